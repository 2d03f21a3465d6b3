/**
 * No periodic checkpoint of a pod whose node is not Ready: the node cannot take the snapshot, and each
 * try was a Failed Checkpoint and a `CheckpointFailed` warning (503 from the node proxy), every interval
 * until the pod was evicted (found by a user: a SIGKILLed worker's pod with a 10 s interval). Once the
 * node is Ready again, the next one is made.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { reconcilePod } from './reconcile.ts';

test('no periodic checkpoints while the pod\'s node is not Ready; one again once it is', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.nodes.set(node('lost', { ready: 'Unknown' }));
  const p = pod('keeper', { nodeName: 'lost', running: true, annotations: { 'kube32.io/checkpoint-interval': '10s' } });
  p.status!.startTime = new Date(clock.now()).toISOString() as unknown as Date;
  cache.pods.set(p);
  for (let i = 0; i < 3; i++) {
    clock.advance(10_000);
    assert.deepEqual(await reconcilePod('default/keeper', ctx), { requeueAfterMs: 10_000 });
  }
  assert.deepEqual(fake.calls, [], 'no Checkpoint created for a pod on a node that is not Ready');
  cache.nodes.set(node('lost', { ready: 'False' }));
  clock.advance(10_000);
  await reconcilePod('default/keeper', ctx);
  assert.deepEqual(fake.calls, []);

  cache.nodes.set(node('lost'));
  assert.deepEqual(await reconcilePod('default/keeper', ctx), { requeueAfterMs: 10_000 });
  assert.equal(fake.writes.length, 1, 'the node is Ready again: a periodic checkpoint');
});
