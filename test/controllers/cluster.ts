/**
 * The controllers' end-to-end cluster: a real API server process (test/helpers/apiserver.ts), the
 * controllers in this process (`startControllers`, with short timings where a test needs them), and real
 * `kube32-sim` workers on loopback addresses of their own (127.A.B.2, .3, ... of a /24 claimed with
 * test/helpers/ports.ts), the counter fixture module pushed. Everything is stopped and removed in `t.after`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { pino } from 'pino';
import { CoreV1Api, type CoreV1Event, type V1Pod } from '@kubernetes/client-node';
import { startControllers, type ControllerTimings } from '../../src/controllers/index.ts';
import { type Checkpoint, RestClient } from '../../src/api/index.ts';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** A running worker. */
export interface Worker {
  name: string;
  address: string;
  proc: ChildProcess;
  exited: Promise<number | null>;
  logs(): string;
}

export interface ControllersCluster {
  api: TestApiServer;
  rest: RestClient;
  core: CoreV1Api;
  workers: Map<string, Worker>;
  /** Starts a kube32-sim worker; `env` is added to its environment (LOG_LEVEL: debug, ...). */
  startWorker(name: string, extra?: string[], env?: Record<string, string>): Promise<Worker>;
  /** Polls `fn` until it answers something other than undefined/false; throws after `ms` naming `what`. */
  until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms?: number): Promise<T>;
  getPod(name: string, ns?: string): Promise<V1Pod | undefined>;
  getCheckpoint(name: string, ns?: string): Promise<Checkpoint | undefined>;
  createCheckpoint(ck: Checkpoint): Promise<void>;
  /** GET http://<pod's node address>:<port><path> (the counter answers JSON). */
  podGet(pod: V1Pod, port: number, path: string): Promise<{ status: number; body: string }>;
  events(ns?: string): Promise<CoreV1Event[]>;
  stopControllers(): Promise<void>;
}

/** Starts the API server, the controllers, and pushes the counter fixture as `counter-fixture`. */
export async function startControllersCluster(
  t: TestContext,
  timings: Partial<ControllerTimings> = {},
  opts: { apiServerArgs?: string[]; pushSnapshotsToTarget?: boolean } = {},
): Promise<ControllersCluster> {
  const api = await startApiServer(t, { args: opts.apiServerArgs });
  const tmp = mkdtempSync(join(tmpdir(), 'k32-controllers-'));
  const workers = new Map<string, Worker>();
  // A /24 of its own (claimed: no suite running at the same time shares it), so the pods' fixed ports are ours.
  const prefix = await claimLoopbackRange();
  let next = 2;
  const rest = new RestClient(api.kubeConfig);
  const log = pino({ level: process.env.LOG_LEVEL ?? 'error', base: { component: 'controllers' } }, pino.destination({ dest: 2, sync: true }));
  const controllers = await startControllers({ kubeConfig: api.kubeConfig, timings, log, ...(opts.pushSnapshotsToTarget === undefined ? {} : { pushSnapshotsToTarget: opts.pushSnapshotsToTarget }) });
  let controllersStopped = false;
  const stopControllers = async () => {
    if (controllersStopped) return;
    controllersStopped = true;
    await controllers.stop();
  };
  t.after(async () => {
    await stopControllers();
    for (const w of workers.values()) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
    await Promise.all([...workers.values()].map((w) => w.exited));
    rest.close();
    rmSync(tmp, { recursive: true, force: true });
  });
  await pushCounterModule(rest, tmp);

  const until = <T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 20_000): Promise<T> => waitFor(what, ms, fn);

  const startWorker = async (name: string, extra: string[] = [], env: Record<string, string> = {}): Promise<Worker> => {
    const address = `${prefix}.${next++}`;
    const kubeconfig = api.nodeKubeconfig(name);
    const proc = spawn(
      process.execPath,
      [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', kubeconfig, '--name', name, '--address', address, '--kubelet-port', '0', '--data-dir', join(tmp, name), ...extra],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn', ...env } },
    );
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    proc.stderr!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    const w: Worker = { name, address, proc, exited, logs: () => out };
    workers.set(name, w);
    await until(`worker ${name} to start`, () => {
      if (proc.exitCode !== null) throw new Error(`kube32-sim ${name} exited ${proc.exitCode}: ${out.slice(-2000)}`);
      return out.includes('ready:');
    }, 30_000);
    await until(`node ${name} Ready`, async () => {
      const n = await rest.json<{ status?: { conditions?: Array<{ type: string; status: string }> } }>({ method: 'GET', path: `/api/v1/nodes/${name}` });
      return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    });
    return w;
  };

  const get = async <T>(path: string): Promise<T | undefined> => {
    try {
      return await rest.json<T>({ method: 'GET', path });
    } catch (err: unknown) {
      if ((err as { code?: number }).code === 404) return undefined;
      throw err;
    }
  };

  return {
    api,
    rest,
    core: api.kubeConfig.makeApiClient(CoreV1Api),
    workers,
    startWorker,
    until,
    getPod: (name, ns = 'default') => get<V1Pod>(`/api/v1/namespaces/${ns}/pods/${name}`),
    getCheckpoint: (name, ns = 'default') => get<Checkpoint>(`/apis/kube32.io/v1/namespaces/${ns}/checkpoints/${name}`),
    async createCheckpoint(ck) {
      await rest.json({ method: 'POST', path: `/apis/kube32.io/v1/namespaces/${ck.metadata?.namespace ?? 'default'}/checkpoints`, body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', ...ck } });
    },
    podGet(pod, port, path) {
      const w = workers.get(pod.spec?.nodeName ?? '');
      const host = pod.status?.podIP ?? w?.address;
      return new Promise((resolve, reject) => {
        const req = http.get({ host, port, path, timeout: 5000 }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => {
            body += d;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('timeout', () => req.destroy(new Error('timeout')));
        req.on('error', reject);
      });
    },
    async events(ns = 'default') {
      const list = await rest.json<{ items: CoreV1Event[] }>({ method: 'GET', path: `/api/v1/namespaces/${ns}/events` });
      return list.items;
    },
    stopControllers,
  };
}

function bufferStream(buf: Buffer): Readable {
  return Readable.from([buf]);
}

/**
 * Builds the counter fixture (test/kubelet/fixtures/counter.wat) into `dir` and pushes it as the Module
 * `counter-fixture`, which {@link counterPod}'s pods run. @throws Error when the push is not answered 2xx
 */
export async function pushCounterModule(rest: RestClient, dir: string): Promise<void> {
  const wasm = join(dir, 'counter.wasm');
  execFileSync('wat2wasm', [join(ROOT, 'test/kubelet/fixtures/counter.wat'), '-o', wasm]);
  const bytes = readFileSync(wasm);
  const res = await rest.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/counter-fixture/data', body: bufferStream(bytes), contentType: 'application/octet-stream', contentLength: bytes.length });
  res.body.resume();
  if (res.status >= 300) throw new Error(`pushing the fixture module: ${res.status}`);
}

/** A counter pod (the kubelet's fixture) with one container `c` serving on `port`. */
export function counterPod(name: string, port: number, opts: { annotations?: Record<string, string>; labels?: Record<string, string>; nodeName?: string } = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: opts.labels ?? { app: name }, annotations: opts.annotations ?? {} },
    spec: {
      nodeName: opts.nodeName,
      containers: [{ name: 'c', image: 'wasm://counter-fixture', ports: [{ containerPort: port }], resources: { limits: { memory: '64Ki' } } }],
    },
  };
}

/** The counter's answer. */
export interface Count {
  count: number;
  podTimeMs: number;
  restored: number;
}

/** Creates `pod` and waits (30 s at most) until it runs. */
export async function runPod(c: ControllersCluster, pod: V1Pod): Promise<V1Pod> {
  await c.rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: pod });
  return c.until(`pod ${pod.metadata?.name} to run`, async () => {
    const p = await c.getPod(pod.metadata!.name!);
    return p?.status?.phase === 'Running' ? p : undefined;
  }, 30_000);
}

/** The counter pod's answer at `path` (waits until it answers 200). */
export async function count(c: ControllersCluster, pod: V1Pod, port: number, path = '/count'): Promise<Count> {
  return c.until(`${pod.metadata?.name} to answer ${path}`, async () => {
    const res = await c.podGet(pod, port, path);
    return res.status === 200 ? (JSON.parse(res.body) as Count) : undefined;
  });
}
