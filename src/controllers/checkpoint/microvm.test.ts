import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Checkpoint } from '../../api/index.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { MICROVM_MOVE_TIMEOUT_MS } from './microvm.ts';
import { reconcileCheckpoint } from './reconcile.ts';

const FEOS = { 'kube32.io/runtime': 'feos' };

function feosNodes() {
  const t = fakeContext();
  t.cache.nodes.set(node('vm-a', { labels: FEOS }));
  t.cache.nodes.set(node('vm-b', { labels: FEOS }));
  t.cache.pods.set(pod('counter', { nodeName: 'vm-a', running: true, uid: 'feos-uid-1', labels: { app: 'counter' }, owner: { kind: 'ReplicaSet', name: 'counter-5d9', uid: 'rs-uid' } }));
  return t;
}

function saving(name: string, status: Checkpoint['status'] = {}, action: 'Move' | 'Save' = 'Move'): Checkpoint {
  return {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name, namespace: 'default', creationTimestamp: new Date().toISOString() as unknown as Date },
    spec: { podName: 'counter', action },
    status: { phase: 'Saving', nodeName: 'vm-a', targetNode: 'vm-b', ...status },
  };
}

test('a microVM move waits for the FeOS kubelet\'s hibernation: no snapshot through a kubelet endpoint, no replacement yet', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  cache.checkpoints.set(saving('m1'));
  const res = await reconcileCheckpoint('default/m1', ctx);
  assert.ok(res && 'requeueAfterMs' in res && res.requeueAfterMs! > 0 && res.requeueAfterMs! <= 5000);
  assert.deepEqual(fake.writes, []);
});

test('once hibernated, the replacement is written in one write on the target with the FeOS pod\'s ID, under the VM deadline', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  const takenAt = new Date(ctx.clock.now() - 4000).toISOString();
  cache.checkpoints.set(saving('m2', { snapshotKind: 'microvm', snapshotName: 'c0ffee', takenAt }));
  const res = await reconcileCheckpoint('default/m2', ctx);
  assert.deepEqual(res, { requeueAfterMs: MICROVM_MOVE_TIMEOUT_MS });
  assert.deepEqual(fake.writes.map((c) => c.op), ['replacePod', 'patchCheckpointStatus']);
  const replacement = fake.writes[0]!.args[2] as V1Pod;
  assert.equal(replacement.metadata?.uid, 'feos-uid-1', 'the current uid is the precondition');
  assert.equal(replacement.spec?.nodeName, 'vm-b');
  assert.equal(replacement.metadata?.annotations?.['kube32.io/restore-from'], 'm2');
  assert.equal(replacement.metadata?.annotations?.['feos.kube32.io/pod-id'], 'feos-uid-1', 'the target restores the FeOS pod of the old uid');
  assert.equal((fake.writes[1]!.args[2] as { status: { phase: string } }).status.phase, 'Moving');
  assert.equal(ctx.state.frozenAt.get('default/m2'), Date.parse(takenAt), 'the Moved figure counts from the hibernation\'s start');
  assert.deepEqual(fake.eventReasons, ['Moving']);
});

test('a hibernation that failed fails the move before the replacement; an eviction\'s pod is then deleted', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  const ck = saving('counter-evict-1', { snapshotKind: 'microvm', message: 'HibernatePod of feos-uid-1 on vm-a: no --object-store' });
  ck.metadata!.labels = { 'kube32.io/trigger': 'eviction' };
  cache.checkpoints.set(ck);
  await reconcileCheckpoint('default/counter-evict-1', ctx);
  assert.deepEqual(fake.writes.map((c) => c.op), ['deletePod', 'patchCheckpointStatus']);
  const status = (fake.writes[1]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.match(status.message, /no --object-store/);
  assert.deepEqual(fake.eventReasons, ['MoveFailed']);
});

test('a Save checkpoint of a microVM pod waits for the kubelet\'s checkpoint, then is Saved with a Checkpointed event, the pod untouched', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  cache.checkpoints.set(saving('s1', {}, 'Save'));
  const res = await reconcileCheckpoint('default/s1', ctx);
  assert.ok(res && 'requeueAfterMs' in res && res.requeueAfterMs! > 0);
  assert.equal(fake.writes.length, 0, 'nothing written while the kubelet checkpoints');
  cache.checkpoints.set(saving('s1', { snapshotKind: 'microvm', snapshotName: 'c0ffee', takenAt: new Date().toISOString() }, 'Save'));
  await reconcileCheckpoint('default/s1', ctx);
  assert.deepEqual(fake.writes.map((c) => c.op), ['patchCheckpointStatus'], 'no replacement, no delete');
  assert.equal((fake.writes[0]!.args[2] as { status: { phase: string } }).status.phase, 'Saved');
  assert.deepEqual(fake.eventReasons, ['Checkpointed']);
});

test('a Save whose checkpoint failed is Failed with feosd\'s message, the pod untouched', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  cache.checkpoints.set(saving('s2', { snapshotKind: 'microvm', message: 'HibernatePod of feos-uid-1 on vm-a: the store is down' }, 'Save'));
  await reconcileCheckpoint('default/s2', ctx);
  assert.deepEqual(fake.writes.map((c) => c.op), ['patchCheckpointStatus']);
  const status = (fake.writes[0]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.match(status.message, /the store is down/);
});

test('a microVM move\'s replacement that has not run after the Wasm deadline is still waited for', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = feosNodes();
  const p = pod('counter', { nodeName: 'vm-b', running: false, uid: 'new-uid', annotations: { 'kube32.io/restore-from': 'm3', 'feos.kube32.io/pod-id': 'feos-uid-1' } });
  p.metadata!.creationTimestamp = new Date(ctx.clock.now() - 90_000) as unknown as Date;
  cache.pods.set(p);
  cache.checkpoints.set(saving('m3', { phase: 'Moving', snapshotKind: 'microvm', snapshotName: 'c0ffee' }));
  const res = await reconcileCheckpoint('default/m3', ctx);
  assert.deepEqual(fake.writes, [], 'no rollback at 90 s');
  assert.equal((res as { requeueAfterMs: number }).requeueAfterMs, MICROVM_MOVE_TIMEOUT_MS - 90_000);
});
