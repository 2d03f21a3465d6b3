/**
 * `feosctl traffic watch [--pod ID]... [-o table|json]` (docs/feos/feosctl.md, docs/feos/network.md):
 * streams the node's traffic records (feos.network.v1.TrafficService.WatchTraffic, the seed's
 * "Traffic records") until interrupted; Ctrl-C (SIGINT) or SIGTERM ends it with exit 0.
 *
 * The table is one line a record, its columns of fixed width so that lines align as they come:
 *   TIME           POD           KIND     RECORD
 *   04:58:01.417   abcdefghjkm   flow     end tcp out 169.254.16.1:40312 → 11.0.0.2:8080 sent 6 pkts 398 B received 4 pkts 246 B 2s
 *   04:58:02.003   abcdefghjkm   drop     deny out tcp 169.254.16.1:51234 → 11.0.0.200:8080 60 B
 *   04:58:02.250   abcdefghjkm   name     tls api.example.com 169.254.16.1:40314 → 11.0.0.2:443
 *   04:58:02.260   abcdefghjkm   dns      A example.test NOERROR by 11.0.0.2: 11.9.9.9
 * A record after records this caller lost (it read too slowly) is preceded by "# N records missed".
 * With -o json, each record is one line of protobuf JSON (a TrafficRecord: timeMs, podId, missed,
 * and one of dnsQuery, flow, drop, serverName).
 */
import { type Command, Option } from 'commander';
import { toJson } from '@bufbuild/protobuf';
import { type TrafficRecord, TrafficRecordSchema, TrafficService } from '../gen/feos/network/v1/network_pb.js';
import { makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';
import { networkCall } from './network.ts';

const hostPort = (a: string, p: number) => (p === 0 ? a : a.includes(':') ? `[${a}]:${p}` : `${a}:${p}`);

/** One record's RECORD column. */
export function trafficText(r: TrafficRecord): string {
  const k = r.kind;
  switch (k.case) {
    case 'flow': {
      const f = k.value;
      const ends = `${hostPort(f.podAddress, f.podPort)} ${f.direction === 'in' ? '←' : '→'} ${hostPort(f.peerAddress, f.peerPort)}`;
      if (f.event === 'new') return `new ${f.protocol} ${f.direction} ${ends}`;
      const secs = f.endMs > 0n && f.startMs > 0n ? ` ${(f.endMs - f.startMs) / 1000n}s` : '';
      return `end ${f.protocol} ${f.direction} ${ends} sent ${f.packetsSent} pkts ${f.bytesSent} B received ${f.packetsReceived} pkts ${f.bytesReceived} B${secs}`;
    }
    case 'drop': {
      const d = k.value;
      return `${d.reason} ${d.direction} ${d.protocol} ${hostPort(d.source, d.sourcePort)} → ${hostPort(d.destination, d.destinationPort)} ${d.length} B`;
    }
    case 'serverName': {
      const s = k.value;
      return `${s.protocol} ${s.name} ${hostPort(s.source, s.sourcePort)} → ${hostPort(s.destination, s.destinationPort)}`;
    }
    case 'dnsQuery': {
      const q = k.value;
      return `${q.type} ${q.name} ${q.rcode} by ${q.answeredBy}${q.addresses.length > 0 ? `: ${q.addresses.join(',')}` : ''}`;
    }
    default:
      return '';
  }
}

const KIND: Record<string, string> = { flow: 'flow', drop: 'drop', serverName: 'name', dnsQuery: 'dns' };

/** One record's line of the table. */
export function trafficLine(r: TrafficRecord): string {
  const time = new Date(Number(r.timeMs)).toISOString().slice(11, 23);
  return `${time}   ${(r.podId || '-').padEnd(11)}   ${(KIND[r.kind.case ?? ''] ?? '?').padEnd(4)}   ${trafficText(r)}`;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** Adds `traffic watch` to feosctl's program. */
export function addTrafficCommands(program: Command, ctx: CtlContext): void {
  const traffic = program.command('traffic').description("the pods' traffic records: flows, drops, server names and DNS queries (with --pod-prefix)");
  traffic
    .command('watch')
    .description('streams the records until interrupted (Ctrl-C), one line each, or JSON lines with -o json')
    .option('--pod <id>', "only this pod's records (repeatable)", collect)
    .addOption(new Option('-o, --output <format>', 'table or json').choices(['table', 'json']).default('table'))
    .action(async (o: { pod?: string[]; output: 'table' | 'json' }) => {
      const c = makeClient(TrafficService, ctx.target());
      // No deadline: the stream lasts until the operator ends it.
      const stream = c.watchTraffic({ podIds: o.pod ?? [] });
      let interrupted = false;
      const interrupt = () => {
        interrupted = true;
        stream.cancel();
      };
      process.once('SIGINT', interrupt);
      process.once('SIGTERM', interrupt);
      // The header with the first record: a feosd that refuses the call prints no table.
      let header = o.output !== 'table';
      await networkCall(ctx, () =>
        new Promise<void>((resolve, reject) => {
          stream.on('data', (m: { record?: TrafficRecord }) => {
            const r = m.record;
            if (!r) return;
            if (o.output === 'json') {
              process.stdout.write(`${JSON.stringify(toJson(TrafficRecordSchema, r))}\n`);
              return;
            }
            if (!header) {
              process.stdout.write(`${'TIME'.padEnd(12)}   ${'POD'.padEnd(11)}   KIND   RECORD\n`);
              header = true;
            }
            if (r.missed > 0n) process.stdout.write(`# ${r.missed} record${r.missed === 1n ? '' : 's'} missed\n`);
            process.stdout.write(`${trafficLine(r)}\n`);
          });
          stream.on('end', resolve);
          stream.on('error', (err: { code?: number }) => (interrupted && err.code === 1 ? resolve() : reject(err)));
        }),
      );
      process.off('SIGINT', interrupt);
      process.off('SIGTERM', interrupt);
      c.grpc.close();
    });
}
