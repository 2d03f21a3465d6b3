/**
 * kube32-cli `up`: a whole local cluster in the foreground (control plane and N kube32-sim workers as
 * child processes on loopback, see ../local-cluster.ts). Ctrl-C or SIGTERM stops the workers first
 * (they drain), then the control plane; a second Ctrl-C kills what is left. A second `up` on the same
 * data dir finds its objects again.
 */
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { CliError } from '../errors.ts';
import { startLocalCluster } from '../local-cluster.ts';

/** The data dir `up` uses without `--data-dir`: `$KUBE32_DATA_DIR`, else `~/.kube32` (beside kubectl's `~/.kube`). */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.KUBE32_DATA_DIR || join(env.HOME || homedir(), '.kube32');
}

interface UpFlags {
  workers: string;
  dataDir?: string;
  port: string;
  workerHeap?: string;
  firstAddress: string;
  readyTimeout: string;
  nodeMonitorGracePeriod?: string;
  podEvictionTimeout?: string;
}

function intFlag(flag: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < min || n > max) {
    throw new CliError(`invalid value "${value}" for ${flag}: expected a whole number from ${min} to ${max}`);
  }
  return n;
}

async function up(flags: UpFlags): Promise<void> {
  const workers = intFlag('--workers', flags.workers, 0, 200);
  const port = intFlag('--port', flags.port, 0, 65535);
  const readyTimeoutMs = intFlag('--ready-timeout', flags.readyTimeout, 1, 3600) * 1000;
  const dataDir = resolve(flags.dataDir ?? defaultDataDir());
  const print = (line: string): void => {
    process.stdout.write(`${line}\n`);
  };
  print(`kube32: starting a local cluster in ${dataDir} (${workers} worker${workers === 1 ? '' : 's'})`);

  let interrupted = 0;
  let cluster: Awaited<ReturnType<typeof startLocalCluster>> | undefined;
  const { promise: stopRequested, resolve: requestStop } = Promise.withResolvers<void>();
  const startupAbort = new AbortController();
  const onSignal = (sig: NodeJS.Signals): void => {
    interrupted++;
    if (interrupted === 1) {
      print(`\n${sig}: stopping the cluster (again to kill it at once)`);
      requestStop();
      startupAbort.abort();
    } else {
      print(`${sig}: killing the cluster`);
      cluster?.kill();
      process.exit(130);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const startup = startLocalCluster({
      workers,
      dataDir,
      port,
      workerHeap: flags.workerHeap,
      firstAddress: flags.firstAddress,
      controlPlaneArgs: [
        ...(flags.nodeMonitorGracePeriod ? ['--node-monitor-grace-period', flags.nodeMonitorGracePeriod] : []),
        ...(flags.podEvictionTimeout ? ['--pod-eviction-timeout', flags.podEvictionTimeout] : []),
      ],
      readyTimeoutMs,
      print,
      signal: startupAbort.signal,
    });
    // A signal during start-up stops what has started so far once start-up settles.
    cluster = await startup;
    if (interrupted > 0) {
      await cluster.stop();
      return;
    }
    print('');
    print(`Cluster ready: a control plane at ${cluster.server} and ${workers} worker${workers === 1 ? '' : 's'}.`);
    print('Point kubectl at it:');
    print(`  export KUBECONFIG=${cluster.kubeconfig}`);
    print('  kubectl get nodes');
    print(`Logs: ${join(dataDir, 'logs')}/. Press Ctrl-C to stop the cluster (the workers drain first).`);
    const cpExit = cluster.controlPlaneExited.then((code) => ({ code }));
    const outcome = await Promise.race([stopRequested.then(() => undefined), cpExit]);
    await cluster.stop();
    if (outcome !== undefined) throw new CliError(`the control plane exited (code ${outcome.code}): the cluster is down`);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Adds `up` to `program`. */
export function register(program: Command): void {
  program
    .command('up')
    .summary('Run a local cluster: a control plane and kube32-sim workers on this computer')
    .description(
      [
        'Start a local Kube32 cluster in the foreground: the control plane (API server on SQLite in the data dir, and the controllers) and N kube32-sim workers on 127.0.0.2, 127.0.0.3, ... as child processes. It writes the admin kubeconfig to DATA_DIR/kubeconfig.',
        'Ctrl-C or SIGTERM stops the workers first (each drains its pods), then the control plane. Starting again on the same data dir finds the cluster\'s objects again. Logs are in DATA_DIR/logs/.',
        'Use it with kubectl:\n  export KUBECONFIG=DATA_DIR/kubeconfig\n  kubectl get nodes',
      ].join('\n\n'),
    )
    .option('--workers <n>', 'number of kube32-sim workers (0: the control plane alone)', '2')
    .option('--data-dir <dir>', 'where the cluster keeps its state (default: $KUBE32_DATA_DIR or ~/.kube32)')
    .option('--port <port>', "the API server's port on 127.0.0.1 (0: pick a free one)", '6443')
    .option('--first-address <ip>', "the first worker's loopback address; the others take the next ones", '127.0.0.2')
    .option('--worker-heap <bytes>', "each worker's heap for pods, e.g. 64Mi (default: kube32-sim's)")
    .option('--node-monitor-grace-period <duration>', 'passed to the control plane: a worker silent this long turns NotReady (default 40s)')
    .option('--pod-eviction-timeout <duration>', "passed to the control plane: a lost worker's pods are evicted this long after (default 5m)")
    .option('--ready-timeout <seconds>', 'how long each component may take to become ready', '60')
    .action(up);
}
