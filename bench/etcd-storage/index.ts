/**
 * etcd storage benchmark (issue 11): the synchronous `Storage` calls of `EtcdStorage` (a worker
 * thread, `Atomics.wait`, etcd's gRPC on loopback; reads linearizable) beside `SqliteStorage` (WAL,
 * synchronous = FULL) on the same machine, in one run:
 *
 * - `get` of one object; `list` of 1 000 pods; `create` (a committed, fsynced write);
 * - a registry-style update: `transaction(get, update with its resourceVersion)`;
 * - watch delivery: from a write's start to its event reaching an in-process watcher (etcd's
 *   events come back through its watch; SQLite's are delivered inside the write).
 *
 * Prints per-operation times and the etcd/SQLite ratios; asserts nothing.
 * Run: `node bench/etcd-storage/index.ts`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EtcdStorage } from '../../src/apiserver/storage/etcd.ts';
import { SqliteStorage, type Storage, type StorageEvent } from '../../src/apiserver/storage/index.ts';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';

const PODS = Number(process.env.BENCH_PODS ?? 1000);
const GETS = Number(process.env.BENCH_GETS ?? 2000);
const LISTS = Number(process.env.BENCH_LISTS ?? 30);
const WRITES = Number(process.env.BENCH_WRITES ?? 300);

const pod = (i: number) => ({
  metadata: { name: `pod-${i}`, namespace: 'default', uid: `uid-${i}`, labels: { app: 'bench', i: String(i) } },
  spec: { nodeName: 'node-1', containers: [{ name: 'c', image: 'registry.local/app:1', resources: { requests: { cpu: '100m', memory: '64Mi' } } }] },
  status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
});
const key = (i: number) => ({ resource: 'pods', namespace: 'default', name: `pod-${i}` });

function time(n: number, fn: (i: number) => void): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) fn(i);
  return ((performance.now() - t0) * 1000) / n; // µs per op
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function measure(s: Storage): Promise<Record<string, number>> {
  const create = time(PODS, async (i) => await s.create(key(i), pod(i)));
  const get = time(GETS, async (i) => await s.get(key(i % PODS)));
  const list = time(LISTS, async () => await s.list('pods', 'default'));
  const update = time(WRITES, async (i) =>
    await s.transaction(async () => {
      const cur = (await s.get(key(i % PODS)))!;
      return await s.update(key(i % PODS), { ...cur, metadata: { ...cur.metadata, annotations: { n: String(i) } } }, { resourceVersion: cur.metadata.resourceVersion });
    }),
  );
  // Watch delivery: one write at a time, wait for its event.
  const lags: number[] = [];
  let pending: { rv: number; t0: number; done: () => void } | undefined;
  const h = s.watch('pods', s.currentResourceVersion(), (e: StorageEvent) => {
    if (pending && e.rv >= pending.rv) pending.done();
  });
  for (let i = 0; i < 100; i++) {
    let resolve!: () => void;
    const seen = new Promise<void>((r) => {
      resolve = r;
    });
    const t0 = performance.now();
    const done = () => {
      lags.push((performance.now() - t0) * 1000);
      pending = undefined;
      resolve();
    };
    pending = { rv: 0, t0, done };
    const o = await s.guaranteedUpdate(key(i), (cur) => ({ ...cur, metadata: { ...cur.metadata, labels: { ...cur.metadata.labels, w: String(i) } } }));
    if (pending) pending.rv = Number(o.metadata.resourceVersion);
    // SQLite delivered before the write was answered (pending already cleared); etcd delivers later.
    await seen;
  }
  h.stop();
  return { create, get, list, update, watchP50: pct(lags, 50), watchP99: pct(lags, 99) };
}

const cleanups: (() => unknown)[] = [];
try {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-bench-etcd-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const sqlite = new SqliteStorage(join(dir, 'db'));
  cleanups.push(() => sqlite.close());
  const sq = await measure(sqlite);
  const etcd = await startEtcd({ after: (fn) => cleanups.push(fn) }, ['--data-dir', join(dir, 'etcd')]);
  const es = await EtcdStorage.open({ endpoints: [etcd.url], compactionIntervalMs: 0 });
  cleanups.push(async () => await es.close());
  const et = await measure(es);
  const rows = [
    ['create (fsynced write)', 'create'],
    ['get one object (linearizable on etcd)', 'get'],
    [`list ${PODS} pods`, 'list'],
    ['transaction: get + update', 'update'],
    ['write + its event at a watcher, p50', 'watchP50'],
    ['write + its event at a watcher, p99', 'watchP99'],
  ] as const;
  console.log(`${'operation'.padEnd(42)} ${'sqlite µs'.padStart(10)} ${'etcd µs'.padStart(10)} ${'etcd/sqlite'.padStart(12)}`);
  for (const [label, k] of rows) {
    console.log(`${label.padEnd(42)} ${sq[k]!.toFixed(0).padStart(10)} ${et[k]!.toFixed(0).padStart(10)} ${(et[k]! / Math.max(1, sq[k]!)).toFixed(1).padStart(12)}`);
  }
} finally {
  for (const c of cleanups.reverse()) await c();
}
