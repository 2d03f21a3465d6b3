/**
 * Helpers of the root suites of FeOS nodes in the cluster (issue 16, docs/feos/fleet.md): network
 * namespaces with a veth pair each to the host namespace, a free port on the host, feosd joined to a
 * control plane from inside a namespace, kubectl, feosctl through the cluster and bounded polls.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { TestContext } from 'node:test';
import { type FeosdProcess, startFeosd, tempDir } from '../../feos/harness.ts';
import { buildBusyboxLayout, type LocalRegistry, push, startRegistry } from '../../feos/registry.ts';
import { unusedPort } from '../../helpers/ports.ts';
import { endProcessesInNetns } from '../../helpers/processes.ts';

export const ROOT = new URL('../../../', import.meta.url).pathname;
export const CLI = join(ROOT, 'bin/kube32-cli.js');
export const FEOSCTL = join(ROOT, 'bin/feosctl.js');
/** The microVM guest the suites' feosds boot (scripts/build-guest.sh builds it once). */
export const GUEST_DIR = join(ROOT, 'build/guest');

/** A command's exit code and output. */
export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command (no shell), bounded by `timeoutMs`; never throws for a non-zero exit. */
export function run(cmd: string, args: string[], timeoutMs = 60_000): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** Runs a command; throws with its output when it fails. */
export async function must(cmd: string, args: string[]): Promise<string> {
  const r = await run(cmd, args, 20_000);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.code}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Polls `fn` every 250 ms until it answers something truthy; fails after `ms` naming `what` and the last answer. */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err: unknown) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 250)); // poll interval of a condition with a deadline
  }
}

/** A network namespace with a veth pair to the host namespace: `host` is the host side's address, `node` the namespace's. */
export interface NodeNet {
  ns: string;
  host: string;
  node: string;
}

/**
 * Namespaces of one suite, `k32t-<random>-<name>`, each with a veth pair `k32<random><i>h` (host side,
 * 10.X.Y.1/24) and `...n` (inside, 10.X.Y.2/24, its default route via the host side), where 10.X.Y is a
 * random /24 that no route of the host covers yet, one per namespace. {@link Nets.removeAll} removes them (and so the pairs).
 */
export class Nets {
  readonly #tag = randomBytes(3).toString('hex');
  readonly #made: string[] = [];

  /** Makes namespace `name` and its veth pair. @throws Error naming the `ip` command that failed */
  async add(name: string): Promise<NodeNet> {
    const i = this.#made.length;
    const ns = `k32t-${this.#tag}-${name}`;
    const hostIf = `k32${this.#tag}${i}h`;
    const nsIf = `k32${this.#tag}${i}n`;
    // A /24 no route of this host covers yet (another suite's veth, say): tried a few times at random.
    let net = '';
    for (let tries = 0; !net; tries++) {
      const candidate = `10.${randomInt(100, 250)}.${randomInt(0, 250)}`;
      if ((await must('ip', ['-4', 'route', 'show', 'match', `${candidate}.0/24`])).split('\n').every((l) => !l.trim() || l.startsWith('default'))) net = candidate;
      else if (tries > 20) throw new Error('no free 10.X.Y.0/24 for a veth pair');
    }
    await must('ip', ['netns', 'add', ns]);
    this.#made.push(ns);
    await must('ip', ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf]);
    await must('ip', ['link', 'set', nsIf, 'netns', ns]);
    await must('ip', ['addr', 'add', `${net}.1/24`, 'dev', hostIf]);
    await must('ip', ['link', 'set', hostIf, 'up']);
    for (const args of [
      ['link', 'set', 'lo', 'up'],
      ['addr', 'add', `${net}.2/24`, 'dev', nsIf],
      ['link', 'set', nsIf, 'up'],
      ['route', 'add', 'default', 'via', `${net}.1`],
    ]) {
      await must('ip', ['netns', 'exec', ns, 'ip', ...args]);
    }
    return { ns, host: `${net}.1`, node: `${net}.2` };
  }

  /**
   * Ends every process in the namespaces made ({@link endProcessesInNetns}: what feosd leaves running, its microVMs'
   * QEMU and the mesh's wireguard-go, would keep a deleted namespace alive, orphaned), then removes them (their veth
   * pairs go with them). A second call has nothing to do.
   * @throws Error naming a process that did not end (the namespaces are removed all the same)
   */
  async removeAll(): Promise<void> {
    const made = this.#made.splice(0).reverse();
    let failed: unknown;
    for (const ns of made) {
      await endProcessesInNetns(ns).catch((err: unknown) => {
        failed ??= err;
      });
      await run('ip', ['netns', 'del', ns], 20_000);
    }
    if (failed) throw failed;
  }
}

/**
 * A port for a control plane's `--feos-listen 0.0.0.0:PORT` (it must know it before it starts, to
 * advertise it): `unusedPort` of test/helpers/ports.ts, below the ephemeral range (docs/test-isolation.md).
 */
export function freePort(): Promise<number> {
  return unusedPort('0.0.0.0');
}

/** A feosd of the suite: its base directory, node directory and token file besides the process. */
export interface FleetNode {
  name: string;
  base: string;
  nodeDir: string;
  tokenFile: string;
  net: NodeNet;
  proc: FeosdProcess;
  /** Starts it again on the same directories (after it was stopped or killed). */
  restart(): Promise<FeosdProcess>;
}

/**
 * Starts feosd in `net.ns` joined to the control plane at `net.host:port` (`--control-plane-name
 * cpName`), with the token written into `<base>/join-token` (0600), `--node-name name` and
 * `--stop-grace 10` (a tenth: 1 s for the calls in flight); `guestDir` for pods that boot (none: no guest installed).
 */
export async function startNode(base: string, name: string, net: NodeNet, port: number, cpName: string, token: string, extra: string[] = [], guestDir?: string): Promise<FleetNode> {
  mkdirSync(base, { recursive: true });
  const tokenFile = join(base, 'join-token');
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  const nodeDir = join(base, 'node');
  const start = () =>
    startFeosd(base, {
      netns: net.ns,
      ...(guestDir ? { guestDir } : {}),
      env: { ...process.env, LOG_LEVEL: 'info' },
      extra: ['--control-plane', `${net.host}:${port}`, '--control-plane-name', cpName, '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', name, '--stop-grace', '10', ...extra],
    });
  const node: FleetNode = {
    name,
    base,
    nodeDir,
    tokenFile,
    net,
    proc: await start(),
    restart: async () => {
      node.proc = await start();
      return node.proc;
    },
  };
  return node;
}

/** `kubectl --kubeconfig K ARGS`, bounded to 30 s, a cache dir of its own. */
export function kubectl(kubeconfig: string, ...args: string[]): Promise<Ran> {
  return run('kubectl', ['--kubeconfig', kubeconfig, '--cache-dir', join(kubeconfig, '..', '.kube-cache'), ...args], 30_000);
}

/** `feosctl --kubeconfig K --node NODE ARGS` (through the cluster), bounded to 60 s. */
export function feosctlNode(kubeconfig: string, node: string, ...args: string[]): Promise<Ran> {
  return run(process.execPath, [FEOSCTL, '--kubeconfig', kubeconfig, '--node', node, '--timeout', '20', ...args], 60_000);
}

/** `kube32-cli feos token create --kubeconfig K [ARGS]`: the whole token. @throws Error with its stderr when it fails */
export async function createToken(kubeconfig: string, ...args: string[]): Promise<string> {
  const r = await run(process.execPath, [CLI, 'feos', 'token', 'create', '--kubeconfig', kubeconfig, ...args]);
  if (r.code !== 0) throw new Error(`feos token create: exit ${r.code}: ${r.stderr}`);
  return r.stdout.trim();
}

/** The status of the Node's Ready condition (`True`, `False`, `Unknown`), or '' when there is none. */
export async function readyOf(kubeconfig: string, node: string): Promise<string> {
  return (await kubectl(kubeconfig, 'get', 'node', node, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).stdout;
}

/** Spawns `feosctl --kubeconfig K --node NODE ARGS` in the background: its output so far and its end. */
export function spawnFeosctlNode(kubeconfig: string, node: string, ...args: string[]): { out: () => string; err: () => string; done: Promise<number | null>; kill(): void } {
  const child = spawn(process.execPath, [FEOSCTL, '--kubeconfig', kubeconfig, '--node', node, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const done = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  return { out: () => out, err: () => err, done, kill: () => child.kill('SIGKILL') };
}

/** A running `kube32-cli control-plane` with its port for nodes. */
export interface ControlPlane {
  dataDir: string;
  kubeconfig: string;
  /** What its JSON line names as the port for nodes. */
  feos: string;
  logs(): string;
  /** Stops it (SIGTERM) and waits for its exit; its data dir stays until the test ends. */
  stop(): Promise<void>;
}

/**
 * Starts `kube32-cli control-plane --data-dir <temp> --port 0 ARGS` and waits for its JSON line;
 * stopped (SIGTERM, SIGKILL after 10 s) and its data dir removed in `t.after`. With `reuseDataDir`, it
 * starts again on that data dir (the cluster of an earlier start), which it leaves to that start's cleanup.
 * @throws Error with its stderr when it exits first or is not ready within 90 s
 */
export async function startControlPlane(t: { after(fn: () => Promise<void>): void }, args: string[], reuseDataDir?: string): Promise<ControlPlane> {
  const dataDir = reuseDataDir ?? mkdtempSync(join(tmpdir(), 'k32t-fleet-cp-'));
  const proc = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } });
  let stderr = '';
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-200_000);
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
    if (!reuseDataDir) rmSync(dataDir, { recursive: true, force: true });
  });
  let timer: NodeJS.Timeout | undefined;
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then(() => {
      throw new Error(`the control plane exited:\n${stderr}`);
    }),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the control plane did not start within 90 s:\n${stderr}`)), 90_000);
    }),
  ]);
  clearTimeout(timer);
  const info = JSON.parse(line) as { kubeconfig: string; feos?: string };
  if (!info.feos) throw new Error(`the JSON line names no port for nodes: ${line}`);
  return {
    dataDir,
    kubeconfig: info.kubeconfig,
    feos: info.feos,
    logs: () => stderr,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** With `K32T_FLEET_LOGS=DIR` in the environment, writes `text` to `DIR/<name>.log` (to read a run's logs); else nothing. */
export function keepLog(name: string, text: string): void {
  const dir = process.env.K32T_FLEET_LOGS;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.log`), text);
}

/** Pids of the processes whose command line names `needle` (a test's data dir: its own children only). */
export function pidsNaming(needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(needle)) out.push(Number(d));
    } catch {}
  }
  return out;
}

/** A running `kube32-cli up` (root suites): its kubeconfig and output, and its stop. */
export interface UpCluster {
  dataDir: string;
  kubeconfig: string;
  /** The tag of its FeOS nodes' namespaces and bridge (`k32-<tag>-feos-<i>`, `k32fb<tag>`), '' without them. */
  tag: string;
  out(): string;
  /** SIGTERM, then its exit code (null when it was not gone within 180 s). */
  stop(): Promise<number | null>;
}

/**
 * Starts `kube32-cli up --data-dir <temp> --port 0 ARGS` and waits (up to `readyMs`) for its last line
 * once ready. In `t.after`: SIGKILL if it runs, then whatever it left (processes naming its data dir, its
 * FeOS nodes' namespaces with what runs in them, the bridge) is removed, and the data dir.
 * @throws Error with its output when it exits first or is not ready in time
 */
export async function startUp(t: { after(fn: () => Promise<void>): void }, args: string[], readyMs: number): Promise<UpCluster> {
  // Short: a FeOS node's microVM sockets live under it (up refuses a data dir too long for them).
  const dataDir = mkdtempSync('/tmp/k32t-up-');
  const proc = spawn(process.execPath, [CLI, 'up', '--data-dir', dataDir, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } });
  let out = '';
  const logs = process.env.K32T_FLEET_LOGS;
  if (logs) mkdirSync(logs, { recursive: true });
  const take = (d: string) => {
    out += d;
    if (logs) appendFileSync(join(logs, 'up-stream.log'), d);
  };
  proc.stdout!.setEncoding('utf8').on('data', take);
  proc.stderr!.setEncoding('utf8').on('data', take);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const tagOf = () => /network namespace k32-([0-9a-f]{6})-feos-1 /.exec(out)?.[1] ?? '';
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await exited;
    }
    for (const pid of pidsNaming(dataDir)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    const tag = tagOf();
    if (tag) {
      for (const ns of (await run('ip', ['netns', 'list'])).stdout.split('\n').map((l) => l.split(' ')[0]!)) {
        if (!ns.startsWith(`k32-${tag}-`)) continue;
        for (const pid of (await run('ip', ['netns', 'pids', ns])).stdout.split('\n').filter(Boolean)) {
          try {
            process.kill(Number(pid), 'SIGKILL');
          } catch {}
        }
        await run('ip', ['netns', 'del', ns]);
      }
      await run('ip', ['link', 'del', `k32fb${tag}`]);
    }
    // With K32T_FLEET_LOGS: the last lines of each component's log, before the data dir goes.
    try {
      for (const f of readdirSync(join(dataDir, 'logs'))) keepLog(`up-${f.replace(/\.log$/, '')}`, readFileSync(join(dataDir, 'logs', f), 'utf8').split('\n').slice(-400).join('\n'));
    } catch {}
    rmSync(dataDir, { recursive: true, force: true });
  });
  await until(
    'kube32-cli up ready',
    async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`up exited (${proc.exitCode ?? proc.signalCode}):\n${out}`);
      return out.includes('Press Ctrl-C to stop');
    },
    readyMs,
  ).catch((err: unknown) => {
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${out}`);
  });
  return {
    dataDir,
    kubeconfig: /export KUBECONFIG=(\S+)/.exec(out)?.[1] ?? join(dataDir, 'kubeconfig'),
    tag: tagOf(),
    out: () => out,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return Promise.race([exited, new Promise<null>((r) => setTimeout(() => r(null), 180_000).unref())]);
    },
  };
}

/** What {@link suiteRegistry} started: the registry and its root directory. */
export interface SuiteRegistry {
  reg: LocalRegistry;
  /** The registry's temporary root (`/tmp/<prefix>XXXXXX`), removed in `t.after`. */
  dir: string;
}

/**
 * A local registry of test/feos/registry.ts in a temporary directory of its own, its `private/*`
 * behind `token` (a suite that pushes with the direct address may pass any); with `busybox`, the
 * machine's busybox image pushed to it as `<busybox>:1` (e.g. `private/busybox`). Stopped and its
 * directory removed in `t.after`.
 * @throws Error when docker-registry does not start or the push fails (skopeo's stderr)
 */
export async function suiteRegistry(t: { after(fn: () => Promise<void>): void }, prefix: string, token: string, busybox?: string): Promise<SuiteRegistry> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let reg: LocalRegistry;
  try {
    reg = await startRegistry(dir, token);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  t.after(async () => {
    await reg.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  if (busybox) push(buildBusyboxLayout(dir), reg.direct, busybox, '1');
  return { reg, dir };
}

/**
 * Listens on `host` (a node's veth host side) at an unused port and pipes every connection to `to`
 * (`ip:port`, e.g. a registry's gate on the host's loopback), which a node's namespace cannot reach
 * itself. Closed in `t.after`. Returns `host:port`.
 */
export async function forwardTo(t: { after(fn: () => Promise<void>): void }, host: string, to: string): Promise<string> {
  const [toHost, toPort] = [to.slice(0, to.lastIndexOf(':')), Number(to.slice(to.lastIndexOf(':') + 1))];
  const port = await unusedPort(host);
  const proxy = createServer((c) => {
    const up = connect(toPort, toHost);
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  t.after(async () => {
    proxy.close();
  });
  await new Promise<void>((resolve) => proxy.listen(port, host, resolve));
  return `${host}:${port}`;
}

/** What the pods' network needs of a node beside its IPv4 default route: an IPv6 one, through a veth `feos-out` (docs/feos/network.md). */
export function addIpv6Default(ns: string): void {
  for (const args of [
    ['link', 'add', 'feos-out', 'type', 'veth', 'peer', 'name', 'feos-out-end'],
    ['link', 'set', 'feos-out', 'up'],
    ['link', 'set', 'feos-out-end', 'up'],
    ['-6', 'route', 'add', 'default', 'dev', 'feos-out'],
  ]) {
    execFileSync('ip', ['-n', ns, ...args], { timeout: 10_000 });
  }
}

/** The kubernetes.io/dockerconfigjson Secret `pull` that logs in to `registry` as `robot` with `token` (JSON, for {@link applyText}). */
export function pullSecret(registry: string, token: string): string {
  const config = { auths: { [registry]: { auth: Buffer.from(`robot:${token}`).toString('base64') } } };
  return JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'pull' }, type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': Buffer.from(JSON.stringify(config)).toString('base64') } });
}

/**
 * A Deployment `name` of one microVM pod (RuntimeClass feos, labelled app=name, the imagePullSecret
 * `pull` of {@link pullSecret}) whose container `app` runs `/bin/sh -c script` from `image` with a
 * limit of 1 CPU and 256Mi; `pod` adds fields to the pod spec, `container` to the container's (JSON,
 * for {@link applyText}).
 */
export function feosDeployment(name: string, image: string, script: string, more: { pod?: Record<string, unknown>; container?: Record<string, unknown> } = {}): string {
  const container = { name: 'app', image, command: ['/bin/sh', '-c'], args: [script], resources: { limits: { cpu: '1', memory: '256Mi' } }, ...more.container };
  return JSON.stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { runtimeClassName: 'feos', imagePullSecrets: [{ name: 'pull' }], ...more.pod, containers: [container] } },
    },
  });
}

/** `kubectl apply -f FILE` of `text` (YAML or JSON) written to a new file in `dir`. */
export async function applyText(kubeconfig: string, dir: string, text: string): Promise<Ran> {
  const file = join(dir, `m-${randomBytes(6).toString('hex')}.yaml`);
  writeFileSync(file, text);
  return kubectl(kubeconfig, 'apply', '-f', file);
}

/** The events of the object `name` (any kind, the kubeconfig's namespace), oldest first: `REASON  MESSAGE` a line. */
export async function eventsOf(kubeconfig: string, name: string): Promise<string> {
  const r = await kubectl(kubeconfig, 'get', 'events', '--field-selector', `involvedObject.name=${name}`, '--sort-by', '.lastTimestamp', '-o', 'custom-columns=REASON:.reason,MESSAGE:.message', '--no-headers');
  return r.stdout;
}

/**
 * The events of the object `name` with their source component, oldest first: `REASON  COMPONENT  MESSAGE` a
 * line. With `uid`, only that object's: a moved pod keeps its name with a new uid, and its source's events
 * are another object's.
 */
export async function eventsWithSource(kubeconfig: string, name: string, uid?: string): Promise<string> {
  const selector = `involvedObject.name=${name}${uid ? `,involvedObject.uid=${uid}` : ''}`;
  const r = await kubectl(kubeconfig, 'get', 'events', '--field-selector', selector, '--sort-by', '.lastTimestamp', '-o', 'custom-columns=REASON:.reason,SOURCE:.source.component,MESSAGE:.message', '--no-headers');
  return r.stdout;
}

/**
 * The end of a suite's feosds: each one's log kept as `<prefix>-<name>` ({@link keepLog}), each
 * SIGKILLed, then whatever still runs in their namespaces (the QEMU processes of their microVMs,
 * which feosd's SIGKILL leaves) killed.
 */
export async function killNodes(nodes: FleetNode[], prefix: string): Promise<void> {
  for (const n of nodes) keepLog(`${prefix}-${n.name}`, n.proc.stderr());
  for (const n of nodes) await n.proc.stop('SIGKILL');
  for (const n of nodes) {
    const r = await run('ip', ['netns', 'pids', n.net.ns]);
    for (const pid of r.stdout.split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {}
    }
  }
}

/**
 * The start of a suite of FeOS nodes in network namespaces: it runs as root, the guest is built, and its end
 * SIGKILLs the nodes pushed on `nodes` (their logs kept as `<name>-<node>`, {@link killNodes}), removes the
 * namespaces made with `nets` and the suite's directory.
 * @param name the suite's short name: `k32t-<name>-` its directory, `<name>` its kept logs
 * @throws AssertionError when not root; Error when the guest cannot be built
 */
export function fleetSuite(t: TestContext, name: string): { nets: Nets; dir: string; nodes: FleetNode[] } {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(ROOT, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const nets = new Nets();
  const { dir, cleanup } = tempDir(`k32t-${name}-`);
  const nodes: FleetNode[] = [];
  t.after(async () => {
    await killNodes(nodes, name);
    await nets.removeAll();
    cleanup();
  });
  return { nets, dir, nodes };
}
