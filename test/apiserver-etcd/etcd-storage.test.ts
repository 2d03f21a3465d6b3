/**
 * `EtcdStorage` against a real etcd (Debian's etcd-server) on loopback: the storage conformance
 * suite, then what only several API servers on one etcd show: each other's writes through watch in
 * the same order, history replayed at start, compaction (explicit and scheduled) answering Expired,
 * a replaced object (new uid at a key) as DELETED then ADDED, the key layout, and calls bounded by
 * the request timeout when etcd stops answering.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { EtcdError, EtcdStorage, type EtcdStorageOptions } from '../../src/apiserver/storage/etcd.ts';
import { type KubeObject, type Storage, StorageError, type StorageEvent } from '../../src/apiserver/storage/index.ts';
import { runStorageConformance } from '../apiserver/storage-conformance.ts';
import { startEtcd } from './etcd-server.ts';
import { stopProcess } from '../helpers/process-stop.ts';

const urls = new WeakMap<Storage, string>();

async function open(t: TestContext, url: string, opts: Partial<EtcdStorageOptions> = {}): Promise<EtcdStorage> {
  const s = await EtcdStorage.open({ endpoints: [url], compactionIntervalMs: 0, ...opts });
  urls.set(s, url);
  t.after(() => s.close());
  return s;
}

runStorageConformance('etcd', {
  make: async (t, { watchWindow }) => open(t, (await startEtcd(t)).url, { watchWindow }),
  peer: (t, s) => open(t, urls.get(s)!),
  timeoutMs: 30_000,
});

const key = (name: string, namespace = 'default', resource = 'pods') => ({ resource, namespace, name });
const obj = (name: string, extra: Record<string, unknown> = {}): KubeObject => ({ metadata: { name, namespace: 'default', uid: `u-${name}` }, ...extra });
const rvOf = (o: KubeObject | undefined) => Number(o?.metadata.resourceVersion);

/** Resolves when `events` satisfies `pred`, checking on each event (bounded). */
function watchAll(s: Storage, since: number) {
  const events: StorageEvent[] = [];
  const waiters = new Set<() => void>();
  const handle = s.watch('*', since, (e) => {
    events.push(e);
    for (const w of waiters) w();
  });
  return {
    events,
    handle,
    until: (pred: (ev: StorageEvent[]) => boolean, ms = 10_000) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (!pred(events)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`not within ${ms} ms: ${events.map((e) => `${e.type} ${e.name}@${e.rv}`).join(', ')}`));
        }, ms);
        waiters.add(check);
        check();
      }),
  };
}

/** A plain etcd client, to look at etcd itself. */
function client(t: TestContext, url: string): Etcd3 {
  const c = new Etcd3({ hosts: url });
  t.after(() => c.close());
  return c;
}

test('two API servers on one etcd see each other\'s writes through watch, in the same order', { timeout: 60_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const a = await open(t, url);
  const b = await open(t, url);
  const since = a.currentResourceVersion();
  const wa = watchAll(a, since);
  const wb = watchAll(b, since);
  let last = 0;
  for (let i = 0; i < 30; i++) {
    const writer = i % 2 === 0 ? a : b;
    last = rvOf(await writer.create(key(`p${i}`), obj(`p${i}`)));
    if (i % 3 === 2) last = rvOf(await (i % 2 === 0 ? b : a).guaranteedUpdate(key(`p${i - 1}`), (o) => ({ ...o, spec: { by: i } })));
  }
  last = rvOf(await b.delete(key('p0')));
  await Promise.all([wa.until((ev) => ev.some((e) => e.rv === last)), wb.until((ev) => ev.some((e) => e.rv === last))]);
  const line = (e: StorageEvent) => `${e.type} ${e.name} ${e.rv}`;
  assert.deepEqual(wa.events.map(line), wb.events.map(line));
  assert.equal(wa.events.length, 30 + 10 + 1);
  const rvs = wa.events.map((e) => e.rv);
  assert.deepEqual(rvs, [...rvs].sort((x, y) => x - y));
  // What one wrote, the other reads at once (linearizable reads).
  assert.deepEqual((await a.get(key('p1')))?.spec, { by: 2 });
  assert.equal((await b.list('pods')).items.length, 29);
});

test('a later API server replays recent history: a watch from another server\'s resourceVersion resumes', { timeout: 30_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const a = await open(t, url);
  const first = await a.create(key('a'), obj('a'));
  const second = await a.create(key('b'), obj('b'));
  await a.update(key('a'), obj('a', { spec: { x: 1 } }));
  const b = await open(t, url, { replayRevisions: 100 });
  const w = watchAll(b, rvOf(first));
  await w.until((ev) => ev.length === 2);
  assert.deepEqual(w.events.map((e) => [e.type, e.name]), [['ADDED', 'b'], ['MODIFIED', 'a']]);
  assert.equal(w.events[0]!.rv, rvOf(second));
  assert.equal(w.events[1]!.previous?.spec, undefined);
});

test('compaction: history before it is Expired for a new API server; the schedule compacts once per interval', { timeout: 30_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const a = await open(t, url);
  const old = await a.create(key('a'), obj('a'));
  let p4 = old;
  for (let i = 0; i < 5; i++) p4 = await a.create(key(`p${i}`), obj(`p${i}`));
  // a's watch has delivered everything before the compaction (as it has after a few ms in a real cluster).
  await watchAll(a, rvOf(p4) - 1).until((ev) => ev.length > 0);
  const cut = await a.etcdRevision();
  await a.compact(cut);
  const b = await open(t, url, { replayRevisions: 1000 });
  assert.throws(() => b.watch('pods', rvOf(old), () => {}), (e: unknown) => e instanceof StorageError && e.code === 'Expired');
  const c = await b.create(key('c'), obj('c'));
  const w = watchAll(b, cut);
  await w.until((ev) => ev.some((e) => e.rv === rvOf(c)));
  // The API server that was up keeps its window: its watchers resume across the compaction.
  const wa = watchAll(a, rvOf(old));
  await wa.until((ev) => ev.some((e) => e.rv === rvOf(c)));
  assert.equal(wa.events[0]!.name, 'p0');

  // Scheduled: the revision recorded at one tick is compacted at the next.
  await open(t, url, { compactionIntervalMs: 150 });
  const mark = await b.etcdRevision();
  await b.create(key('d'), obj('d'));
  const etcd = client(t, url);
  const deadline = Date.now() + 10_000;
  const compactedPast = async () => {
    try {
      await etcd.kv.range({ key: Buffer.from('x'), revision: mark - 1 });
      return false;
    } catch (err: unknown) {
      return /compacted/.test(String((err as Error).message));
    }
  };
  while (!(await compactedPast())) {
    assert.ok(Date.now() < deadline, 'the schedule compacted within 10 s');
    await new Promise<void>((r) => setTimeout(r, 50));
  }
});

test('a replacement (delete and create of one key in a transaction) is DELETED then ADDED; layout /registry/<resource>/<ns>/<name>', { timeout: 30_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const s = await open(t, url);
  await s.create(key('a'), obj('a'));
  await s.create(key('n1', '', 'nodes'), { metadata: { name: 'n1', uid: 'n' } });
  const w = watchAll(s, await s.etcdRevision());
  const created = await s.transaction(async () => {
    await s.delete(key('a'), { uid: 'u-a' });
    return await s.create(key('a'), { metadata: { name: 'a', namespace: 'default', uid: 'u-new' } });
  });
  await w.until((ev) => ev.length === 2);
  assert.deepEqual(w.events.map((e) => [e.type, e.object.metadata.uid, e.rv]), [['DELETED', 'u-a', rvOf(created)], ['ADDED', 'u-new', rvOf(created)]]);
  assert.equal((await s.get(key('a')))?.metadata.uid, 'u-new');
  const etcd = client(t, url);
  assert.deepEqual(await etcd.getAll().prefix('/registry/').keys(), ['/registry/nodes/n1', '/registry/pods/default/a']);
  const stored = JSON.parse((await etcd.get('/registry/pods/default/a').string()) ?? 'null');
  assert.equal(stored.metadata.uid, 'u-new');
});

test('calls are bounded: a stopped etcd gives EtcdError within the request timeout; bad options are RangeErrors', { timeout: 30_000 }, async (t) => {
  assert.throws(() => new EtcdStorage({ endpoints: [] }), RangeError);
  assert.throws(() => new EtcdStorage({ endpoints: ['127.0.0.1:2379'] }), RangeError);
  assert.throws(() => new EtcdStorage({ endpoints: ['http://127.0.0.1:1'], watchWindow: 0 }), RangeError);
  const e = await startEtcd(t);
  const s = await open(t, e.url, { requestTimeoutMs: 800 });
  await s.create(key('a'), obj('a'));
  t.after(() => e.proc.kill('SIGCONT'));
  await stopProcess(e.proc.pid!);
  const t0 = Date.now();
  await assert.rejects(async () => await s.get(key('a')), (err: unknown) => err instanceof EtcdError && /no answer within 800 ms|deadline/i.test(err.message));
  assert.ok(Date.now() - t0 < 3000, `bounded: ${Date.now() - t0} ms`);
  e.proc.kill('SIGCONT');
  // After it answers again, the same storage works (a late answer is discarded).
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      assert.equal((await s.get(key('a')))?.metadata.name, 'a');
      break;
    } catch (err: unknown) {
      if (Date.now() > deadline) throw err;
      await new Promise<void>((r) => setTimeout(r, 100));
    }
  }
});

test('no circuit breaker: after several calls timed out on a stopped etcd, the next call once it answers succeeds at once', { timeout: 30_000 }, async (t) => {
  const e = await startEtcd(t);
  const s = await open(t, e.url, { requestTimeoutMs: 500 });
  await s.create(key('a'), obj('a'));
  t.after(() => e.proc.kill('SIGCONT'));
  await stopProcess(e.proc.pid!);
  // Three consecutive timeouts opened etcd3's default breaker (5 s of "circuit breaker is open").
  for (let i = 0; i < 4; i++) {
    await assert.rejects(async () => await s.get(key('a')), (err: unknown) => err instanceof EtcdError && /no answer within 500 ms|deadline/i.test(err.message));
  }
  e.proc.kill('SIGCONT');
  // etcd answers again: a fresh client sees it (retried until it does, bounded) ...
  const c = client(t, e.url);
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await c.get('/registry/pods/default/a').string();
      break;
    } catch (err: unknown) {
      if (Date.now() > deadline) throw err;
      await new Promise<void>((r) => setTimeout(r, 50));
    }
  }
  // ... and so does the storage's very next call, with no wait for a breaker to close.
  assert.equal((await s.get(key('a')))?.metadata.name, 'a');
  await s.create(key('b'), obj('b'));
});

test('the watch survives an etcd restart: it resumes from its last event, without repeats', { timeout: 60_000 }, async (t) => {
  const e = await startEtcd(t);
  const s = await open(t, e.url, { requestTimeoutMs: 3000 });
  const w = watchAll(s, await s.etcdRevision());
  const a = await s.create(key('a'), obj('a'));
  await w.until((ev) => ev.some((x) => x.rv === rvOf(a)));
  await e.restart();
  // Calls right after the restart may find the connection still down: retried within a deadline.
  const deadline = Date.now() + 20_000;
  let b: KubeObject | undefined;
  while (!b) {
    try {
      b = await s.create(key('b'), obj('b'));
    } catch (err: unknown) {
      // A try whose answer was lost (etcd committed it, the answer came after the request timeout)
      // makes the next one AlreadyExists: b was created, once.
      if (err instanceof StorageError && err.code === 'AlreadyExists') {
        b = await s.get(key('b'));
        break;
      }
      if (!(err instanceof EtcdError) || Date.now() > deadline) throw err;
      await new Promise<void>((r) => setTimeout(r, 100));
    }
  }
  await w.until((ev) => ev.some((x) => x.rv === rvOf(b)), 20_000);
  assert.deepEqual(w.events.map((x) => `${x.type} ${x.name}`), ['ADDED a', 'ADDED b']);
});
