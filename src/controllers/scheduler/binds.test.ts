import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError, NodeUsage } from '../../api/index.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { Binds } from './binds.ts';
import { AssumedPods, reconcileSchedule } from './reconcile.ts';

/** `ctx.api` whose binds wait for `release` (the API server slow to answer). */
function slowBinds(ctx: ControllerContext, release: Promise<void>): void {
  const api = ctx.api;
  ctx.api = new Proxy(api, {
    get: (target, op: keyof typeof api) =>
      op === 'bindPod'
        ? async (...args: Parameters<typeof api.bindPod>) => {
            await release;
            return target.bindPod(...args);
          }
        : target[op],
  });
}

test('the binding cycle is asynchronous: the scheduling cycle returns with the pod assumed, the bind and its Scheduled event follow', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a', { memory: '1Mi' }));
  cache.nodes.set(node('b', { memory: '1Mi' }));
  for (const n of ['p1', 'p2']) cache.pods.set(pod(n, { memory: '768Ki' }));
  const assumed = new AssumedPods(new NodeUsage());
  const { promise: release, resolve } = Promise.withResolvers<void>();
  slowBinds(ctx, release);
  const binds = new Binds();
  const failed: string[] = [];
  const bound: string[] = [];
  const binding = { binds, failed: (k: string) => failed.push(k), bound: (k: string) => bound.push(k) };
  // Both cycles end while their binds wait for the API server; the second saw the first assumed on its node.
  assert.equal(await reconcileSchedule('default/p1', ctx, assumed, binding), undefined);
  assert.equal(await reconcileSchedule('default/p2', ctx, assumed, binding), undefined);
  assert.equal(binds.inFlight, 2);
  assert.equal(fake.events.length, 0, 'no Scheduled event before the bind answers');
  resolve();
  await binds.idle();
  assert.deepEqual(fake.writes.map((c) => c.args[3]).sort(), ['a', 'b']);
  assert.deepEqual(fake.eventReasons, ['Scheduled', 'Scheduled']);
  assert.deepEqual(bound.sort(), ['default/p1', 'default/p2']);
  assert.deepEqual(failed, []);
  assert.equal(binds.inFlight, 0);
});

test('binds in flight are bounded: a scheduling cycle waits for one to end, then decides on what the others assumed', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  for (const n of ['a', 'b', 'c']) cache.nodes.set(node(n, { memory: '1Mi' }));
  for (const n of ['p1', 'p2', 'p3']) cache.pods.set(pod(n, { memory: '768Ki' }));
  const assumed = new AssumedPods(new NodeUsage());
  const { promise: release, resolve } = Promise.withResolvers<void>();
  slowBinds(ctx, release);
  const binds = new Binds(2);
  const binding = { binds, failed: () => {}, bound: () => {} };
  await reconcileSchedule('default/p1', ctx, assumed, binding);
  await reconcileSchedule('default/p2', ctx, assumed, binding);
  let third = false;
  const p3 = reconcileSchedule('default/p3', ctx, assumed, binding).then(() => {
    third = true;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(third, false, 'the third cycle waits while two binds are in flight');
  assert.equal(fake.writes.length, 0);
  resolve();
  await p3;
  await binds.idle();
  assert.deepEqual(fake.writes.map((c) => c.args[3]).sort(), ['a', 'b', 'c'], 'one pod a node: each decision saw the others');
  assert.throws(() => new Binds(0), /positive integer/);
});

test('a failed asynchronous bind forgets the assumption and reports the pod (queued again), without a Scheduled event; a pod needing no bind gives its reservation back', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a', { memory: '1Mi' }));
  cache.pods.set(pod('p1', { memory: '768Ki' }));
  const usage = new NodeUsage();
  const assumed = new AssumedPods(usage);
  const binds = new Binds(1);
  const failed: string[] = [];
  const binding = { binds, failed: (k: string) => failed.push(k), bound: () => {} };
  fake.failures.set('bindPod', new ApiError('bind pod', 500, 'InternalError', 'etcd: no answer'));
  await reconcileSchedule('default/p1', ctx, assumed, binding);
  await binds.idle();
  assert.deepEqual(failed, ['default/p1']);
  assert.equal(usage.nodes.get('a'), undefined);
  assert.equal(assumed.has('default/p1', ctx.clock.now()), false);
  assert.deepEqual(fake.eventReasons, []);
  // Gone, then bound meanwhile (409): no failure reported, and the one reservation is free each time.
  await reconcileSchedule('default/gone', ctx, assumed, binding);
  fake.failures.set('bindPod', new ApiError('bind pod', 409, 'Conflict', 'pod p1 is already assigned to node b'));
  await reconcileSchedule('default/p1', ctx, assumed, binding);
  await binds.idle();
  assert.deepEqual(failed, ['default/p1']);
  assert.equal(binds.inFlight, 0);
  await reconcileSchedule('default/p1', ctx, assumed, binding);
  await binds.idle();
  assert.deepEqual(fake.writes.filter((c) => c.op === 'bindPod').length, 3);
});
