import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Checkpoint } from '../runtime/types.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { reconcilePod } from './reconcile.ts';

test('a pod restored outside a move runs: Restored with the checkpoint age, and the annotation removed', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.nodes.set(node('b'));
  cache.checkpoints.set({ metadata: { name: 'keeper-periodic-x', namespace: 'default' }, spec: { podName: 'keeper' }, status: { phase: 'Saved', takenAt: new Date(clock.now() - 42_000).toISOString() } });
  cache.pods.set(pod('keeper', { nodeName: 'b', running: true, annotations: { 'kube32.io/restore-from': 'keeper-periodic-x' } }));
  await reconcilePod('default/keeper', ctx);
  assert.deepEqual(fake.writes, [{ op: 'patchPod', args: ['default', 'keeper', { metadata: { annotations: { 'kube32.io/restore-from': null } } }] }]);
  assert.equal(fake.eventMessage('Restored'), 'restored from checkpoint keeper-periodic-x, taken 42s ago');
});

test('a failed restore outside a move: MoveFailed, and the pod replaced afresh without the annotation', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const p = pod('keeper', { nodeName: 'b', uid: 'u1', annotations: { 'kube32.io/restore-from': 'gone' } });
  p.status = { phase: 'Failed', containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode: 1, reason: 'RestoreError', message: 'no data' } } }] };
  cache.pods.set(p);
  await reconcilePod('default/keeper', ctx);
  assert.equal(fake.writes[0]!.op, 'replacePod');
  const fresh = fake.writes[0]!.args[2] as V1Pod;
  assert.equal(fresh.metadata?.annotations?.['kube32.io/restore-from'], undefined);
  assert.equal(fresh.spec?.nodeName, undefined);
  assert.equal(fresh.metadata?.uid, 'u1');
  assert.deepEqual(fake.eventReasons, ['MoveFailed']);
});

test('periodic checkpoints: one per interval (10 s at least), named by slot, labelled periodic', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  const p = pod('ticker', { nodeName: 'a', running: true, annotations: { 'kube32.io/checkpoint-interval': '1s' } });
  p.status!.startTime = new Date(clock.now()).toISOString() as unknown as Date;
  cache.pods.set(p);
  assert.deepEqual(await reconcilePod('default/ticker', ctx), { requeueAfterMs: 10_000 }, 'clamped to 10 s');
  clock.advance(10_000);
  assert.deepEqual(await reconcilePod('default/ticker', ctx), { requeueAfterMs: 10_000 });
  const ck = fake.writes[0]!.args[1] as Checkpoint;
  assert.equal(ck.metadata?.name, `ticker-periodic-${Math.floor(clock.now() / 10_000).toString(36)}`);
  assert.equal(ck.metadata?.labels?.['kube32.io/trigger'], 'periodic');
  assert.deepEqual(ck.spec, { podName: 'ticker', action: 'Save' });
});

test('no periodic checkpoints for a Never pod', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.pods.set(pod('never', { nodeName: 'a', running: true, annotations: { 'kube32.io/checkpoint-interval': '10s', 'kube32.io/migration': 'Never' } }));
  clock.advance(60_000);
  assert.equal(await reconcilePod('default/never', ctx), undefined);
  assert.deepEqual(fake.calls, []);
});
