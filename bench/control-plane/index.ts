/**
 * The control plane's pod-creation and scheduling throughput, with no kubelet (issue 11): one
 * `kube32-cli control-plane` (on etcd, then on its default SQLite), 100 fake Nodes (Ready, capacity
 * set, each with a Lease this benchmark renews every 10 s as a kubelet does), and a Deployment of
 * 1 000 (or 10 000) idle counter pods. Pods need no running kubelet to be created and bound, so this
 * measures the API server, its storage, the ReplicaSet controller and the scheduler alone:
 *
 * - time from `kubectl apply` to every pod existing, and to every pod bound (`spec.nodeName`), as a
 *   watch from this process sees them; pods created/s and bound/s over the whole run;
 * - the API's mutating p99 (ConfigMap create, patch, delete) and list p99 (nodes; the first 500 pods)
 *   measured meanwhile by a client in a second process (`probe.ts`);
 * - the control plane's CPU time and RSS (peak and at the end), and etcd's CPU time.
 *
 * Prints one table per storage; asserts nothing. Run (the counter module comes from `npm run build`):
 *
 *   node bench/control-plane/index.ts [--pods 1000] [--nodes 100] [--storage etcd,sqlite] [--cpu-prof DIR]
 *
 * `--cpu-prof DIR` runs the control plane under `node --cpu-prof` and writes its profile to DIR when
 * it stops (read it with `node bench/control-plane/profile-summary.ts FILE`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { AppsV1Api, CoordinationV1Api, CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions, type V1Pod, Watch } from '@kubernetes/client-node';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');
const COUNTER_WASM = join(ROOT, 'build/examples/counter.wasm');
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

const { values } = parseArgs({
  options: {
    pods: { type: 'string', default: '1000' },
    nodes: { type: 'string', default: '100' },
    storage: { type: 'string', default: 'etcd,sqlite' },
    'cpu-prof': { type: 'string' },
    'timeout-s': { type: 'string', default: '1800' },
  },
});
const PODS = Number(values.pods);
const NODES = Number(values.nodes);
const TIMEOUT_MS = Number(values['timeout-s']) * 1000;
const STORAGES = values.storage.split(',').filter(Boolean);
for (const [flag, v] of [['--pods', PODS], ['--nodes', NODES], ['--timeout-s', TIMEOUT_MS]] as const) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`${flag} must be a positive integer: current value is ${v}`);
}
for (const s of STORAGES) if (s !== 'etcd' && s !== 'sqlite') throw new RangeError(`--storage lists etcd and/or sqlite: current value is ${values.storage}`);
if (!existsSync(COUNTER_WASM)) throw new Error(`${COUNTER_WASM} is missing: run npm run build`);

const CLK_TCK = 100; // Linux's USER_HZ
/** CPU seconds (user + system) a process has used. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}
function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? Number.NaN;
}

/** Cleanups, run last-first at the end of each storage's run. */
type Cleanups = (() => unknown)[];

async function stopProcess(proc: ChildProcess, graceMs: number): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Starts `kube32-cli control-plane` and answers its process and admin kubeconfig. */
async function startControlPlane(cleanups: Cleanups, storage: string, etcdUrl: string | undefined): Promise<{ proc: ChildProcess; kubeconfig: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), `k32-bench-cp-${storage}-`));
  const prof = values['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', values['cpu-prof'], '--cpu-prof-name', `control-plane-${storage}-${PODS}.cpuprofile`] : [];
  const args = [...prof, CLI, 'control-plane', '--storage', storage, '--data-dir', dataDir, '--port', '0'];
  if (etcdUrl) args.push('--etcd-endpoints', etcdUrl);
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'error' } });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise((r) => proc.once('exit', r));
  cleanups.push(async () => {
    await stopProcess(proc, values['cpu-prof'] ? 60_000 : 10_000);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then((code) => {
      throw new Error(`control-plane exited ${String(code)}: ${stderr}`);
    }),
  ]);
  return { proc, kubeconfig: (JSON.parse(line) as { kubeconfig: string }).kubeconfig };
}

function runToEnd(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.once('exit', (code) => resolve({ code, out }));
  });
}

/** Kubernetes' MicroTime: RFC 3339 with microseconds. */
const microTime = (ms: number) => new Date(ms).toISOString().replace(/Z$/, '000Z');

/** Creates the fake nodes (Ready, 250 pods, 64Gi) and their Leases; renews the Leases every 10 s until cleanup. */
async function createNodes(cleanups: Cleanups, kc: KubeConfig): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const coord = kc.makeApiClient(CoordinationV1Api);
  const names = Array.from({ length: NODES }, (_, i) => `fake-${String(i + 1).padStart(3, '0')}`);
  const capacity = { pods: '250', memory: '64Gi', cpu: '16' };
  await Promise.all(
    names.map(async (name) => {
      await core.createNode({ body: { metadata: { name, labels: { 'kubernetes.io/hostname': name, 'kube32.io/fake': 'true' } } } });
      const now = new Date().toISOString();
      await core.patchNodeStatus(
        {
          name,
          body: {
            status: {
              capacity,
              allocatable: capacity,
              conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'fake node of bench/control-plane', lastHeartbeatTime: now, lastTransitionTime: now }],
              addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
            },
          },
        },
        MERGE,
      );
      await coord.createNamespacedLease({
        namespace: 'kube-node-lease',
        body: { metadata: { name }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime(Date.now()) as unknown as Date } },
      });
    }),
  );
  let stopped = false;
  let renewing: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    if (stopped) return;
    renewing = Promise.allSettled(
      names.map((name) => coord.patchNamespacedLease({ name, namespace: 'kube-node-lease', body: { spec: { renewTime: microTime(Date.now()) } } }, MERGE)),
    );
  }, 10_000);
  cleanups.push(async () => {
    stopped = true;
    clearInterval(timer);
    await renewing;
  });
}

interface Figures {
  /** Pods seen created and bound when the run ended (all of them, unless it timed out). */
  createdCount: number;
  boundCount: number;
  createdS: number;
  boundS: number;
  createdHalfS: number;
  boundHalfS: number;
  probe: { samples: Record<string, number[]>; errors: number; errorMessages?: string[] };
  cpRssPeak: number;
  cpRssEnd: number;
  cpCpu: number;
  etcdCpu: number | undefined;
  wallS: number;
}

async function runOne(storage: string): Promise<Figures> {
  const cleanups: Cleanups = [];
  try {
    let etcdPid: number | undefined;
    let etcdUrl: string | undefined;
    if (storage === 'etcd') {
      const etcd = await startEtcd({ after: (fn) => cleanups.push(fn) });
      etcdUrl = etcd.url;
      etcdPid = etcd.proc.pid;
    }
    const cp = await startControlPlane(cleanups, storage, etcdUrl);
    const cpPid = cp.proc.pid!;
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfig);
    await createNodes(cleanups, kc);
    const push = await runToEnd(process.execPath, [CLI, 'push', COUNTER_WASM, '--name', 'idle'], { ...process.env, KUBECONFIG: cp.kubeconfig });
    if (push.code !== 0) throw new Error(`kube32-cli push: ${push.out}`);

    // What this process sees: every pod of the Deployment, created and bound.
    const created = new Set<string>();
    const bound = new Set<string>();
    let t0 = 0;
    const marks = { createdHalf: 0, created: 0, boundHalf: 0, bound: 0 };
    const { promise: done, resolve: finish } = Promise.withResolvers<void>();
    const watch = await new Watch(kc).watch(
      '/api/v1/namespaces/default/pods',
      { labelSelector: 'app=idle' },
      (type: string, p: V1Pod) => {
        const uid = p.metadata?.uid ?? '';
        if (type === 'DELETED') return;
        const now = performance.now();
        if (!created.has(uid)) {
          created.add(uid);
          if (created.size === Math.ceil(PODS / 2)) marks.createdHalf = now;
          if (created.size === PODS) marks.created = now;
        }
        if (p.spec?.nodeName && !bound.has(uid)) {
          bound.add(uid);
          if (bound.size === Math.ceil(PODS / 2)) marks.boundHalf = now;
          if (bound.size === PODS) {
            marks.bound = now;
            finish();
          }
        }
      },
      (err: unknown) => {
        if (err && !marks.bound) console.error(`watch ended: ${String(err)}`);
      },
    );
    cleanups.push(() => watch.abort());

    const probe = spawn(process.execPath, [join(ROOT, 'bench/control-plane/probe.ts'), cp.kubeconfig], { stdio: ['pipe', 'pipe', 'inherit'] });
    let probeOut = '';
    probe.stdout!.on('data', (d: Buffer) => (probeOut += d.toString()));
    const probeExited = new Promise((r) => probe.once('exit', r));
    cleanups.push(async () => {
      if (probe.exitCode === null) probe.kill('SIGKILL');
      await probeExited;
    });

    let rssPeak = 0;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, rssMiB(cpPid));
    }, 1000);
    cleanups.push(() => clearInterval(sampler));
    const cpu0 = cpuSeconds(cpPid);
    const etcdCpu0 = etcdPid ? cpuSeconds(etcdPid) : 0;

    const apps = kc.makeApiClient(AppsV1Api);
    t0 = performance.now();
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name: 'idle' },
        spec: {
          replicas: PODS,
          selector: { matchLabels: { app: 'idle' } },
          template: {
            metadata: { labels: { app: 'idle' } },
            spec: { containers: [{ name: 'c', image: 'wasm://idle', resources: { limits: { memory: '1Mi' } } }] },
          },
        },
      },
    });
    const deadline = setTimeout(() => finish(), TIMEOUT_MS);
    await done;
    clearTimeout(deadline);
    const wallS = (performance.now() - t0) / 1000;
    const cpCpu = cpuSeconds(cpPid) - cpu0;
    const etcdCpu = etcdPid ? cpuSeconds(etcdPid) - etcdCpu0 : undefined;
    const cpRssEnd = rssMiB(cpPid);
    rssPeak = Math.max(rssPeak, cpRssEnd);
    probe.stdin!.end();
    await probeExited;
    // A run that timed out reports how far it got (times it did not reach are NaN).
    const s = (at: number) => (at ? (at - t0) / 1000 : Number.NaN);
    return {
      createdCount: created.size,
      boundCount: bound.size,
      createdS: s(marks.created),
      boundS: s(marks.bound),
      createdHalfS: s(marks.createdHalf),
      boundHalfS: s(marks.boundHalf),
      probe: JSON.parse(probeOut.trim().split('\n').pop() ?? '{}') as Figures['probe'],
      cpRssPeak: rssPeak,
      cpRssEnd,
      cpCpu,
      etcdCpu,
      wallS,
    };
  } finally {
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch {
        // cleanup goes on
      }
    }
  }
}

function report(storage: string, f: Figures): void {
  const ms = (xs: number[] | undefined) => (xs?.length ? `${pct(xs, 50).toFixed(0)} / ${pct(xs, 99).toFixed(0)} ms (${xs.length})` : 'n/a');
  const mut = [...(f.probe.samples.create ?? []), ...(f.probe.samples.patch ?? []), ...(f.probe.samples.delete ?? [])];
  console.log(`\n${storage}: ${PODS} pods on ${NODES} fake nodes, ${new Date().toISOString()}`);
  console.log('| measure | value |\n| --- | ---: |');
  if (f.boundCount < PODS) console.log(`| NOT DONE within --timeout-s ${TIMEOUT_MS / 1000} | ${f.createdCount} pods created, ${f.boundCount} bound |`);
  console.log(`| Deployment created → ${PODS} pods exist | ${f.createdS.toFixed(1)} s (half at ${f.createdHalfS.toFixed(1)} s) |`);
  console.log(`| Deployment created → ${PODS} pods bound | ${f.boundS.toFixed(1)} s (half at ${f.boundHalfS.toFixed(1)} s) |`);
  const rate = (n: number, at: number) => (Number.isNaN(at) ? n / f.wallS : n / at).toFixed(0);
  console.log(`| pods created/s, bound/s (whole run) | ${rate(f.createdCount, f.createdS)} / ${rate(f.boundCount, f.boundS)} |`);
  console.log(`| mutating calls (ConfigMap create/patch/delete) p50 / p99 | ${ms(mut)} |`);
  console.log(`| list nodes (${NODES}) p50 / p99 | ${ms(f.probe.samples.listNodes)} |`);
  console.log(`| list pods limit=500 p50 / p99 | ${ms(f.probe.samples.listPods500)} |`);
  console.log(`| probe errors | ${f.probe.errors}${f.probe.errorMessages?.length ? ` (${f.probe.errorMessages.join('; ')})` : ''} |`);
  console.log(`| control plane CPU (s) / wall (s) | ${f.cpCpu.toFixed(1)} / ${f.wallS.toFixed(1)} |`);
  if (f.etcdCpu !== undefined) console.log(`| etcd CPU (s) | ${f.etcdCpu.toFixed(1)} |`);
  console.log(`| control plane RSS peak / at the end | ${f.cpRssPeak.toFixed(0)} / ${f.cpRssEnd.toFixed(0)} MiB |`);
}

let failed = false;
for (const storage of STORAGES) {
  try {
    report(storage, await runOne(storage));
  } catch (err: unknown) {
    failed = true;
    console.error(`${storage}: ${err instanceof Error ? err.stack : String(err)}`);
  }
}
if (failed) process.exitCode = 1;
