import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Checkpoint } from '../../api/index.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { reconcilePolicy } from './reconcile.ts';

const AUTO = { 'kube32.io/migration': 'Auto' };

test('memory pressure moves the Auto pod that requests the most memory, one per node per minute', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  const tight = node('tight', { memory: '256Ki' });
  tight.status!.conditions!.push({ type: 'MemoryPressure', status: 'True' });
  cache.nodes.set(tight);
  cache.nodes.set(node('roomy'));
  cache.pods.set(pod('small', { nodeName: 'tight', running: true, memory: '64Ki', annotations: AUTO, uid: 's1' }));
  cache.pods.set(pod('big', { nodeName: 'tight', running: true, memory: '128Ki', annotations: AUTO, uid: 'b1aaaa' }));
  cache.pods.set(pod('bigger-but-ondrain', { nodeName: 'tight', running: true, memory: '192Ki' }));
  assert.deepEqual(await reconcilePolicy('node:tight', ctx), { requeueAfterMs: 60_000 });
  assert.equal(fake.calls.length, 1);
  const ck = fake.calls[0]!.args[1] as Checkpoint;
  assert.equal(ck.metadata?.name, 'big-memory-pressure-b1aaa');
  assert.deepEqual(ck.spec, { podName: 'big', action: 'Move' });
  assert.equal(ck.metadata?.labels?.['kube32.io/trigger'], 'memory-pressure');
  clock.advance(30_000);
  assert.deepEqual(await reconcilePolicy('node:tight', ctx), { requeueAfterMs: 30_000 });
  assert.equal(fake.calls.length, 1, 'at most one per node per minute');
});

test('a node at least twice as fast draws a placement: fastest pod, once per 10 minutes', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.nodes.set(node('slow', { mops: 10 }));
  cache.nodes.set(node('faster', { mops: 19 }));
  const p = pod('calc', { nodeName: 'slow', running: true, uid: 'c1', annotations: { ...AUTO, 'kube32.io/placement': 'fastest' } });
  cache.pods.set(p);
  await reconcilePolicy('pod:default/calc', ctx);
  assert.equal(fake.calls.length, 0, 'not twice as fast');
  cache.nodes.set(node('fast', { mops: 20 }));
  await reconcilePolicy('pod:default/calc', ctx);
  const ck = fake.calls[0]!.args[1] as Checkpoint;
  assert.deepEqual(ck.spec, { podName: 'calc', action: 'Move', target: { nodeName: 'fast' } });
  assert.equal(ck.metadata?.labels?.['kube32.io/trigger'], 'placement');
  // Moved; later an even faster node joins: the cooldown holds it back.
  p.spec!.nodeName = 'fast';
  cache.nodes.set(node('fastest', { mops: 100 }));
  clock.advance(60_000);
  assert.deepEqual(await reconcilePolicy('pod:default/calc', ctx), { requeueAfterMs: 540_000 });
  assert.equal(fake.calls.length, 1);
});

test('OnDrain and Never pods never move on their own', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('slow', { mops: 1 }));
  cache.nodes.set(node('fast', { mops: 100 }));
  cache.pods.set(pod('a', { nodeName: 'slow', running: true, annotations: { 'kube32.io/placement': 'fastest' } }));
  cache.pods.set(pod('b', { nodeName: 'slow', running: true, annotations: { 'kube32.io/migration': 'Never', 'kube32.io/placement': 'fastest' } }));
  await reconcilePolicy('pod:default/a', ctx);
  await reconcilePolicy('pod:default/b', ctx);
  assert.deepEqual(fake.calls, []);
});
