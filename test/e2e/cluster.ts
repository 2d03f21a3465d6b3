/**
 * End-to-end test helpers: a real local cluster (`kube32-cli up` as a child process, on a free port,
 * in a temp data dir, its workers on loopback addresses of their own so that suites run side by side),
 * the real `kubectl` against it, `kube32-cli` as a real process, extra workers, and what the example
 * counter pod answers. Everything started here is stopped, and the temp dir removed, in `t.after`.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { waitFor as waitForCondition } from '../helpers/wait.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CLI = join(ROOT, 'bin/kube32-cli.js');
export const SIM = join(ROOT, 'bin/kube32-sim.js');
export const KUBECTL = '/usr/bin/kubectl';
export const COUNTER_WASM = join(ROOT, 'build/examples/counter.wasm');
export const COUNTER_DIR = join(ROOT, 'examples/counter');

/** What a process printed and how it ended. */
export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program to its end (bounded by `timeoutMs`), never throwing on a non-zero exit. */
export function run(file: string, args: string[], opts: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      { timeout: opts.timeoutMs ?? 120_000, maxBuffer: 64 << 20, env: opts.env ?? process.env, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** What a suite needs besides the control plane and the workers. */
export interface Needs {
  /** The counter example, built by `npm run build`, with its manifests. */
  counter?: boolean;
}

/**
 * The build outputs a suite needs that are missing (`npm run build` makes them). Every component the
 * suites drive is in the tree; only a checkout that was never built skips, and says why.
 */
export function missingPieces(needs: Needs = {}): string[] {
  const missing: string[] = [];
  if (needs.counter) {
    if (!existsSync(COUNTER_WASM)) missing.push('build/examples/counter.wasm (run npm run build)');
    if (!existsSync(COUNTER_DIR) || !readdirSync(COUNTER_DIR).some((f) => /\.ya?ml$/.test(f))) {
      missing.push('examples/counter/*.yaml (the Deployment + Service manifest)');
    }
  }
  return missing;
}

/** A skip reason for `missingPieces`, or false when nothing is missing. */
export function skipUnlessBuilt(needs: Needs = {}): string | false {
  const m = missingPieces(needs);
  return m.length > 0 ? `not built: ${m.join('; ')}` : false;
}

/**
 * A loopback /24 of its own for one cluster's workers: 127.A.B.2, 127.A.B.3, ... (claimed, so that no
 * suite running at the same time puts its workers or its pods' ports on the same addresses).
 */
async function ownFirstAddress(): Promise<string> {
  return `${await claimLoopbackRange()}.2`;
}

/** A running local cluster started by `kube32-cli up`. */
export interface TestCluster {
  dataDir: string;
  kubeconfig: string;
  /** The first worker's address; worker-N has the N-th one. '' when `up` picked it (`firstAddress: null`). */
  firstAddress: string;
  /** Everything `up` printed so far. */
  output(): string;
  /** The real kubectl with this cluster's kubeconfig and a fresh cache dir. */
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): Promise<Run>;
  /** kube32-cli as a real process, with KUBECONFIG set to this cluster's. */
  cli(args: string[], opts?: { timeoutMs?: number }): Promise<Run>;
  /** The pid of a child of `up` (`control-plane`, `worker-1`...) from its lock file. */
  childPid(name: string): number;
  /** Stops `up` with SIGTERM (or `signal`: SIGINT is Ctrl-C) and waits for its exit code. */
  stop(signal?: NodeJS.Signals): Promise<number>;
  process: ChildProcess;
}

/**
 * Starts `kube32-cli up` and waits for the last line it prints once ready ("Press Ctrl-C to stop ...").
 * @param opts.dataDir reuse a data dir (a second `up`); by default a new temp dir, removed at the end
 * @param opts.firstAddress worker-1's address; by default 127.A.B.2 of a /24 claimed for this process
 *   (test/helpers/ports.ts `claimLoopbackRange`), so that suites run side by side; null passes no
 *   `--first-address` (up picks a free range from 127.0.0.2)
 * @throws Error with `up`'s output when it exits or is not ready within `readyTimeoutMs`
 */
export async function startCluster(
  t: TestContext,
  opts: { workers?: number; dataDir?: string; extraArgs?: string[]; readyTimeoutMs?: number; firstAddress?: string | null } = {},
): Promise<TestCluster> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'kube32-e2e-'));
  if (!opts.dataDir) t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const cacheDir = mkdtempSync(join(tmpdir(), 'kube32-e2e-kubectl-'));
  t.after(() => rmSync(cacheDir, { recursive: true, force: true }));
  const firstAddress = opts.firstAddress === null ? '' : (opts.firstAddress ?? (await ownFirstAddress()));
  const args = [
    CLI,
    'up',
    '--workers',
    String(opts.workers ?? 2),
    '--data-dir',
    dataDir,
    '--port',
    '0',
    ...(firstAddress ? ['--first-address', firstAddress] : []),
    // CI runs every suite side by side on 2 cores: give each component time.
    '--ready-timeout',
    '120',
    ...(opts.extraArgs ?? []),
  ];
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  // 'close', not 'exit': the process may exit before its last lines are read from the pipes, and a test
  // reads the whole output once `stop()` resolves.
  const exited = new Promise<number>((resolve) => proc.once('close', (code, sig) => resolve(code ?? (sig ? 128 : 1))));
  let stopped: Promise<number> | undefined;
  const stop = (signal: NodeJS.Signals = 'SIGTERM'): Promise<number> => {
    stopped ??= (async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    })();
    return stopped;
  };
  t.after(async () => {
    await stop('SIGTERM');
    // Children of a killed `up` would be orphans: kill what its lock file still names.
    try {
      const lock = JSON.parse(readFileSync(join(dataDir, 'up.lock'), 'utf8')) as { children: Record<string, number> };
      for (const pid of Object.values(lock.children)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    } catch {
      // no lock: `up` cleaned up
    }
  });
  const readyTimeoutMs = opts.readyTimeoutMs ?? 150_000;
  const ready = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), readyTimeoutMs);
    const check = (): void => {
      if (out.includes('Press Ctrl-C to stop')) {
        clearTimeout(timer);
        resolve(true);
      }
    };
    proc.stdout!.on('data', check);
    exited.then(() => {
      clearTimeout(timer);
      resolve(out.includes('Press Ctrl-C to stop'));
    });
  });
  if (!ready) {
    await stop();
    throw new Error(`kube32-cli up did not become ready:\n${out}\n${logTails(dataDir)}`);
  }
  const kubeconfig = join(dataDir, 'kubeconfig');
  const env = { ...process.env, KUBECONFIG: kubeconfig };
  return {
    dataDir,
    kubeconfig,
    firstAddress,
    output: () => out,
    process: proc,
    kubectl: (a, o = {}) => run(KUBECTL, ['--kubeconfig', kubeconfig, '--cache-dir', cacheDir, ...a], o),
    cli: (a, o = {}) => run(process.execPath, [CLI, ...a], { ...o, env }),
    childPid(name) {
      const lock = JSON.parse(readFileSync(join(dataDir, 'up.lock'), 'utf8')) as { children: Record<string, number> };
      const pid = lock.children[name];
      if (!pid) throw new Error(`up.lock names no ${name}: ${JSON.stringify(lock)}`);
      return pid;
    },
    stop,
  };
}

/** The last lines of every log of a cluster, for failure messages. */
export function logTails(dataDir: string, lines = 30): string {
  const dir = join(dataDir, 'logs');
  if (!existsSync(dir)) return '(no logs)';
  return readdirSync(dir)
    .map((f) => `--- ${f}\n${readFileSync(join(dir, f), 'utf8').trimEnd().split('\n').slice(-lines).join('\n')}`)
    .join('\n');
}

/** Polls `check` (an API call) until it returns a value or the deadline passes: the suites' one wait (test/helpers/wait.ts), every 250 ms. */
export const waitFor = <T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false>): Promise<T> => waitForCondition(what, timeoutMs, check, { intervalMs: 250 });

/** What the counter example answers. */
export interface CounterReply {
  count: number;
  ticks?: number;
  podTimeMs: number;
  /** How many times the pod was restored from a snapshot. */
  restores?: number;
  node?: string;
}

/** One GET to a pod's HTTP port, answering its status and body. */
export function httpGet(host: string, port: number, path = '/'): Promise<{ status: number; body: string; retryAfter?: number }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port, path, timeout: 10_000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d.toString();
      });
      res.on('end', () => {
        const ra = Number(res.headers['retry-after']);
        resolve({ status: res.statusCode ?? 0, body, ...(Number.isFinite(ra) && ra >= 0 && res.headers['retry-after'] !== undefined ? { retryAfter: ra } : {}) });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET http://${host}:${port}${path}: timed out`)));
    req.on('error', reject);
  });
}

/**
 * Asks the counter pod at `host:port` and decodes its JSON. A frozen pod answers 503 with
 * Retry-After: 1 (seed: "A frozen pod gets no calls"), e.g. for the moment of a periodic
 * checkpoint: like a client that honours Retry-After, the request is repeated after that delay,
 * at most 5 times (a 503 never reached the pod, so counts are not changed by it).
 * @throws Error for any other status, or a 503 still answered after the retries
 */
export async function askCounter(host: string, port: number): Promise<CounterReply> {
  for (let attempt = 1; ; attempt++) {
    const res = await httpGet(host, port);
    if (res.status === 200) return JSON.parse(res.body) as CounterReply;
    if (res.status === 503 && res.retryAfter !== undefined && attempt < 5) {
      await new Promise<void>((r) => setTimeout(r, res.retryAfter! * 1000));
      continue;
    }
    throw new Error(`counter at ${host}:${port} answered ${res.status}: ${res.body}`);
  }
}

/** The counter example's manifests, and the names the tests need from them. */
export interface CounterManifest {
  /** All documents of examples/counter/*.yaml, in file order. */
  docs: Record<string, unknown>[];
  deployment: string;
  service: string;
  /** The Deployment's selector, as a `-l` argument. */
  selector: string;
  containerPort: number;
  servicePort: number | string;
  /** The module name of the image `wasm://NAME`. */
  moduleName: string;
}

/** Reads examples/counter/*.yaml. @throws Error when there is no Deployment or Service in them */
export function counterManifest(): CounterManifest {
  const docs: Record<string, unknown>[] = [];
  for (const f of readdirSync(COUNTER_DIR).filter((f) => /\.ya?ml$/.test(f)).sort()) {
    for (const d of parseAllDocuments(readFileSync(join(COUNTER_DIR, f), 'utf8'))) {
      const js = d.toJS() as Record<string, unknown> | null;
      if (js) docs.push(js);
    }
  }
  // biome-ignore lint/suspicious/noExplicitAny: manifest documents are free-form YAML
  const dep = docs.find((d) => d.kind === 'Deployment') as any;
  // biome-ignore lint/suspicious/noExplicitAny: manifest documents are free-form YAML
  const svc = docs.find((d) => d.kind === 'Service') as any;
  if (!dep || !svc) throw new Error('examples/counter has no Deployment and Service');
  const labels = dep.spec.selector.matchLabels as Record<string, string>;
  const container = dep.spec.template.spec.containers[0];
  const image = String(container.image);
  return {
    docs,
    deployment: dep.metadata.name,
    service: svc.metadata.name,
    selector: Object.entries(labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(','),
    containerPort: Number(container.ports?.[0]?.containerPort ?? 8080),
    servicePort: svc.spec.ports?.[0]?.name ?? svc.spec.ports?.[0]?.port,
    moduleName: image.startsWith('wasm://') ? image.slice('wasm://'.length) : 'counter',
  };
}

/** A pod as the tests read it. */
export interface PodView {
  metadata: { name: string; uid: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  spec: { nodeName?: string };
  status: { phase?: string; podIP?: string; conditions?: { type: string; status: string }[] };
}

/** True when the pod runs and reports Ready. */
export function podReady(p: PodView | undefined): boolean {
  return !!p && p.status.phase === 'Running' && !!p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Reads pods through kubectl (`-o json`). @throws Error with kubectl's stderr when it fails */
export async function getPods(c: TestCluster, args: string[]): Promise<PodView[]> {
  const r = await c.kubectl(['get', 'pods', '-o', 'json', ...args]);
  if (r.code !== 0) throw new Error(`kubectl get pods ${args.join(' ')}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { items: PodView[] }).items;
}

/** The address after `first` by `n` (127.A.B.2 + 1 = 127.A.B.3). */
export function nthAddress(first: string, n: number): string {
  const p = first.split('.').map(Number);
  return `${p[0]}.${p[1]}.${p[2]}.${p[3]! + n}`;
}

/**
 * Starts one more kube32-sim worker against a running cluster (a node joining), with a node kubeconfig
 * minted from the cluster's data dir, and waits for its Node to be Ready. Stopped in `t.after`.
 * @returns its process, to kill or stop it
 */
export async function startWorker(
  t: TestContext,
  c: TestCluster,
  opts: { name: string; address: string; heap?: string; extraArgs?: string[] },
): Promise<ChildProcess> {
  const { issueWorkerKubeconfig } = await import('../../src/cli/node-credentials.ts');
  const nodeDir = join(c.dataDir, 'nodes', opts.name);
  const { mkdirSync, openSync, closeSync } = await import('node:fs');
  mkdirSync(nodeDir, { recursive: true });
  const kc = await issueWorkerKubeconfig(c.dataDir, opts.name, join(nodeDir, 'kubeconfig'));
  const args = [SIM, '--kubeconfig', kc, '--name', opts.name, '--address', opts.address, '--data-dir', nodeDir];
  if (opts.heap) args.push('--heap', opts.heap);
  args.push(...(opts.extraArgs ?? []));
  const fd = openSync(join(c.dataDir, 'logs', `${opts.name}.log`), 'a');
  const proc = spawn(process.execPath, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await exited;
    }
  });
  await waitFor(`node ${opts.name} Ready`, 60_000, async () => {
    if (proc.exitCode !== null) throw new Error(`${opts.name} exited with ${proc.exitCode}`);
    const r = await c.kubectl(['get', 'node', opts.name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}']);
    return r.code === 0 && r.stdout.trim() === 'True';
  });
  return proc;
}
