// The traffic records in network namespaces (seed: "Traffic records", on "The table"): a node, veth
// "pods" and a fake internet, each a namespace this suite makes and removes; the node's layer reads
// connection tracking with conntrack -E and nflog groups 2 and 3 with tcpdump, as feosd does.
// Checked as a user would: over TrafficService.WatchTraffic and with `feosctl traffic watch`.

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { SecurityGroupSchema, SecurityGroupService, type TrafficRecord, TrafficService, type WatchTrafficResponse } from '../../../src/feos/gen/feos/network/v1/network_pb.js';
import type { AttachedPod, PodAddresses } from '../../../src/feos/network/index.ts';
import { isProcessAlive } from '../../../src/lib/index.ts';
import { control, grpcClient, grpcStream, inNs, must, Namespaces, type Started, sh, startInNs } from './helpers.ts';

const here = import.meta.dirname;
const REPO = join(here, '../../..');
const FEOSCTL = join(REPO, 'bin/feosctl.js');
const NODE_FIXTURE = join(here, 'fixture-node.ts');
const INET_FIXTURE = join(here, 'fixture-internet.ts');
const PROBE = join(here, 'probe.ts');
const TRAFFIC_PROBE = join(here, 'traffic-probe.ts');
const PREFIX = '2001:db8:7::/64';
// a: the default group (out to the internet); c: a group that allows nothing; f: a pod whose flow ends with its delete.
const ids = { a: 'tabcdefghjk', c: 'tcdefghjkmn', f: 'tfghjkmnpqr' } as const;
type PodName = keyof typeof ids;
/** A WatchTraffic caller's queue in this suite: small, so that a stopped watcher overflows it soon. */
const QUEUE = 50;

/** Polls `check` every 100 ms until it returns a value, or fails after `ms` naming `what`. */
async function until<T>(what: string, ms: number, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A `feosctl traffic watch` of its own, its output collected. */
interface Watcher {
  child: ChildProcess;
  out(): string;
  exited: Promise<number | null>;
}

function feosctlWatch(socket: string, ...args: string[]): Watcher {
  const child = spawn(process.execPath, [FEOSCTL, '--socket', socket, 'traffic', 'watch', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => {
    out += d;
  });
  child.stderr!.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, out: () => out + err, exited };
}

const jsonLines = (w: Watcher) =>
  w
    .out()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { podId?: string; missed?: string; dnsQuery?: { name: string }; flow?: unknown; drop?: unknown; serverName?: unknown });

describe('traffic records in namespaces', { timeout: 420_000 }, () => {
  const nss = new Namespaces();
  let dir = '';
  let nodeNs = '';
  let inetNs = '';
  const podNs: Partial<Record<PodName, string>> = {};
  let node: Started | undefined;
  let inet: Started | undefined;
  const addrs: Partial<Record<PodName, PodAddresses>> = {};
  const watchers: Watcher[] = [];
  let all: { messages: WatchTrafficResponse[]; close(): void } | undefined;
  const records = (): TrafficRecord[] => all!.messages.map((m) => m.record!).filter(Boolean);
  const sock = () => join(dir, 'grpc.sock');
  const ctl = (call: Record<string, unknown>) => control(join(dir, 'control.sock'), call);
  const inPod = (p: PodName, ...cmd: string[]) => sh(inNs(podNs[p]!, process.execPath, ...cmd), 60_000);
  let tableWatch: Watcher | undefined;
  let jsonWatch: Watcher | undefined;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'k32t-traffic-'));
    nodeNs = await nss.add('node');
    inetNs = await nss.add('inet');
    await must(inNs(nodeNs, 'ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', inetNs));
    for (const [ns, dev, v4, v6] of [
      [nodeNs, 'up0', '11.0.0.1/24', '2600:1::1/64'],
      [inetNs, 'eth0', '11.0.0.2/24', '2600:1::2/64'],
    ]) {
      await must(inNs(ns, 'ip', 'addr', 'add', v4, 'dev', dev));
      await must(inNs(ns, 'ip', '-6', 'addr', 'add', v6, 'dev', dev, 'nodad'));
      await must(inNs(ns, 'ip', 'link', 'set', dev, 'up'));
    }
    await must(inNs(inetNs, 'ip', 'addr', 'add', '11.0.0.200/24', 'dev', 'eth0'));
    await must(inNs(nodeNs, 'ip', 'route', 'add', 'default', 'via', '11.0.0.2'));
    await must(inNs(nodeNs, 'ip', '-6', 'route', 'add', 'default', 'via', '2600:1::2'));
    await must(inNs(inetNs, 'ip', '-6', 'route', 'add', PREFIX, 'via', '2600:1::1'));
    inet = await startInNs(inetNs, INET_FIXTURE, ['11.0.0.2', '2600:1::2', '11.0.0.200']);
    const flags = { podPrefix: PREFIX, dnsUpstreams: ['11.0.0.2'], denyPrefixes: ['11.0.0.128/25'], rulesIntervalMs: 3_600_000, trafficQueueRecords: QUEUE };
    node = await startInNs(nodeNs, NODE_FIXTURE, [JSON.stringify({ stateDir: join(dir, 'state'), grpcSocket: sock(), controlSocket: join(dir, 'control.sock'), flags, kept: [] })]);
    assert.equal(JSON.parse(node.ready).unavailable, null);
    const sg = grpcClient(SecurityGroupService, sock());
    try {
      await sg.call('PutSecurityGroup', create(SecurityGroupService.method.putSecurityGroup.input, { group: create(SecurityGroupSchema, { id: 'nothing', version: 1n }) }));
    } finally {
      sg.close();
    }
    all = grpcStream<WatchTrafficResponse>(TrafficService, sock(), 'WatchTraffic', {});
    for (const p of ['a', 'c', 'f'] as const) {
      podNs[p] = await nss.add(p);
      const spec = { securityGroups: p === 'c' ? ['nothing'] : [], nameTables: [], dnsUpstreams: [] };
      const made = await ctl({ method: 'createPod', id: ids[p], spec });
      assert.ok(made.ok, made.message ?? '');
      addrs[p] = made.result as PodAddresses;
      await must(inNs(nodeNs, 'ip', 'link', 'add', `pod-${ids[p]}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs[p]!));
      const r = await ctl({ method: 'attachPod', id: ids[p] });
      assert.ok(r.ok, r.message ?? '');
      const at = r.result as AttachedPod;
      const ns = podNs[p]!;
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'address', at.mac));
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'up'));
      await must(inNs(ns, 'ip', '-6', 'addr', 'add', `${at.guest.ipv6Address}/128`, 'dev', 'eth0', 'nodad'));
      await must(inNs(ns, 'ip', '-6', 'route', 'add', 'default', 'via', at.guest.ipv6Gateway, 'dev', 'eth0'));
      await must(inNs(ns, 'ip', 'addr', 'add', `${at.guest.ipv4Address}/32`, 'dev', 'eth0'));
      await must(inNs(ns, 'ip', 'route', 'add', 'default', 'via', at.guest.ipv4Gateway, 'dev', 'eth0', 'onlink'));
    }
    // The readers are up once a logged drop comes through (tcpdump binds its group after it starts).
    await until('the first drop record', 30_000, async () => {
      await inPod('c', PROBE, '11.0.0.2', '8080', '300');
      return records().some((r) => r.kind.case === 'drop');
    });
    tableWatch = feosctlWatch(sock(), '--pod', ids.a, '--pod', ids.f);
    jsonWatch = feosctlWatch(sock(), '-o', 'json');
    watchers.push(tableWatch, jsonWatch);
    // Both streams are open once they carry a query.
    await until('the feosctl watchers to stream', 30_000, async () => {
      await inPod('a', TRAFFIC_PROBE, 'dns', '1', 'warmup');
      return /warmup-0\.test/.test(tableWatch!.out()) && /warmup-0\.test/.test(jsonWatch!.out());
    });
  });

  after(async () => {
    for (const w of watchers) {
      if (w.child.exitCode === null) {
        w.child.kill('SIGCONT');
        w.child.kill('SIGKILL');
      }
    }
    all?.close();
    await node?.stop();
    await inet?.stop();
    await nss.removeAll();
    await rm(dir, { recursive: true, force: true });
  });

  it("turns on connection tracking's counters and timestamps", async () => {
    for (const key of ['nf_conntrack_acct', 'nf_conntrack_timestamp']) {
      assert.equal((await must(inNs(nodeNs, 'cat', `/proc/sys/net/netfilter/${key}`))).trim(), '1', key);
    }
  });

  it('records the drops with their reasons: deny, no-rule, spoofed', async () => {
    const drop = (reason: string, dst: string) =>
      records().find((r) => r.kind.case === 'drop' && r.kind.value.reason === reason && r.kind.value.destination === dst);
    assert.equal((await inPod('a', PROBE, '11.0.0.200', '8080', '800')).code, 1, 'a denied prefix');
    const deny = await until('a deny drop', 15_000, () => drop('deny', '11.0.0.200'));
    assert.equal(deny.podId, ids.a);
    assert.equal(deny.kind.case, 'drop');
    if (deny.kind.case === 'drop') {
      assert.deepEqual([deny.kind.value.direction, deny.kind.value.protocol, deny.kind.value.source, deny.kind.value.destinationPort], ['out', 'tcp', addrs.a!.ipv4, 8080]);
      assert.ok(deny.kind.value.length >= 40);
    }
    assert.equal((await inPod('c', PROBE, '11.0.0.2', '8080', '800')).code, 1, 'c reaches nothing');
    const noRule = await until('a no-rule drop', 15_000, () => drop('no-rule', '11.0.0.2'));
    assert.equal(noRule.podId, ids.c, 'pod c has no rule to the internet');
    // A source the TAP does not route back: the pod is named by its TAP, not by the address.
    await must(inNs(podNs.a!, 'ip', 'addr', 'add', '169.254.16.99/32', 'dev', 'eth0'));
    try {
      assert.equal((await inPod('a', PROBE, '11.0.0.2', '8080', '800', '169.254.16.99')).code, 1);
    } finally {
      await must(inNs(podNs.a!, 'ip', 'addr', 'del', '169.254.16.99/32', 'dev', 'eth0'));
    }
    const spoofed = await until('a spoofed drop', 15_000, () => drop('spoofed', '11.0.0.2'));
    assert.equal(spoofed.podId, ids.a);
    assert.equal(spoofed.kind.case === 'drop' && spoofed.kind.value.source, '169.254.16.99');
  });

  it("records an HTTPS ClientHello's server name and an HTTP request's Host", async () => {
    assert.equal((await inPod('a', TRAFFIC_PROBE, 'tls', '11.0.0.2', '8080', 'Secure.Example.test')).stdout.trim(), 'ok');
    assert.equal((await inPod('a', TRAFFIC_PROBE, 'http', '2600:1::2', '8080', 'web.example.test:8080')).stdout.trim(), 'ok');
    const name = (n: string) => records().find((r) => r.kind.case === 'serverName' && r.kind.value.name === n);
    const sni = await until('the SNI record', 15_000, () => name('secure.example.test'));
    assert.equal(sni.podId, ids.a);
    assert.deepEqual(sni.kind.case === 'serverName' && [sni.kind.value.protocol, sni.kind.value.source, sni.kind.value.destination, sni.kind.value.destinationPort], ['tls', addrs.a!.ipv4, '11.0.0.2', 8080]);
    const host = await until('the Host record', 15_000, () => name('web.example.test'));
    assert.equal(host.podId, ids.a);
    assert.deepEqual(host.kind.case === 'serverName' && [host.kind.value.protocol, host.kind.value.source, host.kind.value.destination], ['http', addrs.a!.ipv6, '2600:1::2']);
  });

  it("records a pod's TCP connection as a flow with its bytes when it ends, after the pod left too", async () => {
    assert.equal((await inPod('f', PROBE, '11.0.0.2', '8080', '10000')).stdout.trim(), 'ok');
    const flow = (event: string) =>
      records().find((r) => r.kind.case === 'flow' && r.kind.value.event === event && r.kind.value.peerAddress === '11.0.0.2' && r.kind.value.protocol === 'tcp' && r.podId === ids.f);
    const started = await until('the new flow', 15_000, () => flow('new'));
    assert.equal(started.kind.case === 'flow' && started.kind.value.podAddress, addrs.f!.ipv4);
    // The connection closed; its entry waits out TIME_WAIT. Deleting the pod deletes it (seed:
    // "Addresses"), and its end is read after the pod left: the record still names the pod.
    const removed = await ctl({ method: 'removePod', id: ids.f });
    assert.ok(removed.ok, removed.message ?? '');
    const ended = await until('the ended flow', 15_000, () => flow('end'));
    assert.equal(ended.kind.case, 'flow');
    if (ended.kind.case !== 'flow' || started.kind.case !== 'flow') return;
    const f = ended.kind.value;
    assert.equal(f.conntrackId, started.kind.value.conntrackId, 'the new and the end of one connection');
    assert.equal(f.direction, 'out');
    assert.equal(f.peerPort, 8080);
    // SYN, ACK, "ping", FIN and ACK at least each way's share; the bytes are of IP packets.
    assert.ok(f.packetsSent >= 4n && f.bytesSent >= 4n * 40n + 4n, `sent ${f.packetsSent} packets, ${f.bytesSent} bytes`);
    assert.ok(f.packetsReceived >= 3n && f.bytesReceived >= 3n * 40n + 4n, `received ${f.packetsReceived} packets, ${f.bytesReceived} bytes`);
    assert.ok(f.startMs > 0n && f.endMs >= f.startMs, `start ${f.startMs} end ${f.endMs}`);
  });

  it('records a closed connection as ended once connection tracking ends its entry', async () => {
    // TIME_WAIT of 1 s in this node's namespace (120 s by default); the kernel's garbage
    // collection reaps the entry after that, within a minute.
    await must(inNs(nodeNs, 'sh', '-c', 'echo 1 > /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait'));
    assert.equal((await inPod('a', PROBE, '2600:1::2', '8080', '10000')).stdout.trim(), 'ok');
    const ended = await until('the closed connection to end', 120_000, () =>
      records().find((r) => r.kind.case === 'flow' && r.kind.value.event === 'end' && r.kind.value.peerAddress === '2600:1::2' && r.kind.value.peerPort === 8080),
    );
    assert.equal(ended.podId, ids.a);
    if (ended.kind.case !== 'flow') return;
    assert.deepEqual([ended.kind.value.direction, ended.kind.value.podAddress], ['out', addrs.a!.ipv6]);
    assert.ok(ended.kind.value.bytesSent > 0n && ended.kind.value.bytesReceived > 0n);
  });

  it("leaves a pod's queries to the resolver out of the flows", async () => {
    assert.match((await inPod('a', TRAFFIC_PROBE, 'dns', '3', 'asked')).stdout, /answered 3/);
    await until('the queries', 10_000, () => records().filter((r) => r.kind.case === 'dnsQuery' && /^asked-/.test(r.kind.value.name)).length === 3);
    const toResolver = records().filter((r) => r.kind.case === 'flow' && r.kind.value.peerAddress === '169.254.0.53' && r.kind.value.peerPort === 53);
    assert.deepEqual(toResolver, []);
    assert.ok(records().some((r) => r.kind.case === 'flow' && r.podId === ids.a), 'pod a has flows (its probes)');
  });

  it('`feosctl traffic watch` prints each kind, and exits 0 on Ctrl-C', async () => {
    const table = tableWatch!;
    const lines = table.out().split('\n');
    assert.match(lines[0], /^TIME\s+POD\s+KIND\s+RECORD$/);
    const kinds = new Set(lines.slice(1).map((l) => l.split(/\s{3,}/)[2]).filter(Boolean));
    for (const k of ['flow', 'drop', 'name', 'dns']) assert.ok(kinds.has(k), `a ${k} line: ${table.out()}`);
    assert.match(table.out(), new RegExp(`${ids.f}\\s+flow\\s+end tcp out ${addrs.f!.ipv4!.replaceAll('.', '\\.')}:\\d+ → 11\\.0\\.0\\.2:8080 sent \\d+ pkts \\d+ B received \\d+ pkts \\d+ B`));
    assert.match(table.out(), new RegExp(`${ids.a}\\s+name\\s+tls secure\\.example\\.test `));
    assert.doesNotMatch(table.out(), new RegExp(ids.c), 'only the pods asked for');
    const json = jsonLines(jsonWatch!);
    for (const k of ['flow', 'drop', 'serverName', 'dnsQuery'] as const) assert.ok(json.some((r) => r[k] !== undefined), `a ${k} record in -o json`);
    assert.ok(json.some((r) => r.podId === ids.c), 'every pod without --pod');
    for (const w of [table, jsonWatch!]) {
      w.child.kill('SIGINT');
      assert.equal(await w.exited, 0, w.out().slice(-500));
    }
  });

  it('counts what a slow watcher loses in its next record, and holds neither feosd nor the others back', async () => {
    const slow = feosctlWatch(sock(), '-o', 'json', '--pod', ids.a);
    watchers.push(slow);
    let i = 0;
    await until('the slow watcher to stream', 30_000, async () => {
      await inPod('a', TRAFFIC_PROBE, 'dns', '1', `slow-warmup-${i++}`);
      return jsonLines(slow).length > 0 ? true : undefined;
    });
    const first = jsonLines(slow)[0].dnsQuery!.name;
    // A watcher that reads nothing: its HTTP/2 window fills, then its queue.
    slow.child.kill('SIGSTOP');
    const N = 3000;
    const burst = await inPod('a', TRAFFIC_PROBE, 'dns', String(N), 'burst');
    assert.match(burst.stdout, new RegExp(`answered ${N}`), `the resolver answered every query while a watcher was stopped: ${burst.stdout}`);
    const burstSeen = () => records().filter((r) => r.kind.case === 'dnsQuery' && /^burst-\d+\.test$/.test(r.kind.value.name)).length;
    await until(`all ${N} burst records on the other watcher`, 20_000, () => burstSeen() === N);
    slow.child.kill('SIGCONT');
    let j = 0;
    const lastName = await until('the slow watcher to catch up', 30_000, async () => {
      const name = `slow-after-${j++}`;
      await inPod('a', TRAFFIC_PROBE, 'dns', '1', name);
      await new Promise((r) => setTimeout(r, 300));
      return jsonLines(slow).some((r) => r.dnsQuery?.name === `${name}-0.test`) ? `${name}-0.test` : undefined;
    });
    const got = jsonLines(slow);
    const missed = got.reduce((n, r) => n + Number(r.missed ?? 0), 0);
    assert.ok(missed > 0, 'records were missed');
    assert.ok(got.length < N, `the slow watcher got ${got.length} of the ${N}`);
    // Exact accounting: what the slow watcher got and missed is what pod a's stream had in that span, plus
    // what the node's readers lost meanwhile (conntrack's ENOBUFS on a loaded machine), which every watcher
    // counts: the fast watcher's `missed` in the same span.
    const all = records();
    const isQuery = (name: string) => (r: TrafficRecord) => r.podId === ids.a && r.kind.case === 'dnsQuery' && r.kind.value.name === name;
    const mine = all.filter((r) => r.podId === ids.a);
    const from = mine.findIndex(isQuery(first));
    const to = mine.findIndex(isQuery(lastName));
    assert.ok(from >= 0 && to > from);
    const readersLost = all.slice(all.findIndex(isQuery(first)) + 1, all.findIndex(isQuery(lastName)) + 1).reduce((n, r) => n + Number(r.missed), 0);
    const expected = to - from + 1;
    const detail = `got ${got.length}, missed ${missed}, pod a's records in the span ${expected}, lost by the readers ${readersLost}`;
    assert.ok(got.length + missed >= expected && got.length + missed <= expected + readersLost, detail);
    slow.child.kill('SIGINT');
    assert.equal(await slow.exited, 0);
  });

  // Last: it kills the node.
  it('its readers (conntrack, tcpdump) end with the process that started them, even on SIGKILL', async () => {
    const pid = node!.child.pid!;
    const children = () =>
      readdirSync('/proc')
        .filter((d) => /^\d+$/.test(d))
        .flatMap((d) => {
          try {
            const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
            const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
            const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
            return [{ pid: Number(d), ppid, comm }];
          } catch {
            return [];
          }
        });
    const readers = children().filter((p) => p.ppid === pid && /^(conntrack|tcpdump)$/.test(p.comm));
    assert.deepEqual([...new Set(readers.map((r) => r.comm))].sort(), ['conntrack', 'tcpdump'], JSON.stringify(children().filter((p) => p.ppid === pid)));
    node!.child.kill('SIGKILL');
    // isProcessAlive counts a zombie that whatever adopted it has not reaped yet as gone.
    await until('the readers to end', 10_000, () => readers.every((r) => !isProcessAlive(r.pid)) || undefined);
  });
});
