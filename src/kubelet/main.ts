/**
 * `kube32-sim`: the Kube32 worker node that runs on an ordinary computer (run by
 * `bin/kube32-sim.js`). Parses the flags, starts the worker (or, with `--nodes N`, N simulated
 * nodes in this one process: host.ts), and on SIGINT or SIGTERM drains every node at once (seed
 * "Drain and evictions") and exits 0. A second signal during the drain stops at once.
 */
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { createLogger, parseBytes, parseDuration, watchParent } from '../lib/index.ts';
import { configurePodThreads, MAX_PODS_PER_THREAD } from '../wasm/index.ts';
import { MAX_NODES_PER_PROCESS, type NodeHost, type NodePlan, planNodes, startNodes } from './host.ts';

function bytesOption(value: string): number {
  try {
    return parseBytes(value);
  } catch (err: unknown) {
    throw new InvalidArgumentError(err instanceof Error ? err.message : String(err));
  }
}

/** Bytes of one WebAssembly page: the least heap a node can offer a pod. */
const WASM_PAGE_BYTES = 64 * 1024;

/**
 * Parses `--heap`: a byte quantity of at least one 64 KiB WebAssembly page (a smaller heap would
 * give a Ready node that can run no pod at all).
 * @throws InvalidArgumentError naming the value and the least accepted
 */
export function heapOption(value: string): number {
  const n = bytesOption(value);
  if (n < WASM_PAGE_BYTES) {
    throw new InvalidArgumentError(`the heap must hold at least one 64Ki WebAssembly page (65536 bytes): current value is "${value}" (${n} bytes)`);
  }
  return n;
}

function intOption(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`expected a whole number: current value is "${value}"`);
  return n;
}

function positiveDurationOption(value: string): number {
  const ms = durationOption(value);
  if (ms < 1) throw new InvalidArgumentError(`expected a duration of at least 1ms: current value is "${value}"`);
  return ms;
}

function durationOption(value: string): number {
  try {
    return parseDuration(value);
  } catch (err: unknown) {
    throw new InvalidArgumentError(err instanceof Error ? err.message : String(err));
  }
}

/**
 * Parses `--labels k=v,k2=v2`.
 * @throws InvalidArgumentError naming the pair that is not `key=value`
 */
export function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = pair.indexOf('=');
    if (i <= 0) throw new InvalidArgumentError(`expected key=value pairs separated by commas: "${pair}" is not one`);
    out[pair.slice(0, i)] = pair.slice(i + 1);
  }
  return out;
}

function portOption(value: string): number {
  const n = intOption(value);
  if (n > 65535) throw new InvalidArgumentError(`expected a TCP port (0-65535): current value is "${value}"`);
  return n;
}

/**
 * A parser of a whole number from 1 to `max` (`--nodes`, `--pods-per-thread`): one message for
 * every value refused (not a number, a fraction, 0, negative, past `max`).
 * @throws InvalidArgumentError `expected a whole number of 1 to <max>: current value is "<value>"`
 */
function rangeIntOption(max: number): (value: string) => number {
  return (value) => {
    const n = /^\s*\d+\s*$/.test(value) ? Number(value) : Number.NaN;
    if (!(n >= 1 && n <= max)) {
      throw new InvalidArgumentError(`expected a whole number of 1 to ${max}: current value is "${value}"`);
    }
    return n;
  };
}

const SEVERAL_NODES_HELP = `
Several nodes in one process (--nodes N, N > 1), each a whole worker with its own Node and Lease:
  names          <name>-1 ... <name>-N
  addresses      consecutive from --address (IPv4): --address 127.0.0.2 --nodes 3 gives 127.0.0.2, .3, .4
  kubelet ports  --kubelet-port on each node's own address (0: each a free port)
  data dirs      <data-dir>/<node> (default ~/.kube32/nodes/<node>)
  credentials    --kubeconfig-dir DIR holding <node>.kubeconfig for each node (user system:node:<node>);
                 kube32-cli apiserver --data-dir CP --issue-node-kubeconfig <node> writes CP/nodes/<node>.kubeconfig
SIGINT or SIGTERM drains every node at once, then the process exits 0; a second signal stops at once (exit 1).
If one node cannot start, none runs: the nodes already up are stopped and the error names each failed node.`;

/** Builds the command line (exported for tests). */
export function buildCommand(): Command {
  return new Command('kube32-sim')
    .description('A Kube32 worker node: runs WebAssembly pods bound to it, serves their HTTP, checkpoints them for moves')
    .option('--kubeconfig <file>', 'kubeconfig of the node\'s identity (default: $KUBECONFIG); one node only')
    .option('--kubeconfig-dir <dir>', 'directory holding <node>.kubeconfig for each node (instead of --kubeconfig)')
    .option('--name <node>', 'the Node\'s name; with --nodes N, the prefix of <name>-1 ... <name>-N', hostname().toLowerCase())
    .addOption(new Option('--nodes <n>', `how many simulated nodes this process runs, 1 to ${MAX_NODES_PER_PROCESS} (see below)`).argParser(rangeIntOption(MAX_NODES_PER_PROCESS)).default(1))
    .option('--address <ip>', 'address of the node and its pods (one per worker: 127.0.0.2, 127.0.0.3, ...); with --nodes N, the first of N consecutive', '127.0.0.1')
    .addOption(new Option('--kubelet-port <port>', 'port of the kubelet endpoint on the node\'s address (0: any free port)').argParser(portOption).default(10250))
    .addOption(new Option('--heap <bytes>', 'heap the pods may hold, at least 64Ki (capacity memory; MemoryPressure below 24Ki free); per node').argParser(heapOption).default(256 * 1024 * 1024, '256Mi'))
    .addOption(new Option('--max-pods <n>', 'most pods the node runs').argParser(intOption).default(110))
    .addOption(new Option('--labels <k=v,...>', 'extra Node labels (every node of the process)').argParser(parseLabels).default({}, 'none'))
    .option('--data-dir <dir>', 'where modules and pods\' files are kept (default: ~/.kube32/nodes/<name>); with --nodes N, the parent of <dir>/<node>')
    .option('--interp-mops <mops>', 'report this interpreter speed instead of measuring it', (v) => {
      const n = Number(v);
      if (!(n >= 0)) throw new InvalidArgumentError(`expected a number of MOPS: current value is "${v}"`);
      return n;
    })
    .addOption(new Option('--drain-timeout <duration>', 'how long the self-drain waits for pods to leave').argParser(durationOption).default(20_000, '20s'))
    .addOption(new Option('--pods-per-thread <n>', `pods packed on one worker thread, 1 to ${MAX_PODS_PER_THREAD} (1: a thread of its own for each pod); shared by every node of the process`).argParser(rangeIntOption(MAX_PODS_PER_THREAD)).default(1))
    .addOption(new Option('--hold-timeout <duration>', 'longest a request to a frozen or moving pod is held before 503 with Retry-After: 1').argParser(positiveDurationOption).default(10_000, '10s'))
    .addOption(new Option('--hold-requests <n>', 'most requests held for one frozen or moving pod (more: 503 with Retry-After: 1)').argParser(rangeIntOption(1_000_000)).default(64))
    .addOption(new Option('--hold-bytes <bytes>', 'most bytes of request bodies held for one frozen or moving pod').argParser(bytesOption).default(16 << 20, '16Mi'))
    .addOption(new Option('--moved-forward <duration>', 'how long a moved pod\'s old address keeps answering, forwarding to its new node (0: not at all)').argParser(durationOption).default(30_000, '30s'))
    .addOption(new Option('--fence-after <duration>', 'freeze (fence) the node\'s pods once its Lease could not be renewed for this long, so that the control plane may restore them elsewhere (0: never); at most the control plane\'s --node-monitor-grace-period').argParser(durationOption).default(40_000, '40s'))
    .addHelpText('after', SEVERAL_NODES_HELP)
    .version('0.1.0')
    // A bad flag gets its one `error:` line and a pointer to the help, not the whole help (as feosd).
    .showHelpAfterError('(kube32-sim --help lists the flags)')
    .exitOverride();
}

/** kube32-sim's flags as commander parses them. */
interface SimFlags {
  kubeconfig?: string; kubeconfigDir?: string; name: string; nodes: number; address: string; kubeletPort: number; heap: number;
  maxPods: number; labels: Record<string, string>; dataDir?: string; interpMops?: number; drainTimeout: number; podsPerThread: number;
  holdTimeout: number; holdRequests: number; holdBytes: number; movedForward: number; fenceAfter: number;
}

/**
 * Runs kube32-sim with `argv` as `process.argv` gives it. Resolves once the nodes have started;
 * the process then lives until a signal drains and stops them. Exit status: 1 for a flag commander
 * refuses (as before), 2 for flags that cannot make the nodes (no kubeconfig, `--kubeconfig` with
 * several nodes, an address that cannot be counted from), 1 when a node cannot start (none is left
 * running) or a second signal cut the drain short, 0 after a drain.
 */
export async function main(argv: string[]): Promise<void> {
  const cmd = buildCommand();
  try {
    cmd.parse(argv);
  } catch (err: unknown) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    throw err;
  }
  const o = cmd.opts<SimFlags>();
  let plans: NodePlan[];
  try {
    plans = planNodes({
      name: o.name, count: o.nodes, address: o.address, kubeletPort: o.kubeletPort,
      dataDir: o.dataDir ?? join(homedir(), '.kube32', 'nodes', ...(o.nodes === 1 ? [o.name] : [])),
      ...(o.kubeconfigDir !== undefined ? { kubeconfigDir: o.kubeconfigDir } : {}),
      ...(o.kubeconfig !== undefined ? { kubeconfig: o.kubeconfig } : o.kubeconfigDir === undefined && process.env.KUBECONFIG ? { kubeconfig: process.env.KUBECONFIG } : {}),
    });
  } catch (err: unknown) {
    process.stderr.write(`kube32-sim: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
    return;
  }
  // One logger for the process; each node's lines carry its name (a child logger's `node`).
  const log = createLogger('kube32-sim');
  configurePodThreads({ podsPerThread: o.podsPerThread });

  // Signals are taken from the start: one during the start drains the nodes once they are up.
  let host: NodeHost | undefined;
  let signalled = false;
  const drainAndExit = async (): Promise<void> => {
    const reports = await host!.drainAll(o.drainTimeout);
    host!.kubelets.forEach((k, i) => {
      const r = reports[i]!;
      process.stdout.write(`kube32-sim: node ${k.nodeName} drained: ${r.evicted.length} evicted, ${r.remaining.length} left behind, in ${r.durationMs} ms\n`);
    });
    await host!.stopAll();
    process.exit(0);
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) {
      log.warn({ signal }, 'second signal: stopping without waiting for the drain');
      void (host?.stopAll() ?? Promise.resolve()).finally(() => process.exit(1));
      return;
    }
    signalled = true;
    if (!host) {
      log.info({ signal }, 'signal during the start: the nodes drain once they are up (a second signal stops at once)');
      return;
    }
    log.info({ signal, nodes: host.kubelets.length }, 'draining every node before exit');
    void drainAndExit();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Started by `kube32-cli up`: a SIGKILLed up must not leave this worker running (lib/parent-watch.ts).
  watchParent();
  const started = Date.now();
  try {
    host = await startNodes(plans, {
      heapBytes: o.heap, maxPods: o.maxPods, labels: o.labels,
      hold: { timeoutMs: o.holdTimeout, maxRequests: o.holdRequests, maxBytes: o.holdBytes, forwardMs: o.movedForward },
      fenceAfterMs: o.fenceAfter,
      ...(o.interpMops !== undefined ? { interpMops: o.interpMops } : {}),
    }, log);
  } catch (err: unknown) {
    process.stderr.write(`kube32-sim: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  // A node's ready line is printed once every node is up: a process that fails to start prints none.
  for (const k of host.kubelets) {
    process.stdout.write(`kube32-sim: node ${k.nodeName} ready: pods at ${k.address}, kubelet endpoint http://${k.address}:${k.kubeletPort}, interp-mops ${k.interpMops}\n`);
  }
  if (plans.length > 1) process.stdout.write(`kube32-sim: ${plans.length} nodes ready in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  if (signalled) {
    log.info({ nodes: host.kubelets.length }, 'draining every node before exit');
    void drainAndExit();
  }
}
