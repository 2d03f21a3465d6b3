/**
 * kube32-cli `up`: a whole local cluster in the foreground (control plane and N kube32-sim workers as
 * child processes on loopback). This file holds its flags and help; the code is loaded only when `up`
 * runs (../actions/up.ts, ../local-cluster.ts). Ctrl-C, SIGTERM or SIGHUP stops the workers first
 * (they drain), then the control plane; a second signal kills what is left at once. A second `up` on the
 * same data dir finds its objects again.
 */
import { resolve } from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import type { UpFlags } from '../actions/up.ts';

import { defaultDataDir } from '../paths.ts';
import { dataDirFlag } from '../flags.ts';

/** A `--feos-registry` value, `HOST:PORT` (repeatable). @throws InvalidArgumentError saying what to give */
function feosRegistryFlag(value: string, prev: string[] = []): string[] {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(value);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new InvalidArgumentError('expected HOST:PORT, such as 127.0.0.1:5000');
  return [...prev, value];
}

export { defaultDataDir };

/** `up`'s options as commander parses them (before the defaults that need the environment). */
type UpOptions = Omit<UpFlags, 'dataDir'> & { dataDir?: string };

/** Adds `up` to `program`. */
export function register(program: Command): void {
  program
    .command('up')
    .summary('Run a local cluster: a control plane and kube32-sim workers on this computer')
    .description(
      [
        'Start a local Kube32 cluster in the foreground: the control plane (API server on SQLite in the data dir, and the controllers) and N kube32-sim workers on 127.0.0.2, 127.0.0.3, ... as child processes. It writes the admin kubeconfig to DATA_DIR/kubeconfig.',
        'Each worker listens on its address, port 10250. When those of the default range are taken (another cluster on this computer), up takes the next free range (127.0.1.2, ...) and says so; with --first-address, a taken address is an error.',
        'With --storage etcd the objects are kept in etcd: at --etcd-endpoints, or else in a local etcd that up starts first (loopback, free ports, data in DATA_DIR/etcd) and stops last.',
        'With --storage etcd --apiservers N, N API server processes serve the one port (the kernel spreads connections among them; one killed, the others go on): the control plane\'s and N-1 kube32-cli apiserver with their data in DATA_DIR/apiservers/. The controllers stay in the control plane.',
        "Ctrl-C, SIGTERM or SIGHUP stops the workers first (each drains its pods), then the control plane. Starting again on the same data dir finds the cluster's objects again. Logs are in DATA_DIR/logs/.",
        'Use it with kubectl:\n  export KUBECONFIG=DATA_DIR/kubeconfig\n  kubectl get nodes',
      ].join('\n\n'),
    )
    .option('--workers <n>', 'number of kube32-sim workers (0: the control plane alone)', '2')
    .option('--data-dir <dir>', 'where the cluster keeps its state (default: $KUBE32_DATA_DIR or ~/.kube32)', dataDirFlag)
    .option('--port <port>', "the API server's port on 127.0.0.1 (0: pick a free one)", '6443')
    .option('--first-address <ip>', "the first worker's loopback address; the others take the next ones (default: 127.0.0.2, or the next free range)")
    .option('--worker-heap <bytes>', "each worker's heap for pods, e.g. 64Mi (default: kube32-sim's)")
    .option('--node-monitor-grace-period <duration>', 'passed to the control plane: a worker silent this long turns NotReady (default 40s)')
    .option('--pod-eviction-timeout <duration>', "passed to the control plane: a lost worker's pods are evicted this long after (default 5m)")
    .option('--storage <kind>', 'where the control plane keeps its objects: sqlite (DATA_DIR/kube32.db) or etcd', 'sqlite')
    .option(
      '--etcd-endpoints <urls>',
      'with --storage etcd: etcd client URLs, comma-separated (default: up runs its own etcd, /usr/bin/etcd, with its data in DATA_DIR/etcd)',
    )
    .option(
      '--apiservers <n>',
      'API server processes, with --storage etcd: the control plane\'s and N-1 more on the same port (SO_REUSEPORT) and etcd, each with a peer port of its own',
      '1',
    )
    .option('--feos-listen <address:port>', 'passed to the control plane: the port for FeOS nodes (default: a free port on 127.0.0.1; "off" for none)')
    .option('--feos-nodes <n>', 'FeOS nodes to start beside the workers, each a feosd in a network namespace of its own (root only; the port for nodes then listens on their bridge)', '0')
    .option('--feos-guest-dir <dir>', "with --feos-nodes: the FeOS guest versions (default: /usr/lib/feos/guest if it has one, else one built into the package's build/guest)")
    .option('--feos-accel <accel>', "with --feos-nodes: feosd's --accel (auto, kvm or tcg)", 'auto')
    .option('--feos-s3-endpoint <url>', "with --feos-object-store s3://...: the S3 server of the FeOS nodes' object store (feosd's --s3-endpoint, an http(s) URL)")
    .option('--feos-object-store <url>', "with --feos-nodes: the nodes' shared object store, where microVM pods hibernate to move (file:///path or s3://BUCKET/PREFIX; default file://DATA_DIR/feos/objects)")
    .option('--feos-registry <host:port>', "with --feos-nodes: a registry the microVM pods pull from, named in their images as here (repeatable; a loopback one is forwarded into the nodes' namespaces)", feosRegistryFlag)
    .option('--ready-timeout <seconds>', 'how long each component may take to become ready', '60')
    .action(async (options: UpOptions) => {
      const { up } = await import('../actions/up.ts');
      await up({ ...options, dataDir: resolve(options.dataDir ?? defaultDataDir()) });
    });
  program
    .command('down')
    .summary('Stop the local cluster that kube32-cli up runs on a data dir')
    .description(
      [
        'Stop the local cluster of DATA_DIR from another terminal, as Ctrl-C where kube32-cli up runs does: SIGTERM to the up named in DATA_DIR/up.lock, then wait until it has stopped (its workers drain first, then the control plane stops). A kube32-cli control-plane or apiserver holding DATA_DIR is stopped the same way.',
        'When nothing runs on DATA_DIR it says so and exits 0: down twice stops the cluster once. After --timeout it signals again, which stops everything at once.',
      ].join('\n\n'),
    )
    .option('--data-dir <dir>', 'the cluster\'s data dir (default: $KUBE32_DATA_DIR or ~/.kube32)', dataDirFlag)
    .option('--timeout <duration>', 'how long to wait for the stop before killing it at once (0: forever)', '2m')
    .action(async (options: { dataDir?: string; timeout: string }) => {
      const { down } = await import('../actions/down.ts');
      await down({ timeout: options.timeout, dataDir: resolve(options.dataDir ?? defaultDataDir()) });
    });
}
