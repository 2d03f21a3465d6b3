/**
 * When etcd compacts past what an API server's watch had not delivered yet (its connection to etcd was
 * lost meanwhile, while another API server wrote and compacted), the store ends its watches (`onEnd`,
 * Expired) and every copy kept from them lists again instead of going stale silently: a raw storage watch
 * is told, the Nodes kept for the eviction's move check (`nodesOf`) and the watch cache (`Cacher`) list
 * again and hold the Node written during the gap, a watcher of the cache is ended (its HTTP client gets
 * 410 Expired), the garbage collector's owner index lists again and holds the ConfigMap written then,
 * RBAC no longer grants what a ClusterRoleBinding deleted then granted, the quota admission knows the
 * namespace that got a ResourceQuota then, the FeOS pod index knows the Pod bound then to a FeOS Node, and
 * the root-CA publisher puts kube-root-ca.crt into the namespace made then.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { type TestContext, test } from 'node:test';
import { pino } from 'pino';
import { RbacAuthorizer } from '../../src/apiserver/auth/rbac.ts';
import { ROOT_CA_CONFIGMAP, RootCaPublisher } from '../../src/apiserver/auth/root-ca.ts';
import { FeosPodIndex } from '../../src/apiserver/handlers/feos-pods.ts';
import { GarbageCollector } from '../../src/apiserver/registry/gc.ts';
import { nodesOf } from '../../src/apiserver/registry/pods/node-usage.ts';
import { QuotaNamespaces } from '../../src/apiserver/registry/quota/index.ts';
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
  const RBAC = 'rbac.authorization.k8s.io';
  await a.create({ resource: `clusterroles.${RBAC}`, namespace: '', name: 'reader' }, { metadata: { name: 'reader', uid: 'u-reader' }, rules: [{ verbs: ['get'], apiGroups: [''], resources: ['pods'] }] });
  const binding = {
    metadata: { name: 'reader', uid: 'u-reader-binding' },
    roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: 'reader' },
    subjects: [{ kind: 'User', apiGroup: RBAC, name: 'gap-user' }],
  };
  await a.create({ resource: `clusterrolebindings.${RBAC}`, namespace: '', name: 'reader' }, binding);

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
  const quotas = new QuotaNamespaces(a);
  await quotas.start();
  t.after(() => quotas.stop());
  assert.equal(quotas.has('resourcequotas', 'q'), false);
  assert.equal(quotas.has('resourcequotas', 'elsewhere'), false);
  const rbac = new RbacAuthorizer(new Registry(a), pino({ level: 'silent' }));
  rbac.start();
  t.after(() => rbac.stop());
  const user = { name: 'gap-user', groups: [] };
  await waitFor('the binding seen by RBAC', 10_000, async () => (await rbac.rulesFor(user, undefined)).length === 1);
  const PEM = '-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n';
  const rootCa = new RootCaPublisher(new Registry(a), PEM, pino({ level: 'silent' }));
  await rootCa.start();
  t.after(() => rootCa.stop());
  const feos = new FeosPodIndex();
  await feos.start(a);
  t.after(() => feos.stop());

  // a loses etcd; b writes a Node and compacts past it; a comes back.
  p.cut();
  await b.create({ resource: 'nodes', namespace: '', name: 'during-the-gap' }, node('during-the-gap'));
  await b.delete({ resource: `clusterrolebindings.${RBAC}`, namespace: '', name: 'reader' });
  await b.create({ resource: 'resourcequotas', namespace: 'q', name: 'quota' }, { metadata: { name: 'quota', namespace: 'q', uid: 'u-quota' }, spec: { hard: { pods: '1' } } });
  await b.create({ resource: 'namespaces', namespace: '', name: 'gap-ns' }, { metadata: { name: 'gap-ns', uid: 'u-gap-ns' } });
  await b.create({ resource: 'nodes', namespace: '', name: 'feos-node' }, { metadata: { name: 'feos-node', uid: 'u-feos-node', labels: { 'kube32.io/runtime': 'feos' } } });
  await b.create({ resource: 'pods', namespace: 'default', name: 'on-feos' }, { metadata: { name: 'on-feos', namespace: 'default', uid: 'u-on-feos' }, spec: { nodeName: 'feos-node' } });
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
  assert.deepEqual(await rbac.rulesFor(user, undefined), [], 'a binding deleted during the gap no longer grants');
  // Listed again, not merely unknown (unknown answers true for every namespace).
  await waitFor('the quota namespaces listed again', 15_000, () => quotas.has('resourcequotas', 'q') && !quotas.has('resourcequotas', 'elsewhere'));
  await waitFor('the FeOS pod index listed again', 15_000, () => feos.isFeosPod('default', 'on-feos'));
  // The root-CA publisher publishes into every namespace again, the one made during the gap too.
  await waitFor('kube-root-ca.crt in the namespace made during the gap', 15_000, async () => (await b.get({ resource: 'configmaps', namespace: 'gap-ns', name: ROOT_CA_CONFIGMAP }))?.data !== undefined);
  // And the copies go on from the new watch.
  await b.create({ resource: 'nodes', namespace: '', name: 'after' }, node('after'));
  await waitFor('nodesOf follows the new watch', 15_000, async () => (await nodesOf(a)).some((n) => n.metadata?.name === 'after'));
  await waitFor('the cache follows the new watch', 15_000, async () => (await cacher.cache('nodes', prefix)).get('', 'after') !== undefined);
  // RBAC watches again: the binding made again grants again (its snapshot, read above, is dropped).
  await b.create({ resource: `clusterrolebindings.${RBAC}`, namespace: '', name: 'reader' }, binding);
  await waitFor('RBAC follows the new watch', 15_000, async () => (await rbac.rulesFor(user, undefined)).length === 1);
  await b.create({ resource: 'namespaces', namespace: '', name: 'after-ns' }, { metadata: { name: 'after-ns', uid: 'u-after-ns' } });
  await waitFor('the root-CA publisher follows the new watch', 15_000, async () => (await b.get({ resource: 'configmaps', namespace: 'after-ns', name: ROOT_CA_CONFIGMAP }))?.data !== undefined);
});
