/**
 * feosctl (docs/feos/feosctl.md): the command line of a node's feosd.
 *   feosctl [--socket PATH | --tcp ADDRESS] pod create|get|list|start|stop|delete|suspend|resume|hibernate|restore|events|exec|logs|port-forward ...
 *   feosctl [--socket PATH | --tcp ADDRESS] volume create|get|list|delete ...
 *   feosctl [--socket PATH | --tcp ADDRESS] host info
 *   feosctl [--socket PATH | --tcp ADDRESS] security-group|name-table put|get|list|delete ... (./network.ts)
 * Every command prints a table, or with `-o json|yaml` the PodInfo (its `id` first). A gRPC error prints
 * as `feosctl: <CODE_NAME>: <message>` (with "(VmBusy)" when marked) and exits 1; bad usage exits 2.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { Command, InvalidArgumentError, Option } from 'commander';
import { create, fromJson, toJson, type JsonValue } from '@bufbuild/protobuf';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import YAML from 'yaml';
import {
  ExecPodRequestSchema,
  type ExecPodResponse,
  type PodInfo,
  PodInfoSchema,
  type PodLogsResponse,
  PodService,
  PodSpecSchema,
  PodState,
  type PodEvent,
  PortForwardPodRequestSchema,
  type PortForwardPodResponse,
} from '../gen/feos/pod/v1/pod_pb.js';
import { GetHostInfoResponseSchema, HostService } from '../gen/feos/host/v1/host_pb.js';
import { type Volume, VolumeSchema, VolumeService, VolumeState } from '../gen/feos/volume/v1/volume_pb.js';
import { codeName, isVmBusy, makeClient } from '../api/index.ts';
import { formatBytes, humanDuration, parseBytes } from '../../lib/index.ts';
import { mintPodId } from '../pods/id.ts';
import { MAX_MEMORY_BYTES, MAX_VCPUS, MIN_MEMORY_BYTES } from '../pods/spec.ts';
import { MAX_VOLUME_BYTES, MIN_VOLUME_BYTES } from '../volumes/index.ts';
import { addNetworkCommands } from './network.ts';
import { applyMetadata, withContainerStates } from './metadata.ts';

type Output = 'table' | 'json' | 'yaml';

/** Thrown for a gRPC error: printed with its code name. */
class CallFailed extends Error {}

function podJson(pod: PodInfo): JsonValue {
  const json = toJson(PodInfoSchema, pod, { alwaysEmitImplicit: false }) as Record<string, JsonValue>;
  // `id` first, then the rest as protobuf JSON has them.
  const { id, ...rest } = json;
  return { id: id ?? '', ...rest };
}

/** The pod's age as kubectl prints ages: from its creation (`createdAt`), not its last change of state. */
function age(pod: PodInfo): string {
  const since = pod.createdAt ?? pod.stateChangedAt;
  if (!since) return '';
  return humanDuration(Date.now() - timestampDate(since).getTime());
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return `${rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('   ')).join('\n')}\n`;
}

function printPods(pods: PodInfo[], output: Output, single: boolean): void {
  if (output === 'json') {
    process.stdout.write(`${JSON.stringify(single ? podJson(pods[0]) : { pods: pods.map(podJson) }, null, 2)}\n`);
  } else if (output === 'yaml') {
    process.stdout.write(YAML.stringify(single ? podJson(pods[0]) : { pods: pods.map(podJson) }));
  } else {
    const rows = [['ID', 'STATE', 'VCPUS', 'MEMORY', 'IPV6', 'IPV4', 'AGE', 'REASON']];
    for (const p of pods) {
      rows.push([
        p.id,
        PodState[p.state] ?? String(p.state),
        String(p.spec?.vcpus ?? ''),
        `${(p.spec?.memoryBytes ?? 0n) / (1024n * 1024n)}Mi`,
        p.ipv6Address || '-',
        p.ipv4Address || '-',
        age(p),
        p.reason,
      ]);
    }
    process.stdout.write(table(rows));
    // One pod's containers below it (GetPod asks a RUNNING pod's guest for their states): an exited
    // container is why an exec is refused.
    const p = pods[0];
    if (single && (p.spec?.containers.length ?? 0) > 0) {
      const crows = [['CONTAINER', 'IMAGE', 'STATE']];
      for (const c of p.spec!.containers) {
        const st = p.containers.find((x) => x.name === c.name);
        crows.push([c.name, c.image, st ? (st.state === 'exited' ? `exited (${st.exitCode})` : st.state) : '-']);
      }
      process.stdout.write(`\n${table(crows)}`);
    }
  }
}

/** A pull token from a file (trimmed), or empty; a token never goes on a command line, where ps shows it. */
function readToken(file: string | undefined): string {
  if (!file) return '';
  const t = readFileSync(file, 'utf8').trim();
  if (!t) throw new InvalidArgumentError(`${file}: empty pull token`);
  return t;
}

/**
 * A flag's whole number from `min` to `max`, for commander: `1.5`, `abc`, `-1` or `99999999999999999999`
 * are usage errors naming the flag and the value.
 */
function wholeNumber(flag: string, min: number, max: number) {
  return (v: string): number => {
    const n = /^\d+$/.test(v.trim()) ? Number(v) : Number.NaN;
    if (!(n >= min && n <= max)) throw new InvalidArgumentError(`${flag} ${JSON.stringify(v)}: want a whole number from ${min} to ${max}`);
    return n;
  };
}

/** `--memory`'s bytes: a quantity of whole MiB within a pod's bounds (seed 000, "A pod"). */
function memoryBytes(v: string): bigint {
  let n: number;
  try {
    n = parseBytes(v);
  } catch {
    throw new InvalidArgumentError(`--memory ${JSON.stringify(v)}: want a quantity such as 256Mi or 1Gi`);
  }
  const mib = 1024 * 1024;
  if (!Number.isSafeInteger(n) || BigInt(n) < MIN_MEMORY_BYTES || BigInt(n) > MAX_MEMORY_BYTES || n % mib !== 0) {
    throw new InvalidArgumentError(`--memory ${JSON.stringify(v)}: want whole Mi from ${MIN_MEMORY_BYTES / BigInt(mib)}Mi to ${MAX_MEMORY_BYTES / BigInt(mib)}Mi`);
  }
  return BigInt(n);
}

/** `volume create --size`'s bytes: a quantity of whole MiB within a volume's bounds (seed 000, "Volumes"). */
function volumeBytes(v: string): bigint {
  let n: number;
  try {
    n = parseBytes(v);
  } catch {
    throw new InvalidArgumentError(`--size ${JSON.stringify(v)}: want a quantity such as 1Gi or 512Mi`);
  }
  const mib = 1024 * 1024;
  if (!Number.isSafeInteger(n) || BigInt(n) < MIN_VOLUME_BYTES || BigInt(n) > MAX_VOLUME_BYTES || n % mib !== 0) {
    throw new InvalidArgumentError(`--size ${JSON.stringify(v)}: want whole Mi from 64Mi to 16Ti`);
  }
  return BigInt(n);
}

/**
 * A PodSpec from a `-f` file's text (YAML or JSON, protobuf JSON names).
 * @throws InvalidArgumentError naming the file and what is wrong: YAML syntax, not a mapping, or the
 *   field protobuf JSON cannot take
 */
function specFromFile(file: string, text: string) {
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(`${file}: not YAML or JSON: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
  }
  if (doc === null || doc === undefined) throw new InvalidArgumentError(`${file}: empty: want a PodSpec (a mapping such as "vcpus: 1")`);
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new InvalidArgumentError(`${file}: want a PodSpec, a mapping such as "vcpus: 1", got ${Array.isArray(doc) ? 'a list' : JSON.stringify(doc)}`);
  }
  try {
    return fromJson(PodSpecSchema, doc as JsonValue);
  } catch (err: unknown) {
    // protobuf-es names the field and the value: `cannot decode field feos.pod.v1.PodSpec.vcpus from JSON: "two"`.
    const msg = (err instanceof Error ? err.message : String(err)).replace(/^cannot decode message feos\.pod\.v1\.PodSpec from JSON: /, '');
    throw new InvalidArgumentError(`${file}: not a PodSpec: ${msg} (fields: vcpus, memoryBytes, containers, network, volumes, metadata...; protobuf JSON names)`);
  }
}

/**
 * Whether an UNAVAILABLE's details are grpc-js's own failure to reach feosd ("No connection
 * established. Last error: connect ENOENT ..."), as opposed to an UNAVAILABLE that feosd answered
 * (a store that failed with ENOENT, say), which feosctl shows as it is.
 */
export function isConnectFailure(details: string): boolean {
  return /^No connection established\b/.test(details) || /^(?:connect )?(?:ENOENT|ECONNREFUSED)\b/.test(details);
}

/** Runs feosctl with `argv` (process.argv). Exits the process with its status. */
export async function main(argv: string[]): Promise<void> {
  // Whether commander printed its error itself (its parse errors); errors thrown by an action it does not print.
  let commanderSaid = false;
  const program = new Command('feosctl')
    .description("FeOS's command line: the pods of one node's feosd")
    .option('--socket <path>', "feosd's API socket", '/run/feos/api.sock')
    .option('--tcp <address>', "feosd's TCP address, host:port (instead of the socket)", (v: string) => {
      // Checked before any lookup: `--tcp nothing` asked the resolver for "nothing".
      const m = /^(?:\[[0-9A-Fa-f:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(v);
      if (!m || Number(m[1]) < 1 || Number(m[1]) > 65535) throw new InvalidArgumentError(`--tcp ${JSON.stringify(v)}: want host:port or [IPv6]:port with a port from 1 to 65535`);
      return v;
    })
    .option('--timeout <seconds>', 'deadline of each call', (v) => {
      const n = Number(v);
      if (!(n > 0)) throw new InvalidArgumentError(`want a positive number of seconds, got ${JSON.stringify(v)}`);
      return n;
    }, 600)
    .exitOverride()
    .configureOutput({
      writeErr: (s) => {
        commanderSaid = true;
        process.stderr.write(s);
      },
    });

  const target = () => {
    const o = program.opts<{ socket: string; tcp?: string }>();
    return o.tcp ? o.tcp : `unix:${o.socket}`;
  };
  const deadline = () => new Date(Date.now() + program.opts<{ timeout: number }>().timeout * 1000);
  const output = () => new Option('-o, --output <format>', 'table, json or yaml').choices(['table', 'json', 'yaml']).default('table');
  const pods = () => makeClient(PodService, target());
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err: unknown) {
      const e = err as { code?: number; details?: string };
      // grpc-js's words for a feosd that is not there ("No connection established. Last error: ...
      // Resolution note: ") say the same in the operator's terms.
      const o = program.opts<{ socket: string; tcp?: string }>();
      // Only grpc-js's own failure to connect: feosd's UNAVAILABLE answers (a store that failed with
      // ENOENT, say) are shown as they are.
      if (e.code === 14 && isConnectFailure(e.details ?? '')) {
        const where = o.tcp
          ? `nothing answers at ${o.tcp}; pass --tcp`
          : /ENOENT/.test(e.details ?? '')
            ? `no socket at ${o.socket}; pass --socket`
            : `nothing listens on ${o.socket}; pass --socket`;
        throw new CallFailed(`UNAVAILABLE: is feosd running? (${where})`);
      }
      if (typeof e.code === 'number') {
        throw new CallFailed(`${codeName(e.code)}: ${e.details ?? ''}${isVmBusy(err) ? ' (VmBusy)' : ''}`);
      }
      throw err;
    }
  };

  /** Watches a pod until it is no longer PENDING (RUNNING or FAILED, ...), within --timeout. */
  const waitSettled = (c: ReturnType<typeof pods>, id: string) =>
    call(
      () =>
        new Promise<PodInfo>((resolve, reject) => {
          const ev = c.watchPodEvents({ podId: id }, { deadline: deadline() });
          ev.on('data', (e: PodEvent) => {
            if (e.pod && e.pod.state !== PodState.PENDING) {
              resolve(e.pod);
              ev.cancel();
            }
          });
          ev.on('error', (err: { code?: number }) => {
            if (err.code !== 1) reject(err);
          });
        }),
    );
  /** After --wait, a FAILED pod is feosctl's failure: exit 1 with the reason (the pod is printed first). */
  const failedAfterWait = (p: PodInfo) => {
    if (p.state === PodState.FAILED) throw new CallFailed(`pod ${p.id} is FAILED: ${p.reason || 'no reason given'}`);
  };
  const pod = program.command('pod').description('the pods of the node');
  pod
    .command('create')
    .description('records a pod and brings it up in the background (an ID is minted when none is given)')
    .option('--id <id>', 'the pod ID (11 characters of lowercase Crockford base32, a letter first, or a UUID)')
    .option('--vcpus <n>', `virtual CPUs (1 to ${MAX_VCPUS})`, wholeNumber('--vcpus', 1, MAX_VCPUS))
    .option('--memory <quantity>', 'memory, such as 256Mi or 1Gi', memoryBytes)
    .option('--image <ref...>', 'a container per image, named after it')
    .option('--network', 'give the pod a network (the defaults)')
    .option('-f, --filename <file>', 'the PodSpec as YAML or JSON (protobuf JSON names)')
    .option('--wait', 'wait until the pod is RUNNING or FAILED (FAILED exits 1)')
    .option('--pull-token-file <file>', "a Bearer token of the images' registry for this bring-up's pulls (kept in feosd's memory only)")
    .option('--metadata <key=value...>', "the pod's metadata (its metadata service's /metadata); over -f's and --metadata-file's")
    .option('--metadata-file <file>', 'metadata as a YAML or JSON mapping of keys to strings')
    .addOption(output())
    .action(async (o: { id?: string; vcpus?: number; memory?: bigint; image?: string[]; network?: boolean; filename?: string; wait?: boolean; pullTokenFile?: string; metadata?: string[]; metadataFile?: string; output: Output }) => {
      let spec = create(PodSpecSchema);
      if (o.filename) {
        let text: string;
        try {
          text = readFileSync(o.filename, 'utf8');
        } catch (err: unknown) {
          throw new InvalidArgumentError(`-f ${o.filename}: ${err instanceof Error ? err.message : String(err)}`);
        }
        spec = specFromFile(o.filename, text);
      }
      if (o.vcpus !== undefined) spec.vcpus = o.vcpus;
      if (o.memory !== undefined) spec.memoryBytes = o.memory;
      for (const image of o.image ?? []) {
        const base = (image.split('/').at(-1) ?? 'c').split(/[:@]/)[0].replace(/[^a-z0-9-]/g, '-').slice(0, 58) || 'c';
        // Two images of one name (busybox:1 and busybox:2) are two containers: busybox, busybox-2.
        let name = base;
        for (let n = 2; spec.containers.some((c) => c.name === name); n++) name = `${base}-${n}`;
        spec.containers.push({ $typeName: 'feos.pod.v1.ContainerSpec', name, image, command: [], args: [], env: {}, volumeMounts: [] });
      }
      if (o.network && !spec.network) spec.network = { $typeName: 'feos.pod.v1.PodNetwork', securityGroups: [], nameTables: [], dnsUpstreams: [] };
      applyMetadata(spec, o.metadata, o.metadataFile);
      const c = pods();
      const id = o.id ?? mintPodId();
      const pullToken = readToken(o.pullTokenFile);
      const res = await call(() => c.createPod({ id, spec, pullToken }, { deadline: deadline() }));
      const settled = o.wait ? await withContainerStates(c, await waitSettled(c, res.pod!.id || id), deadline()) : res.pod!;
      printPods([settled], o.output, true);
      c.grpc.close();
      failedAfterWait(settled);
    });
  pod
    .command('get <id>')
    .description('shows a pod')
    .addOption(output())
    .action(async (id: string, o: { output: Output }) => {
      const c = pods();
      const res = await call(() => c.getPod({ id }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('list')
    .description("lists the node's pods")
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = pods();
      const res = await call(() => c.listPods({}, { deadline: deadline() }));
      if (o.output === 'table' && res.pods.length === 0) process.stdout.write('No pods.\n');
      else printPods(res.pods, o.output, false);
      c.grpc.close();
    });
  for (const [name, desc] of [
    ['start', 'brings a STOPPED or FAILED pod up anew on its disk'],
    ['stop', 'shuts a pod down (its disk stays)'],
    ['suspend', "writes a RUNNING pod's microVM into its snapshot"],
    ['resume', 'resumes a SUSPENDED pod, or restores a HIBERNATED one from its checkpoint'],
  ] as const) {
    const cmd = pod.command(`${name} <id>`).description(desc).addOption(output());
    if (name === 'start') {
      cmd.option('--pull-token-file <file>', "a Bearer token of the images' registry for this bring-up's pulls");
      cmd.option('--wait', 'wait until the pod is RUNNING or FAILED (FAILED exits 1)');
    }
    if (name === 'resume') cmd.option('--disk-only', 'a HIBERNATED pod: boot anew on its checkpoint\'s disk, without its memory');
    cmd.action(async (id: string, o: { output: Output; pullTokenFile?: string; wait?: boolean; diskOnly?: boolean }) => {
        const c = pods();
        const method = { start: c.startPod, stop: c.stopPod, suspend: c.suspendPod, resume: c.resumePod }[name] as (
          req: { id: string; pullToken?: string; diskOnly?: boolean },
          options: { deadline: Date },
        ) => Promise<{ pod?: PodInfo }>;
        const req = name === 'start' ? { id, pullToken: readToken(o.pullTokenFile) } : name === 'resume' ? { id, diskOnly: o.diskOnly ?? false } : { id };
        const res = await call(() => method(req, { deadline: deadline() }));
        const settled = o.wait ? await withContainerStates(c, await waitSettled(c, res.pod!.id), deadline()) : res.pod!;
        printPods([settled], o.output, true);
        c.grpc.close();
        if (o.wait) failedAfterWait(settled);
      });
  }
  pod
    .command('hibernate <id>')
    .description("puts a pod into feosd's object store (its memory and disk) and releases it on the node: HIBERNATED")
    .option('--no-abandon', 'a ResumePod waits for this hibernation instead of abandoning it (a drain)')
    .addOption(output())
    .action(async (id: string, o: { output: Output; abandon: boolean }) => {
      const c = pods();
      const res = await call(() => c.hibernatePod({ id, noAbandon: !o.abandon }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('restore <id>')
    .description("brings a pod back from its checkpoint in feosd's object store (a HIBERNATED pod, or one hibernated by another feosd)")
    .option('--checkpoint <name>', "the checkpoint (default: the pod's own, or its latest in the store)")
    .option('--disk-only', "boot anew on the checkpoint's disk, without its memory")
    .addOption(output())
    .action(async (id: string, o: { output: Output; checkpoint?: string; diskOnly?: boolean }) => {
      const c = pods();
      const res = await call(() => c.restorePod({ id, checkpoint: o.checkpoint ?? '', diskOnly: o.diskOnly ?? false }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('delete <id>')
    .description('removes a pod: its microVM, disk and record')
    .action(async (id: string) => {
      const c = pods();
      await call(() => c.deletePod({ id }, { deadline: deadline() }));
      process.stdout.write(`pod ${id} deleted\n`);
      c.grpc.close();
    });
  pod
    .command('events [id]')
    .description("streams the pods' changes (one pod's with an ID), one line each, or JSON lines with -o json")
    .addOption(new Option('-o, --output <format>', 'table or json').choices(['table', 'json']).default('table'))
    .action(async (id: string | undefined, o: { output: 'table' | 'json' }) => {
      const c = pods();
      const stream = c.watchPodEvents({ podId: id ?? '' });
      // The table shows a pod's state and reason: a recorded change that keeps both (its guest version,
      // its addresses) would print the same line again. JSON lines have every event.
      const shown = new Map<string, string>();
      await call(
        () =>
          new Promise<void>((resolve, reject) => {
            stream.on('data', (e: PodEvent) => {
              if (o.output === 'json') {
                process.stdout.write(`${JSON.stringify({ podId: e.podId, deleted: e.deleted, initial: e.initial, pod: e.pod ? podJson(e.pod) : null })}\n`);
              } else {
                const state = e.deleted ? 'DELETED' : PodState[e.pod?.state ?? 0];
                const line = `${state}\0${e.pod?.reason ?? ''}`;
                if (!e.initial && shown.get(e.podId) === line) return;
                shown.set(e.podId, line);
                process.stdout.write(`${e.podId}   ${state}${e.initial ? ' (now)' : ''}   ${e.pod?.reason ?? ''}\n`);
              }
            });
            stream.on('end', resolve);
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
    });
  pod
    .command('exec <id> <command...>')
    .description("runs a command in a container of a RUNNING pod (after --); exits with the command's exit code")
    .option('-c, --container <name>', "the container (default: the pod's first)")
    .option('-i, --stdin', "pass feosctl's stdin to the command")
    .option('-t, --tty', 'give the command a terminal')
    .action(async (id: string, command: string[], o: { container?: string; stdin?: boolean; tty?: boolean }) => {
      const c = pods();
      const stream = c.execPod();
      stream.write(create(ExecPodRequestSchema, { request: { case: 'start', value: { podId: id, container: o.container ?? '', command, tty: !!o.tty, stdin: !!o.stdin } } }));
      if (o.stdin) {
        process.stdin.on('data', (d: Buffer) => stream.write(create(ExecPodRequestSchema, { request: { case: 'stdin', value: d } })));
        process.stdin.on('end', () => {
          stream.write(create(ExecPodRequestSchema, { request: { case: 'closeStdin', value: true } }));
          stream.end();
        });
      } else stream.end();
      const code = await call(
        () =>
          new Promise<number>((resolve, reject) => {
            let exit = -1;
            stream.on('data', (r: ExecPodResponse) => {
              if (r.response.case === 'stdout') process.stdout.write(r.response.value);
              else if (r.response.case === 'stderr') process.stderr.write(r.response.value);
              else if (r.response.case === 'exitCode') exit = r.response.value;
            });
            stream.on('end', () => resolve(exit));
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
      process.stdin.pause();
      process.exitCode = code < 0 ? 1 : code;
    });
  pod
    .command('logs <id>')
    .description("prints a container's log (its stdout and stderr)")
    .option('-c, --container <name>', "the container (default: the pod's first)")
    .option('-f, --follow', 'go on with what it writes until it ends')
    .option('--tail <lines>', 'the last lines only', (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`want a whole number of lines, got ${JSON.stringify(v)}`);
      return n;
    })
    .action(async (id: string, o: { container?: string; follow?: boolean; tail?: number }) => {
      const c = pods();
      // A log without --follow ends on its own: it has the calls' deadline (--timeout); a followed one runs until it ends.
      const stream = c.podLogs({ podId: id, container: o.container ?? '', follow: !!o.follow, tailLines: o.tail ?? 0 }, o.follow ? {} : { deadline: deadline() });
      await call(
        () =>
          new Promise<void>((resolve, reject) => {
            stream.on('data', (r: PodLogsResponse) => process.stdout.write(r.data));
            stream.on('end', resolve);
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
    });
  pod
    .command('port-forward <id> <ports>')
    .description('forwards local TCP connections to a port on the pod: LOCAL:REMOTE (LOCAL 0 asks the OS), or PORT for both')
    .option('--address <address>', 'the local address to listen on', '127.0.0.1')
    .action(async (id: string, ports: string, o: { address: string }) => {
      const m = /^(?:(\d+):)?(\d+)$/.exec(ports);
      const remote = m ? Number(m[2]) : 0;
      const local = m ? Number(m[1] ?? m[2]) : -1;
      if (!m || remote < 1 || remote > 65535 || local > 65535) throw new InvalidArgumentError(`${ports}: want LOCAL:REMOTE or PORT (1 to 65535)`);
      const c = pods();
      await call(() => c.getPod({ id }, { deadline: deadline() }));
      const server = net.createServer((sock) => {
        const stream = c.portForwardPod();
        stream.write(create(PortForwardPodRequestSchema, { request: { case: 'start', value: { podId: id, port: remote } } }));
        sock.on('data', (d: Buffer) => stream.write(create(PortForwardPodRequestSchema, { request: { case: 'data', value: d } })));
        sock.on('end', () => stream.end());
        sock.on('error', () => stream.cancel());
        stream.on('data', (r: PortForwardPodResponse) => sock.write(r.data));
        stream.on('end', () => sock.end());
        stream.on('error', (err: { code?: number; details?: string }) => {
          process.stderr.write(`feosctl: port-forward: ${typeof err.code === 'number' ? codeName(err.code) : ''}: ${err.details ?? String(err)}\n`);
          sock.destroy();
        });
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(local, o.address, () => resolve());
      });
      const bound = (server.address() as net.AddressInfo).port;
      process.stdout.write(`Forwarding from ${o.address}:${bound} -> ${remote}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      server.close();
      c.grpc.close();
    });
  const printVolumes = (vs: Volume[], out: Output, single: boolean) => {
    const json = (v: Volume) => toJson(VolumeSchema, v) as JsonValue;
    if (out === 'json') process.stdout.write(`${JSON.stringify(single ? json(vs[0]) : { volumes: vs.map(json) }, null, 2)}\n`);
    else if (out === 'yaml') process.stdout.write(YAML.stringify(single ? json(vs[0]) : { volumes: vs.map(json) }));
    else {
      const rows = [['ID', 'STATE', 'SIZE', 'POD', 'FORMATTED']];
      for (const v of vs) rows.push([v.id, VolumeState[v.state] ?? String(v.state), formatBytes(Number(v.sizeBytes)), v.podId || '-', String(v.formatted)]);
      process.stdout.write(table(rows));
    }
  };
  const volume = program.command('volume').description("the node's volumes");
  volume
    .command('create <id>')
    .description('records a volume (a lowercase UUID), AVAILABLE')
    .requiredOption('--size <quantity>', 'its size, such as 1Gi (64Mi to 16Ti in whole Mi)', volumeBytes)
    .option('--label <key=value...>', 'labels')
    .addOption(output())
    .action(async (id: string, o: { size: bigint; label?: string[]; output: Output }) => {
      const labels: Record<string, string> = {};
      for (const kv of o.label ?? []) {
        const at = kv.indexOf('=');
        if (at <= 0) throw new InvalidArgumentError(`--label ${JSON.stringify(kv)}: want key=value`);
        const key = kv.slice(0, at);
        // Two values for one key: which one was meant is not feosctl's to guess.
        if (key in labels) throw new InvalidArgumentError(`--label ${JSON.stringify(kv)}: label ${key} given twice`);
        labels[key] = kv.slice(at + 1);
      }
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.createVolume({ id, sizeBytes: o.size, labels }, { deadline: deadline() }));
      printVolumes([res.volume!], o.output, true);
      c.grpc.close();
    });
  volume
    .command('get <id>')
    .addOption(output())
    .action(async (id: string, o: { output: Output }) => {
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.getVolume({ id }, { deadline: deadline() }));
      printVolumes([res.volume!], o.output, true);
      c.grpc.close();
    });
  volume
    .command('list')
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.listVolumes({}, { deadline: deadline() }));
      if (o.output === 'table' && res.volumes.length === 0) process.stdout.write('No volumes.\n');
      else printVolumes(res.volumes, o.output, false);
      c.grpc.close();
    });
  volume
    .command('delete <id>')
    .action(async (id: string) => {
      const c = makeClient(VolumeService, target());
      await call(() => c.deleteVolume({ id }, { deadline: deadline() }));
      process.stdout.write(`volume ${id} deleted\n`);
      c.grpc.close();
    });
  addNetworkCommands(program, { target, deadline, call, output, table });
  program
    .command('host')
    .description('the node')
    .command('info')
    .description("the node's facts")
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = makeClient(HostService, target());
      const res = await call(() => c.getHostInfo({}, { deadline: deadline() }));
      // protobuf JSON, as the pods' (startedAt an RFC 3339 time, 64-bit numbers as strings).
      const json = toJson(GetHostInfoResponseSchema, res) as JsonValue;
      if (o.output === 'json') process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
      else if (o.output === 'yaml') process.stdout.write(YAML.stringify(json));
      else {
        process.stdout.write(
          table([
            ['HOSTNAME', 'KERNEL', 'CPUS', 'MEMORY', 'FEOSD', 'ACCEL', 'GUESTS'],
            [res.hostname, res.kernelRelease, String(res.cpus), `${res.memoryBytes / 1024n ** 2n}Mi`, res.feosdVersion, res.accelerator, res.guestVersions.join(',') || '-'],
          ]),
        );
      }
      c.grpc.close();
    });

  try {
    await program.parseAsync(argv);
  } catch (err: unknown) {
    if (err instanceof CallFailed) {
      process.stderr.write(`feosctl: ${err.message}\n`);
      process.exit(1);
    }
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // An InvalidArgumentError thrown by an action (not by commander's parsing) was not printed.
      if (e.exitCode !== 0 && !commanderSaid) process.stderr.write(`feosctl: ${(e.message ?? '').replace(/^error: /, '')}\n`);
      process.exit(e.exitCode === 0 ? 0 : 2);
    }
    process.stderr.write(`feosctl: ${e.message ?? String(err)}\n`);
    process.exit(2);
  }
}
