/**
 * `kube32-sim`: the Kube32 worker node that runs on an ordinary computer (run by
 * `bin/kube32-sim.js`). Parses the flags, starts the worker, and on SIGINT or SIGTERM drains it
 * (seed "Drain and evictions") and exits 0. A second signal during the drain stops at once.
 */
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { KubeConfig } from '@kubernetes/client-node';
import { createLogger, parseBytes, parseDuration } from '../lib/index.ts';
import { startKubelet } from './kubelet.ts';

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

/** Builds the command line (exported for tests). */
export function buildCommand(): Command {
  return new Command('kube32-sim')
    .description('A Kube32 worker node: runs WebAssembly pods bound to it, serves their HTTP, checkpoints them for moves')
    .option('--kubeconfig <file>', 'kubeconfig of the node\'s identity (default: $KUBECONFIG)')
    .option('--name <node>', 'the Node\'s name', hostname().toLowerCase())
    .option('--address <ip>', 'address of the node and its pods (one per worker: 127.0.0.2, 127.0.0.3, ...)', '127.0.0.1')
    .addOption(new Option('--kubelet-port <port>', 'port of the kubelet endpoint (0: any free port)').argParser(intOption).default(10250))
    .addOption(new Option('--heap <bytes>', 'heap the pods may hold, at least 64Ki (capacity memory; MemoryPressure below 24Ki free)').argParser(heapOption).default(256 * 1024 * 1024, '256Mi'))
    .addOption(new Option('--max-pods <n>', 'most pods the node runs').argParser(intOption).default(110))
    .addOption(new Option('--labels <k=v,...>', 'extra Node labels').argParser(parseLabels).default({}, 'none'))
    .option('--data-dir <dir>', 'where modules and pods\' files are kept (default: ~/.kube32/nodes/<name>)')
    .option('--interp-mops <mops>', 'report this interpreter speed instead of measuring it', (v) => {
      const n = Number(v);
      if (!(n >= 0)) throw new InvalidArgumentError(`expected a number of MOPS: current value is "${v}"`);
      return n;
    })
    .addOption(new Option('--drain-timeout <duration>', 'how long the self-drain waits for pods to leave').argParser(durationOption).default(20_000, '20s'))
    .version('0.1.0')
    .showHelpAfterError()
    .exitOverride();
}

/**
 * Runs kube32-sim with `argv` as `process.argv` gives it. Resolves once the worker has started;
 * the process then lives until a signal drains and stops it.
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
  const o = cmd.opts<{
    kubeconfig?: string; name: string; address: string; kubeletPort: number; heap: number; maxPods: number;
    labels: Record<string, string>; dataDir?: string; interpMops?: number; drainTimeout: number;
  }>();
  const log = createLogger('kube32-sim', { node: o.name });
  const kubeconfig = o.kubeconfig ?? process.env.KUBECONFIG;
  if (!kubeconfig) {
    process.stderr.write('kube32-sim: --kubeconfig is required (or set KUBECONFIG)\n');
    process.exitCode = 2;
    return;
  }
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(kubeconfig);
    const kubelet = await startKubelet({
      kubeConfig: kc, nodeName: o.name, address: o.address, kubeletPort: o.kubeletPort, heapBytes: o.heap,
      maxPods: o.maxPods, labels: o.labels, dataDir: o.dataDir ?? join(homedir(), '.kube32', 'nodes', o.name),
      ...(o.interpMops !== undefined ? { interpMops: o.interpMops } : {}), log,
    });
    process.stdout.write(`kube32-sim: node ${kubelet.nodeName} ready: pods at ${kubelet.address}, kubelet endpoint http://${kubelet.address}:${kubelet.kubeletPort}, interp-mops ${kubelet.interpMops}\n`);
    let signalled = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (signalled) {
        log.warn({ signal }, 'second signal: stopping without waiting for the drain');
        void kubelet.stop().finally(() => process.exit(1));
        return;
      }
      signalled = true;
      log.info({ signal }, 'draining the node before exit');
      void (async () => {
        const report = await kubelet.drain(o.drainTimeout);
        process.stdout.write(`kube32-sim: node ${kubelet.nodeName} drained: ${report.evicted.length} evicted, ${report.remaining.length} left behind, in ${report.durationMs} ms\n`);
        await kubelet.stop();
        process.exit(0);
      })();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  } catch (err: unknown) {
    process.stderr.write(`kube32-sim: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
