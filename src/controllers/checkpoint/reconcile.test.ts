import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ApiError, type Checkpoint } from '../../api/index.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { reconcileCheckpoint } from './reconcile.ts';

function ckpt(name: string, spec: Checkpoint['spec'], status?: Checkpoint['status'], labels?: Record<string, string>): Checkpoint {
  return { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name, namespace: 'default', labels }, spec, status };
}

function twoNodes() {
  const t = fakeContext();
  t.cache.nodes.set(node('a'));
  t.cache.nodes.set(node('b'));
  t.cache.pods.set(pod('counter', { nodeName: 'a', running: true, uid: 'old-uid', labels: { app: 'counter' }, owner: { kind: 'ReplicaSet', name: 'counter-5d9', uid: 'rs-uid' } }));
  return t;
}

test('a Move has the API server store the frozen pod snapshot from its node, and replaces the pod in one write on the target', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  ctx.pushSnapshotsToTarget = true;
  cache.checkpoints.set(ckpt('m1', { podName: 'counter', action: 'Move' }));
  const res = await reconcileCheckpoint('default/m1', ctx);
  assert.deepEqual(res, { requeueAfterMs: 60_000 });
  assert.deepEqual(
    fake.writes.map((c) => c.op),
    ['patchCheckpointStatus', 'captureCheckpointData', 'replacePod', 'patchCheckpointStatus'],
  );
  assert.deepEqual(fake.writes[0]!.args[2], { status: { phase: 'Saving', nodeName: 'a', targetNode: 'b' } });
  assert.deepEqual(fake.writes[1]!.args, ['default', 'm1', 'a', 'app', 'frozen', 10_000, 'b'], 'the target too: the API server sends the bytes on to it');
  const replacement = fake.writes[2]!.args[2] as V1Pod;
  assert.equal(replacement.metadata?.uid, 'old-uid', 'the current uid is the precondition');
  assert.equal(replacement.spec?.nodeName, 'b');
  assert.equal(replacement.metadata?.annotations?.['kube32.io/restore-from'], 'm1');
  assert.deepEqual(replacement.metadata?.labels, { app: 'counter' });
  assert.equal(replacement.metadata?.ownerReferences?.[0]?.name, 'counter-5d9');
  const moving = (fake.writes[3]!.args[2] as { status: Record<string, unknown> }).status;
  assert.equal(moving.phase, 'Moving');
  assert.equal(moving.targetNode, 'b');
  assert.equal(moving.newPodName, 'counter');
  assert.equal(moving.podTimeMs, 1234, 'the snapshot facts go with the Moving write');
  assert.equal(moving.takenAt, new Date(ctx.clock.now()).toISOString());
  assert.deepEqual(fake.eventReasons, ['Moving']);
});

test('every spec blocker refuses the move at once: Failed, status.blockers, MoveFailed, no snapshot', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  const p = pod('gadget', { nodeName: 'a', running: true, annotations: { 'kube32.io/migration': 'Never' } });
  p.spec!.containers[0]!.securityContext = { capabilities: { add: ['DISPLAY'] } };
  p.spec!.containers[0]!.resources = { limits: { 'hardware.kube32.io/gpio': '1', 'hardware.kube32.io/ipc': '1' } };
  p.spec!.volumes = [{ name: 'data', persistentVolumeClaim: { claimName: 'sd-claim' } }];
  cache.pods.set(p);
  cache.checkpoints.set(ckpt('m2', { podName: 'gadget', action: 'Move' }));
  await reconcileCheckpoint('default/m2', ctx);
  assert.equal(fake.writes.length, 1);
  const status = (fake.writes[0]!.args[2] as { status: { phase: string; blockers: string[] } }).status;
  assert.equal(status.phase, 'Failed');
  assert.deepEqual(status.blockers, [
    'grant hardware.kube32.io/gpio',
    'grant capability DISPLAY',
    'volume claim sd-claim on node storage',
    'annotation kube32.io/migration: Never',
  ]);
  assert.deepEqual(fake.eventReasons, ['MoveFailed']);
  assert.match(fake.eventMessage('MoveFailed')!, /grant capability DISPLAY/);
});

test('the node refusing (409 NotMovable) fails the move with its blockers and leaves the pod running', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  fake.snapshot = () => ({ kind: 'refused', code: 409, reason: 'NotMovable', message: 'not movable', blockers: ['open file /data/log (descriptor 3)'] });
  cache.checkpoints.set(ckpt('m3', { podName: 'counter', action: 'Move' }));
  await reconcileCheckpoint('default/m3', ctx);
  const ops = fake.writes.map((c) => c.op);
  assert.deepEqual(ops, ['patchCheckpointStatus', 'captureCheckpointData', 'patchCheckpointStatus']);
  const status = (fake.writes[2]!.args[2] as { status: { phase: string; blockers: string[]; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.deepEqual(status.blockers, ['open file /data/log (descriptor 3)']);
  assert.deepEqual(fake.eventReasons, ['MoveFailed']);
});

test('data that cannot be stored thaws the pod; an eviction then deletes the pod so the drain completes', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  fake.failures.set('captureCheckpointData', new ApiError('capture data', 413, 'RequestEntityTooLarge', 'too large'));
  cache.checkpoints.set(ckpt('counter-evict-old', { podName: 'counter', action: 'Move' }, undefined, { 'kube32.io/trigger': 'eviction' }));
  await reconcileCheckpoint('default/counter-evict-old', ctx);
  assert.deepEqual(
    fake.writes.map((c) => c.op),
    ['patchCheckpointStatus', 'captureCheckpointData', 'thaw', 'deletePod', 'patchCheckpointStatus'],
  );
  assert.deepEqual(fake.writes[2]!.args, ['a', 'default', 'counter', 'app']);
  assert.deepEqual(fake.writes[3]!.args, ['default', 'counter', { uid: 'old-uid' }]);
  assert.equal((fake.writes[4]!.args[2] as { status: { phase: string } }).status.phase, 'Failed');
});

test('an API server that cannot take the snapshot itself (405) gets the bytes relayed: node proxy, then a PUT of the data', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  fake.failures.set('captureCheckpointData', new ApiError('capture data', 405, 'MethodNotAllowed', 'POST is not supported on checkpoints/data'));
  cache.checkpoints.set(ckpt('m12', { podName: 'counter', action: 'Move' }));
  await reconcileCheckpoint('default/m12', ctx);
  assert.deepEqual(
    fake.writes.map((c) => c.op),
    ['patchCheckpointStatus', 'captureCheckpointData', 'takeSnapshot', 'putCheckpointData', 'replacePod', 'patchCheckpointStatus'],
  );
  assert.deepEqual(fake.writes[2]!.args, ['a', 'default', 'counter', 'app', 'frozen', 10_000]);
  assert.deepEqual(fake.writes[3]!.args, ['default', 'm12', '<stream>', 18]);
  assert.equal((fake.writes[5]!.args[2] as { status: { podTimeMs: number } }).status.podTimeMs, 1234);
});

test('an API server error while taking the snapshot (not a refusal of the node) thaws the pod and fails the move', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  fake.failures.set('captureCheckpointData', new ApiError('capture data', 422, 'Invalid', 'data: the trailer does not match'));
  cache.checkpoints.set(ckpt('m13', { podName: 'counter', action: 'Move' }));
  await reconcileCheckpoint('default/m13', ctx);
  assert.deepEqual(fake.writes.map((c) => c.op), ['patchCheckpointStatus', 'captureCheckpointData', 'thaw', 'patchCheckpointStatus']);
  const status = (fake.writes[3]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.match(status.message, /trailer does not match/);
});

test('without a node that fits, the move fails with the scheduler reason and never picks the own node', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  cache.nodes.set(node('b', { unschedulable: true }));
  cache.checkpoints.set(ckpt('m4', { podName: 'counter', action: 'Move' }));
  await reconcileCheckpoint('default/m4', ctx);
  const status = (fake.writes[0]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.equal(status.message, "no target node: 0/2 nodes are available: 1 node(s) were the pod's own node, 1 node(s) were unschedulable.");
});

test('a Save leaves the pod running and ends Saved with a Checkpointed event', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = twoNodes();
  cache.checkpoints.set(ckpt('s1', { podName: 'counter' }));
  await reconcileCheckpoint('default/s1', ctx);
  assert.deepEqual(fake.writes.map((c) => c.op), ['patchCheckpointStatus', 'captureCheckpointData', 'patchCheckpointStatus']);
  assert.equal(fake.writes[1]!.args[4], 'running');
  assert.equal((fake.writes[2]!.args[2] as { status: { phase: string } }).status.phase, 'Saved');
  assert.deepEqual(fake.eventReasons, ['Checkpointed']);
});

function moving(t: ReturnType<typeof twoNodes>, replacement: Partial<{ running: boolean; failed: boolean }>) {
  t.cache.checkpoints.set(
    ckpt('m5', { podName: 'counter', action: 'Move' }, { phase: 'Moving', nodeName: 'a', targetNode: 'b', takenAt: new Date(t.clock.now() - 80).toISOString() }),
  );
  const p = pod('counter', { nodeName: 'b', running: replacement.running, uid: 'new-uid', annotations: { 'kube32.io/restore-from': 'm5' } });
  if (replacement.failed) {
    p.status = {
      phase: 'Failed',
      containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode: 1, reason: 'RestoreError', message: 'cannot restore the snapshot: the trailer does not match' } } }],
    };
  }
  t.cache.pods.set(p);
}

test('Moving → Completed once the replacement runs: Moved with the time from the freeze, annotation removed', { timeout: 5000 }, async () => {
  const t = twoNodes();
  moving(t, { running: true });
  await reconcileCheckpoint('default/m5', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchPod', 'patchCheckpointStatus']);
  assert.deepEqual(t.fake.writes[0]!.args[2], { metadata: { annotations: { 'kube32.io/restore-from': null } } });
  assert.equal((t.fake.writes[1]!.args[2] as { status: { phase: string } }).status.phase, 'Completed');
  assert.match(t.fake.eventMessage('Moved')!, /moved from a to b in 80 ms from the freeze/);
});

test('a RestoreError on the target rolls back to the source, same Checkpoint; the Checkpoint fails with the reason', { timeout: 5000 }, async () => {
  const t = twoNodes();
  moving(t, { failed: true });
  await reconcileCheckpoint('default/m5', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpointStatus', 'replacePod', 'patchCheckpointStatus']);
  assert.match((t.fake.writes[0]!.args[2] as { status: { message: string } }).status.message, /RestoreError.*; rolling back$/);
  const back = t.fake.writes[1]!.args[2] as V1Pod;
  assert.equal(back.spec?.nodeName, 'a');
  assert.equal(back.metadata?.uid, 'new-uid');
  assert.equal(back.metadata?.annotations?.['kube32.io/restore-from'], 'm5');
  const status = (t.fake.writes[2]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.match(status.message, /RestoreError.*rolled back to a/);
  assert.deepEqual(t.fake.eventReasons, ['MoveFailed']);
});

test('a replacement that does not run within 60 s rolls back; before that the move waits exactly the rest', { timeout: 5000 }, async () => {
  const t = twoNodes();
  moving(t, {});
  t.ctx.state.replacedAt.set('default/m5', t.clock.now());
  t.clock.advance(45_000);
  assert.deepEqual(await reconcileCheckpoint('default/m5', t.ctx), { requeueAfterMs: 15_000 });
  assert.equal(t.fake.writes.length, 0);
  t.clock.advance(15_000);
  await reconcileCheckpoint('default/m5', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpointStatus', 'replacePod', 'patchCheckpointStatus']);
  assert.match((t.fake.writes[2]!.args[2] as { status: { message: string } }).status.message, /did not run on b within 60 s; rolled back to a/);
});

test('a rollback while the source is not Ready leaves the pod to the scheduler', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.nodes.set(node('a', { ready: 'Unknown' }));
  moving(t, { failed: true });
  await reconcileCheckpoint('default/m5', t.ctx);
  const back = t.fake.writes[1]!.args[2] as V1Pod;
  assert.equal(back.spec?.nodeName, undefined);
  assert.match((t.fake.writes[2]!.args[2] as { status: { message: string } }).status.message, /to the scheduler \(a is not Ready\)/);
});

test('a crash after the replacement resumes at Moving, without a second snapshot', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.checkpoints.set(ckpt('m6', { podName: 'counter', action: 'Move' }, { phase: 'Saving', nodeName: 'a', targetNode: 'b' }));
  t.cache.pods.set(pod('counter', { nodeName: 'b', uid: 'new', annotations: { 'kube32.io/restore-from': 'm6' } }));
  await reconcileCheckpoint('default/m6', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpointStatus']);
  assert.equal((t.fake.writes[0]!.args[2] as { status: { phase: string } }).status.phase, 'Moving');
});

test('retention: finished-at is recorded, a Failed checkpoint goes after 1 hour, one named by restore-from stays', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.checkpoints.set(ckpt('f1', { podName: 'counter', action: 'Move' }, { phase: 'Failed' }));
  const first = await reconcileCheckpoint('default/f1', t.ctx);
  assert.equal(t.fake.writes[0]!.op, 'patchCheckpoint');
  assert.deepEqual(first, { requeueAfterMs: 3_600_000 });
  const finishedAt = new Date(t.clock.now()).toISOString();
  const f1 = ckpt('f1', { podName: 'counter', action: 'Move' }, { phase: 'Failed' });
  f1.metadata!.annotations = { 'kube32.io/finished-at': finishedAt };
  t.cache.checkpoints.set(f1);
  t.clock.advance(3_600_000);
  t.cache.pods.set(pod('other', { annotations: { 'kube32.io/restore-from': 'f1' } }));
  assert.equal(await reconcileCheckpoint('default/f1', t.ctx), undefined);
  assert.equal(t.fake.writes.length, 1, 'kept while restore-from names it');
  t.cache.pods.remove('other', 'default');
  await reconcileCheckpoint('default/f1', t.ctx);
  assert.deepEqual(t.fake.writes.at(-1), { op: 'deleteCheckpoint', args: ['default', 'f1'] });
});

test('retention: only the latest Saved periodic checkpoint of a pod stays, and none once the pod is gone', { timeout: 5000 }, async () => {
  const t = twoNodes();
  const mk = (name: string, takenAt: string) => {
    const c = ckpt(name, { podName: 'counter' }, { phase: 'Saved', takenAt }, { 'kube32.io/trigger': 'periodic' });
    c.metadata!.annotations = { 'kube32.io/finished-at': takenAt };
    return c;
  };
  t.cache.checkpoints.set(mk('p1', '2026-01-01T00:00:00.000Z'));
  t.cache.checkpoints.set(mk('p2', '2026-01-01T00:01:00.000Z'));
  await reconcileCheckpoint('default/p2', t.ctx);
  assert.deepEqual(t.fake.writes, []);
  await reconcileCheckpoint('default/p1', t.ctx);
  assert.deepEqual(t.fake.writes, [{ op: 'deleteCheckpoint', args: ['default', 'p1'] }]);
  t.cache.pods.remove('counter', 'default');
  await reconcileCheckpoint('default/p2', t.ctx);
  assert.deepEqual(t.fake.writes.at(-1), { op: 'deleteCheckpoint', args: ['default', 'p2'] });
});

test('Moving while the pods cache still shows the old pod (watch lag) waits instead of failing', { timeout: 5000 }, async () => {
  const t = twoNodes(); // the old pod on a
  t.cache.checkpoints.set(ckpt('m7', { podName: 'counter', action: 'Move' }, { phase: 'Moving', nodeName: 'a', targetNode: 'b' }));
  t.ctx.state.replacements.begin('default/counter', 'rs-uid');
  assert.deepEqual(await reconcileCheckpoint('default/m7', t.ctx), { requeueAfterMs: 100 });
  assert.equal(t.fake.calls.length, 0);
});

test('a rollback whose Failed status was not written is recognised on the next look', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.checkpoints.set(
    ckpt('m8', { podName: 'counter', action: 'Move' }, { phase: 'Moving', nodeName: 'a', targetNode: 'b', message: 'the replacement did not run on b within 60 s; rolling back' }),
  );
  t.cache.pods.set(pod('counter', { nodeName: 'a', uid: 'back-uid', annotations: { 'kube32.io/restore-from': 'm8' } }));
  await reconcileCheckpoint('default/m8', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpointStatus']);
  const status = (t.fake.writes[0]!.args[2] as { status: { phase: string; message: string } }).status;
  assert.equal(status.phase, 'Failed');
  assert.equal(status.message, 'the replacement did not run on b within 60 s; rolled back to a');
});

// Idempotence of decisions (a fresh-user trial saw two Moved events per move and two MoveFailed per
// Checkpoint): the reconcile runs again before the Checkpoints' watch shows the controller's own write.

test('a move completes once: a second reconcile on the stale cache records no second Moved, and every report gives one time', { timeout: 5000 }, async () => {
  const t = twoNodes();
  moving(t, { running: true });
  t.cache.checkpoints.get('m5', 'default')!.metadata!.resourceVersion = '7';
  t.ctx.state.frozenAt.set('default/m5', t.clock.now() - 614);
  await reconcileCheckpoint('default/m5', t.ctx);
  // The annotation removal brings the key back at once; the cache still shows Moving (resourceVersion 7).
  t.clock.advance(197);
  t.cache.pods.get('counter', 'default')!.metadata!.annotations = {};
  assert.equal(await reconcileCheckpoint('default/m5', t.ctx), undefined);
  assert.deepEqual(t.fake.eventReasons, ['Moved']);
  const completed = t.fake.writes.filter((c) => c.op === 'patchCheckpointStatus').map((c) => c.args[2] as { metadata?: { resourceVersion?: string }; status: { phase: string; message: string } });
  assert.equal(completed.length, 2, 'the second write was tried');
  assert.equal(completed[0]!.metadata?.resourceVersion, '7', 'conditional on the version the controller saw');
  assert.equal(completed[0]!.status.message, 'moved in 614 ms from the freeze');
  assert.match(t.fake.eventMessage('Moved')!, / in 614 ms from the freeze to Running$/);
});

test('a refusal is decided once: MoveFailed once although the reconcile runs again on the stale cache', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.pods.set(pod('gadget', { nodeName: 'a', running: true, annotations: { 'kube32.io/migration': 'Never' } }));
  const ck = ckpt('m9', { podName: 'gadget', action: 'Move' });
  ck.metadata!.resourceVersion = '3';
  t.cache.checkpoints.set(ck);
  await reconcileCheckpoint('default/m9', t.ctx);
  await reconcileCheckpoint('default/m9', t.ctx);
  assert.deepEqual(t.fake.eventReasons, ['MoveFailed']);
});

test('a Save on a stale cache takes no second snapshot and records one Checkpointed', { timeout: 5000 }, async () => {
  const t = twoNodes();
  const ck = ckpt('s2', { podName: 'counter' });
  ck.metadata!.resourceVersion = '4';
  t.cache.checkpoints.set(ck);
  await reconcileCheckpoint('default/s2', t.ctx);
  await reconcileCheckpoint('default/s2', t.ctx);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpointStatus', 'captureCheckpointData', 'patchCheckpointStatus', 'patchCheckpointStatus']);
  const saved = t.fake.writes[2]!.args[2] as { metadata?: { resourceVersion?: string } };
  assert.equal(saved.metadata?.resourceVersion, '102', 'the Saved write follows the version the data capture answered');
  assert.deepEqual(t.fake.eventReasons, ['Checkpointed']);
});

test('the Moving event goes with the write that makes the Checkpoint Moving, also after a failed status write', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.checkpoints.set(ckpt('m10', { podName: 'counter', action: 'Move' }, { phase: 'Saving', nodeName: 'a', targetNode: 'b' }));
  t.cache.pods.set(pod('counter', { nodeName: 'b', uid: 'new', annotations: { 'kube32.io/restore-from': 'm10' } }));
  await reconcileCheckpoint('default/m10', t.ctx);
  assert.deepEqual(t.fake.eventReasons, ['Moving']);
});

test('Saving while the pod is being replaced (the pods watch behind) waits instead of snapshotting the old pod again', { timeout: 5000 }, async () => {
  const t = twoNodes(); // the old pod on a, still in the cache
  t.cache.checkpoints.set(ckpt('m11', { podName: 'counter', action: 'Move' }, { phase: 'Saving', nodeName: 'a', targetNode: 'b' }));
  t.ctx.state.replacements.begin('default/counter', 'rs-uid');
  assert.deepEqual(await reconcileCheckpoint('default/m11', t.ctx), { requeueAfterMs: 100 });
  assert.equal(t.fake.calls.length, 0);
});

test('a finished Checkpoint deleted before its finished-at annotation is written is done with, not retried', { timeout: 5000 }, async () => {
  const t = twoNodes();
  t.cache.checkpoints.set(ckpt('m14', { podName: 'counter', action: 'Move' }, { phase: 'Completed', nodeName: 'a', targetNode: 'b' }));
  t.fake.failures.set('patchCheckpoint', new ApiError('patch checkpoint default/m14', 404, 'NotFound', 'checkpoints.kube32.io "m14" not found'));
  assert.equal(await reconcileCheckpoint('default/m14', t.ctx), undefined);
  assert.deepEqual(t.fake.writes.map((c) => c.op), ['patchCheckpoint']);
});
