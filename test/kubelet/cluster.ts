/**
 * Test cluster for the kubelet's end-to-end suites: a real API server (test/helpers/apiserver.ts)
 * and real `kube32-sim` processes on their own loopback addresses, the fixture module pushed to
 * the module store. Everything is stopped and removed in `t.after`.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import type { TestContext } from 'node:test';
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { createInterface } from 'node:readline';
import { KubeConfig as KubeConfigClass } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';
import { unusedPort } from '../helpers/ports.ts';
import { issueNodeKubeconfig } from '../../src/apiserver/index.ts';
import { ControlPlane } from '../../src/kubelet/client.ts';
import { waitFor } from '../helpers/wait.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** A running worker process. */
export interface Worker {
  name: string;
  address: string;
  dataDir: string;
  proc: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code once the process ends. */
  exited: Promise<number | null>;
}

export interface Cluster {
  admin: ControlPlane;
  kubeConfig: KubeConfig;
  kubeconfigPath: string;
  kubectl(args: string[], opts?: { input?: string }): Promise<{ code: number; stdout: string; stderr: string }>;
  nodeKubeconfig(name: string): string | Promise<string>;
  /** The fixture's digest (hex) and module name. */
  module: { name: string; sha256: string };
  /** Starts a worker and waits for its ready line; `dataDir` defaults to `<tmp>/<name>`. */
  startWorker(name: string, address: string, extra?: string[], opts?: { dataDir?: string }): Promise<Worker>;
  /** Starts a worker without waiting for it (one that should refuse to start, say); stopped in `t.after` too. */
  spawnWorker(name: string, address: string, extra?: string[], opts?: { dataDir?: string }): Promise<Worker>;
  /** Polls `fn` until it returns a value other than undefined/false, or throws after `ms`. */
  until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms?: number): Promise<T>;
  getPod(name: string, ns?: string): Promise<V1Pod | undefined>;
  tmp: string;
}

/** Builds a WAT fixture with wat2wasm into `dir`; answers the bytes. */
export function buildWat(name: string, dir: string): Uint8Array {
  const out = join(dir, `${name}.wasm`);
  execFileSync('wat2wasm', [join(ROOT, 'test/kubelet/fixtures', `${name}.wat`), '-o', out]);
  return new Uint8Array(readFileSync(out));
}

/** The ports `freePort` handed out in this process: never handed out twice (a pod may not have bound one yet). */
const handedOut = new Set<number>();

/**
 * A TCP port for a pod's containerPort on `address` (or on each of several addresses, for a pod that
 * moves between them): free now, below the ephemeral range (test/helpers/ports.ts `unusedPort`: no
 * outgoing connection can take it before the pod binds it), and not one this process handed out before.
 */
export function freePort(address: string | string[]): Promise<number> {
  return unusedPort(address, handedOut);
}

/**
 * `kube32-cli control-plane` (the API server and the controllers in one process) on a free port,
 * shaped as the API server helper's answer (without kubectl).
 */
async function startControlPlane(t: TestContext): Promise<Pick<Awaited<ReturnType<typeof startApiServer>>, 'kubeConfig' | 'kubeconfigPath' | 'kubectl' | 'nodeKubeconfig'>> {
  const dataDir = mkdtempSync(join(tmpdir(), 'k32-kubelet-cp-'));
  const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-cli.js'), 'control-plane', '--data-dir', dataDir, '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' },
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  });
  const first = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then(() => {
      throw new Error(`the control plane exited before it listened:\n${stderr}`);
    }),
  ]);
  const info = JSON.parse(first) as { kubeconfig: string };
  const kubeConfig = new KubeConfigClass();
  kubeConfig.loadFromFile(info.kubeconfig);
  return {
    kubeConfig,
    kubeconfigPath: info.kubeconfig,
    kubectl: () => Promise.reject(new Error('no kubectl in control-plane mode')),
    nodeKubeconfig: (name: string) => issueNodeKubeconfig(dataDir, name),
  };
}

/**
 * Starts the API server (or, with `controllers`, the whole control plane), pushes the fixture, and
 * offers workers.
 */
export async function startCluster(t: TestContext, opts: { controllers?: boolean } = {}): Promise<Cluster> {
  const api = opts.controllers ? await startControlPlane(t) : await startApiServer(t);
  const tmp = mkdtempSync(join(tmpdir(), 'k32-kubelet-'));
  const workers: Worker[] = [];
  t.after(async () => {
    for (const w of workers) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    rmSync(tmp, { recursive: true, force: true });
  });
  const admin = new ControlPlane(api.kubeConfig);
  const bytes = buildWat('counter', tmp);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  await admin.json('PUT', '/apis/kube32.io/v1/modules/counter-fixture/data', { body: bytes, contentType: 'application/octet-stream' });

  // A timeout says what each worker said last (a CI run timed out on a restore with nothing to go on).
  const said = () =>
    workers.map((w) => `--- ${w.name} (${w.proc.exitCode === null && w.proc.signalCode === null ? 'running' : `exited ${w.proc.exitCode ?? w.proc.signalCode}`}), the end of its output:\n${w.stdout().slice(-1500)}${w.stderr().slice(-1500)}`).join('\n');
  const until = <T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15_000): Promise<T> => waitFor(what, ms, fn, { describe: said });

  const spawnWorker = async (name: string, address: string, extra: string[] = [], opts: { dataDir?: string } = {}): Promise<Worker> => {
    const dataDir = opts.dataDir ?? join(tmp, name);
    const kubeconfig = await api.nodeKubeconfig(name);
    const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', kubeconfig, '--name', name, '--address', address, '--kubelet-port', '0', '--data-dir', dataDir, ...extra], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'info' },
    });
    let out = '';
    let err = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    proc.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    const w: Worker = { name, address, dataDir, proc, stdout: () => out, stderr: () => err, exited };
    workers.push(w);
    return w;
  };
  const startWorker = async (name: string, address: string, extra: string[] = [], opts: { dataDir?: string } = {}): Promise<Worker> => {
    const w = await spawnWorker(name, address, extra, opts);
    await until(`worker ${name} to start`, () => {
      if (w.proc.exitCode !== null) throw new Error(`kube32-sim ${name} exited ${w.proc.exitCode}: ${w.stderr().slice(-2000)}`);
      return w.stdout().includes('ready:');
    }, 30_000);
    return w;
  };

  return {
    admin,
    kubeConfig: api.kubeConfig,
    kubeconfigPath: api.kubeconfigPath,
    kubectl: api.kubectl,
    nodeKubeconfig: api.nodeKubeconfig,
    module: { name: 'counter-fixture', sha256 },
    startWorker,
    spawnWorker,
    until,
    getPod: async (name, ns = 'default') => {
      try {
        return await admin.json<V1Pod>('GET', `/api/v1/namespaces/${ns}/pods/${name}`);
      } catch (err: unknown) {
        if ((err as { code?: number }).code === 404) return undefined;
        throw err;
      }
    },
    tmp,
  };
}

/** A pod of the fixture bound to `node`, serving on `port`. */
export function fixturePod(name: string, node: string, port: number, opts: { annotations?: Record<string, string>; memory?: string; restartPolicy?: string } = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: name }, annotations: opts.annotations ?? {} },
    spec: {
      nodeName: node,
      restartPolicy: opts.restartPolicy ?? 'Always',
      containers: [{ name: 'c', image: 'wasm://counter-fixture', ports: [{ containerPort: port }], resources: { limits: { memory: opts.memory ?? '64Ki' } } }],
    },
  };
}
