/**
 * The Node authorizer decides a kubelet's read of a Secret, a ConfigMap or a Checkpoint's data from the
 * graph of the pods bound to it (src/apiserver/auth/node-graph.ts), kept from the storage watch: many
 * such reads list the pods once between them, not once each (every pod of the namespace, ~14 MB at
 * 10 000 pods), and a pod bound after the graph was built is seen.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ResourceRequest } from '../handlers/router.ts';
import { Registry } from '../registry/store.ts';
import { MemoryStorage } from '../storage/index.ts';
import { authorizeNode } from './node.ts';

/** A MemoryStorage that counts its lists of pods: what a decision costs is what is asserted. */
class CountingStorage extends MemoryStorage {
  podLists = 0;
  override async list(resource: string, namespace?: string) {
    if (resource === 'pods') this.podLists++;
    return super.list(resource, namespace);
  }
}

const req = (group: string, plural: string, name: string, subresource?: string): ResourceRequest => ({ group, version: 'v1', plural, def: undefined, namespace: 'default', name, subresource, subpath: '', trailingSlash: false });
const ckptData = (name: string) => req('kube32.io', 'checkpoints', name, 'data');
const secret = (name: string) => req('', 'secrets', name);

function pod(name: string, nodeName: string, extra: { restoreFrom?: string; secret?: string } = {}) {
  return {
    metadata: { name, namespace: 'default', uid: `u-${name}`, ...(extra.restoreFrom ? { annotations: { 'kube32.io/restore-from': extra.restoreFrom } } : {}) },
    spec: { nodeName, containers: [{ name: 'app', image: 'counter', ...(extra.secret ? { env: [{ name: 'K', valueFrom: { secretKeyRef: { name: extra.secret, key: 'k' } } }] } : {}) }] },
  };
}

test("a kubelet's reads of Checkpoint data and Secrets are decided from the node graph: one list of pods for all of them", async () => {
  const storage = new CountingStorage();
  const reg = new Registry(storage);
  const key = (name: string) => ({ resource: 'pods', namespace: 'default', name });
  for (let i = 0; i < 50; i++) await storage.create(key(`idle${i}`), pod(`idle${i}`, i % 2 ? 'n1' : 'n2'));
  // The Checkpoint names a pod that is gone; another pod, bound to n1, restores from it and names a Secret.
  await storage.create({ resource: 'checkpoints.kube32.io', namespace: 'default', name: 'c1' }, { metadata: { name: 'c1', namespace: 'default', uid: 'u-c1' }, spec: { podName: 'gone', action: 'Checkpoint' } });
  await storage.create(key('restorer'), pod('restorer', 'n1', { restoreFrom: 'c1', secret: 's1' }));

  const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => authorizeNode(reg, i % 2 ? 'n1' : 'n2', 'get', i % 4 < 2 ? ckptData('c1') : secret('s1'))));
  assert.deepEqual(decisions.map((d) => d.allowed), decisions.map((_, i) => i % 2 === 1), 'n1 may read both, n2 neither');
  assert.match((await authorizeNode(reg, 'n2', 'get', ckptData('c1')) as { reason: string }).reason, /^no pod bound to node "n2" restores from this Checkpoint$/);
  assert.match((await authorizeNode(reg, 'n2', 'get', secret('s1')) as { reason: string }).reason, /^no relationship found between node 'n2' and this object$/);
  assert.equal(storage.podLists, 1, 'one list of pods feeds every decision');

  // A pod bound to n2 later, restoring from c1 and naming s1, is seen from the watch: n2 may read both now.
  await storage.create(key('late'), pod('late', 'n2', { restoreFrom: 'c1', secret: 's1' }));
  assert.equal((await authorizeNode(reg, 'n2', 'get', ckptData('c1'))).allowed, true);
  assert.equal((await authorizeNode(reg, 'n2', 'get', secret('s1'))).allowed, true);
  // Once it is deleted, n2 may not.
  await storage.delete(key('late'));
  assert.equal((await authorizeNode(reg, 'n2', 'get', ckptData('c1'))).allowed, false);
  assert.equal((await authorizeNode(reg, 'n2', 'get', secret('s1'))).allowed, false);
  assert.equal(storage.podLists, 1);
});
