/**
 * When etcd compacts past what an API server's watch had not delivered yet (its connection to etcd was
 * lost meanwhile, while another API server wrote and compacted), the store ends its watches (`onEnd`,
 * Expired) and every copy kept from them lists again instead of going stale silently: a raw storage watch
 * is told, the Nodes kept for the eviction's move check (`nodesOf`) and the watch cache (`Cacher`) list
 * again and hold the Node written during the gap, a watcher of the cache is ended (its HTTP client gets
 * 410 Expired), and the garbage collector's owner index lists again and holds the ConfigMap written then.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { type TestContext, test } from 'node:test';
import { pino } from 'pino';
import { GarbageCollector } from '../../src/apiserver/registry/gc.ts';
import { nodesOf } from '../../src/apiserver/registry/pods/node-usage.ts';
import { Registry } from '../../src/apiserver/registry/store.ts';
import { EtcdStorage } from '../../src/apiserver/storage/etcd.ts';
import { Cacher, type KubeObject, StorageError } from '../../src/apiserver/storage/index.ts';
import { waitFor } from '../helpers/wait.ts';
import { startEtcd } from './etcd-server.ts';

/** A TCP proxy to etcd that the test can cut (every connection dropped, new ones refused) and restore. */
async function proxy(t: TestContext, target: URL): Promise<{ url: string; cut(): void; restore(): void }> {
  const sockets = new Set<net.Socket>();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cut() {
      refusing = true;
      for (const s of sockets) s.destroy();
    },
    restore() {
      refusing = false;
    },
  };
}

const node = (name: string): KubeObject => ({ metadata: { name, uid: `u-${name}` } });

test('etcd compacted past a watch that was away: the store ends its watches and the kept copies list again', { timeout: 90_000 }, async (t) => {
  const e = await startEtcd(t);
  const p = await proxy(t, new URL(e.url));
  const a = await EtcdStorage.open({ endpoints: [p.url], compactionIntervalMs: 0, requestTimeoutMs: 3000 });
  t.after(() => a.close());
  const b = await EtcdStorage.open({ endpoints: [e.url], compactionIntervalMs: 0 });
  t.after(() => b.close());
  await a.create({ resource: 'nodes', namespace: '', name: 'before' }, node('before'));

  // The users of a's watch: a raw watch with onEnd, the kept Nodes, the watch cache and a watcher of it.
  let ended: StorageError | undefined;
  a.watch('*', a.currentResourceVersion(), () => {}, (err) => {
    ended = err;
  });
  assert.deepEqual((await nodesOf(a)).map((n) => n.metadata?.name), ['before']);
  const cacher = new Cacher(a);
  t.after(() => cacher.stop());
  const prefix = '{"apiVersion":"v1","kind":"Node",';
  const cache = await cacher.cache('nodes', prefix);
  assert.ok(cache.get('', 'before'));
  let watcherEnded: StorageError | undefined;
  cache.watchFromNow({ fromRv: 0, deliver: () => {}, end: (err) => { watcherEnded = err; } });
  const gc = new GarbageCollector(new Registry(a), pino({ level: 'silent' }));
  await gc.start();
  t.after(() => gc.stop());

  // a loses etcd; b writes a Node and compacts past it; a comes back.
  p.cut();
  await b.create({ resource: 'nodes', namespace: '', name: 'during-the-gap' }, node('during-the-gap'));
  const owned = { metadata: { name: 'owned', namespace: 'default', uid: 'u-owned', ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'before', uid: 'u-before' }] } };
  await b.create({ resource: 'configmaps', namespace: 'default', name: 'owned' }, owned);
  // Compacted at a later revision than the Node's: its event is gone from etcd's history.
  const later = await b.create({ resource: 'configmaps', namespace: 'default', name: 'later' }, { metadata: { name: 'later', namespace: 'default', uid: 'u-later' } });
  await b.compact(Number(later.metadata.resourceVersion));
  p.restore();

  await waitFor("a's watches ended (Expired)", 30_000, () => ended !== undefined);
  assert.ok(ended instanceof StorageError && ended.code === 'Expired', String(ended));
  await waitFor('nodesOf listed again', 15_000, async () => (await nodesOf(a)).some((n) => n.metadata?.name === 'during-the-gap'));
  assert.ok(watcherEnded instanceof StorageError && watcherEnded.code === 'Expired', 'a watcher of the cache is ended: its client lists again');
  assert.equal(cacher.restarts, 1);
  const fresh = await cacher.cache('nodes', prefix);
  assert.ok(fresh.get('', 'during-the-gap'), 'the watch cache listed again');
  await waitFor('the garbage collector listed again', 15_000, () => gc.dependentsOf('u-before').has('configmaps/default/owned'));
  assert.equal(gc.relists, 1);
  // And the copies go on from the new watch.
  await b.create({ resource: 'nodes', namespace: '', name: 'after' }, node('after'));
  await waitFor('nodesOf follows the new watch', 15_000, async () => (await nodesOf(a)).some((n) => n.metadata?.name === 'after'));
  await waitFor('the cache follows the new watch', 15_000, async () => (await cacher.cache('nodes', prefix)).get('', 'after') !== undefined);
});
