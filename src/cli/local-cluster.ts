/**
 * A whole Kube32 cluster on one computer, as `kube32-cli up` runs it in the foreground: the control
 * plane (`kube32-cli control-plane`: API server on SQLite in the data dir, and the controllers) and N
 * `kube32-sim` workers on 127.0.0.2, 127.0.0.3, ..., each a child process with its log in
 * `<data-dir>/logs/`. With `storage: 'etcd'` the control plane keeps its objects in etcd (issue 11,
 * docs/etcd.md): the endpoints given, or else a local `etcd` (Debian's etcd-server) that `up` starts
 * first as one more child, on 127.0.0.1 with free ports and its data in `<data-dir>/etcd/`, and stops
 * last. With `apiservers: N` (etcd only) N-1 more API server processes (`kube32-cli apiserver`,
 * children `apiserver-2`...) serve beside the control plane's on the same port (SO_REUSEPORT: the kernel
 * spreads connections among them) and the same etcd; each has a peer port of its own, where the others
 * (checkpoint data) and a user (its `/metrics`) reach that one process.
 *
 * Data dir layout:
 * ```
 * <data-dir>/
 *   up.lock                 {"pid":..., "children":{"control-plane":pid, "worker-1":pid, ...}} while `up` runs
 *   kubeconfig              the admin kubeconfig the control plane writes (point kubectl at it)
 *   ...                     the control plane's own files (SQLite database, CA, tokens)
 *   etcd/                   the local etcd's --data-dir (storage 'etcd' without endpoints)
 *   etcd-ports.json         {"client":port,"peer":port}: the local etcd's last ports, taken again when free
 *   apiservers/apiserver-N/ each extra API server's --data-dir (the CA and token key come from etcd)
 *   nodes/<worker>/         each worker's --data-dir and its node kubeconfig
 *   logs/<component>.log    each child's standard output and error, appended
 * ```
 * Readiness is read from the cluster itself: the control plane is up when `/readyz` answers 200
 * through the kubeconfig it writes; a worker is up when its Node reports Ready with a heartbeat from this run.
 * Stopping sends SIGTERM to the workers first (each drains itself: cordon, evict, up to 20 s), then to
 * the extra API servers and the control plane, then to the local etcd; a second interrupt kills what is left at once. If the process exits any other way
 * while children run (an uncaught error, `process.exit`), they are killed (SIGKILL) on its way out.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, closeSync, existsSync, fchmodSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../api/index.ts';
import { isProcessAlive, PARENT_PID_ENV, unusedPort } from '../lib/index.ts';
import { apiJson, rawRequest, serverUrl } from './api-client.ts';
import { MAX_APISERVERS } from './apiserver-flags.ts';
import { dataDirHolder, inUseMessage, UP_LOCK_FILE } from './data-dir-lock.ts';
import { CliError } from './errors.ts';
import { loadClusterTarget } from './kubeconfig.ts';
import { issueWorkerKubeconfig } from './node-credentials.ts';
import { repoFile } from './paths.ts';
import { chooseWorkerRange, DEFAULT_FIRST_ADDRESS, describeRange, nextWorkerRange, portFree, workerAddress } from './worker-addresses.ts';

export { workerAddress } from './worker-addresses.ts';

/** Options of one `up`. */
export interface LocalClusterOptions {
  /** Number of workers, 0 to 200. @default 2 */
  workers: number;
  /** The data dir; created when missing. */
  dataDir: string;
  /** The API server's port on 127.0.0.1; 0 lets the control plane pick one. @default 6443 */
  port: number;
  /** The first worker's address; the others take the next ones. @default '127.0.0.2' */
  firstAddress?: string;
  /**
   * True when `firstAddress` is only a default: if a worker's address:10250 is taken (another cluster),
   * the next free range is used instead (127.0.1.2, ...). False: a taken address is an error. @default false
   */
  pickFreeAddresses?: boolean;
  /** Each worker's heap (`kube32-sim --heap`), as given, e.g. `64Mi`; the worker's default when absent. */
  workerHeap?: string;
  /**
   * Each worker's `kube32-sim --fence-after`, as given: the control plane's `--node-monitor-grace-period`
   * when one is given, so that a worker cut off fences its pods before they restore elsewhere (issue 26).
   */
  workerFenceAfter?: string;
  /**
   * Where the control plane keeps its objects: `sqlite` (`<data-dir>/kube32.db`) or `etcd` (issue 11).
   * @default 'sqlite'
   */
  storage?: 'sqlite' | 'etcd';
  /**
   * With `storage: 'etcd'`: the etcd client URLs the control plane uses (`--etcd-endpoints`). Absent
   * or empty: `up` runs its own etcd in `<data-dir>/etcd/`.
   */
  etcdEndpoints?: string[];
  /**
   * API server processes, 1 to {@link MAX_APISERVERS}: the control plane's and N-1 `kube32-cli apiserver`
   * on its port; more than 1 needs `storage: 'etcd'`. @default 1
   */
  apiservers?: number;
  /** Extra flags for `kube32-cli control-plane`, e.g. `['--node-monitor-grace-period', '20s']`. */
  controlPlaneArgs?: string[];
  /** How long each component may take to become ready, ms. @default 60000 */
  readyTimeoutMs?: number;
  /** Where progress lines go. */
  print: (line: string) => void;
  /** Aborts start-up (a Ctrl-C while components come up): what started is stopped, and CliError thrown. */
  signal?: AbortSignal;
}

/** A running local cluster. */
export interface LocalCluster {
  /** The API server's URL. */
  server: string;
  /** The admin kubeconfig's path. */
  kubeconfig: string;
  /** Names of the workers started. */
  workers: string[];
  /** With `storage: 'etcd'`: the etcd client URLs the control plane uses (the local etcd's, or those given). */
  etcdEndpoints?: string[];
  /**
   * Every API server process: the control plane's first (`control-plane`), then `apiserver-2`...; each
   * with its pid and its peer port (undefined with one API server: it has none).
   */
  apiservers: { name: string; pid: number; peerPort: number | undefined }[];
  /** worker-1's address; worker-N has the N-th one from it. */
  firstAddress: string;
  /** Resolves when the control plane exits on its own (not through `stop`), with its exit code. */
  controlPlaneExited: Promise<number>;
  /** Stops the workers (they drain), then the control plane, and releases the data dir. Idempotent. */
  stop(): Promise<void>;
  /** Kills every child at once (SIGKILL) and releases the data dir. */
  kill(): void;
}

interface Child {
  name: string;
  proc: ChildProcess;
  log: string;
  exited: Promise<number>;
  exitCode: number | null;
}

const LOCK_FILE = UP_LOCK_FILE;
/** A worker drains for up to 20 s (seed "Drain and evictions"); give it that and a margin. */
const WORKER_STOP_MS = 35_000;
const CONTROL_PLANE_STOP_MS = 15_000;
const ETCD_STOP_MS = 15_000;
/** Whether child `name` is a worker (not the control plane, an extra API server or etcd). */
const isWorker = (name: string): boolean => name.startsWith('worker-');


/** The name of extra API server `i` (2-based: the control plane's is the first). */
export function apiserverName(i: number): string {
  return `apiserver-${i}`;
}

/** The Node name of worker `i` (1-based). */
export function workerName(i: number): string {
  return `worker-${i}`;
}

const alive = isProcessAlive;

/** Waits, synchronously and for at most `ms`, until none of `pids` is alive; answers those still alive. */
function waitGone(pids: number[], ms: number): number[] {
  const deadline = Date.now() + ms;
  const tick = new Int32Array(new SharedArrayBuffer(4));
  let left = pids.filter(alive);
  while (left.length > 0 && Date.now() < deadline) {
    Atomics.wait(tick, 0, 0, 50);
    left = left.filter(alive);
  }
  return left;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

interface LockRecord {
  pid: number;
  children: Record<string, number>;
}

/**
 * Takes the data dir for this process: writes `up.lock` with our pid, or refuses when another live
 * `up` holds it. A lock left by an `up` that died is taken over, and the children it recorded that
 * still run with this data dir on their command line are killed first.
 * @throws CliError naming the pid that holds the data dir
 */
function acquireLock(dataDir: string, print: (line: string) => void): string {
  const path = join(dataDir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o644);
      writeFileSync(fd, JSON.stringify({ pid: process.pid, children: {} } satisfies LockRecord));
      closeSync(fd);
      return path;
    } catch (err: unknown) {
      const code = (err as { code?: string }).code;
      if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
        throw new CliError(`cannot write in the data dir ${dataDir} (${code}): pass a --data-dir you can write to`, 1, { cause: err });
      }
      if (code !== 'EEXIST') throw err;
    }
    let held: LockRecord | undefined;
    try {
      held = JSON.parse(readFileSync(path, 'utf8')) as LockRecord;
    } catch {
      held = undefined; // half-written or foreign: treat as stale
    }
    if (held && held.pid !== process.pid && alive(held.pid)) {
      throw new CliError(
        `the data dir ${dataDir} is in use by another kube32-cli up (pid ${held.pid}): stop it (Ctrl-C there, or kill ${held.pid}) or pass another --data-dir`,
      );
    }
    const stopped: number[] = [];
    for (const [name, pid] of Object.entries(held?.children ?? {})) {
      if (alive(pid) && cmdline(pid).includes(dataDir)) {
        print(`data dir: stopping ${name} (pid ${pid}) left running by an earlier up`);
        try {
          process.kill(pid, 'SIGKILL');
          stopped.push(pid);
        } catch {
          // gone meanwhile
        }
      }
    }
    // Their ports, addresses and data dirs are free only once they are gone.
    const lingering = waitGone(stopped, 10_000);
    if (lingering.length > 0) throw new CliError(`processes of an earlier up (pid ${lingering.join(', ')}) do not end: stop them, then run up again`);
    rmSync(path, { force: true });
  }
  throw new CliError(`could not take the data dir ${dataDir}: ${path} keeps reappearing`);
}

function recordChildren(lockPath: string, children: Child[]): void {
  const rec: LockRecord = { pid: process.pid, children: Object.fromEntries(children.map((c) => [c.name, c.proc.pid ?? 0])) };
  writeFileSync(lockPath, JSON.stringify(rec));
}

/** @throws CliError when something already listens on 127.0.0.1:`port` */
async function checkPortFree(port: number): Promise<void> {
  if (port === 0) return;
  let free: boolean;
  try {
    free = await portFree('127.0.0.1', port);
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'EACCES') {
      throw new CliError(`port ${port}: permission denied (ports below 1024 need root): pass another --port`, 1, { cause: err });
    }
    throw err;
  }
  if (!free) {
    throw new CliError(
      `port ${port} on 127.0.0.1 is already in use (another cluster or program listens there): pass --port with a free port, or --port 0 to let the control plane pick one`,
    );
  }
}

/**
 * Creates the data dir (mode 0700) when missing.
 * @throws CliError when the path, or a directory above it, is a file, or it cannot be created
 */
function prepareDataDir(dataDir: string): void {
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    if (statSync(dataDir).isDirectory()) return;
  } catch (err: unknown) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
      throw new CliError(`cannot create the data dir ${dataDir} (${code}): pass a --data-dir you can write to`, 1, { cause: err });
    }
    if (code !== 'EEXIST' && code !== 'ENOTDIR') throw err;
  }
  throw new CliError(
    `the data dir ${dataDir} is not a directory (${existsSync(dataDir) ? 'a file of that name exists' : 'a file stands in its path'}): pass --data-dir with a directory, or a path where up can create one`,
  );
}

function tail(path: string, lines = 15): string {
  try {
    const text = readFileSync(path, 'utf8').trimEnd().split('\n');
    return text
      .slice(-lines)
      .map((l) => `    ${l}`)
      .join('\n');
  } catch {
    return '    (no log)';
  }
}

/**
 * Starts `file` (a Node script, run by this Node; or, with `node` false, an executable) as child `name`.
 */
function startChild(name: string, file: string, args: string[], logDir: string, node = true): Child {
  const log = join(logDir, `${name}.log`);
  const fd = openSync(log, 'a', 0o600);
  fchmodSync(fd, 0o600);
  writeFileSync(fd, `--- ${new Date().toISOString()} kube32-cli up starts ${name}: ${args.join(' ')}\n`);
  // detached: its own process group, so that a Ctrl-C on the terminal reaches only `up`, which then
  // stops the workers before the control plane.
  // Each child watches for up's end (KUBE32_PARENT_PID, lib/parent-watch.ts): a SIGKILLed up leaves none running.
  const env = { ...process.env, [PARENT_PID_ENV]: String(process.pid) };
  const proc = node
    ? spawn(process.execPath, [file, ...args], { stdio: ['ignore', fd, fd], detached: true, env })
    : spawn(file, args, { stdio: ['ignore', fd, fd], detached: true, env });
  closeSync(fd);
  const child: Child = { name, proc, log, exitCode: null, exited: Promise.resolve(0) };
  child.exited = new Promise<number>((resolve) => {
    proc.once('exit', (code, sig) => {
      // A signal is the shell's 128 + its number (SIGKILL: 137), so that exitText can name it again.
      child.exitCode = code ?? (sig ? 128 + (osConstants.signals[sig] ?? 0) : 1);
      resolve(child.exitCode);
    });
    proc.once('error', () => {
      child.exitCode = 127;
      resolve(127);
    });
  });
  return child;
}

/** A worker that exited before it was ready because its address was taken (EADDRINUSE in its log). */
class AddressTakenError extends CliError {}

/** How many other ranges `up` tries when a worker's address is taken after the check (another `up` at the same moment). */
const ADDRESS_RETRIES = 3;

/** Resolves when `p` settles or `ms` pass; true when `p` settled first. */
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((r) => {
    timer = setTimeout(() => r(false), ms);
  });
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Polls `check` until it returns a value, the child exits, or the deadline passes. Each poll is an
 * API call with a short interval: the state it waits for (a file, an HTTP 200, a Node condition) has
 * no event to wait on from outside the process.
 */
async function until<T>(
  what: string,
  child: Child,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  check: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  while (Date.now() < deadline) {
    if (signal?.aborted) throw new CliError(`interrupted while waiting for ${child.name} (${what})`);
    if (child.exitCode !== null) {
      const end = tail(child.log);
      const taken = isWorker(child.name) && end.includes('EADDRINUSE');
      const hint = taken
        ? '\n(its address is taken: another cluster on this computer, maybe one started at the same moment that found the same addresses free? run up again to let it pick free addresses, or pass another range, e.g. --first-address 127.0.1.2)'
        : '';
      const message = `${child.name} exited with code ${child.exitCode} before ${what}; the end of ${child.log}:\n${end}${hint}`;
      throw taken ? new AddressTakenError(message) : new CliError(message);
    }
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err: unknown) {
      lastError = err instanceof Error ? err.message : String(err);
    }
    await within(child.exited, 150);
  }
  throw new CliError(
    `${child.name} was not ready after ${Math.round(timeoutMs / 1000)} s (${what})${lastError ? `: ${lastError}` : ''}; the end of ${child.log}:\n${tail(child.log)}`,
  );
}

interface NodeObject {
  metadata: { annotations?: Record<string, string> };
  status?: { conditions?: { type: string; status: string; lastHeartbeatTime?: string }[] };
}

/**
 * Starts the cluster and returns once every component is ready.
 * @throws CliError for `apiservers` out of range or above 1 without etcd (before anything starts), when the data dir or the port is taken, or a component exits or is not ready in
 *   time (every child started is stopped first, and the message ends with that child's log)
 */
export async function startLocalCluster(opts: LocalClusterOptions): Promise<LocalCluster> {
  const { dataDir, print } = opts;
  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000;
  const apiservers = opts.apiservers ?? 1;
  if (!Number.isInteger(apiservers) || apiservers < 1 || apiservers > MAX_APISERVERS) throw new CliError(`apiservers must be a whole number from 1 to ${MAX_APISERVERS}: current value is ${apiservers}`);
  if (apiservers > 1 && opts.storage !== 'etcd') throw new CliError('--apiservers above 1 needs --storage etcd: API servers share their objects through etcd only');
  prepareDataDir(dataDir);
  const logDir = join(dataDir, 'logs');
  // Logs may hold what pods print and objects' contents: the folder 0700, each log 0600 (startChild).
  mkdirSync(logDir, { recursive: true, mode: 0o700 });
  chmodSync(logDir, 0o700);
  const lockPath = acquireLock(dataDir, print);
  // A `kube32-cli control-plane` of its own on this data dir (not a child of an earlier up: those are gone now).
  const holder = dataDirHolder(dataDir);
  if (holder) {
    rmSync(lockPath, { force: true });
    throw new CliError(inUseMessage(dataDir, holder));
  }
  const children: Child[] = [];
  let stopping: Promise<void> | undefined;

  const kill = (): void => {
    process.off('exit', kill);
    for (const c of children) if (c.exitCode === null) c.proc.kill('SIGKILL');
    rmSync(lockPath, { force: true });
  };
  // Whatever ends this process (an uncaught error, process.exit), the children in their own process
  // groups must not outlive it: 'exit' handlers run synchronously, and SIGKILL is all they can send.
  process.on('exit', kill);
  const stopChild = async (c: Child, ms: number): Promise<void> => {
    if (c.exitCode !== null) return;
    c.proc.kill('SIGTERM');
    if (!(await within(c.exited, ms))) {
      print(`${c.name} did not stop within ${ms / 1000} s: killing it`);
      c.proc.kill('SIGKILL');
      await c.exited;
    }
  };
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      const workers = children.filter((c) => isWorker(c.name) && c.exitCode === null);
      if (workers.length > 0) print(`stopping ${workers.map((w) => w.name).join(', ')} (each drains its pods first)`);
      await Promise.all(workers.map((w) => stopChild(w, WORKER_STOP_MS)));
      const extra = children.filter((c) => c.name.startsWith('apiserver-') && c.exitCode === null);
      if (extra.length > 0) {
        print(`stopping ${extra.map((a) => a.name).join(', ')}`);
        await Promise.all(extra.map((a) => stopChild(a, CONTROL_PLANE_STOP_MS)));
      }
      const cp = children.find((c) => c.name === 'control-plane');
      if (cp && cp.exitCode === null) {
        print('stopping the control plane');
        await stopChild(cp, CONTROL_PLANE_STOP_MS);
      }
      // Last: the control plane writes to it until it has stopped.
      const etcd = children.find((c) => c.name === 'etcd');
      if (etcd && etcd.exitCode === null) {
        print('stopping etcd');
        await stopChild(etcd, ETCD_STOP_MS);
      }
      rmSync(lockPath, { force: true });
      process.off('exit', kill);
      if (children.length > 0) print('cluster stopped');
    })();
    return stopping;
  };

  try {
    const range = await chooseWorkerRange(opts.workers, opts.firstAddress ?? DEFAULT_FIRST_ADDRESS, opts.pickFreeAddresses === true);
    let firstAddress = range.first;
    if (range.replaced) {
      print(
        `worker addresses ${describeRange(opts.workers, range.replaced)} are in use (another cluster on this computer?): using ${describeRange(opts.workers, firstAddress)}`,
      );
    }
    await checkPortFree(opts.port);
    const kubeconfig = join(dataDir, 'kubeconfig');
    const started = Date.now();
    const cli = repoFile('bin/kube32-cli.js');
    const storageArgs: string[] = [];
    let etcdEndpoints: string[] | undefined;
    if (opts.storage === 'etcd') {
      etcdEndpoints = opts.etcdEndpoints?.length ? opts.etcdEndpoints : [await startLocalEtcd(dataDir, logDir, children, lockPath, readyTimeoutMs, opts)];
      storageArgs.push('--storage', 'etcd', '--etcd-endpoints', etcdEndpoints.join(','));
    }
    // Several API servers: each listens on the shared port with SO_REUSEPORT, and on a peer port of its own.
    const peerPorts: number[] = [];
    if (apiservers > 1) {
      const picked = new Set<number>();
      for (let i = 0; i < apiservers; i++) peerPorts.push(await unusedPort('127.0.0.1', picked));
    }
    const sharing = (i: number): string[] => (apiservers > 1 ? ['--reuse-port', '--peer-advertise-port', String(peerPorts[i])] : []);
    const cp = startChild(
      'control-plane',
      cli,
      ['control-plane', '--data-dir', dataDir, '--port', String(opts.port), ...storageArgs, ...sharing(0), ...(opts.controlPlaneArgs ?? [])],
      logDir,
    );
    children.push(cp);
    recordChildren(lockPath, children);
    print(`control plane   starting   (log ${cp.log})`);
    // Ready when /readyz answers 200 through the kubeconfig it writes. The file is read again at each
    // try: one left by an earlier run may name another port until this run rewrites it.
    let admin: KubeConfig | undefined;
    const server = await until('answering /readyz', cp, readyTimeoutMs, opts.signal, async () => {
      if (!existsSync(kubeconfig)) return undefined;
      const kc = loadClusterTarget({ kubeconfig }).kubeConfig;
      const res = await rawRequest(kc, { path: '/readyz', signal: AbortSignal.timeout(5000) });
      res.body.resume();
      if (res.status !== 200) return undefined;
      admin = kc;
      return serverUrl(kc);
    });
    print(`control plane   ready      ${server}   (${((Date.now() - started) / 1000).toFixed(1)}s${apiservers > 1 ? `, peer port ${peerPorts[0]}` : ''})`);

    // The extra API servers, on the port the control plane bound (--port 0: the one it picked).
    const extras: Child[] = [];
    for (let i = 2; i <= apiservers; i++) {
      const name = apiserverName(i);
      const dir = join(dataDir, 'apiservers', name);
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const port = new URL(server).port;
      const a = startChild(name, cli, ['apiserver', '--data-dir', dir, '--port', port, ...storageArgs, ...sharing(i - 1)], logDir);
      a.proc.once('exit', (code, signal) => {
        if (!stopping) print(`${name} ${exitText(code, signal)}; the others serve port ${port} on; it stays down until up is started again (log ${a.log})`);
      });
      children.push(a);
      extras.push(a);
      recordChildren(lockPath, children);
      print(`${name.padEnd(15)} starting   (log ${a.log})`);
    }
    await Promise.all(
      extras.map(async (a, k) => {
        const t0 = Date.now();
        const peer = `https://127.0.0.1:${peerPorts[k + 1]}`;
        const kc = withServer(admin!, peer);
        await until('answering /readyz on its peer port', a, readyTimeoutMs, opts.signal, async () => {
          const res = await rawRequest(kc, { path: '/readyz', signal: AbortSignal.timeout(5000) });
          res.body.resume();
          return res.status === 200 ? true : undefined;
        });
        print(`${a.name.padEnd(15)} ready      ${server}   (${((Date.now() - t0) / 1000).toFixed(1)}s, peer port ${peerPorts[k + 1]})`);
      }),
    );

    const sim = repoFile('bin/kube32-sim.js');
    // Starts the workers on the range from `first` and waits until each Node is Ready.
    const startWorkers = async (first: string, started0: number): Promise<string[]> => {
      const names: string[] = [];
      const launched: Child[] = [];
      for (let i = 1; i <= opts.workers; i++) {
        const name = workerName(i);
        const nodeDir = join(dataDir, 'nodes', name);
        mkdirSync(nodeDir, { recursive: true, mode: 0o700 });
        const nodeKubeconfig = await issueWorkerKubeconfig(dataDir, name, join(nodeDir, 'kubeconfig'));
        const args = ['--kubeconfig', nodeKubeconfig, '--name', name, '--address', workerAddress(i, first), '--data-dir', nodeDir];
        if (opts.workerHeap) args.push('--heap', opts.workerHeap);
        if (opts.workerFenceAfter) args.push('--fence-after', opts.workerFenceAfter);
        const w = startChild(name, sim, args, logDir);
        w.proc.once('exit', (code, signal) => {
          if (!stopping && !retired.has(w)) print(`${name} ${exitText(code, signal)}; it stays down until up is started again (log ${w.log})`);
        });
        children.push(w);
        launched.push(w);
        names.push(name);
        recordChildren(lockPath, children);
        print(`${name.padEnd(15)} starting   ${workerAddress(i, first)}   (log ${w.log})`);
      }
      await Promise.all(
        launched.map(async (w, idx) => {
          const t0 = Date.now();
          const node = await until('its Node reporting Ready', w, readyTimeoutMs, opts.signal, async () => {
            const n = await apiJson<NodeObject>(admin!, { path: `/api/v1/nodes/${w.name}` });
            const ready = n.status?.conditions?.find((c) => c.type === 'Ready');
            // A Node from an earlier run still says Ready until the node lifecycle controller notices; only
            // a heartbeat from this run counts (heartbeats have one-second precision).
            const beat = ready?.lastHeartbeatTime ? Date.parse(ready.lastHeartbeatTime) : 0;
            return ready?.status === 'True' && beat >= started0 - 1000 ? n : undefined;
          });
          const mops = node.metadata.annotations?.[ANNOTATIONS.interpMops];
          print(
            `${w.name.padEnd(15)} ready      ${workerAddress(idx + 1, first)}   (${((Date.now() - t0) / 1000).toFixed(1)}s${mops ? `, interp-mops ${mops}` : ''})`,
          );
        }),
      );
      return names;
    };
    // Workers stopped to move to another range: their exit is no news.
    const retired = new Set<Child>();
    let workers: string[] = [];
    for (let attempt = 0; ; attempt++) {
      const started0 = Date.now();
      try {
        workers = await startWorkers(firstAddress, started0);
        break;
      } catch (err: unknown) {
        // A range free at the check and taken since (another up started at the same moment): the next free
        // range, unless --first-address chose this one.
        if (!(err instanceof AddressTakenError) || opts.pickFreeAddresses !== true || attempt >= ADDRESS_RETRIES) throw err;
        const ours = children.filter((c) => isWorker(c.name));
        for (const w of ours) retired.add(w);
        await Promise.all(ours.map((w) => stopChild(w, WORKER_STOP_MS)));
        children.splice(0, children.length, ...children.filter((c) => !retired.has(c)));
        recordChildren(lockPath, children);
        const next = await chooseWorkerRange(opts.workers, nextWorkerRange(firstAddress), true);
        print(`worker addresses ${describeRange(opts.workers, firstAddress)} were taken meanwhile (another cluster started at the same moment?): using ${describeRange(opts.workers, next.first)}`);
        firstAddress = next.first;
      }
    }
    cp.proc.once('exit', (code, signal) => {
      if (!stopping) print(`control plane ${exitText(code, signal)}; the end of ${cp.log}:\n${tail(cp.log)}`);
    });
    return {
      server: server!,
      kubeconfig,
      workers,
      apiservers: [cp, ...extras].map((c, i) => ({ name: c.name, pid: c.proc.pid ?? 0, peerPort: peerPorts[i] })),
      firstAddress,
      ...(etcdEndpoints ? { etcdEndpoints } : {}),
      controlPlaneExited: cp.exited,
      stop,
      kill,
    };
  } catch (err: unknown) {
    await stop().catch(() => kill());
    throw err;
  }
}

/** `kc` with its clusters' server replaced by `url` (an API server's peer port: the same CA and token). */
function withServer(kc: KubeConfig, url: string): KubeConfig {
  const out = new KubeConfig();
  out.loadFromOptions({ clusters: kc.clusters.map((c) => ({ ...c, server: url })), users: kc.users, contexts: kc.contexts, currentContext: kc.currentContext });
  return out;
}

/** How a child ended, for the line `up` prints: `exited with code 1` or `was killed by SIGKILL`. */
export function exitText(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `was killed by ${signal}` : `exited with code ${code ?? 'unknown'}`;
}

/**
 * {@link exitText} of a child's exit status as `Child.exited` resolves it (a signal is 128 + its number).
 * @example exitStatusText(137) // 'was killed by SIGKILL'
 */
export function exitStatusText(status: number): string {
  const signal = status > 128 ? Object.entries(osConstants.signals).find(([, n]) => n === status - 128)?.[0] : undefined;
  return signal ? exitText(null, signal as NodeJS.Signals) : exitText(status, null);
}

/** The etcd server `up` runs: Debian's etcd-server. */
export const ETCD_BINARY = '/usr/bin/etcd';

interface EtcdPorts {
  client: number;
  peer: number;
}

/**
 * The local etcd's ports: those of the last run (`<data-dir>/etcd-ports.json`) when both are still
 * free, so that the member keeps the peer URL its data records; else two unused ones below the
 * ephemeral range ({@link unusedPort}).
 */
async function etcdPorts(dataDir: string): Promise<EtcdPorts> {
  const path = join(dataDir, 'etcd-ports.json');
  try {
    const last = JSON.parse(readFileSync(path, 'utf8')) as Partial<EtcdPorts>;
    if (
      Number.isInteger(last.client) &&
      Number.isInteger(last.peer) &&
      last.client !== last.peer &&
      (await portFree('127.0.0.1', last.client!)) &&
      (await portFree('127.0.0.1', last.peer!))
    ) {
      return { client: last.client!, peer: last.peer! };
    }
  } catch {
    // first run, or an unreadable record: new ports
  }
  // Below the ephemeral range, so that no outgoing connection takes them before etcd binds them.
  const picked = new Set<number>();
  const client = await unusedPort('127.0.0.1', picked);
  const peer = await unusedPort('127.0.0.1', picked);
  writeFileSync(path, JSON.stringify({ client, peer } satisfies EtcdPorts));
  return { client, peer };
}

/**
 * Starts the local etcd (one member named `kube32`, data in `<data-dir>/etcd/`) as child `etcd`,
 * records it in the lock, and waits until its `/health` answers `{"health":"true"}`. A data dir from
 * an earlier run is opened again: its keys (the cluster's objects) are kept.
 * @returns its client URL, e.g. `http://127.0.0.1:40123`
 * @throws CliError when /usr/bin/etcd is missing, or etcd exits or is not healthy in time (with its log)
 */
async function startLocalEtcd(
  dataDir: string,
  logDir: string,
  children: Child[],
  lockPath: string,
  readyTimeoutMs: number,
  opts: LocalClusterOptions,
): Promise<string> {
  if (!existsSync(ETCD_BINARY)) {
    throw new CliError(`--storage etcd without --etcd-endpoints runs ${ETCD_BINARY}, which is missing: install Debian's etcd-server, or pass --etcd-endpoints`);
  }
  const etcdDir = join(dataDir, 'etcd');
  mkdirSync(etcdDir, { recursive: true, mode: 0o700 });
  const { client, peer } = await etcdPorts(dataDir);
  const url = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const t0 = Date.now();
  const etcd = startChild(
    'etcd',
    ETCD_BINARY,
    [
      '--name', 'kube32', '--data-dir', etcdDir,
      '--listen-client-urls', url, '--advertise-client-urls', url,
      '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
      '--initial-cluster', `kube32=${peerUrl}`, '--log-level', 'warn',
    ],
    logDir,
    false,
  );
  children.push(etcd);
  recordChildren(lockPath, children);
  opts.print(`${'etcd'.padEnd(15)} starting   (log ${etcd.log})`);
  await until('answering /health', etcd, readyTimeoutMs, opts.signal, async () => {
    const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
    const body = (await r.json()) as { health?: string };
    return body.health === 'true' ? true : undefined;
  });
  opts.print(`${'etcd'.padEnd(15)} ready      ${url}   (${((Date.now() - t0) / 1000).toFixed(1)}s, data ${etcdDir})`);
  return url;
}
