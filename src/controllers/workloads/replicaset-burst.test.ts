import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { ApiError } from '../../api/index.ts';
import { fakeContext } from '../testing/fakes.ts';
import { BURST_REPLICAS, Expectations, reconcileReplicaSet } from './replicaset.ts';

function rs(replicas: number): V1ReplicaSet {
  return {
    metadata: { name: 'web', namespace: 'default', uid: 'uid-web', generation: 1 },
    spec: { replicas, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'app', image: 'wasm://web' }] } } },
  };
}

/** The pod the API server stored for a create: the template with a generated name and a uid. */
function stored(pod: V1Pod, n: number): V1Pod {
  return { ...pod, metadata: { ...pod.metadata, name: `web-${n}`, uid: `uid-${n}` }, status: { phase: 'Pending' } };
}

test('slow and failing creates never make more pods than replicas, however the cache lags', { timeout: 10_000 }, async () => {
  const { ctx, cache } = fakeContext();
  const want = 60;
  cache.replicaSets.set(rs(want));
  const exp = new Expectations();
  const made: V1Pod[] = [];
  let calls = 0;
  ctx.api = new Proxy(ctx.api, {
    get: (target, op: keyof typeof ctx.api) =>
      op === 'createPod'
        ? async (_ns: string, pod: V1Pod) => {
            const n = ++calls;
            // Slow: answers arrive out of order, a few turns later.
            for (let i = 0; i < n % 5; i++) await new Promise((r) => setImmediate(r));
            if (n % 7 === 0) throw new ApiError('create pod', 500, 'InternalError', 'etcd: no answer within 10000 ms');
            const p = stored(pod, n);
            made.push(p);
            return p;
          }
        : target[op],
  });
  for (let sync = 0; sync < 40 && made.length < want; sync++) {
    await reconcileReplicaSet('default/web', ctx, exp).catch(() => {});
    assert.ok(made.length <= want, `sync ${sync}: ${made.length} pods for ${want} replicas`);
    // The informer shows all but the last three pods created so far.
    for (const p of made.slice(0, Math.max(0, made.length - 3))) if (!cache.pods.get(p.metadata!.name!, 'default')) cache.pods.set(p);
  }
  assert.equal(made.length, want);
  for (const p of made) cache.pods.set(p);
  const before = calls;
  await reconcileReplicaSet('default/web', ctx, exp);
  assert.equal(calls, before, 'nothing more once the cache shows every pod');
});

test('creates go in slow-start batches, at most BURST_REPLICAS a sync; a failed batch stops the sync', { timeout: 10_000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs(BURST_REPLICAS + 100));
  await reconcileReplicaSet('default/web', ctx, new Expectations());
  assert.equal(fake.writes.filter((c) => c.op === 'createPod').length, BURST_REPLICAS);
  // A failure in the first batch: one call, the FailedCreate event, and the error for the back-off.
  const second = fakeContext();
  second.cache.replicaSets.set(rs(10));
  second.fake.failures.set('createPod', new ApiError('create pod', 422, 'Invalid', 'Pod "web-" is invalid: no module'));
  await assert.rejects(reconcileReplicaSet('default/web', second.ctx, new Expectations()), /no module/);
  assert.equal(second.fake.writes.filter((c) => c.op === 'createPod').length, 1);
  assert.deepEqual(second.fake.eventReasons, ['FailedCreate']);
});

test('after a restart (expectations empty) the pods the synced cache shows are counted: nothing is created twice', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs(5));
  const first = new Expectations();
  await reconcileReplicaSet('default/web', ctx, first);
  const created = fake.writes.filter((c) => c.op === 'createPod').map((c, i) => stored(c.args[1] as V1Pod, i + 1));
  assert.equal(created.length, 5);
  // A new control plane: its informers listed every pod before its workers started.
  for (const p of created) {
    p.metadata!.ownerReferences = [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web', uid: 'uid-web', controller: true }];
    cache.pods.set(p);
  }
  await reconcileReplicaSet('default/web', ctx, new Expectations());
  assert.equal(fake.writes.filter((c) => c.op === 'createPod').length, 5);
});
