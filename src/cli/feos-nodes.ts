/**
 * `kube32-cli up --feos-nodes N` (docs/quickstart.md, "FeOS nodes beside the workers"; issue 18): N
 * FeOS nodes on this machine beside the Wasm workers, each a feosd in a network namespace of its own.
 *
 * - The network: one bridge `k32fb<tag>` on the host with `10.X.Y.1/24` (a /24 no route covers yet),
 *   and per node a namespace `k32-<tag>-feos-<i>` with a veth pair into the bridge (`10.X.Y.<i+1>`, its
 *   default route via the bridge). The control plane's port for nodes listens on the bridge's address
 *   (`--feos-listen 10.X.Y.1:PORT`): the nodes reach it, nothing outside this machine does.
 * - The guest: `--feos-guest-dir DIR`, else the installed `/usr/lib/feos/guest`, else one built with
 *   scripts/build-guest.sh into the package's `build/guest` (a build whose inputs did not change makes
 *   nothing).
 * - Each feosd: `<data-dir>/feos/feos-<i>/` (state, run, node identity), its log in
 *   `<data-dir>/logs/feos-<i>.log`, joined as `feos-<i>` with one join token (`kube32-cli feos token
 *   create`, 1 h, deleted at the stop); `up` waits for each Node to be Ready.
 * - The stop: SIGTERM to each feosd, which suspends its pods (`--suspend-on-stop`, `--stop-grace 60`;
 *   the next `up` resumes them), SIGKILL after 75 s, then the namespaces, the bridge and the token go.
 *   A second signal kills them at once.
 *
 * Root only: namespaces, veth pairs and a bridge, and feosd's microVMs and TAP devices need it.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CliError } from './errors.ts';
import { repoFile } from './paths.ts';

/** The most FeOS nodes `up` starts (one /24, names and interface names short enough). */
export const MAX_FEOS_NODES = 16;
/** feosd's `--stop-grace`, s: its pods' suspends at the stop fit in it. */
const STOP_GRACE_S = 60;
/** How long after SIGTERM a feosd is killed, ms. */
const KILL_AFTER_MS = (STOP_GRACE_S + 15) * 1000;
/** Where an installed guest is (feosd's default `--guest-dir`). */
const INSTALLED_GUEST = '/usr/lib/feos/guest';

/** Runs a command, bounded; resolves with its output. @throws CliError naming the command and its stderr */
function sh(cmd: string, args: string[], timeoutMs = 30_000, signal?: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 << 20, ...(signal ? { signal } : {}) }, (err, stdout, stderr) => {
      if (err) reject(new CliError(`${cmd} ${args.join(' ')}: ${String(stderr).trim() || err.message}`));
      else resolve(String(stdout));
    });
  });
}

/** Says what is missing when `up --feos-nodes` is not run as root. @throws CliError */
export function checkFeosNodesRoot(n: number): void {
  if (n > 0 && process.getuid?.() !== 0) {
    throw new CliError(
      `--feos-nodes needs root: each FeOS node is a feosd in a network namespace of its own (ip netns, veth pairs, a bridge) that starts microVMs (QEMU, TAP devices). Run it as root (sudo kube32-cli up --feos-nodes ${n} ...), or leave --feos-nodes out for Wasm workers alone`,
    );
  }
}

/** The bridge of the FeOS nodes, made before the control plane starts (its port for nodes listens there). */
export interface FeosBridge {
  tag: string;
  name: string;
  /** The /24's first three octets, `10.X.Y`. */
  net: string;
  /** The bridge's address, `10.X.Y.1`: `--feos-listen` takes it. */
  address: string;
}

/**
 * Makes the bridge on a free 10.X.Y.0/24.
 * @throws CliError when `ip` fails or no /24 is free after 20 tries
 */
export async function makeFeosBridge(): Promise<FeosBridge> {
  const tag = randomBytes(3).toString('hex');
  let net = '';
  for (let tries = 0; !net; tries++) {
    const candidate = `10.${randomInt(100, 250)}.${randomInt(0, 250)}`;
    if ((await sh('ip', ['-4', 'route', 'show', 'match', `${candidate}.0/24`])).split('\n').every((l) => !l.trim() || l.startsWith('default'))) net = candidate;
    else if (tries > 20) throw new CliError('no free 10.X.Y.0/24 for the FeOS nodes\' bridge (every one tried is routed already)');
  }
  const name = `k32fb${tag}`;
  await sh('ip', ['link', 'add', name, 'type', 'bridge']);
  try {
    await sh('ip', ['addr', 'add', `${net}.1/24`, 'dev', name]);
    await sh('ip', ['link', 'set', name, 'up']);
  } catch (err: unknown) {
    await sh('ip', ['link', 'del', name]).catch(() => {});
    throw err;
  }
  return { tag, name, net, address: `${net}.1` };
}

/** Removes the bridge (when the cluster did not get as far as the nodes). */
export function removeFeosBridge(bridge: FeosBridge): void {
  try {
    execFileSync('ip', ['link', 'del', bridge.name], { stdio: 'ignore', timeout: 20_000 });
  } catch {}
}

/** Running FeOS nodes. */
export interface FeosNodes {
  names: string[];
  /** Stops each feosd (SIGTERM: its pods suspended; SIGKILL after 75 s), removes the namespaces, the bridge and the token. */
  stop(): Promise<void>;
  /** Kills them at once and removes the namespaces and the bridge (a second signal; `up` exits next). */
  kill(): void;
}

interface NodeProc {
  name: string;
  ns: string;
  proc?: ChildProcess;
  exited: Promise<void>;
}

/** The guest directory: given, installed, or built (with a progress line). @throws CliError when the build fails */
async function findGuest(given: string | undefined, print: (line: string) => void, signal: AbortSignal): Promise<string> {
  const hasVersion = (d: string) => existsSync(d) && readdirSync(d).some((v) => existsSync(join(d, v, 'vmlinuz')));
  if (given) {
    if (!hasVersion(given)) throw new CliError(`--feos-guest-dir ${given}: no guest version in it (a <version>/vmlinuz); build one with scripts/build-guest.sh ${given}`);
    print(`kube32: FeOS guest: ${given}`);
    return given;
  }
  if (hasVersion(INSTALLED_GUEST)) {
    print(`kube32: FeOS guest: found in ${INSTALLED_GUEST}`);
    return INSTALLED_GUEST;
  }
  const dir = repoFile('build/guest');
  print(`kube32: FeOS guest: none installed; building one into ${dir} (scripts/build-guest.sh; minutes the first time)`);
  try {
    const version = (await sh('bash', [repoFile('scripts/build-guest.sh'), dir], 1_800_000, signal)).trim();
    print(`kube32: FeOS guest: ${version} in ${dir}`);
  } catch (err: unknown) {
    throw new CliError(`building the FeOS guest: ${err instanceof Error ? err.message : String(err)}`);
  }
  return dir;
}

/** Options of {@link startFeosNodes}. */
export interface FeosNodesOptions {
  count: number;
  bridge: FeosBridge;
  /** The port for nodes, on the bridge's address: `10.X.Y.1:PORT`. */
  listen: string;
  kubeconfig: string;
  dataDir: string;
  guestDir?: string;
  /** feosd's `--accel`. @default auto */
  accel?: string;
  readyTimeoutMs: number;
  print: (line: string) => void;
  signal: AbortSignal;
}

/**
 * Starts the FeOS nodes and waits for their Nodes to be Ready. On failure (or an abort) what was
 * started is stopped and removed, the bridge with it.
 * @throws CliError naming the step that failed (a namespace, the guest, the token, a feosd that exited or is not Ready in time, with its log's path)
 */
export async function startFeosNodes(o: FeosNodesOptions): Promise<FeosNodes> {
  const cli = repoFile('bin/kube32-cli.js');
  const feosd = repoFile('bin/feosd.js');
  const nodes: NodeProc[] = [];
  let tokenId = '';
  let removed = false;
  const removeNet = () => {
    if (removed) return;
    removed = true;
    for (const n of nodes) {
      try {
        execFileSync('ip', ['netns', 'del', n.ns], { stdio: 'ignore', timeout: 20_000 });
      } catch {}
    }
    try {
      execFileSync('ip', ['link', 'del', o.bridge.name], { stdio: 'ignore', timeout: 20_000 });
    } catch {}
  };
  const stopProcs = async () => {
    for (const n of nodes) if (n.proc && n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill('SIGTERM');
    await Promise.all(
      nodes.map(async (n) => {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<void>((r) => {
          timer = setTimeout(() => {
            if (n.proc && n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill('SIGKILL');
            r();
          }, KILL_AFTER_MS);
        });
        await Promise.race([n.exited, late]);
        await n.exited;
        clearTimeout(timer);
      }),
    );
  };
  const stop = async () => {
    await stopProcs();
    removeNet();
    if (tokenId) await sh(process.execPath, [cli, 'feos', 'token', 'delete', '--kubeconfig', o.kubeconfig, tokenId]).catch(() => {});
    tokenId = '';
  };
  const kill = () => {
    for (const n of nodes) {
      try {
        if (n.proc?.pid) process.kill(-n.proc.pid, 'SIGKILL');
      } catch {}
    }
    removeNet();
  };
  try {
    const guestDir = await findGuest(o.guestDir, o.print, o.signal);
    o.signal.throwIfAborted();
    const token = (await sh(process.execPath, [cli, 'feos', 'token', 'create', '--kubeconfig', o.kubeconfig, '--ttl', '1h', '--description', 'kube32-cli up --feos-nodes'])).trim();
    tokenId = /^feos-join-([a-z0-9]{6})-/.exec(token)?.[1] ?? '';
    const feosDir = join(o.dataDir, 'feos');
    mkdirSync(feosDir, { recursive: true, mode: 0o700 });
    const tokenFile = join(feosDir, 'join-token');
    writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    const logDir = join(o.dataDir, 'logs');
    mkdirSync(logDir, { recursive: true });
    for (let i = 1; i <= o.count; i++) {
      o.signal.throwIfAborted();
      const name = `feos-${i}`;
      const ns = `k32-${o.bridge.tag}-${name}`;
      const hostIf = `k32f${o.bridge.tag}${i}h`;
      const nsIf = `k32f${o.bridge.tag}${i}n`;
      const address = `${o.bridge.net}.${i + 1}`;
      const node: NodeProc = { name, ns, exited: Promise.resolve() };
      await sh('ip', ['netns', 'add', ns]);
      nodes.push(node);
      await sh('ip', ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf]);
      await sh('ip', ['link', 'set', nsIf, 'netns', ns]);
      await sh('ip', ['link', 'set', hostIf, 'master', o.bridge.name]);
      await sh('ip', ['link', 'set', hostIf, 'up']);
      for (const args of [
        ['link', 'set', 'lo', 'up'],
        ['addr', 'add', `${address}/24`, 'dev', nsIf],
        ['link', 'set', nsIf, 'up'],
        ['route', 'add', 'default', 'via', o.bridge.address],
      ]) {
        await sh('ip', ['netns', 'exec', ns, 'ip', ...args]);
      }
      const base = join(feosDir, name);
      mkdirSync(base, { recursive: true, mode: 0o700 });
      const args = [
        feosd,
        '--state-dir',
        join(base, 'state'),
        '--run-dir',
        join(base, 'run'),
        '--guest-dir',
        guestDir,
        '--accel',
        o.accel ?? 'auto',
        '--control-plane',
        o.listen,
        '--join-token-file',
        tokenFile,
        '--node-dir',
        join(base, 'node'),
        '--node-name',
        name,
        // At the stop its pods are suspended (their memory on its disk) and the next `up` resumes them:
        // no microVM runs on after `up` (without it feosd leaves them running).
        '--suspend-on-stop',
        '--stop-grace',
        String(STOP_GRACE_S),
      ];
      const log = join(logDir, `${name}.log`);
      const fd = openSync(log, 'a');
      writeFileSync(fd, `--- ${new Date().toISOString()} kube32-cli up starts ${name} in network namespace ${ns}: ${args.slice(1).join(' ')}\n`);
      // Its own process group (detached), as the workers: a Ctrl-C reaches `up` alone, which stops it.
      const proc = spawn('ip', ['netns', 'exec', ns, process.execPath, ...args], { stdio: ['ignore', fd, fd], detached: true, env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'info' } });
      closeSync(fd);
      node.proc = proc;
      node.exited = new Promise<void>((r) => {
        proc.once('exit', () => r());
        proc.once('error', () => r());
      });
      o.print(`kube32: FeOS node ${name}: feosd in network namespace ${ns} (${address}), joining ${o.listen}; log ${log}`);
    }
    // Loaded here, not with `up`'s flags: the Kubernetes client is not needed before the nodes start.
    const { CoreV1Api, KubeConfig } = await import('@kubernetes/client-node');
    const kc = new KubeConfig();
    kc.loadFromFile(o.kubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    const deadline = Date.now() + o.readyTimeoutMs;
    for (const n of nodes) {
      for (;;) {
        o.signal.throwIfAborted();
        if (n.proc?.exitCode !== null || n.proc?.signalCode !== null) {
          throw new CliError(`FeOS node ${n.name}: feosd exited (${n.proc?.exitCode ?? n.proc?.signalCode}) before it was Ready; see ${join(logDir, `${n.name}.log`)}`);
        }
        const ready = await core.readNode({ name: n.name }).then(
          (node) => node.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True',
          () => false,
        );
        if (ready) break;
        if (Date.now() > deadline) throw new CliError(`FeOS node ${n.name} was not Ready within ${o.readyTimeoutMs / 1000}s; see ${join(logDir, `${n.name}.log`)}`);
        await new Promise((r) => setTimeout(r, 500)); // poll interval of the Node's Ready condition, bounded by the deadline above
      }
      o.print(`kube32: FeOS node ${n.name} Ready`);
    }
  } catch (err: unknown) {
    await stop();
    if (o.signal.aborted) throw new CliError('interrupted while starting the FeOS nodes');
    throw err;
  }
  return { names: nodes.map((n) => n.name), stop, kill };
}
