/**
 * The storage conformance suite (STYLE.md §5.7, §5.15): every `Storage` backend (memory, SQLite,
 * etcd) runs it through `runStorageConformance(name, makeStorage)`. It asserts only what the
 * interface promises, so that a backend whose watch events arrive asynchronously (etcd) and whose
 * resourceVersions are not consecutive (etcd's revisions) passes the same cases as SQLite:
 * resourceVersions increase with each write, lists are ordered by namespace and name, preconditions
 * answer Conflict, a write that changes nothing is skipped, `guaranteedUpdate` retries on conflict,
 * transactions are all-or-nothing (nested ones roll back alone), watch replays from a
 * resourceVersion in order and answers Expired (410) past the window, and blobs are content-addressed.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { Cacher, type KubeObject, type ObjectKey, type Storage, StorageError, type StorageEvent } from '../../src/apiserver/storage/index.ts';

/** What a backend's test supplies. */
export interface ConformanceBackend {
  /** A fresh, empty store whose watch window holds `watchWindow` events; cleaned up in `t.after`. */
  make(t: TestContext, opts: { watchWindow: number }): Storage | Promise<Storage>;
  /**
   * A second store on the same data as `s` (another API server), for the cases where two writers
   * race; undefined when the backend has a single writer, with `noPeerReason`.
   */
  peer?: (t: TestContext, s: Storage) => Storage | Promise<Storage>;
  /** Why there is no `peer` (a skip states its reason). */
  noPeerReason?: string;
  /** Per-test timeout, ms. @default 20000 */
  timeoutMs?: number;
}

const key = (name: string, namespace = 'default', resource = 'pods'): ObjectKey => ({ resource, namespace, name });
const obj = (name: string, extra: Record<string, unknown> = {}, namespace = 'default'): KubeObject => ({
  metadata: { name, namespace, uid: `u-${name}` },
  ...extra,
});
const rvOf = (o: KubeObject | undefined): number => Number(o?.metadata.resourceVersion);
const isStorageError = (code: StorageError['code']) => (e: unknown) => e instanceof StorageError && e.code === code;

/** Events of one watch, with a wait for a condition (no sleeps: it resolves on the event that makes it true). */
function collect(s: Storage, resource: string, since: number) {
  const events: StorageEvent[] = [];
  let wake: (() => void) | undefined;
  const handle = s.watch(resource, since, (e) => {
    events.push(e);
    wake?.();
  });
  return {
    events,
    handle,
    /** Resolves when `pred(events)` holds; rejects after `ms`. */
    async until(pred: (ev: StorageEvent[]) => boolean, ms = 5000): Promise<void> {
      const deadline = Date.now() + ms;
      while (!pred(events)) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`watch: condition not met within ${ms} ms; got ${events.map((e) => `${e.type} ${e.name}@${e.rv}`).join(', ')}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    },
  };
}

/** Resolves once `s` has delivered the event of the write at `rv` to watchers (at once for synchronous backends). */
async function delivered(s: Storage, rv: number): Promise<void> {
  const c = collect(s, '*', rv - 1);
  try {
    await c.until((ev) => ev.some((e) => e.rv >= rv));
  } finally {
    c.handle.stop();
  }
}

/**
 * Registers the conformance tests of one backend.
 * @param name the backend's name, prefixed to each test's
 * @param backend how to make stores of it
 */
export function runStorageConformance(name: string, backend: ConformanceBackend): void {
  const timeout = backend.timeoutMs ?? 20_000;
  const make = (t: TestContext, watchWindow = 1000) => backend.make(t, { watchWindow });

  test(`${name}: create, get, getRaw, list in namespace and name order; AlreadyExists`, { timeout }, async (t) => {
    const s = await make(t);
    const a = await s.create(key('a'), obj('a'));
    assert.ok(rvOf(a) > 0);
    await assert.rejects(async () => await s.create(key('a'), obj('a')), isStorageError('AlreadyExists'));
    const c = await s.create(key('c'), obj('c'));
    const b = await s.create(key('b', 'other'), obj('b', {}, 'other'));
    const z = await s.create(key('z', 'a-b'), obj('z', {}, 'a-b'));
    assert.ok(rvOf(a) < rvOf(c) && rvOf(c) < rvOf(b) && rvOf(b) < rvOf(z));
    assert.deepEqual(await s.get(key('a')), a);
    assert.equal(JSON.parse(await s.getRaw(key('a')) ?? 'null').metadata.resourceVersion, a.metadata.resourceVersion);
    assert.equal(await s.get(key('zz')), undefined);
    assert.equal(await s.getRaw(key('zz')), undefined);
    assert.deepEqual((await s.list('pods')).items.map((o) => `${o.metadata.namespace}/${o.metadata.name}`), ['a-b/z', 'default/a', 'default/c', 'other/b']);
    assert.deepEqual((await s.list('pods', 'default')).items.map((o) => o.metadata.name), ['a', 'c']);
    assert.deepEqual((await s.listRaw('pods', 'default')).rows.map((r) => JSON.parse(r).metadata.resourceVersion), [a.metadata.resourceVersion, c.metadata.resourceVersion]);
    assert.deepEqual((await s.list('nodes')).items, []);
    assert.ok((await s.list('pods')).resourceVersion >= rvOf(z));
    // currentResourceVersion is what watchers have been told of: at the latest write once its event is delivered.
    await delivered(s, rvOf(z));
    assert.ok(s.currentResourceVersion() >= rvOf(z));
    // Cluster-scoped objects: namespace ''.
    await s.create(key('n1', '', 'nodes'), obj('n1', {}, ''));
    assert.equal((await s.get(key('n1', '', 'nodes')))?.metadata.name, 'n1');
    assert.deepEqual((await s.list('nodes')).items.map((o) => o.metadata.name), ['n1']);
  });

  test(`${name}: syncedResourceVersion waits until watchers have every write (a blob write too), and a watch cache fed by it reads at a version`, { timeout }, async (t) => {
    const s = await make(t);
    const cacher = new Cacher(s);
    t.after(() => cacher.stop());
    const seen: number[] = [];
    const h = s.watch('pods', s.currentResourceVersion(), (e) => seen.push(e.rv));
    t.after(() => h.stop());
    const a = await s.create(key('a'), obj('a'));
    const synced = await s.syncedResourceVersion();
    assert.ok(synced >= rvOf(a), `synced ${synced} >= the write's ${rvOf(a)}`);
    assert.ok(seen.includes(rvOf(a)), 'the write was handed to the watcher before syncedResourceVersion answered');
    // A write outside the objects (etcd: a revision with no event) does not leave it waiting.
    await s.putBlob('cd', Uint8Array.of(1));
    assert.ok((await s.syncedResourceVersion()) >= synced);
    const prefix = '{"apiVersion":"v1","kind":"Pod",';
    const cache = await cacher.cache('pods', prefix);
    const b = await s.create(key('b'), obj('b'));
    const a2 = await s.update(key('a'), obj('a', { spec: { x: 2 } }));
    await s.delete(key('b'));
    assert.ok(await cacher.sync());
    assert.deepEqual(cache.list().items.map((o) => o.object.metadata.name), ['a']);
    assert.equal(JSON.parse(cache.get('default', 'a')!.json).spec.x, 2);
    assert.ok(cache.get('default', 'a')!.json.startsWith(prefix));
    // The state just after b's create: a as it was, and b.
    const then = cache.list({ atRv: rvOf(b) });
    assert.deepEqual(then.items.map((o) => [o.object.metadata.name, o.rv]), [['a', rvOf(a)], ['b', rvOf(b)]]);
    assert.deepEqual(cache.list({ atRv: rvOf(b), limit: 1 }).remaining, 1);
    assert.ok(rvOf(a2) > rvOf(b));
    assert.throws(() => cache.list({ atRv: cache.oldestRv - 1 }), isStorageError('Expired'));
  });

  test(`${name}: update and delete check preconditions; a write that changes nothing is skipped`, { timeout }, async (t) => {
    const s = await make(t);
    const a = await s.create(key('a'), obj('a', { spec: { x: 1 } }));
    const w = collect(s, 'pods', rvOf(a));
    await assert.rejects(async () => await s.update(key('a'), obj('a', { spec: { x: 2 } }), { resourceVersion: String(rvOf(a) + 1000) }), isStorageError('Conflict'));
    await assert.rejects(async () => await s.update(key('a'), obj('a'), { uid: 'other' }), isStorageError('Conflict'));
    await assert.rejects(async () => await s.update(key('nope'), obj('nope')), isStorageError('NotFound'));
    const same = await s.update(key('a'), obj('a', { spec: { x: 1 } }), { resourceVersion: a.metadata.resourceVersion });
    assert.equal(same.metadata.resourceVersion, a.metadata.resourceVersion);
    const b = await s.update(key('a'), obj('a', { spec: { x: 2 } }), { resourceVersion: a.metadata.resourceVersion, uid: 'u-a' });
    assert.ok(rvOf(b) > rvOf(a));
    assert.deepEqual((await s.get(key('a')))?.spec, { x: 2 });
    await assert.rejects(async () => await s.delete(key('a'), { resourceVersion: a.metadata.resourceVersion }), isStorageError('Conflict'));
    await assert.rejects(async () => await s.delete(key('a'), { uid: 'other' }), isStorageError('Conflict'));
    await assert.rejects(async () => await s.delete(key('nope')), isStorageError('NotFound'));
    const gone = await s.delete(key('a'), { uid: 'u-a', resourceVersion: b.metadata.resourceVersion });
    assert.ok(rvOf(gone) > rvOf(b));
    assert.equal(await s.get(key('a')), undefined);
    await w.until((ev) => ev.length >= 2);
    // The skipped write told no one: one MODIFIED (with its previous state), one DELETED.
    assert.deepEqual(w.events.map((e) => [e.type, e.rv]), [['MODIFIED', rvOf(b)], ['DELETED', rvOf(gone)]]);
    assert.deepEqual(w.events[0]!.previous?.spec, { x: 1 });
    assert.equal(rvOf(w.events[0]!.object), rvOf(b));
    assert.deepEqual(w.events[1]!.object.spec, { x: 2 });
    assert.equal(rvOf(w.events[1]!.object), rvOf(gone));
  });

  test(`${name}: guaranteedUpdate applies tryUpdate to the latest object, skips no-ops, passes its errors`, { timeout }, async (t) => {
    const s = await make(t);
    const a = await s.create(key('a'), obj('a', { spec: { n: 0 } }));
    await assert.rejects(async () => await s.guaranteedUpdate(key('nope'), (o) => o), isStorageError('NotFound'));
    const same = await s.guaranteedUpdate(key('a'), (o) => o);
    assert.equal(same.metadata.resourceVersion, a.metadata.resourceVersion);
    const next = await s.guaranteedUpdate(key('a'), (o) => {
      (o.spec as { n: number }).n++;
      return o;
    });
    assert.ok(rvOf(next) > rvOf(a));
    assert.deepEqual(next.spec, { n: 1 });
    assert.deepEqual((await s.get(key('a')))?.spec, { n: 1 });
    await assert.rejects(
      async () =>
        await s.guaranteedUpdate(key('a'), () => {
          throw new RangeError('no');
        }),
      RangeError,
    );
    assert.deepEqual((await s.get(key('a')))?.spec, { n: 1 });
  });

  test(`${name}: guaranteedUpdate retries tryUpdate when another writer changed the object`, { timeout, skip: backend.peer ? false : backend.noPeerReason }, async (t) => {
    const s = await make(t);
    const other = await backend.peer!(t, s);
    await s.create(key('a'), obj('a', { spec: { by: [] as string[] } }));
    let calls = 0;
    const out = await s.guaranteedUpdate(key('a'), async (o) => {
      calls++;
      // The first time, another API server writes in between: this commit must lose and run again.
      if (calls === 1) await other.guaranteedUpdate(key('a'), (p) => ({ ...p, spec: { by: [...(p.spec as { by: string[] }).by, 'other'] } }));
      return { ...o, spec: { by: [...(o.spec as { by: string[] }).by, 'mine'] } };
    });
    assert.equal(calls, 2);
    assert.deepEqual(out.spec, { by: ['other', 'mine'] });
    assert.deepEqual((await other.get(key('a')))?.spec, { by: ['other', 'mine'] });
    // A precondition on a stale resourceVersion is a Conflict, not a retry.
    const stale = (await s.get(key('a')))!;
    await other.update(key('a'), obj('a', { spec: { by: ['x'] } }));
    await assert.rejects(async () => await s.update(key('a'), obj('a', { spec: { by: ['y'] } }), { resourceVersion: stale.metadata.resourceVersion }), isStorageError('Conflict'));
  });

  test(`${name}: of two writers creating one key, one wins and the other gets AlreadyExists`, { timeout, skip: backend.peer ? false : backend.noPeerReason }, async (t) => {
    const s = await make(t);
    const other = await backend.peer!(t, s);
    let runs = 0;
    await assert.rejects(
      async () =>
        await s.transaction(async () => {
          runs++;
          const mine = await s.create(key('a'), obj('a', { spec: { by: 'me' } }));
          // The other writer commits between this transaction's read and its commit: the commit loses, the re-run sees it.
          if (runs === 1) await other.create(key('a'), obj('a', { spec: { by: 'other' } }));
          return mine;
        }),
      isStorageError('AlreadyExists'),
    );
    assert.equal(runs, 2);
    assert.deepEqual((await s.get(key('a')))?.spec, { by: 'other' });
  });

  test(`${name}: a transaction writes all or nothing; a failed nested one rolls back alone; watchers see commits only`, { timeout }, async (t) => {
    const s = await make(t);
    const start = await s.create(key('start'), obj('start'));
    const w = collect(s, '*', rvOf(start));
    await assert.rejects(
      async () =>
        await s.transaction(async () => {
          await s.create(key('a'), obj('a'));
          await s.create(key('b'), obj('b'));
          assert.equal((await s.get(key('a')))?.metadata.name, 'a', 'a transaction reads its own writes');
          throw new Error('boom');
        }),
      /boom/,
    );
    assert.equal(await s.get(key('a')), undefined);
    assert.equal(await s.get(key('b')), undefined);
    const result = await s.transaction(async () => {
      const a = await s.create(key('a'), obj('a'));
      await assert.rejects(async () =>
        await s.transaction(async () => {
          await s.create(key('b'), obj('b'));
          throw new Error('inner');
        }),
      );
      assert.equal(await s.get(key('b')), undefined);
      await s.create(key('c'), obj('c'));
      assert.deepEqual((await s.list('pods', 'default')).items.map((o) => o.metadata.name), ['a', 'c', 'start']);
      return a;
    });
    assert.equal(await s.get(key('b')), undefined);
    assert.deepEqual((await s.list('pods')).items.map((o) => o.metadata.name), ['a', 'c', 'start']);
    // The answered object carries the resourceVersion it was stored with.
    assert.equal(result.metadata.resourceVersion, (await s.get(key('a')))?.metadata.resourceVersion);
    const end = await s.create(key('end'), obj('end'));
    await w.until((ev) => ev.some((e) => e.rv >= rvOf(end)));
    assert.deepEqual(w.events.map((e) => e.name), ['a', 'c', 'end']);
  });

  test(`${name}: watch replays after a resourceVersion in order, then goes live; filters by resource; stop ends it`, { timeout }, async (t) => {
    const s = await make(t);
    const rvs: number[] = [];
    for (let i = 0; i < 6; i++) rvs.push(rvOf(await s.create(key(`p${i}`), obj(`p${i}`))));
    const node = await s.create(key('n', '', 'nodes'), obj('n', {}, ''));
    await delivered(s, rvOf(node));
    const pods = collect(s, 'pods', rvs[2]!);
    const all = collect(s, '*', rvs[2]!);
    const del = await s.delete(key('p0'));
    await all.until((ev) => ev.some((e) => e.rv === rvOf(del)));
    assert.deepEqual(pods.events.map((e) => e.rv), [rvs[3], rvs[4], rvs[5], rvOf(del)]);
    assert.deepEqual(all.events.map((e) => `${e.type} ${e.resource}/${e.name}`), ['ADDED pods/p3', 'ADDED pods/p4', 'ADDED pods/p5', 'ADDED nodes/n', 'DELETED pods/p0']);
    for (const e of all.events) assert.equal(rvOf(e.object), e.rv, 'each event object carries its resourceVersion');
    pods.handle.stop();
    pods.handle.stop();
    const after = await s.delete(key('p1'));
    await all.until((ev) => ev.some((e) => e.rv === rvOf(after)));
    assert.equal(pods.events.length, 4);
    // A watch from the present sees only what comes next.
    const now = collect(s, 'pods', s.currentResourceVersion());
    const p9 = await s.create(key('p9'), obj('p9'));
    await now.until((ev) => ev.length > 0);
    assert.deepEqual(now.events.map((e) => [e.type, e.name, e.rv]), [['ADDED', 'p9', rvOf(p9)]]);
  });

  test(`${name}: a watch from before the window is Expired (410)`, { timeout }, async (t) => {
    const s = await make(t, 5);
    const first = await s.create(key('p0'), obj('p0'));
    let last = first;
    for (let i = 1; i < 10; i++) last = await s.create(key(`p${i}`), obj(`p${i}`));
    await delivered(s, rvOf(last));
    assert.throws(() => s.watch('pods', rvOf(first), () => {}), isStorageError('Expired'));
    // The last events still replay.
    const w = collect(s, 'pods', rvOf(last) - 1);
    await w.until((ev) => ev.length === 1);
    assert.equal(w.events[0]!.name, 'p9');
  });

  test(`${name}: events arrive in resourceVersion order with a writer that interleaves resources`, { timeout }, async (t) => {
    const s = await make(t);
    const w = collect(s, '*', s.currentResourceVersion());
    let last = 0;
    for (let i = 0; i < 40; i++) {
      const k = i % 3 === 0 ? key(`n${i}`, '', 'nodes') : key(`p${i}`);
      last = rvOf(await s.create(k, obj(k.name, {}, k.namespace)));
      if (i % 5 === 4) last = rvOf(await s.guaranteedUpdate(k, (p) => ({ ...p, spec: { i } })));
    }
    await w.until((ev) => ev.some((e) => e.rv === last));
    const seen = w.events.map((e) => e.rv);
    assert.deepEqual(seen, [...seen].sort((a, b) => a - b));
    assert.equal(new Set(seen).size, seen.length);
  });

  test(`${name}: concurrent writers: every write lands once, in one order, each answered after it is stored`, { timeout }, async (t) => {
    const s = await make(t);
    const counter = await s.create(key('counter'), obj('counter', { spec: { n: 0 } }));
    const w = collect(s, '*', rvOf(counter));
    // Distinct keys created at once, one key raced by several creators, and one counter bumped by many updaters.
    const creates = Array.from({ length: 40 }, (_, i) => s.create(key(`c${i}`), obj(`c${i}`)));
    const racers = Promise.allSettled(Array.from({ length: 5 }, () => s.create(key('same'), obj('same'))));
    const bumps = Array.from({ length: 8 }, () =>
      s.guaranteedUpdate(key('counter'), (o) => ({ ...o, spec: { n: (o.spec as { n: number }).n + 1 } })),
    );
    const created = await Promise.all(creates);
    const raced = await racers;
    const bumped = await Promise.all(bumps);
    assert.equal(raced.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of raced) if (r.status === 'rejected') assert.ok(isStorageError('AlreadyExists')(r.reason), String(r.reason));
    assert.deepEqual(bumped.map((o) => (o.spec as { n: number }).n).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8]);
    // Each answer is readable at once, outside any transaction, with the resourceVersion it was answered with.
    for (const c of created) assert.equal((await s.get(key(c.metadata.name!)))?.metadata.resourceVersion, c.metadata.resourceVersion);
    assert.deepEqual((await s.get(key('counter')))?.spec, { n: 8 });
    assert.equal((await s.list('pods')).items.length, 40 + 1 + 1);
    const last = Math.max(...created.map(rvOf), ...bumped.map(rvOf));
    await w.until((ev) => ev.some((e) => e.rv >= last) && ev.filter((e) => e.name === 'counter').length === 8);
    const seen = w.events.map((e) => e.rv);
    assert.deepEqual(seen, [...seen].sort((a, b) => a - b));
    assert.equal(w.events.filter((e) => e.type === 'ADDED').length, 41);
    assert.equal(w.events.filter((e) => e.type === 'MODIFIED').length, 8);
  });

  test(`${name}: concurrent transactions are serializable: each sees the others' committed writes`, { timeout }, async (t) => {
    const s = await make(t);
    // Each transaction lists the queue and appends the next slot: a lost or repeated slot is a lost update.
    const append = () =>
      s.transaction(async () => {
        const n = (await s.list('slots')).items.length;
        return s.create(key(`slot-${String(n).padStart(3, '0')}`, '', 'slots'), obj(`slot-${String(n).padStart(3, '0')}`, {}, ''));
      });
    await Promise.all(Array.from({ length: 6 }, append));
    assert.deepEqual((await s.list('slots')).items.map((o) => o.metadata.name), Array.from({ length: 6 }, (_, i) => `slot-${String(i).padStart(3, '0')}`));
  });

  test(`${name}: blobs are content-addressed, first write wins, large ones round-trip`, { timeout }, async (t) => {
    const s = await make(t);
    await s.putBlob('ab', Uint8Array.of(1, 2, 3));
    await s.putBlob('ab', Uint8Array.of(9));
    assert.deepEqual([...(await s.getBlob('ab') ?? [])], [1, 2, 3]);
    assert.equal(await s.getBlob('cd'), undefined);
    const big = new Uint8Array(3 * 1024 * 1024 + 17);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
    await s.putBlob('b16', big);
    const back = await s.getBlob('b16');
    assert.equal(back?.byteLength, big.byteLength);
    assert.ok(Buffer.from(back!).equals(Buffer.from(big)));
    await s.putBlob('e0', new Uint8Array(0));
    assert.equal((await s.getBlob('e0'))?.byteLength, 0);
  });
}
