/**
 * The eviction's move-target check reads the per-node sums the API server keeps from its storage
 * watch (src/apiserver/registry/pods/node-usage.ts): a pod that no other node can take is refused
 * with 429 NoMoveTarget, and once the pod in its way goes (deleted, or Succeeded), the same eviction
 * is accepted, without any list of pods.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../errors.ts';
import { evictPod } from './eviction.ts';
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

test('eviction move-target check: refused while the only other node has the port taken; accepted once that pod is gone or Succeeded', () => {
  const storage = new MemoryStorage();
  const reg = new Registry(storage);
  storage.create({ resource: 'namespaces', namespace: '', name: 'default' }, { metadata: { name: 'default', uid: 'u-ns' }, status: { phase: 'Active' } });
  for (const n of ['a', 'b']) storage.create({ resource: 'nodes', namespace: '', name: n }, node(n));
  storage.create({ resource: 'pods', namespace: 'default', name: 'mover' }, pod('mover', 'a'));
  const blocker = storage.create({ resource: 'pods', namespace: 'default', name: 'blocker' }, pod('blocker', 'b'));
  const refused = (): ApiError => {
    try {
      evictPod(reg, 'default', 'mover', { kind: 'Eviction' }, { dryRun: true });
    } catch (err: unknown) {
      if (err instanceof ApiError) return err;
      throw err;
    }
    assert.fail('the eviction was accepted');
  };
  const err = refused();
  assert.equal(err.reason, 'TooManyRequests');
  assert.match(err.message, /no node can take it: 0\/2 nodes are available: 1 node\(s\) didn't have free ports for the requested pod ports, 1 node\(s\) were the pod's own node/);
  assert.equal(nodeUsageOf(storage).get('b')?.pods, 1);
  assert.equal(nodeUsageOf(storage).get('a')?.memory, 64 * 1024 * 1024);

  // The blocker ends (Succeeded): it no longer takes the port, and the check sees it without a list.
  storage.update({ resource: 'pods', namespace: 'default', name: 'blocker' }, { ...blocker, status: { phase: 'Succeeded' } });
  assert.equal(nodeUsageOf(storage).get('b')?.pods ?? 0, 0);
  assert.equal(evictPod(reg, 'default', 'mover', { kind: 'Eviction' }, { dryRun: true }).code, 201);

  // Another pod takes b's port again: refused; deleted: accepted.
  storage.create({ resource: 'pods', namespace: 'default', name: 'blocker2' }, pod('blocker2', 'b'));
  assert.equal(refused().reason, 'TooManyRequests');
  storage.delete({ resource: 'pods', namespace: 'default', name: 'blocker2' });
  assert.equal(evictPod(reg, 'default', 'mover', { kind: 'Eviction' }, { dryRun: true }).code, 201);
});
