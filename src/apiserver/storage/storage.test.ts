/**
 * One conformance suite for every storage backend (SQLite, memory): keys, resourceVersions,
 * preconditions, skipped no-op writes, transactions (rollback, nested), watch replay and the 410
 * window, blobs; and for SQLite, what survives a reopen.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { MemoryStorage, SqliteStorage, type Storage, StorageError, type StorageEvent } from './index.ts';

const key = (name: string, namespace = 'default', resource = 'pods') => ({ resource, namespace, name });
const obj = (name: string, extra: Record<string, unknown> = {}) => ({ metadata: { name, namespace: 'default', uid: `u-${name}` }, ...extra });

function conformance(label: string, make: (t: import('node:test').TestContext) => Storage): void {
  test(`${label}: create, get, list, AlreadyExists`, async (t) => {
    const s = make(t);
    const a = await s.create(key('a'), obj('a'));
    assert.equal(a.metadata.resourceVersion, '1');
    await assert.rejects(async () => await s.create(key('a'), obj('a')), (e: unknown) => e instanceof StorageError && e.code === 'AlreadyExists');
    await s.create(key('c'), obj('c'));
    await s.create(key('b', 'other'), obj('b'));
    assert.deepEqual((await s.get(key('a')))?.metadata.resourceVersion, '1');
    assert.equal(await s.get(key('zz')), undefined);
    assert.deepEqual((await s.list('pods')).items.map((o) => o.metadata.name), ['a', 'c', 'b']);
    assert.deepEqual((await s.list('pods', 'default')).items.map((o) => o.metadata.name), ['a', 'c']);
    assert.equal((await s.list('pods')).resourceVersion, 3);
    assert.equal(s.currentResourceVersion(), 3);
  });

  test(`${label}: update with preconditions; a write that changes nothing is skipped`, async (t) => {
    const s = make(t);
    await s.create(key('a'), obj('a', { spec: { x: 1 } }));
    const events: StorageEvent[] = [];
    s.watch('pods', 1, (e) => events.push(e));
    await assert.rejects(async () => await s.update(key('a'), obj('a', { spec: { x: 2 } }), { resourceVersion: '7' }), (e: unknown) => e instanceof StorageError && e.code === 'Conflict');
    await assert.rejects(async () => await s.update(key('a'), obj('a'), { uid: 'other' }), (e: unknown) => e instanceof StorageError && e.code === 'Conflict');
    await assert.rejects(async () => await s.update(key('nope'), obj('nope')), (e: unknown) => e instanceof StorageError && e.code === 'NotFound');
    const same = await s.update(key('a'), obj('a', { spec: { x: 1 } }), { resourceVersion: '1' });
    assert.equal(same.metadata.resourceVersion, '1');
    assert.equal(events.length, 0);
    const next = await s.guaranteedUpdate(key('a'), (cur) => ({ ...cur, spec: { x: 3 } }));
    assert.equal(next.metadata.resourceVersion, '2');
    assert.deepEqual(events.map((e) => [e.type, e.rv, (e.previous?.spec as { x: number } | undefined)?.x]), [['MODIFIED', 2, 1]]);
  });

  test(`${label}: a failed transaction writes nothing and tells no watcher`, async (t) => {
    const s = make(t);
    const events: StorageEvent[] = [];
    s.watch('*', 0, (e) => events.push(e));
    await assert.rejects(async () =>
      await s.transaction(async () => {
        await s.create(key('a'), obj('a'));
        await s.create(key('b'), obj('b'));
        throw new Error('boom');
      }),
    );
    assert.equal(await s.get(key('a')), undefined);
    assert.equal(events.length, 0);
    await s.transaction(async () => {
      await s.create(key('a'), obj('a'));
      await assert.rejects(async () =>
        await s.transaction(async () => {
          await s.create(key('b'), obj('b'));
          throw new Error('inner');
        }),
      );
      await s.create(key('c'), obj('c'));
    });
    assert.equal(await s.get(key('b')), undefined);
    assert.deepEqual(events.map((e) => e.name), ['a', 'c']);
    assert.deepEqual((await s.list('pods')).items.map((o) => o.metadata.name), ['a', 'c']);
  });

  test(`${label}: watch replays the window after a resourceVersion, then goes live; older ones are Expired`, async (t) => {
    const s = make(t);
    for (let i = 0; i < 10; i++) await s.create(key(`p${i}`), obj(`p${i}`));
    await s.create(key('n', '', 'nodes'), obj('n'));
    const seen: number[] = [];
    const h = s.watch('pods', 7, (e) => seen.push(e.rv));
    await s.delete(key('p0'));
    assert.deepEqual(seen, [8, 9, 10, 12]);
    h.stop();
    await s.delete(key('p1'));
    assert.equal(seen.length, 4);
    // The window of 5 events holds rv 9..13: a watch from 7 has lost rv 8.
    assert.throws(() => s.watch('pods', 7, () => {}), (e: unknown) => e instanceof StorageError && e.code === 'Expired');
    const all: string[] = [];
    s.watch('*', 10, (e) => all.push(`${e.type} ${e.resource}/${e.name}`));
    assert.deepEqual(all, ['ADDED nodes/n', 'DELETED pods/p0', 'DELETED pods/p1']);
  });

  test(`${label}: blobs are content-addressed`, async (t) => {
    const s = make(t);
    await s.putBlob('ab', Uint8Array.of(1, 2, 3));
    await s.putBlob('ab', Uint8Array.of(9));
    assert.deepEqual([...(await s.getBlob('ab') ?? [])], [1, 2, 3]);
    assert.equal(await s.getBlob('cd'), undefined);
  });
}

conformance('memory', () => new MemoryStorage({ watchWindow: 5 }));
conformance('sqlite', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-storage-'));
  const s = new SqliteStorage(join(dir, 'db'), { watchWindow: 5 });
  t.after(async () => {
    await s.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return s;
});

test('sqlite: objects, the counter and blobs survive a reopen; watches from before it are Expired', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-storage-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const s1 = new SqliteStorage(join(dir, 'db'));
  await s1.create(key('a'), obj('a'));
  await s1.create(key('b'), obj('b'));
  await s1.putBlob('ff', Uint8Array.of(7));
  await s1.close();
  const s2 = new SqliteStorage(join(dir, 'db'));
  t.after(() => s2.close());
  assert.deepEqual((await s2.list('pods')).items.map((o) => o.metadata.name), ['a', 'b']);
  assert.equal(s2.currentResourceVersion(), 2);
  assert.equal((await s2.create(key('c'), obj('c'))).metadata.resourceVersion, '3');
  assert.deepEqual([...(await s2.getBlob('ff') ?? [])], [7]);
  assert.throws(() => s2.watch('pods', 1, () => {}), (e: unknown) => e instanceof StorageError && e.code === 'Expired');
  const seen: number[] = [];
  s2.watch('pods', 2, (e) => seen.push(e.rv));
  assert.deepEqual(seen, [3]);
});
