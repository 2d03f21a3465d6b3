/**
 * `kube32-cli up --feos-nodes N` (docs/quickstart.md, "FeOS nodes beside the workers"; issue 18): N
 * FeOS nodes on this machine beside the Wasm workers, each a feosd in a network namespace of its own.
 *
 * - The network: one bridge `k32fb<tag>` on the host with `10.X.Y.1/24` (a /24 no route covers yet)
 *   and `fd32:TTTT:TT00::1/64` (a ULA made of the tag), and per node a namespace `k32-<tag>-feos-<i>`
 *   with a veth pair into the bridge (`10.X.Y.<i+1>` and `fd32:TTTT:TT00::<i+1>`, its default routes of
 *   both families via the bridge: the pods' network needs one of each, docs/feos/network.md). The
 *   control plane's port for nodes listens on the bridge's address (`--feos-listen 10.X.Y.1:PORT`): the
 *   nodes reach it, nothing outside this machine does.
 * - The pods' network: node i gets `--pod-prefix fd32:TTTT:TTii::/64` (one /64 a node, routed from
 *   the host to the node's address, so the host reaches the pods).
 * - The object store: `--feos-object-store URL` (default `file://<data-dir>/feos/objects`), the same for
 *   every node: a microVM pod moves by hibernating into it (docs/feos/cluster-pods.md).
 * - Registries: each `--feos-registry HOST:PORT` is every feosd's `--registry-forward HOST:PORT`, so that
 *   image references name it as the host does. A loopback one (127.0.0.1:5000) is not reached from a
 *   namespace: `up` forwards it, a listener on HOST:PORT inside each namespace (a Node process) to one
 *   on the bridge's address in `up`, to the registry.
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
import { connect, createServer, isIP, type Server } from 'node:net';
import { join, resolve } from 'node:path';
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

/** The longest unix socket path (sun_path's 108 bytes with its NUL), which feosd checks for each microVM. */
const MAX_SOCKET_PATH = 107;

/**
 * The longest socket path node `count`'s feosd makes under `dataDir`: a microVM's console socket,
 * `<data-dir>/feos/feos-<n>/state/vms/<36-character ID>/console.sock` (src/feos/microvm/qemu-args.ts).
 */
function longestSocketPath(dataDir: string, count: number): string {
  return join(resolve(dataDir), 'feos', `feos-${count}`, 'state', 'vms', '0'.repeat(36), 'console.sock');
}

/**
 * Says when `--data-dir` is too long for FeOS nodes' unix sockets, before anything starts (feosd would
 * refuse each pod: "state dir too long for unix sockets").
 * @throws CliError naming the data dir, the path and the longest data dir that fits
 */
export function checkFeosDataDir(dataDir: string, count: number): void {
  if (count === 0) return;
  const path = longestSocketPath(dataDir, count);
  const over = Buffer.byteLength(path) - MAX_SOCKET_PATH;
  if (over > 0) {
    const fits = Buffer.byteLength(resolve(dataDir)) - over;
    throw new CliError(
      `--data-dir ${resolve(dataDir)} is too long for FeOS nodes: a microVM's sockets under it (${path}) take ${Buffer.byteLength(path)} bytes, over the ${MAX_SOCKET_PATH} of a unix socket path; give a data dir of at most ${fits} bytes (such as /var/lib/kube32 or ~/.kube32)`,
    );
  }
}

/** Whether a registry's host is on this host's loopback (not reached from a node's namespace). */
function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

/** The tag's ULA /56 prefix head, `fd32:TTTT:TT`: the bridge's /64 is `...00::/64`, node i's pods' `...ii::/64`. */
function ulaHead(tag: string): string {
  return `fd32:${tag.slice(0, 4)}:${tag.slice(4, 6)}`;
}

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
  /** The bridge's IPv6 address, `fd32:TTTT:TT00::1` (the nodes' IPv6 default route). */
  address6: string;
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
    await sh('ip', ['-6', 'addr', 'add', `${ulaHead(tag)}00::1/64`, 'dev', name, 'nodad']);
    await sh('ip', ['link', 'set', name, 'up']);
  } catch (err: unknown) {
    await sh('ip', ['link', 'del', name]).catch(() => {});
    throw err;
  }
  return { tag, name, net, address: `${net}.1`, address6: `${ulaHead(tag)}00::1` };
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
  /** Every feosd's `--object-store`. @default `file://<dataDir>/feos/objects` */
  objectStore?: string;
  /** feosd's `--s3-endpoint` (an http(s) URL) for an s3:// object store. */
  s3Endpoint?: string;
  /** Registries, `HOST:PORT`: every feosd's `--registry-forward` (a loopback one forwarded into each namespace). */
  registries?: string[];
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
  /** The registries' listeners in the namespaces (killed before their namespace goes) and in `up`. */
  const nsForwarders: ChildProcess[] = [];
  const hostForwarders: Server[] = [];
  let tokenId = '';
  let removed = false;
  const removeNet = () => {
    if (removed) return;
    removed = true;
    for (const f of nsForwarders) f.kill('SIGKILL');
    for (const s of hostForwarders) s.close();
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
    const guestDir = resolve(await findGuest(o.guestDir, o.print, o.signal));
    o.signal.throwIfAborted();
    const token = (await sh(process.execPath, [cli, 'feos', 'token', 'create', '--kubeconfig', o.kubeconfig, '--ttl', '1h', '--description', 'kube32-cli up --feos-nodes'])).trim();
    tokenId = /^feos-join-([a-z0-9]{6})-/.exec(token)?.[1] ?? '';
    const feosDir = join(o.dataDir, 'feos');
    mkdirSync(feosDir, { recursive: true, mode: 0o700 });
    const tokenFile = join(feosDir, 'join-token');
    writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    const logDir = join(o.dataDir, 'logs');
    mkdirSync(logDir, { recursive: true });
    const objectStore = o.objectStore ?? `file://${join(resolve(o.dataDir), 'feos', 'objects')}`;
    const registries = o.registries ?? [];
    // A loopback registry: a listener on the bridge's address in `up`, reached from the namespaces.
    const bridgePorts = new Map<string, number>();
    for (const r of registries.filter((x) => isLoopbackHost(x.slice(0, x.lastIndexOf(':'))))) {
      bridgePorts.set(r, await forwardOnBridge(o.bridge.address, r, hostForwarders));
    }
    if (registries.length > 0) o.print(`kube32: FeOS nodes pull from ${registries.join(', ')}${bridgePorts.size > 0 ? ' (a loopback registry forwarded into each node\'s namespace)' : ''}`);
    for (let i = 1; i <= o.count; i++) {
      o.signal.throwIfAborted();
      const name = `feos-${i}`;
      const ns = `k32-${o.bridge.tag}-${name}`;
      const hostIf = `k32f${o.bridge.tag}${i}h`;
      const nsIf = `k32f${o.bridge.tag}${i}n`;
      const address = `${o.bridge.net}.${i + 1}`;
      const address6 = `${ulaHead(o.bridge.tag)}00::${(i + 1).toString(16)}`;
      const podPrefix = `${ulaHead(o.bridge.tag)}${i.toString(16).padStart(2, '0')}::/64`;
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
        ['-6', 'addr', 'add', `${address6}/64`, 'dev', nsIf, 'nodad'],
        ['link', 'set', nsIf, 'up'],
        ['route', 'add', 'default', 'via', o.bridge.address],
        // The pods' network needs a default route of each family (docs/feos/network.md).
        ['-6', 'route', 'add', 'default', 'via', o.bridge.address6],
      ]) {
        await sh('ip', ['netns', 'exec', ns, 'ip', ...args]);
      }
      // The host reaches the node's pods (their IPv6 addresses) through the node.
      await sh('ip', ['-6', 'route', 'add', podPrefix, 'via', address6, 'dev', o.bridge.name]);
      for (const [registry, port] of bridgePorts) nsForwarders.push(await forwardInNamespace(ns, registry, o.bridge.address, port));
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
        '--pod-prefix',
        podPrefix,
        '--object-store',
        objectStore,
        ...(o.s3Endpoint ? ['--s3-endpoint', o.s3Endpoint] : []),
        ...registries.flatMap((r) => ['--registry-forward', r]),
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

/**
 * Listens on the bridge's address (a free port) and pipes each connection to `registry` on this host's
 * loopback. Node's own net module: two sockets piped are all a forward needs.
 * @returns the port
 */
async function forwardOnBridge(address: string, registry: string, servers: Server[]): Promise<number> {
  const host = registry.slice(0, registry.lastIndexOf(':')).replace(/^\[|\]$/g, '');
  const port = Number(registry.slice(registry.lastIndexOf(':') + 1));
  const server = createServer((c) => {
    const up = connect(port, host);
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  servers.push(server);
  await new Promise<void>((r, reject) => {
    server.once('error', reject);
    server.listen(0, address, () => r());
  });
  return (server.address() as { port: number }).port;
}

/** The listener inside a namespace: on the registry's own HOST:PORT, to the bridge's forward. */
const NS_FORWARDER = `const net = require('node:net');
const [lh, lp, th, tp] = process.argv.slice(1);
const s = net.createServer((c) => { const u = net.connect(Number(tp), th); c.pipe(u).pipe(c); c.on('error', () => u.destroy()); u.on('error', () => c.destroy()); });
s.listen(Number(lp), lh.replace(/^\\[|\\]$/g, ''), () => process.stdout.write('listening\\n'));`;

/**
 * Starts {@link NS_FORWARDER} in namespace `ns` (killed when `up` dies: setpriv's parent-death signal)
 * and waits for it to listen.
 * @throws CliError when it exits or does not listen within 10 s (the registry's port taken in the namespace)
 */
async function forwardInNamespace(ns: string, registry: string, bridgeAddress: string, bridgePort: number): Promise<ChildProcess> {
  const at = registry.lastIndexOf(':');
  const child = spawn('ip', ['netns', 'exec', ns, 'setpriv', '--pdeathsig', 'KILL', process.execPath, '-e', NS_FORWARDER, registry.slice(0, at), registry.slice(at + 1), bridgeAddress, String(bridgePort)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const ok = await new Promise<boolean>((r) => {
    const timer = setTimeout(() => r(false), 10_000);
    child.stdout!.once('data', () => {
      clearTimeout(timer);
      r(true);
    });
    child.once('exit', () => {
      clearTimeout(timer);
      r(false);
    });
  });
  if (!ok) {
    child.kill('SIGKILL');
    throw new CliError(`forwarding the registry ${registry} into namespace ${ns}: ${err.trim() || 'it did not listen within 10 s'}`);
  }
  return child;
}
