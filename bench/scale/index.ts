/**
 * The control plane and the workers at scale (issue 11, "A hundred workers on one machine";
 * docs/scale.md): one etcd, one `kube32-cli control-plane --storage etcd --leader-elect`, N simulated
 * nodes in `kube32-sim` processes of K nodes each (`--nodes K`), with P pods per worker thread
 * (`--pods-per-thread P`), and a Deployment of idle pods (the counter module, no port). Prints:
 *
 * - the rollout: apply → every pod created, bound (scheduled) and Ready; pods created, bound and Ready
 *   a second; per pod, creation → bound and bound → Ready (where the time goes), and the CPU seconds
 *   each process used meanwhile (control plane, etcd, workers, this bench);
 * - pod startup p50/p99 from the apply and from each pod's creation, for the burst;
 * - pod startup of "latency pods" (clusterloader2's measure of the pod startup SLO, p99 ≤ 5 s):
 *   `--latency-pods` bare pods created at 5 a second once the rollout is Ready, then deleted;
 * - the API's mutating latency while the pods roll out (a ConfigMap created every 500 ms by a
 *   client), and afterwards mutating and list p50/p99 as `kubectl` sees them (Kubernetes' API SLOs:
 *   mutating p99 ≤ 1 s, list p99 ≤ 30 s);
 * - a drain of the fullest node (`kubectl drain`) until every pod is Ready again, moved (same name)
 *   or recreated;
 * - memory (RSS): control plane, etcd, each kube32-sim process, and per pod.
 *
 *   node bench/scale/index.ts [--workers 10] [--pods 200] [--nodes-per-process 1] [--pods-per-thread 1]
 *                             [--max-pods N] [--timeout 1200] [--drain-timeout 600] [--latency-pods 100]
 *
 * Everything measured before the drain is printed before the drain starts; a drain that does not end
 * within --drain-timeout (seconds) is reported with how far it got.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { parseArgs } from 'node:util';
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { COUNTER_WASM, run } from '../../test/e2e/cluster.ts';
import { CLI, eventually, kubectl, ROOT, startControlPlane } from '../../test/apiserver-etcd/control-plane.ts';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';
import { nextAddress } from '../../src/kubelet/index.ts';
import { cpuSeconds } from '../helpers.ts';

const { values } = parseArgs({
  options: {
    workers: { type: 'string', default: '10' },
    pods: { type: 'string', default: '200' },
    'nodes-per-process': { type: 'string', default: '1' },
    'pods-per-thread': { type: 'string', default: '1' },
    'max-pods': { type: 'string' },
    timeout: { type: 'string', default: '1200' },
    'drain-timeout': { type: 'string', default: '600' },
    'latency-pods': { type: 'string', default: '100' },
  },
});
const WORKERS = Number(values.workers);
const PODS = Number(values.pods);
const PER_PROCESS = Number(values['nodes-per-process']);
const PODS_PER_THREAD = Number(values['pods-per-thread']);
/** Room for the scheduler's spread to be uneven, and for a drained node's pods. */
const MAX_PODS = Number(values['max-pods'] ?? Math.max(110, Math.ceil((2 * PODS) / WORKERS)));
/** The longest any phase may take, ms. */
const TIMEOUT_MS = Number(values.timeout) * 1000;
/** How long the drain may take before the bench reports how far it got, ms. */
const DRAIN_TIMEOUT_MS = Number(values['drain-timeout']) * 1000;
/**
 * Pods created one by one at 5 a second once the rollout is Ready, whose startup is measured alone:
 * clusterloader2's density test measures the pod startup SLO (p99 ≤ 5 s) on such "latency pods"
 * (tuning set Uniform5qps) created after its saturation pods, not on the saturation burst.
 */
const LATENCY_PODS = Number(values['latency-pods']);
const LATENCY_QPS = 5;
for (const [flag, v] of Object.entries({ workers: WORKERS, pods: PODS, 'nodes-per-process': PER_PROCESS, 'pods-per-thread': PODS_PER_THREAD, 'max-pods': MAX_PODS, timeout: TIMEOUT_MS, 'drain-timeout': DRAIN_TIMEOUT_MS, 'latency-pods': LATENCY_PODS })) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`--${flag} must be a whole number of 1 or more: current value is ${v}`);
}

const cleanups: (() => unknown)[] = [];
let stopping = false;
const t = { after: (fn: () => unknown) => cleanups.push(fn) } as unknown as TestContext;

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};

/**
 * The API server's request counters and summed request durations (`/metrics`), keyed by `verb
 * resource[/subresource]`, and its JavaScript thread's busy seconds (event-loop utilisation). Requests
 * overlap (asynchronous storage), so their durations summed are not the thread's busy time.
 */
interface ApiMetrics {
  requests: Map<string, number>;
  seconds: Map<string, number>;
  /** `kube32_event_loop_busy_seconds_total`: the control plane process's thread busy since it started, s. */
  busy: number;
}

async function scrapeApi(kc: string): Promise<ApiMetrics> {
  // Minutes, not kubectl()'s 30 s: at 10 000 pods a scrape counts every stored object (apiserver_storage_objects).
  const r = await run('kubectl', ['--kubeconfig', kc, 'get', '--raw', '/metrics'], { timeoutMs: 300_000 });
  if (r.code !== 0) throw new Error(`/metrics: kubectl exited ${r.code}: ${r.stderr}`);
  const m: ApiMetrics = { requests: new Map(), seconds: new Map(), busy: Number(/^kube32_event_loop_busy_seconds_total (\S+)$/m.exec(r.stdout)?.[1] ?? Number.NaN) };
  for (const line of r.stdout.split('\n')) {
    const hit = /^(apiserver_request_total|apiserver_request_duration_seconds_sum)\{([^}]*)\} (\S+)$/.exec(line);
    if (!hit) continue;
    const labels = Object.fromEntries([...hit[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    const key = `${labels.verb} ${labels.resource || '-'}${labels.subresource ? `/${labels.subresource}` : ''}`;
    const into = hit[1] === 'apiserver_request_total' ? m.requests : m.seconds;
    into.set(key, (into.get(key) ?? 0) + Number(hit[3]));
  }
  return m;
}

/** etcd's own counters (its `/metrics`): operations, bytes on its client gRPC, WAL fsyncs. */
async function scrapeEtcd(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  const out: Record<string, number> = {};
  for (const name of ['etcd_mvcc_range_total', 'etcd_mvcc_put_total', 'etcd_mvcc_txn_total', 'etcd_mvcc_delete_total',
    'etcd_network_client_grpc_received_bytes_total', 'etcd_network_client_grpc_sent_bytes_total',
    'etcd_disk_wal_fsync_duration_seconds_count', 'etcd_disk_wal_fsync_duration_seconds_sum', 'etcd_mvcc_db_total_size_in_bytes']) {
    out[name] = Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  }
  return out;
}

/** etcd's work between two scrapes, as one table cell. */
function etcdWork(a: Record<string, number>, b: Record<string, number>): string {
  const d = (k: string) => (b[k] ?? 0) - (a[k] ?? 0);
  const fsyncs = d('etcd_disk_wal_fsync_duration_seconds_count');
  return `${d('etcd_mvcc_range_total')} ranges, ${d('etcd_mvcc_txn_total')} txns, ${d('etcd_mvcc_put_total')} puts, ${d('etcd_mvcc_delete_total')} deletes; `
    + `${(d('etcd_network_client_grpc_received_bytes_total') / 2 ** 20).toFixed(0)} MiB in, ${(d('etcd_network_client_grpc_sent_bytes_total') / 2 ** 20).toFixed(0)} MiB out; `
    + `${fsyncs} WAL fsyncs, mean ${((1000 * d('etcd_disk_wal_fsync_duration_seconds_sum')) / Math.max(1, fsyncs)).toFixed(1)} ms; db ${(b.etcd_mvcc_db_total_size_in_bytes! / 2 ** 20).toFixed(0)} MiB`;
}

/** What changed between two scrapes, largest first. */
function delta(after: Map<string, number>, before: Map<string, number>): [string, number][] {
  return [...after].map(([k, v]): [string, number] => [k, v - (before.get(k) ?? 0)]).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
}

const WRITE_VERBS = /^(create|update|patch|delete|deletecollection|post|put)\b/;

interface PodLite {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: { conditions?: { type: string; status: string }[] };
}
const isReady = (p: PodLite) => !p.metadata.deletionTimestamp && !!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

async function main(): Promise<void> {
  const load = loadavg().map((x) => x.toFixed(2)).join(' ');
  const etcd = await startEtcd(t);
  const cp = await startControlPlane(t, etcd.url, 'cp1');
  const kc = cp.kubeconfig;
  await eventually('the leader', 30_000, async () => (await kubectl(kc, ['get', 'lease', 'kube32-controllers', '-n', 'kube-system', '-o', 'jsonpath={.spec.holderIdentity}'])).stdout, (h) => h === 'cp1');
  const config = new KubeConfig();
  config.loadFromFile(kc);
  const core = config.makeApiClient(CoreV1Api);

  // The workers: ceil(N/K) processes of K simulated nodes, on consecutive loopback addresses of a /16.
  const { issueWorkerKubeconfig } = await import('../../src/cli/node-credentials.ts');
  const first = `127.${30 + Math.floor(Math.random() * 200)}.0.2`;
  const kcDir = join(cp.dataDir, 'nodes');
  const procs: { name: string; proc: ChildProcess; stderr: () => string }[] = [];
  const started = Date.now();
  for (let j = 0, done = 0; done < WORKERS; j++) {
    const count = Math.min(PER_PROCESS, WORKERS - done);
    const prefix = `p${j + 1}`;
    const names = count === 1 ? [prefix] : Array.from({ length: count }, (_, i) => `${prefix}-${i + 1}`);
    for (const name of names) await issueWorkerKubeconfig(cp.dataDir, name, join(kcDir, `${name}.kubeconfig`));
    const dataDir = join(cp.dataDir, 'sim', prefix);
    mkdirSync(dataDir, { recursive: true });
    const args = [join(ROOT, 'bin/kube32-sim.js'), '--nodes', String(count), '--name', prefix, '--address', nextAddress(first, done),
      '--kubelet-port', '0', '--kubeconfig-dir', kcDir, '--data-dir', count === 1 ? join(dataDir, prefix) : dataDir,
      '--pods-per-thread', String(PODS_PER_THREAD), '--max-pods', String(MAX_PODS)];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'error' } });
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    const exited = new Promise((r) => proc.once('exit', r));
    cleanups.push(async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    });
    procs.push({ name: prefix, proc, stderr: () => stderr });
    done += count;
  }
  const readyNodes = async () => {
    for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`kube32-sim ${p.name} exited ${p.proc.exitCode}: ${p.stderr()}`);
    const list = await core.listNode();
    return list.items.filter((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')).length;
  };
  await eventually(`${WORKERS} nodes Ready`, TIMEOUT_MS, readyNodes, (n) => n >= WORKERS);
  const workersReadyS = (Date.now() - started) / 1000;
  console.log(`${WORKERS} nodes in ${procs.length} processes Ready in ${workersReadyS.toFixed(1)} s`);
  const push = await run(process.execPath, [CLI, 'push', COUNTER_WASM, '--name', 'idle'], { env: { ...process.env, KUBECONFIG: kc } });
  if (push.code !== 0) throw new Error(push.stderr);

  const pods = new Map<string, PodLite>();
  const createdAt = new Map<string, number>();
  const boundAt = new Map<string, number>();
  const readyAt = new Map<string, number>();
  const w = await new Watch(config).watch('/api/v1/namespaces/default/pods', { labelSelector: 'app=idle' }, (type: string, p: PodLite) => {
    const now = performance.now();
    const uid = p.metadata.uid;
    if (type === 'DELETED') pods.delete(uid);
    else pods.set(uid, p);
    if (type === 'ADDED' && !createdAt.has(uid)) createdAt.set(uid, now);
    if (p.spec.nodeName && !boundAt.has(uid)) boundAt.set(uid, now);
    if (isReady(p) && !readyAt.has(uid)) readyAt.set(uid, now);
  }, (err: unknown) => {
    if (err && !stopping) console.error(`the pod watch ended: ${String(err)}`);
  });
  cleanups.push(() => {
    stopping = true;
    w.abort();
  });

  const dep = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'idle', namespace: 'default' },
    spec: {
      replicas: PODS,
      selector: { matchLabels: { app: 'idle' } },
      template: {
        metadata: { labels: { app: 'idle' }, annotations: { 'kube32.io/migration': 'OnDrain' } },
        spec: { containers: [{ name: 'c', image: 'wasm://idle', resources: { limits: { memory: '1Mi' } } }] },
      },
    },
  };
  const pids = { cp: cp.proc.pid!, etcd: etcd.proc.pid!, sims: procs.map((p) => p.proc.pid!) };
  const cpuAt = () => ({ cp: cpuSeconds(pids.cp), etcd: cpuSeconds(pids.etcd), sims: pids.sims.reduce((a, pid) => a + cpuSeconds(pid), 0), bench: process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6 });
  const cpu0 = cpuAt();
  const api0 = await scrapeApi(kc);
  const etcd0 = await scrapeEtcd(etcd.url);

  // A client's mutating calls while the pods roll out: a ConfigMap every 500 ms.
  const rolloutMut: number[] = [];
  const rolloutFailed: string[] = [];
  let probing = true;
  const probe = (async () => {
    for (let i = 0; probing; i++) {
      const a = performance.now();
      try {
        await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: `rollout-${i}` }, data: { k: 'v' } } });
        rolloutMut.push(performance.now() - a);
      } catch (err: unknown) {
        const cause = err instanceof Error && err.cause instanceof Error ? ` (${err.cause.message})` : '';
        rolloutFailed.push(`${err instanceof Error ? err.message : String(err)}${cause}`);
      }
      await new Promise((r) => setTimeout(r, 500)); // the probe's pace, not a synchronisation
    }
  })();

  const t0 = performance.now();
  const applied = await kubectl(kc, ['apply', '-f', '-'], JSON.stringify(dep));
  if (applied.code !== 0) throw new Error(applied.stderr);
  const readyCount = () => [...pods.values()].filter(isReady).length;
  await eventually(`${PODS} pods Ready`, TIMEOUT_MS, async () => {
    for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`kube32-sim ${p.name} exited ${p.proc.exitCode}: ${p.stderr()}`);
    return readyCount();
  }, (n) => n >= PODS);
  // When the last pod was created and bound, as the watch saw them.
  const marks = { created: Math.max(...createdAt.values()), bound: Math.max(...boundAt.values()) };
  const tReady = performance.now();
  const loadAfter = loadavg().map((x) => x.toFixed(2)).join(' ');
  probing = false;
  await probe;
  const cpu1 = cpuAt();
  const api1 = await scrapeApi(kc);
  const etcd1 = await scrapeEtcd(etcd.url);
  const requests = delta(api1.requests, api0.requests);
  const writes = requests.filter(([k]) => WRITE_VERBS.test(k));
  const writeTotal = writes.reduce((a, [, v]) => a + v, 0);
  const handling = delta(api1.seconds, api0.seconds);
  const handlingTotal = handling.reduce((a, [, v]) => a + v, 0);
  const allReadyS = (tReady - t0) / 1000;
  const uids = [...readyAt.keys()];
  const startup = uids.map((uid) => readyAt.get(uid)! - t0);
  const createToReady = uids.filter((uid) => createdAt.has(uid)).map((uid) => readyAt.get(uid)! - createdAt.get(uid)!);
  const createToBound = uids.filter((uid) => createdAt.has(uid) && boundAt.has(uid)).map((uid) => boundAt.get(uid)! - createdAt.get(uid)!);
  const boundToReady = uids.filter((uid) => boundAt.has(uid)).map((uid) => readyAt.get(uid)! - boundAt.get(uid)!);
  const rate = (ms: number) => PODS / ((ms - t0) / 1000);

  // The events recorded so far, by reason (they are a large share of the writes).
  const reasons = new Map<string, number>();
  let cont: string | undefined;
  do {
    const page = await core.listEventForAllNamespaces({ limit: 500, ...(cont ? { _continue: cont } : {}) });
    for (const e of page.items) reasons.set(e.reason ?? '', (reasons.get(e.reason ?? '') ?? 0) + (e.count ?? 1));
    cont = page.metadata?._continue || undefined;
  } while (cont);

  // The API once every pod runs: mutating and list latency as kubectl sees them.
  const mut: number[] = [];
  const lists: number[] = [];
  for (let i = 0; i < 40; i++) {
    const a = performance.now();
    const r = await kubectl(kc, ['create', 'configmap', `bench-${i}`, '--from-literal=k=v']);
    mut.push(performance.now() - a);
    if (r.code !== 0) throw new Error(r.stderr);
  }
  // A list of 10 000 pods takes kubectl seconds: fewer samples at that size (p99 is then their max).
  const listSamples = PODS > 2000 ? 5 : 20;
  for (let i = 0; i < listSamples; i++) {
    const a = performance.now();
    const r = await run('kubectl', ['--kubeconfig', kc, 'get', 'pods', '-A', '-o', 'name'], { timeoutMs: 300_000 });
    lists.push(performance.now() - a);
    if (r.code !== 0) throw new Error(r.stderr);
  }
  const ver: number[] = [];
  for (let i = 0; i < 20; i++) {
    const a = performance.now();
    await kubectl(kc, ['version', '-o', 'json']);
    ver.push(performance.now() - a);
  }

  // Latency pods: created at LATENCY_QPS a second while the 10 000 run; creation → Ready as a watch sees it.
  const latCreated = new Map<string, number>();
  const latReady = new Map<string, number>();
  const lw = await new Watch(config).watch('/api/v1/namespaces/default/pods', { labelSelector: 'app=latency' }, (type: string, p: PodLite) => {
    const now = performance.now();
    if (type === 'ADDED' && !latCreated.has(p.metadata.name)) latCreated.set(p.metadata.name, now);
    if (type !== 'DELETED' && isReady(p) && !latReady.has(p.metadata.name)) latReady.set(p.metadata.name, now);
  }, (err: unknown) => {
    if (err && !stopping) console.error(`the latency pod watch ended: ${String(err)}`);
  });
  cleanups.push(() => lw.abort());
  const latFailed: string[] = [];
  const l0 = performance.now();
  const creates: Promise<unknown>[] = [];
  for (let i = 0; i < LATENCY_PODS; i++) {
    creates.push(core.createNamespacedPod({ namespace: 'default', body: {
      metadata: { name: `latency-${i}`, labels: { app: 'latency' } },
      spec: { containers: [{ name: 'c', image: 'wasm://idle', resources: { limits: { memory: '1Mi' } } }] },
    } }).catch((err: unknown) => latFailed.push(err instanceof Error ? err.message : String(err))));
    // The pace of the load (5 pods a second), not a synchronisation.
    await new Promise((r) => setTimeout(r, l0 + ((i + 1) * 1000) / LATENCY_QPS - performance.now()));
  }
  await Promise.all(creates);
  await eventually(`${LATENCY_PODS} latency pods Ready`, TIMEOUT_MS, async () => latReady.size, (n) => n >= LATENCY_PODS - latFailed.length);
  const latency = [...latReady].filter(([n]) => latCreated.has(n)).map(([n, at]) => at - latCreated.get(n)!);
  const del = await kubectl(kc, ['delete', 'pods', '-l', 'app=latency', '--wait=true', '--timeout=300s']);
  if (del.code !== 0) console.error(`deleting the latency pods: ${del.stderr}`);

  const cpRss = rssMiB(pids.cp);
  const etcdRss = rssMiB(pids.etcd);
  const simRss = pids.sims.map(rssMiB);
  const simTotal = simRss.reduce((a, b) => a + b, 0);

  const ms = (x: number) => `${x.toFixed(0)} ms`;
  const s = (x: number) => `${(x / 1000).toFixed(1)} s`;
  const cpuUsed = (k: keyof typeof cpu0) => (cpu1[k] - cpu0[k]).toFixed(0);
  console.log(`\n${WORKERS} nodes in ${procs.length} kube32-sim processes (${PER_PROCESS} a process, ${PODS_PER_THREAD} pods a thread, max ${MAX_PODS} pods a node), ${PODS} idle pods; one etcd, one control plane on etcd; ${new Date().toISOString()}; load average before: ${load}; at the end of the rollout: ${loadAfter}`);
  console.log('| measure | value |\n| --- | ---: |');
  console.log(`| nodes started and Ready | ${workersReadyS.toFixed(1)} s |`);
  console.log(`| Deployment applied → all ${PODS} created / bound / Ready | ${s(marks.created - t0)} / ${s(marks.bound - t0)} / ${allReadyS.toFixed(1)} s |`);
  console.log(`| pods a second: created / bound / Ready (over the rollout) | ${rate(marks.created).toFixed(1)} / ${rate(marks.bound).toFixed(1)} / ${(PODS / allReadyS).toFixed(1)} |`);
  console.log(`| pod startup from the apply, p50 / p99 | ${ms(pct(startup, 50))} / ${ms(pct(startup, 99))} |`);
  console.log(`| pod startup from its creation (the burst), p50 / p99 | ${ms(pct(createToReady, 50))} / ${ms(pct(createToReady, 99))} |`);
  console.log(`| of which creation → bound, p50 / p99 | ${ms(pct(createToBound, 50))} / ${ms(pct(createToBound, 99))} |`);
  console.log(`| of which bound → Ready, p50 / p99 | ${ms(pct(boundToReady, 50))} / ${ms(pct(boundToReady, 99))} |`);
  console.log(`| latency pods: ${LATENCY_PODS} created at ${LATENCY_QPS}/s after the rollout, ${PODS} running (clusterloader2's SLO measure), creation → Ready p50 / p99 / max${latFailed.length ? ` (${latFailed.length} creates failed: ${latFailed[0]})` : ''} | ${ms(pct(latency, 50))} / ${ms(pct(latency, 99))} / ${ms(Math.max(...latency))} |`);
  console.log(`| CPU seconds during the rollout (${allReadyS.toFixed(0)} s × 2 cores): control plane / etcd / kube32-sim (all) / bench | ${cpuUsed('cp')} / ${cpuUsed('etcd')} / ${cpuUsed('sims')} / ${cpuUsed('bench')} |`);
  console.log(`| API writes during the rollout: total (a second), the largest | ${writeTotal} (${(writeTotal / allReadyS).toFixed(0)}/s): ${writes.slice(0, 8).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
  console.log(`| events recorded by the end of the rollout, by reason (count summed) | ${[...reasons].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
  const busy = api1.busy - api0.busy;
  // Durations are labelled by verb and resource only: the requests counted the same way, for their mean.
  const byVerbResource = new Map<string, number>();
  for (const [k, v] of requests) byVerbResource.set(k.replace(/\/\S+$/, ''), (byVerbResource.get(k.replace(/\/\S+$/, '')) ?? 0) + v);
  console.log(`| control plane's JavaScript thread busy during the rollout (API server and controllers; event-loop utilisation, wall time) | ${busy.toFixed(1)} s of ${allReadyS.toFixed(1)} s (${((100 * busy) / allReadyS).toFixed(0)} %) |`);
  console.log(`| API request durations summed over the rollout (requests overlap: not a busy time), the largest | ${handlingTotal.toFixed(1)} s: ${handling.slice(0, 6).map(([k, v]) => `${k} ${v.toFixed(1)} s (mean ${((1000 * v) / Math.max(1, byVerbResource.get(k) ?? 0)).toFixed(0)} ms)`).join(', ')} |`);
  console.log(`| API requests during the rollout, all verbs (a second), the most | ${requests.reduce((a, [, v]) => a + v, 0)} (${(requests.reduce((a, [, v]) => a + v, 0) / allReadyS).toFixed(0)}/s): ${requests.slice(0, 12).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
  console.log(`| etcd's work during the rollout | ${etcdWork(etcd0, etcd1)} |`);
  console.log(`| ConfigMap create during the rollout (client-node, ${rolloutMut.length} calls, ${rolloutFailed.length} failed${rolloutFailed.length ? `: ${rolloutFailed[0]}` : ''}), p50 / p99 / max | ${ms(pct(rolloutMut, 50))} / ${ms(pct(rolloutMut, 99))} / ${ms(Math.max(...rolloutMut))} |`);
  console.log(`| kubectl create configmap after, p50 / p99 (kubectl's own start ~ kubectl version: ${ms(pct(ver, 50))}) | ${ms(pct(mut, 50))} / ${ms(pct(mut, 99))} |`);
  console.log(`| kubectl get pods -A (${PODS} pods; ${listSamples} lists), p50 / p99 | ${ms(pct(lists, 50))} / ${ms(pct(lists, 99))} |`);
  console.log(`| control plane RSS (API server, controllers, etcd client) / etcd RSS | ${cpRss.toFixed(0)} / ${etcdRss.toFixed(0)} MiB |`);
  console.log(`| kube32-sim RSS: total / per process mean / max / per pod | ${simTotal.toFixed(0)} / ${(simTotal / simRss.length).toFixed(0)} / ${Math.max(...simRss).toFixed(0)} MiB / ${((simTotal * 1024) / PODS).toFixed(0)} KiB |`);

  // Drain the fullest node.
  const perNode = new Map<string, PodLite[]>();
  for (const p of pods.values()) if (p.spec.nodeName) perNode.set(p.spec.nodeName, [...(perNode.get(p.spec.nodeName) ?? []), p]);
  const [node, onNode] = [...perNode.entries()].sort((a, b) => b[1].length - a[1].length)[0]!;
  const drainedNames = new Set(onNode.map((p) => p.metadata.name));
  const dCpu0 = cpuAt();
  const dApi0 = await scrapeApi(kc);
  const dEtcd0 = await scrapeEtcd(etcd.url);
  const d0 = performance.now();
  const drain = await run('kubectl', ['--kubeconfig', kc, 'drain', node, '--ignore-daemonsets', '--timeout', `${DRAIN_TIMEOUT_MS / 1000}s`], { timeoutMs: DRAIN_TIMEOUT_MS + 20_000 });
  const drainCmdS = (performance.now() - d0) / 1000;
  if (drain.code !== 0) console.log(`kubectl drain exited ${drain.code}: ${drain.stderr.slice(-500)}`);
  // A control plane that ended under the drain says why in its own stderr (an out-of-memory abort, say).
  if (cp.proc.exitCode !== null || cp.proc.signalCode !== null) {
    console.log(`the control plane ended during the drain (exit ${cp.proc.exitCode ?? cp.proc.signalCode}); its stderr ended with:\n${cp.logs().slice(-3000)}`);
  }
  const readyElsewhere = () => [...pods.values()].filter((p) => isReady(p) && p.spec.nodeName !== node).length;
  let drainDone = true;
  try {
    await eventually('every pod Ready elsewhere', Math.max(1000, DRAIN_TIMEOUT_MS - (performance.now() - d0)), async () => readyElsewhere(), (n) => n >= PODS);
  } catch {
    drainDone = false; // reported below: how far it got
  }
  const drainS = (performance.now() - d0) / 1000;
  const moved = [...pods.values()].filter((p) => drainedNames.has(p.metadata.name)).length;
  const dCpu1 = cpuAt();
  // A control plane still swamped by the drain may not answer: report what could be read.
  const dApi1 = await scrapeApi(kc).catch((err: unknown): ApiMetrics => {
    console.log(`the API server's /metrics after the drain: ${err instanceof Error ? err.message : String(err)}`);
    return dApi0;
  });
  const dEtcd1 = await scrapeEtcd(etcd.url);
  const dRequests = delta(dApi1.requests, dApi0.requests);
  const dHandling = delta(dApi1.seconds, dApi0.seconds);
  console.log(drainDone
    ? `| drain of ${node} (${onNode.length} pods) → all ${PODS} Ready elsewhere (kubectl drain returned after ${drainCmdS.toFixed(1)} s) | ${drainS.toFixed(1)} s; ${moved} moved (same name), ${onNode.length - moved} recreated |`
    : `| drain of ${node} (${onNode.length} pods): NOT DONE within --drain-timeout ${DRAIN_TIMEOUT_MS / 1000} s (kubectl drain exited ${drain.code} after ${drainCmdS.toFixed(1)} s) | ${PODS - readyElsewhere()} pods not Ready elsewhere after ${drainS.toFixed(1)} s; ${moved} kept their name |`);
  console.log(`| during the drain: CPU seconds control plane / etcd / kube32-sim / bench; control plane thread busy; API requests, the most; API request durations summed (overlapping) | ${(dCpu1.cp - dCpu0.cp).toFixed(0)} / ${(dCpu1.etcd - dCpu0.etcd).toFixed(0)} / ${(dCpu1.sims - dCpu0.sims).toFixed(0)} / ${(dCpu1.bench - dCpu0.bench).toFixed(0)}; ${(dApi1.busy - dApi0.busy).toFixed(1)} s of ${drainS.toFixed(1)} s; ${dRequests.slice(0, 8).map(([k, v]) => `${k} ${v}`).join(', ')}; ${dHandling.reduce((a, [, v]) => a + v, 0).toFixed(1)} s: ${dHandling.slice(0, 5).map(([k, v]) => `${k} ${v.toFixed(1)} s`).join(', ')} |`);
  console.log(`| etcd's work during the drain | ${etcdWork(dEtcd0, dEtcd1)} |`);

}

try {
  await main();
} catch (err: unknown) {
  console.error(err);
  process.exitCode = 1;
} finally {
  for (const fn of cleanups.reverse()) {
    try {
      await fn();
    } catch {
      // cleanup goes on
    }
  }
}
