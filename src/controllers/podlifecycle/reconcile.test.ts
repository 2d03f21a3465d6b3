import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ApiError, type Checkpoint } from '../../api/index.ts';
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

test('a wrong kube32.io/migration is a Warning event saying what is used instead, once per pod uid', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.pods.set(pod('echo', { nodeName: 'b', running: true, uid: 'u1', annotations: { 'kube32.io/migration': 'Bogus' } }));
  await reconcilePod('default/echo', ctx);
  await reconcilePod('default/echo', ctx);
  assert.deepEqual(fake.events.map((e) => [e.type, e.reason, e.message]), [
    ['Warning', 'InvalidAnnotation', 'kube32.io/migration "Bogus" is not OnDrain, Never or Auto: treated as OnDrain'],
  ]);
  assert.equal(fake.events[0]!.involvedObject.uid, 'u1');
  // The same name with a new uid (a move's replacement) is told again.
  cache.pods.set(pod('echo', { nodeName: 'a', running: true, uid: 'u2', annotations: { 'kube32.io/migration': 'Bogus' } }));
  await reconcilePod('default/echo', ctx);
  assert.equal(fake.events.length, 2);
});

test('a checkpoint-interval below 10 s is a Warning naming the 10 s used; one that is no duration says none is taken', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.pods.set(pod('fast', { nodeName: 'b', running: true, annotations: { 'kube32.io/checkpoint-interval': '1s' } }));
  cache.pods.set(pod('typo', { nodeName: 'b', running: true, annotations: { 'kube32.io/checkpoint-interval': 'often', 'kube32.io/placement': 'fast' } }));
  await reconcilePod('default/fast', ctx);
  await reconcilePod('default/fast', ctx);
  await reconcilePod('default/typo', ctx);
  assert.deepEqual(fake.events.map((e) => e.message), [
    'kube32.io/checkpoint-interval "1s" is below the minimum of 10s: 10s is used',
    'kube32.io/checkpoint-interval "often" is not a duration such as "60s" or "5m": no periodic checkpoints',
    'kube32.io/placement "fast" is not fastest: ignored, the default placement is used',
  ]);
});

test('Restored is recorded once: a second run on the stale cache (the annotation still shown) records nothing', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.checkpoints.set({ metadata: { name: 'keeper-periodic-x', namespace: 'default' }, spec: { podName: 'keeper' }, status: { phase: 'Saved', takenAt: new Date(clock.now() - 42_000).toISOString() } });
  const p = pod('keeper', { nodeName: 'b', running: true, annotations: { 'kube32.io/restore-from': 'keeper-periodic-x' } });
  p.metadata!.resourceVersion = '12';
  cache.pods.set(p);
  await reconcilePod('default/keeper', ctx);
  await reconcilePod('default/keeper', ctx);
  assert.deepEqual(fake.eventReasons, ['Restored']);
  assert.equal((fake.writes[0]!.args[2] as { metadata: { resourceVersion?: string } }).metadata.resourceVersion, '12');
});

test('a failed restore is reported once, on the pod that starts afresh', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const p = pod('keeper', { nodeName: 'b', uid: 'u1', annotations: { 'kube32.io/restore-from': 'gone' } });
  p.status = { phase: 'Failed', containerStatuses: [{ name: 'app', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode: 1, reason: 'RestoreError', message: 'no data' } } }] };
  cache.pods.set(p);
  await reconcilePod('default/keeper', ctx);
  // The second run still sees the old uid: the replacement's uid precondition fails (409).
  fake.failures.set('replacePod', new ApiError('replace', 409, 'Conflict', 'uid differs'));
  await reconcilePod('default/keeper', ctx);
  assert.deepEqual(fake.eventReasons, ['MoveFailed']);
  assert.equal(fake.events[0]!.involvedObject.uid, 'new-uid-1', 'on the replacement, which kubectl describe shows');
});
