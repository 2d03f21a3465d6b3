import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { ApiError } from '../../api/index.ts';
import { fakeContext, pod } from '../testing/fakes.ts';
import { templateHash } from './deployment.ts';
import { ordinalOf, reconcileStatefulSet } from './statefulset.ts';

function sts(replicas: number, extra: Partial<NonNullable<V1StatefulSet['spec']>> = {}): V1StatefulSet {
  return {
    metadata: { name: 'web', namespace: 'default', uid: 'uid-web', generation: 1 },
    spec: {
      replicas,
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'app', image: 'wasm://counter' }] } },
      ...extra,
    },
  };
}

const REVISION = `web-${templateHash(sts(1).spec!.template)}`;

/** A member of the set: `web-<ordinal>`, Running and Ready unless told, at the set's revision. */
function member(ordinal: number, extra: Parameters<typeof pod>[1] = {}, revision = REVISION): V1Pod {
  return pod(`web-${ordinal}`, {
    labels: { app: 'web', 'controller-revision-hash': revision },
    owner: { kind: 'StatefulSet', name: 'web', uid: 'uid-web' },
    running: true,
    nodeName: 'a',
    ...extra,
  });
}

const created = (fake: ReturnType<typeof fakeContext>['fake']) => fake.writes.filter((c) => c.op === 'createPod').map((c) => (c.args[1] as V1Pod).metadata?.name);
const deleted = (fake: ReturnType<typeof fakeContext>['fake']) => fake.writes.filter((c) => c.op === 'deletePod').map((c) => c.args[1]);

test('ordinals are read from names of the form <set>-<n> only', () => {
  assert.equal(ordinalOf('web', 'web-0'), 0);
  assert.equal(ordinalOf('web', 'web-12'), 12);
  assert.equal(ordinalOf('web', 'web-01'), undefined);
  assert.equal(ordinalOf('web', 'web-x'), undefined);
  assert.equal(ordinalOf('web', 'webby-1'), undefined);
});

test('OrderedReady: one pod at a time, lowest first, each once the one before is Running and Ready', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(3));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), ['web-0']);
  const first = fake.writes.find((c) => c.op === 'createPod')!.args[1] as V1Pod;
  assert.deepEqual(first.metadata?.labels, {
    app: 'web',
    'statefulset.kubernetes.io/pod-name': 'web-0',
    'apps.kubernetes.io/pod-index': '0',
    'controller-revision-hash': REVISION,
  });
  assert.equal(first.metadata?.generateName, undefined);
  assert.equal(first.spec?.hostname, 'web-0');
  assert.equal(first.spec?.subdomain, 'web');
  assert.deepEqual(first.metadata?.ownerReferences?.[0], { apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'web', uid: 'uid-web', controller: true, blockOwnerDeletion: true });
  // The revision is recorded.
  const cr = fake.writes.find((c) => c.op === 'createControllerRevision')?.args[1] as { metadata: { name: string }; revision: number };
  assert.equal(cr.metadata.name, REVISION);
  assert.equal(cr.revision, 1);

  // web-0 created but not Ready: nothing more.
  fake.calls.length = 0;
  cache.pods.set(member(0, { running: false }));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), []);
  // Ready: web-1 next.
  cache.pods.set(member(0));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), ['web-1']);
});

test('Parallel: every missing pod at once', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(3, { podManagementPolicy: 'Parallel' }));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), ['web-0', 'web-1', 'web-2']);
});

test('a name already taken (a replacement another control plane made) is taken as present', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(2));
  fake.failures.set('createPod', new ApiError('create pod', 409, 'AlreadyExists', 'pods "web-0" already exists'));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), ['web-0'], 'tried once, and web-1 waits for web-0');
});

test('scale down: the highest ordinal first, one at a time, once the others are Ready', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(1));
  for (const i of [0, 1, 2]) cache.pods.set(member(i));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-2']);
  // Parallel: all condemned at once.
  fake.calls.length = 0;
  cache.statefulSets.set(sts(1, { podManagementPolicy: 'Parallel' }));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-2', 'web-1']);
});

test('a move: its ordinal counts while replaced, and a moving pod is never deleted under it', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(3));
  cache.pods.set(member(0));
  cache.pods.set(member(2));
  // web-1's old uid is gone from the cache, the replacement not there yet.
  ctx.state.replacements.begin('default/web-1', 'uid-web');
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(created(fake), [], 'no second web-1, and nothing after it');

  // The replacement arrived (same name and owner, restoring): adopted as it is, and not deleted by a scale down.
  ctx.state.replacements.end('default/web-1');
  cache.pods.set(member(1, { running: false, annotations: { 'kube32.io/restore-from': 'ck-1' }, uid: 'new-uid' }));
  cache.statefulSets.set(sts(1, { podManagementPolicy: 'Parallel' }));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-2'], 'web-1 waits for its move to end');
  assert.deepEqual(created(fake), []);
});

test('a Failed pod is made again, but not one whose restore failed (the pod lifecycle controller replaces it)', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(2, { podManagementPolicy: 'Parallel' }));
  const failed = member(0);
  failed.status = { phase: 'Failed' };
  const restoreFailed = member(1, { annotations: { 'kube32.io/restore-from': 'ck' } });
  restoreFailed.status = { phase: 'Failed' };
  cache.pods.set(failed);
  cache.pods.set(restoreFailed);
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-0']);
});

test('RollingUpdate: the highest ordinal at or above the partition not at the new revision, one at a time', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const set = sts(3, { updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: 1 } } });
  set.spec!.template.spec!.containers[0]!.image = 'wasm://counter-v2';
  cache.statefulSets.set(set);
  for (const i of [0, 1, 2]) cache.pods.set(member(i));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-2']);
  const update = `web-${templateHash(set.spec!.template)}`;
  fake.calls.length = 0;
  cache.pods.set(member(2, {}, update));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), ['web-1']);
  fake.calls.length = 0;
  cache.pods.set(member(1, {}, update));
  await reconcileStatefulSet('default/web', ctx);
  assert.deepEqual(deleted(fake), [], 'web-0 is below the partition');
  const status = fake.writes.find((c) => c.op === 'patchStatefulSetStatus')?.args[2] as { status: Record<string, unknown> };
  assert.equal(status.status.updatedReplicas, 2);
  assert.equal(status.status.updateRevision, update);
  assert.equal(status.status.readyReplicas, 3);
});

test('a rollback to an older template makes its revision the newest, as kubectl rollout history shows it', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.statefulSets.set(sts(1));
  const owner = [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'web', uid: 'uid-web', controller: true }];
  cache.controllerRevisions.set({ metadata: { name: REVISION, namespace: 'default', ownerReferences: owner }, revision: 1 });
  cache.controllerRevisions.set({ metadata: { name: 'web-newer', namespace: 'default', ownerReferences: owner }, revision: 2 });
  cache.pods.set(member(0));
  await reconcileStatefulSet('default/web', ctx);
  const patch = fake.writes.find((c) => c.op === 'patchControllerRevision');
  assert.deepEqual(patch?.args.slice(1), [REVISION, { revision: 3 }]);
  assert.equal(fake.writes.filter((c) => c.op === 'createControllerRevision').length, 0);
});

test('below the partition a pod is made again at the current revision, from its ControllerRevision', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const set = sts(2, { podManagementPolicy: 'Parallel', updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: 1 } } });
  set.spec!.template.spec!.containers[0]!.image = 'wasm://counter-v2';
  set.status = { replicas: 1, currentRevision: REVISION };
  cache.statefulSets.set(set);
  const owner = [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'web', uid: 'uid-web', controller: true }];
  cache.controllerRevisions.set({ metadata: { name: REVISION, namespace: 'default', ownerReferences: owner }, revision: 1, data: { spec: { template: { ...sts(1).spec!.template, $patch: 'replace' } } } });
  await reconcileStatefulSet('default/web', ctx);
  const pods = fake.writes.filter((c) => c.op === 'createPod').map((c) => c.args[1] as V1Pod);
  assert.deepEqual(
    pods.map((p) => [p.metadata?.name, p.spec?.containers[0]?.image, p.metadata?.labels?.['controller-revision-hash']]),
    [
      ['web-0', 'wasm://counter', REVISION],
      ['web-1', 'wasm://counter-v2', `web-${templateHash(set.spec!.template)}`],
    ],
  );
});

test('availableReplicas counts the pods Ready for minReadySeconds, and the sync comes back when the next one is', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.statefulSets.set(sts(2, { minReadySeconds: 10 }));
  const since = (ms: number) => new Date(clock.now() - ms).toISOString() as unknown as Date;
  const a = member(0);
  a.status!.conditions = [{ type: 'Ready', status: 'True', lastTransitionTime: since(20_000) }];
  const b = member(1);
  b.status!.conditions = [{ type: 'Ready', status: 'True', lastTransitionTime: since(4_000) }];
  cache.pods.set(a);
  cache.pods.set(b);
  const result = await reconcileStatefulSet('default/web', ctx);
  const status = fake.writes.find((c) => c.op === 'patchStatefulSetStatus')?.args[2] as { status: Record<string, unknown> };
  assert.equal(status.status.readyReplicas, 2);
  assert.equal(status.status.availableReplicas, 1);
  assert.equal(result?.requeueAfterMs, 6_000);
});
