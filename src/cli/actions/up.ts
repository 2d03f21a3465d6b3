/**
 * `kube32-cli up`: a whole local cluster in the foreground (control plane and N kube32-sim workers as
 * child processes on loopback, see ../local-cluster.ts). Loaded only when `up` runs (its flags are in
 * ../commands/cluster.ts).
 *
 * Stopping: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) stop the workers first (they
 * drain), then the control plane; a second signal kills what is left. A closed standard output (`up |
 * head`) does not end `up`: its lines go to standard error from then on. An unexpected error in `up`
 * itself stops the cluster the same way before `up` exits 1, and the children are killed whenever `up`
 * exits while they run.
 */
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { parseBytes, unusedPort } from '../../lib/index.ts';
import { durationFlagMs } from '../duration-flag.ts';
import { CliError } from '../errors.ts';
import { hostPort } from '../feos-flags.ts';
import { checkFeosDataDir, checkFeosNodesRoot, type FeosNodes, makeFeosBridge, MAX_FEOS_NODES, removeFeosBridge, startFeosNodes } from '../feos-nodes.ts';
import { nodeMonitorGracePeriodMs } from '../node-monitor.ts';
import type { LocalCluster } from '../local-cluster.ts';
import { MAX_APISERVERS } from '../apiserver-flags.ts';
import { workerAddress } from '../worker-addresses.ts';

/** `up`'s flags as commander parses them. */
export interface UpFlags {
  workers: string;
  dataDir: string;
  port: string;
  workerHeap?: string;
  /** worker-1's address when `--first-address` is given (a taken one is then an error); else the first free range from 127.0.0.2. */
  firstAddress?: string;
  readyTimeout: string;
  /** `--storage`: `sqlite` (the default) or `etcd`. */
  storage?: string;
  /** `--etcd-endpoints`: etcd client URLs, comma-separated; only with `--storage etcd`. */
  etcdEndpoints?: string;
  /** `--apiservers`: API server processes on the one port (above 1 only with `--storage etcd`). @default '1' */
  apiservers?: string;
  nodeMonitorGracePeriod?: string;
  podEvictionTimeout?: string;
  /** `--feos-listen`: the port for FeOS nodes; absent: a free port on 127.0.0.1; `off`: none. */
  feosListen?: string;
  /** `--feos-nodes`: FeOS nodes to start (../feos-nodes.ts); root only. @default '0' */
  feosNodes?: string;
  /** `--feos-guest-dir`: the guest versions for them. */
  feosGuestDir?: string;
  /** `--feos-accel`: feosd's `--accel`. */
  feosAccel?: string;
  /** `--feos-object-store`: every FeOS node's `--object-store` (default `file://DATA_DIR/feos/objects`). */
  feosObjectStore?: string;
  /** `--feos-s3-endpoint`: every FeOS node's `--s3-endpoint` (an http(s) URL), with an s3:// `--feos-object-store`. */
  feosS3Endpoint?: string;
  /** `--feos-registry` (repeatable): registries the FeOS nodes' pods pull from, `HOST:PORT`. */
  feosRegistry?: string[];
}

/** The signals that stop the cluster: Ctrl-C, a plain `kill`, and the terminal closing. */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function intFlag(flag: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < min || n > max) {
    throw new CliError(`invalid value "${value}" for ${flag}: expected a whole number from ${min} to ${max}`);
  }
  return n;
}

/**
 * Progress lines for a long-running foreground command: to standard output while it is open, then to
 * standard error (said once), then nowhere. A write that fails (EPIPE once `head` has exited, EIO once
 * the terminal has closed) marks the stream dead and the line goes on to the next stream; the stream's
 * 'error' event is taken here so that it cannot end the process.
 * @returns `print(line)`, and `release()` to remove the listeners
 */
export function resilientPrinter(): { print: (line: string) => void; release: () => void } {
  const dead = new Set<NodeJS.WriteStream>();
  /** Lines written to standard output whose write has not completed yet, oldest first. */
  const pending: string[] = [];
  let told = false;
  const usable = (s: NodeJS.WriteStream): boolean => !dead.has(s) && !s.destroyed && s.writable;
  const toStderr = (text: string): void => {
    if (!usable(process.stderr)) return;
    if (!told) {
      told = true;
      process.stderr.write('kube32: standard output was closed; up goes on, printing here\n', () => {});
    }
    process.stderr.write(text, (err) => {
      if (err) dead.add(process.stderr);
    });
  };
  /** Standard output failed: what it had not taken goes to standard error, in order. */
  const stdoutFailed = (): void => {
    dead.add(process.stdout);
    for (const text of pending.splice(0)) toStderr(text);
  };
  const outError = (): void => stdoutFailed();
  const errError = (): void => {
    dead.add(process.stderr);
  };
  process.stdout.on('error', outError);
  process.stderr.on('error', errError);
  const print = (line: string): void => {
    const text = `${line}\n`;
    if (!usable(process.stdout)) {
      // Destroyed by a failed write whose callback has not run yet: the lines before this one first.
      if (pending.length > 0) stdoutFailed();
      toStderr(text);
      return;
    }
    pending.push(text);
    process.stdout.write(text, (err) => {
      if (err) {
        stdoutFailed();
        return;
      }
      const i = pending.indexOf(text);
      if (i >= 0) pending.splice(i, 1);
    });
  };
  const release = (): void => {
    // Keep swallowing errors of a dead stream: a late EPIPE must not crash the exit path.
    if (dead.size === 0) {
      process.stdout.off('error', outError);
      process.stderr.off('error', errError);
    }
  };
  return { print, release };
}

/**
 * Runs `up` until a stop signal, or until the control plane exits on its own.
 * @throws CliError for a bad flag, a data dir or port in use, worker addresses in use when
 *   `--first-address` was given, a component that does not become ready, a control plane that exits, or
 *   an unexpected error in `up` (after the cluster has been stopped)
 */
export async function up(flags: UpFlags): Promise<void> {
  const workers = intFlag('--workers', flags.workers, 0, 200);
  const port = intFlag('--port', flags.port, 0, 65535);
  const readyTimeoutMs = intFlag('--ready-timeout', flags.readyTimeout, 1, 3600) * 1000;
  if (flags.workerHeap !== undefined) heapFlag(flags.workerHeap);
  const storage = storageFlag(flags.storage ?? 'sqlite');
  const etcdEndpoints = flags.etcdEndpoints === undefined ? undefined : endpointsFlag(flags.etcdEndpoints);
  if (etcdEndpoints && storage !== 'etcd') throw new CliError('--etcd-endpoints needs --storage etcd');
  const apiservers = intFlag('--apiservers', flags.apiservers ?? '1', 1, MAX_APISERVERS);
  if (apiservers > 1 && storage !== 'etcd') {
    throw new CliError(`--apiservers ${apiservers} needs --storage etcd: several API server processes share their objects through etcd only (SQLite is one process's)`);
  }
  if (flags.nodeMonitorGracePeriod !== undefined) nodeMonitorGracePeriodMs(flags.nodeMonitorGracePeriod);
  const dataDir = flags.dataDir;
  const feosNodeCount = intFlag('--feos-nodes', flags.feosNodes ?? '0', 0, MAX_FEOS_NODES);
  if (feosNodeCount > 0 && flags.feosListen !== undefined) {
    throw new CliError("--feos-nodes puts the port for FeOS nodes on its nodes' bridge: leave --feos-listen out");
  }
  if (flags.feosAccel !== undefined && !['auto', 'kvm', 'tcg'].includes(flags.feosAccel)) throw new CliError(`invalid value "${flags.feosAccel}" for --feos-accel: expected auto, kvm or tcg`);
  if (feosNodeCount === 0 && (flags.feosObjectStore !== undefined || (flags.feosRegistry ?? []).length > 0)) {
    throw new CliError('--feos-object-store and --feos-registry are for the FeOS nodes of --feos-nodes N: give --feos-nodes, or leave them out');
  }
  if (flags.feosObjectStore !== undefined && !/^(file:\/\/\/|s3:\/\/[^/]+)/.test(flags.feosObjectStore)) {
    throw new CliError(`invalid value "${flags.feosObjectStore}" for --feos-object-store: expected file:///absolute/path or s3://BUCKET/PREFIX`);
  }
  if (flags.feosS3Endpoint !== undefined) {
    if (!flags.feosObjectStore?.startsWith('s3://')) throw new CliError('--feos-s3-endpoint is for an S3 object store: give --feos-object-store s3://BUCKET/PREFIX too');
    let u: URL | undefined;
    try {
      u = new URL(flags.feosS3Endpoint);
    } catch {}
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) throw new CliError(`invalid value "${flags.feosS3Endpoint}" for --feos-s3-endpoint: expected an http:// or https:// URL (such as http://127.0.0.1:8080)`);
  }
  // The flags up passes on are checked here too: nothing is printed or started for a bad one.
  if (flags.podEvictionTimeout !== undefined) durationFlagMs('pod-eviction-timeout', flags.podEvictionTimeout);
  if (flags.feosListen !== undefined && flags.feosListen !== 'off') hostPort('--feos-listen', flags.feosListen);
  if (flags.firstAddress !== undefined) for (let i = 1; i <= Math.max(workers, 1); i++) workerAddress(i, flags.firstAddress);
  checkFeosNodesRoot(feosNodeCount);
  checkFeosDataDir(dataDir, feosNodeCount);
  // Loaded once the flags are known to be good: it brings the Kubernetes client.
  const { exitStatusText, startLocalCluster } = await import('../local-cluster.ts');
  const { print, release } = resilientPrinter();
  // FeOS nodes' bridge first: the control plane's port for nodes listens on its address.
  const feosBridge = feosNodeCount > 0 ? await makeFeosBridge() : undefined;
  // The port for FeOS nodes (docs/feos/fleet.md): a free loopback port unless given or turned off.
  const feosListen = feosBridge
    ? `${feosBridge.address}:${await unusedPort('127.0.0.1')}`
    : flags.feosListen === 'off'
      ? undefined
      : (flags.feosListen ?? `127.0.0.1:${await unusedPort('127.0.0.1')}`);
  print(`kube32: starting a local cluster in ${dataDir} (${workers} worker${workers === 1 ? '' : 's'}${feosNodeCount ? `, ${feosNodeCount} FeOS node${feosNodeCount === 1 ? '' : 's'}` : ''})`);
  let feosNodes: FeosNodes | undefined;

  let interrupted = 0;
  let crash: unknown;
  let cluster: LocalCluster | undefined;
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
      feosNodes?.kill();
      if (feosBridge && !feosNodes) removeFeosBridge(feosBridge);
      cluster?.kill();
      process.exit(130);
    }
  };
  // A bug in up (or in a library it uses) must not leave the cluster behind: stop it as on a signal.
  const onCrash = (err: unknown): void => {
    if (crash !== undefined) return;
    crash = err;
    print(`kube32: unexpected error in up: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    onSignal('SIGTERM');
  };
  for (const sig of STOP_SIGNALS) process.on(sig, onSignal);
  process.on('uncaughtException', onCrash);
  process.on('unhandledRejection', onCrash);
  try {
    const startup = startLocalCluster({
      workers,
      dataDir,
      port,
      workerHeap: flags.workerHeap,
      ...(flags.nodeMonitorGracePeriod ? { workerFenceAfter: flags.nodeMonitorGracePeriod } : {}),
      firstAddress: flags.firstAddress,
      pickFreeAddresses: flags.firstAddress === undefined,
      storage,
      ...(etcdEndpoints ? { etcdEndpoints } : {}),
      apiservers,
      controlPlaneArgs: [
        ...(flags.nodeMonitorGracePeriod ? ['--node-monitor-grace-period', flags.nodeMonitorGracePeriod] : []),
        ...(flags.podEvictionTimeout ? ['--pod-eviction-timeout', flags.podEvictionTimeout] : []),
        ...(feosListen ? ['--feos-listen', feosListen] : []),
      ],
      readyTimeoutMs,
      print,
      signal: startupAbort.signal,
    });
    // A signal during start-up stops what has started so far once start-up settles.
    cluster = await startup;
    if (interrupted === 0) {
      print('');
      print(`Cluster ready: a control plane at ${cluster.server} and ${workers} worker${workers === 1 ? '' : 's'}.`);
      if (cluster.etcdEndpoints) print(`Objects are kept in etcd at ${cluster.etcdEndpoints.join(',')}.`);
      if (cluster.apiservers.length > 1) {
        const port = new URL(cluster.server).port;
        print(`${cluster.apiservers.length} API server processes share port ${port}: ${cluster.apiservers.map((a) => `${a.name} (pid ${a.pid}, peer port ${a.peerPort})`).join(', ')}.`);
      }
      print('Point kubectl at it:');
      print(`  export KUBECONFIG=${cluster.kubeconfig}`);
      print('  kubectl get nodes');
      if (feosListen) await portAnswers(feosListen, readyTimeoutMs);
      if (feosListen) print(`FeOS nodes join at ${feosListen}: feosd --control-plane ${feosListen}${feosBridge ? '' : ' --control-plane-name localhost'}, with a token from "kube32-cli feos token create".`);
      if (feosBridge) {
        try {
          feosNodes = await startFeosNodes({
            count: feosNodeCount,
            bridge: feosBridge,
            listen: feosListen!,
            kubeconfig: cluster.kubeconfig,
            dataDir,
            guestDir: flags.feosGuestDir,
            accel: flags.feosAccel,
            ...(flags.feosObjectStore ? { objectStore: flags.feosObjectStore } : {}),
            ...(flags.feosS3Endpoint ? { s3Endpoint: flags.feosS3Endpoint } : {}),
            registries: flags.feosRegistry ?? [],
            readyTimeoutMs,
            print,
            signal: startupAbort.signal,
          });
        } catch (err: unknown) {
          // startFeosNodes removed what it made, the bridge with it.
          await cluster.stop();
          if (interrupted > 0) return;
          throw err;
        }
        print(`FeOS nodes: ${feosNodes.names.join(', ')} (kubectl get nodes -L kube32.io/runtime); microVM pods run there (docs/feos/fleet.md).`);
      }
      print(`Logs: ${join(dataDir, 'logs')}/. Press Ctrl-C to stop the cluster (the workers drain first).`);
      const cpExit = cluster.controlPlaneExited.then((code) => ({ code }));
      const outcome = await Promise.race([stopRequested.then(() => undefined), cpExit]);
      // The FeOS nodes first (their pods stop), as the workers drain before the control plane stops.
      if (feosNodes) await feosNodes.stop();
      await cluster.stop();
      if (outcome !== undefined) throw new CliError(`the control plane ${exitStatusText(outcome.code)}: the cluster is down`);
    } else {
      await cluster.stop();
    }
    if (crash !== undefined) throw new CliError('up stopped the cluster after an unexpected error (above)', 1, { cause: crash });
  } finally {
    // Gone already once the FeOS nodes stopped; here for a start that did not get as far as them.
    if (feosBridge) removeFeosBridge(feosBridge);
    for (const sig of STOP_SIGNALS) process.off(sig, onSignal);
    process.off('uncaughtException', onCrash);
    process.off('unhandledRejection', onCrash);
    release();
  }
}

/**
 * Waits until `host:port` takes TCP connections: the control plane opens the port for FeOS nodes after
 * /readyz answers (its controllers start first).
 * @throws CliError when it does not within `ms`
 */
async function portAnswers(address: string, ms: number): Promise<void> {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(address.slice(i + 1));
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = netConnect({ host, port }, () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new CliError(`the control plane's port for FeOS nodes (${address}) did not open within ${ms / 1000}s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Checks `--worker-heap` before anything starts, as kube32-sim checks `--heap`: a byte quantity that
 * holds at least one 64 KiB WebAssembly page.
 * @throws CliError naming the flag, the value and what it must be
 */
function heapFlag(value: string): number {
  let bytes: number;
  try {
    bytes = parseBytes(value);
  } catch {
    throw new CliError(`--worker-heap must be a byte quantity such as 64Mi: current value is "${value}"`);
  }
  if (bytes < 65536) throw new CliError(`--worker-heap must hold at least one 64Ki WebAssembly page (65536 bytes): current value is "${value}" (${bytes} bytes)`);
  return bytes;
}

/**
 * Checks `--storage`: where the control plane keeps its objects.
 * @throws CliError for anything but `sqlite` or `etcd`
 */
function storageFlag(value: string): 'sqlite' | 'etcd' {
  if (value === 'sqlite' || value === 'etcd') return value;
  throw new CliError(`invalid value "${value}" for --storage: expected sqlite or etcd`);
}

/**
 * Checks `--etcd-endpoints`: one or more http(s) URLs, comma-separated (as kube-apiserver's
 * `--etcd-servers`).
 * @throws CliError naming the first URL that is not one
 */
function endpointsFlag(value: string): string[] {
  const urls = value
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
  if (urls.length === 0) throw new CliError(`invalid value "${value}" for --etcd-endpoints: expected etcd client URLs, e.g. http://127.0.0.1:2379`);
  for (const u of urls) {
    let ok = false;
    try {
      const parsed = new URL(u);
      ok = (parsed.protocol === 'http:' || parsed.protocol === 'https:') && parsed.hostname !== '';
    } catch {
      ok = false;
    }
    if (!ok) throw new CliError(`invalid etcd endpoint "${u}" in --etcd-endpoints: expected a URL such as http://127.0.0.1:2379`);
  }
  return urls;
}
