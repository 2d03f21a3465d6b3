/**
 * The eviction's move-target check reads the per-node sums the API server keeps from its storage
 * watch (src/apiserver/registry/pods/node-usage.ts), without any list of pods: a pod that no other node
 * can take is deleted as an eviction deletes it (seed 002: a move that fails before the replacement),
 * and once the pod in its way goes (deleted, or Succeeded), an eviction moves the pod.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkpoints } from '../checkpoints/index.ts';
import { events } from '../core/index.ts';
import { evictPod, moveTargetProblem } from './eviction.ts';
import { pods } from './index.ts';
import { nodeUsageOf } from './node-usage.ts';
import { Registry } from '../store.ts';
import { MemoryStorage } from '../../storage/index.ts';

function node(name: string) {
  return {
    metadata: { name, uid: `u-${name}` },
    spec: {},
    status: { conditions: [{ type: 'Ready', status: 'True' }], allocatable: { memory: '1Gi', pods: '110' } },
  };
}

function pod(name: string, nodeName: string, phase = 'Running') {
  return {
    metadata: { name, namespace: 'default', uid: `u-${name}` },
    spec: { nodeName, containers: [{ name: 'app', image: 'counter', ports: [{ containerPort: 8080 }], resources: { requests: { memory: '64Mi' } } }] },
    status: { phase, conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

test('eviction move-target check: a pod no other node can take is deleted as an eviction deletes it; moved once a node can take it', async () => {
  const storage = new MemoryStorage();
  const reg = new Registry(storage);
  await storage.create({ resource: 'namespaces', namespace: '', name: 'default' }, { metadata: { name: 'default', uid: 'u-ns' }, status: { phase: 'Active' } });
  for (const n of ['a', 'b']) await storage.create({ resource: 'nodes', namespace: '', name: n }, node(n));
  await storage.create({ resource: 'pods', namespace: 'default', name: 'mover' }, pod('mover', 'a'));
  const blocker = await storage.create({ resource: 'pods', namespace: 'default', name: 'blocker' }, pod('blocker', 'b'));
  assert.match(await moveTargetProblem(reg, await reg.get(pods, 'default', 'mover')) ?? '', /^no node can take it: 0\/2 nodes are available: 1 node\(s\) didn't have free ports for the requested pod ports, 1 node\(s\) were the pod's own node$/);
  assert.equal((await nodeUsageOf(storage)).get('b')?.pods, 1);
  assert.equal((await nodeUsageOf(storage)).get('a')?.memory, 64 * 1024 * 1024);

  // The blocker ends (Succeeded): it no longer takes the port, and the check sees it without a list.
  await storage.update({ resource: 'pods', namespace: 'default', name: 'blocker' }, { ...blocker, status: { phase: 'Succeeded' } });
  assert.equal((await nodeUsageOf(storage)).get('b')?.pods ?? 0, 0);
  assert.equal(await moveTargetProblem(reg, await reg.get(pods, 'default', 'mover')), undefined);

  // Another pod takes b's port again: the eviction deletes the pod (gracefully: it is bound), no Checkpoint.
  await storage.create({ resource: 'pods', namespace: 'default', name: 'blocker2' }, pod('blocker2', 'b'));
  assert.equal((await evictPod(reg, 'default', 'mover', { kind: 'Eviction' }, { dryRun: true })).code, 201);
  assert.equal((await reg.get(pods, 'default', 'mover')).metadata.deletionTimestamp, undefined, 'a dry run deletes nothing');
  assert.equal((await reg.list(events, 'default')).items.length, 0, 'a dry run records nothing');
  assert.equal((await evictPod(reg, 'default', 'mover', { kind: 'Eviction' })).code, 201);
  assert.ok((await reg.get(pods, 'default', 'mover')).metadata.deletionTimestamp, 'the pod is being deleted');
  assert.equal((await reg.list(checkpoints, 'default')).items.length, 0, 'no Checkpoint for a move that could only fail');
  // A Warning on the pod says why it was deleted, not moved.
  const warned = (await reg.list(events, 'default')).items.map((e) => e as unknown as { type: string; reason: string; message: string; involvedObject: { kind: string; name: string; uid: string } });
  assert.equal(warned.length, 1);
  assert.deepEqual([warned[0]!.type, warned[0]!.reason, warned[0]!.involvedObject.kind, warned[0]!.involvedObject.name, warned[0]!.involvedObject.uid], ['Warning', 'MoveFailed', 'Pod', 'mover', 'u-mover']);
  assert.match(warned[0]!.message, /^Evicted without a move, its state lost: no node can take it: 0\/2 nodes are available: 1 node\(s\) didn't have free ports/);

  // With a target, the eviction moves the pod instead: a Move Checkpoint, the pod untouched.
  await storage.delete({ resource: 'pods', namespace: 'default', name: 'blocker2' });
  await storage.create({ resource: 'pods', namespace: 'default', name: 'mover2' }, pod('mover2', 'a'));
  assert.equal((await evictPod(reg, 'default', 'mover2', { kind: 'Eviction' })).code, 201);
  assert.equal((await reg.get(pods, 'default', 'mover2')).metadata.deletionTimestamp, undefined);
  assert.deepEqual((await reg.list(checkpoints, 'default')).items.map((c) => [c.metadata.labels?.['kube32.io/trigger'], (c.spec as { action: string }).action]), [['eviction', 'Move']]);
  assert.equal((await reg.list(events, 'default')).items.length, 1, 'a move makes no such Warning');
});

test('evictions at once (kubectl drain evicts a whole node together) list the pods and the Nodes once between them, not once each', async () => {
  // A MemoryStorage that counts its lists of pods: the check's cost is what is asserted.
  class CountingStorage extends MemoryStorage {
    podLists = 0;
    nodeLists = 0;
    override async list(resource: string, namespace?: string) {
      if (resource === 'pods') this.podLists++;
      if (resource === 'nodes') this.nodeLists++;
      return super.list(resource, namespace);
    }
  }
  const storage = new CountingStorage();
  const reg = new Registry(storage);
  await storage.create({ resource: 'namespaces', namespace: '', name: 'default' }, { metadata: { name: 'default', uid: 'u-ns' }, status: { phase: 'Active' } });
  for (const n of ['a', 'b']) await storage.create({ resource: 'nodes', namespace: '', name: n }, node(n));
  const movers = Array.from({ length: 20 }, (_, i) => `m${i}`);
  for (const m of movers) await storage.create({ resource: 'pods', namespace: 'default', name: m }, { ...pod(m, 'a'), spec: { nodeName: 'a', containers: [{ name: 'app', image: 'counter' }] } });
  const answers = await Promise.all(movers.map((m) => evictPod(reg, 'default', m, { kind: 'Eviction' })));
  assert.deepEqual(answers.map((a) => a.code), movers.map(() => 201));
  assert.equal((await reg.list(checkpoints, 'default')).items.length, movers.length, 'every eviction became a move');
  assert.equal(storage.podLists, 1, 'one list of pods feeds the per-node sums of every eviction');
  assert.equal(storage.nodeLists, 1, 'one list of Nodes for every eviction');
});
