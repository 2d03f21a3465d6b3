/**
 * `EtcdStorage`'s cached first attempts (src/apiserver/storage/etcd.ts, docs/control-plane-performance.md)
 * against a real etcd: two storages (two API servers) on one etcd, where B acts on what it last knew of a
 * key while A has changed it, with no event loop turn in between (B's watch cannot have told it). Every
 * answer must be the one a fresh read would give: stale knowledge costs a retry, never a wrong result.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { EtcdStorage } from '../../src/apiserver/storage/etcd.ts';
import { type KubeObject, StorageError } from '../../src/apiserver/storage/index.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';

const key = (name: string) => ({ resource: 'pods', namespace: 'default', name });
const obj = (name: string, extra: Record<string, unknown> = {}): KubeObject => ({ metadata: { name, namespace: 'default', uid: `u-${name}` }, ...extra });

async function twoServers(t: TestContext): Promise<{ a: EtcdStorage; b: EtcdStorage }> {
  const etcd = await startEtcd(t);
  const a = await EtcdStorage.open({ endpoints: [etcd.url], compactionIntervalMs: 0 });
  t.after(async () => await a.close());
  const b = await EtcdStorage.open({ endpoints: [etcd.url], compactionIntervalMs: 0 });
  t.after(async () => await b.close());
  return { a, b };
}

const isCode = (code: StorageError['code']) => (err: unknown) => err instanceof StorageError && err.code === code;

test('a transaction acting on stale knowledge answers what a fresh read would', { timeout: 60_000 }, async (t) => {
  const { a, b } = await twoServers(t);

  // B knows x at version 1; A moves it to 3. B's guaranteedUpdate applies to A's latest.
  await a.create(key('x'), obj('x', { spec: { v: 1 } }));
  await b.transaction(async () => await b.get(key('x')));
  await a.guaranteedUpdate(key('x'), (o) => ({ ...o, spec: { v: 2 } }));
  await a.guaranteedUpdate(key('x'), (o) => ({ ...o, spec: { v: 3 } }));
  const updated = await b.guaranteedUpdate(key('x'), (o) => ({ ...o, spec: { ...(o.spec as object), seenBy: 'b', v: (o.spec as { v: number }).v } }));
  assert.deepEqual(updated.spec, { v: 3, seenBy: 'b' });
  assert.deepEqual((await a.get(key('x')))?.spec, { v: 3, seenBy: 'b' });

  // B knows y as absent; A creates it: B's update finds it.
  await b.transaction(async () => await b.get(key('y')));
  await a.create(key('y'), obj('y', { spec: { v: 1 } }));
  const y = await b.update(key('y'), obj('y', { spec: { v: 2 } }));
  assert.deepEqual(y.spec, { v: 2 });

  // B knows z; A deletes it: B's update is NotFound, its delete too, and nothing is written.
  await a.create(key('z'), obj('z'));
  await b.transaction(async () => await b.get(key('z')));
  await a.delete(key('z'));
  await assert.rejects(async () => await b.update(key('z'), obj('z', { spec: { v: 9 } })), isCode('NotFound'));
  await assert.rejects(async () => await b.delete(key('z')), isCode('NotFound'));
  assert.equal(await a.get(key('z')), undefined);

  // A key B never saw is taken as absent by its create: the commit's condition finds it there.
  await a.create(key('w'), obj('w'));
  await assert.rejects(async () => await b.create(key('w'), obj('w', { spec: { v: 2 } })), isCode('AlreadyExists'));
  assert.equal((await a.get(key('w')))?.spec, undefined);

  // A precondition checked on stale knowledge: B knows v's old uid, A replaced the object.
  await a.create(key('v'), obj('v'));
  await b.transaction(async () => await b.get(key('v')));
  await a.delete(key('v'));
  await a.create(key('v'), { metadata: { name: 'v', namespace: 'default', uid: 'u-v2' } });
  await assert.rejects(async () => await b.delete(key('v'), { uid: 'u-v' }), isCode('Conflict'));
  assert.equal((await b.delete(key('v'), { uid: 'u-v2' })).metadata.uid, 'u-v2');

  // An update that changes nothing writes nothing, so no commit checks what B knew: it is read again from etcd.
  await a.create(key('u'), obj('u', { spec: { v: 1 } }));
  await b.transaction(async () => await b.get(key('u')));
  await a.guaranteedUpdate(key('u'), (o) => ({ ...o, spec: { v: 2 } }));
  const same = await b.guaranteedUpdate(key('u'), (o) => o);
  assert.deepEqual(same.spec, { v: 2 }, 'a no-op answers the latest object, not the one B knew');
});

test('with cachedReads off every read goes to etcd and the answers are the same', { timeout: 60_000 }, async (t) => {
  const etcd = await startEtcd(t);
  const a = await EtcdStorage.open({ endpoints: [etcd.url], compactionIntervalMs: 0 });
  t.after(async () => await a.close());
  const b = await EtcdStorage.open({ endpoints: [etcd.url], compactionIntervalMs: 0, cachedReads: false });
  t.after(async () => await b.close());
  await a.create(key('x'), obj('x', { spec: { v: 1 } }));
  await b.transaction(async () => await b.get(key('x')));
  await a.guaranteedUpdate(key('x'), (o) => ({ ...o, spec: { v: 2 } }));
  assert.deepEqual((await b.guaranteedUpdate(key('x'), (o) => ({ ...o, spec: { v: (o.spec as { v: number }).v + 1 } }))).spec, { v: 3 });
  await assert.rejects(async () => await EtcdStorage.open({ endpoints: [etcd.url], cachedReads: 'yes' as unknown as boolean }), /cachedReads must be a boolean: current value is yes/);
});
