/**
 * The control plane at a scale that fits a 2-core machine in a few minutes (issue 11, docs/scale.md):
 * one etcd, one `kube32-cli control-plane --storage etcd --leader-elect`, N `kube32-sim` workers, and a
 * Deployment of P idle pods (the counter module, no port). Prints pod startup p50/p99 (create of
 * the Deployment to each pod Ready, seen by a watch), the API's mutating and list p99 measured by a
 * client while the pods run, a drain of the fullest node (`kubectl drain` to every pod Ready on
 * another node), and the memory (RSS) of the control plane and the workers.
 *
 *   node bench/scale/index.ts [--workers 10] [--pods 200]
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { parseArgs } from 'node:util';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { COUNTER_WASM, run } from '../../test/e2e/cluster.ts';
import { CLI, eventually, kubectl, ROOT, startControlPlane } from '../../test/apiserver-etcd/control-plane.ts';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';

const { values } = parseArgs({ options: { workers: { type: 'string', default: '10' }, pods: { type: 'string', default: '200' } } });
const WORKERS = Number(values.workers);
const PODS = Number(values.pods);

const cleanups: (() => unknown)[] = [];
const t = { after: (fn: () => unknown) => cleanups.push(fn) } as unknown as TestContext;
const pids: number[] = [];

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};

interface PodLite {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: { conditions?: { type: string; status: string }[] };
}
const isReady = (p: PodLite) => !p.metadata.deletionTimestamp && !!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

async function main(): Promise<void> {
  const etcd = await startEtcd(t);
  const cp = await startControlPlane(t, etcd.url, 'cp1');
  const kc = cp.kubeconfig;
  await eventually('the leader', 30_000, async () => (await kubectl(kc, ['get', 'lease', 'kube32-controllers', '-n', 'kube-system', '-o', 'jsonpath={.spec.holderIdentity}'])).stdout, (h) => h === 'cp1');
  const { issueWorkerKubeconfig } = await import('../../src/cli/node-credentials.ts');
  const prefix = `127.${30 + Math.floor(Math.random() * 200)}.${1 + Math.floor(Math.random() * 250)}`;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, i) => {
      const name = `w${i + 1}`;
      const dir = join(cp.dataDir, 'nodes', name);
      mkdirSync(dir, { recursive: true });
      const nkc = await issueWorkerKubeconfig(cp.dataDir, name, join(dir, 'kubeconfig'));
      const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', nkc, '--name', name, '--address', `${prefix}.${i + 2}`, '--kubelet-port', '0', '--data-dir', dir], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'error' } });
      pids.push(proc.pid!);
      const exited = new Promise((r) => proc.once('exit', r));
      cleanups.push(async () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
        await exited;
      });
      await eventually(`node ${name} Ready`, 120_000, async () => (await kubectl(kc, ['get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'])).stdout, (s) => s === 'True');
    }),
  );
  console.log(`${WORKERS} workers Ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const push = await run(process.execPath, [CLI, 'push', COUNTER_WASM, '--name', 'idle'], { env: { ...process.env, KUBECONFIG: kc } });
  if (push.code !== 0) throw new Error(push.stderr);

  const pods = new Map<string, PodLite>();
  const createdAt = new Map<string, number>();
  const readyAt = new Map<string, number>();
  const config = new KubeConfig();
  config.loadFromFile(kc);
  const w = await new Watch(config).watch('/api/v1/namespaces/default/pods', { labelSelector: 'app=idle' }, (type: string, p: PodLite) => {
    const now = performance.now();
    if (type === 'DELETED') pods.delete(p.metadata.uid);
    else pods.set(p.metadata.uid, p);
    if (type === 'ADDED' && !createdAt.has(p.metadata.uid)) createdAt.set(p.metadata.uid, now);
    if (isReady(p) && !readyAt.has(p.metadata.uid)) readyAt.set(p.metadata.uid, now);
  }, () => {});
  cleanups.push(() => w.abort());

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
  const t0 = performance.now();
  const applied = await kubectl(kc, ['apply', '-f', '-'], JSON.stringify(dep));
  if (applied.code !== 0) throw new Error(applied.stderr);
  const readyCount = () => [...pods.values()].filter(isReady).length;
  await eventually(`${PODS} pods Ready`, 600_000, async () => readyCount(), (n) => n >= PODS);
  const allReadyS = (performance.now() - t0) / 1000;
  const startup = [...readyAt.entries()].map(([uid]) => readyAt.get(uid)! - t0);
  const createToReady = [...readyAt.entries()].filter(([uid]) => createdAt.has(uid)).map(([uid, at]) => at - createdAt.get(uid)!);

  // The API under load: mutating and list latency from a client.
  const mut: number[] = [];
  const lists: number[] = [];
  for (let i = 0; i < 40; i++) {
    const a = performance.now();
    const r = await kubectl(kc, ['create', 'configmap', `bench-${i}`, '--from-literal=k=v']);
    mut.push(performance.now() - a);
    if (r.code !== 0) throw new Error(r.stderr);
  }
  for (let i = 0; i < 20; i++) {
    const a = performance.now();
    const r = await kubectl(kc, ['get', 'pods', '-A', '-o', 'name']);
    lists.push(performance.now() - a);
    if (r.code !== 0) throw new Error(r.stderr);
  }
  const ver: number[] = [];
  for (let i = 0; i < 20; i++) {
    const a = performance.now();
    await kubectl(kc, ['version', '-o', 'json']);
    ver.push(performance.now() - a);
  }
  const cpRss = rssMiB(cp.proc.pid!);
  const simRss = pids.map(rssMiB);

  // Drain the fullest node.
  const perNode = new Map<string, number>();
  for (const p of pods.values()) if (p.spec.nodeName) perNode.set(p.spec.nodeName, (perNode.get(p.spec.nodeName) ?? 0) + 1);
  const [node, onNode] = [...perNode.entries()].sort((a, b) => b[1] - a[1])[0]!;
  const d0 = performance.now();
  const drain = await run('kubectl', ['--kubeconfig', kc, 'drain', node, '--ignore-daemonsets', '--timeout', '600s'], { timeoutMs: 620_000 });
  if (drain.code !== 0) console.log(`kubectl drain exited ${drain.code}: ${drain.stderr.slice(-500)}`);
  await eventually('every pod Ready elsewhere', 600_000, async () => [...pods.values()].filter((p) => isReady(p) && p.spec.nodeName !== node).length, (n) => n >= PODS);
  const drainS = (performance.now() - d0) / 1000;

  const ms = (x: number) => `${x.toFixed(0)} ms`;
  console.log(`\n${WORKERS} workers, ${PODS} idle pods (one etcd, one control plane on etcd), ${new Date().toISOString()}`);
  console.log('| measure | value |\n| --- | ---: |');
  console.log(`| Deployment applied → all ${PODS} Ready | ${allReadyS.toFixed(1)} s |`);
  console.log(`| pod startup from the apply, p50 / p99 | ${ms(pct(startup, 50))} / ${ms(pct(startup, 99))} |`);
  console.log(`| pod startup from its creation, p50 / p99 | ${ms(pct(createToReady, 50))} / ${ms(pct(createToReady, 99))} |`);
  console.log(`| kubectl create configmap, p50 / p99 (kubectl's own start ~ kubectl version: ${ms(pct(ver, 50))}) | ${ms(pct(mut, 50))} / ${ms(pct(mut, 99))} |`);
  console.log(`| kubectl get pods -A (${PODS} pods), p50 / p99 | ${ms(pct(lists, 50))} / ${ms(pct(lists, 99))} |`);
  console.log(`| drain of ${node} (${onNode} pods) → all Ready elsewhere | ${drainS.toFixed(1)} s |`);
  console.log(`| control plane RSS (API server + controllers) | ${cpRss.toFixed(0)} MiB |`);
  console.log(`| worker RSS, mean / max (${(PODS / WORKERS).toFixed(0)} pods each before the drain) | ${(simRss.reduce((a, b) => a + b, 0) / simRss.length).toFixed(0)} / ${Math.max(...simRss).toFixed(0)} MiB |`);
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
