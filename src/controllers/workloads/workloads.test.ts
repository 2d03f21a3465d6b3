import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Deployment, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { ApiError } from '../../api/index.ts';
import { fakeContext, pod } from '../testing/fakes.ts';
import { newReplicaSetAnnotations, REVISION_HISTORY_ANNOTATION, reconcileDeployment, sameTemplate, templateHash } from './deployment.ts';
import { Expectations, reconcileReplicaSet } from './replicaset.ts';

function rs(name: string, replicas: number, uid = `uid-${name}`): V1ReplicaSet {
  return {
    metadata: { name, namespace: 'default', uid, generation: 1 },
    spec: { replicas, selector: { matchLabels: { app: 'counter' } }, template: { metadata: { labels: { app: 'counter' } }, spec: { containers: [{ name: 'app', image: 'wasm://counter' }] } } },
  };
}

const owned = (name: string, extra: Parameters<typeof pod>[1] = {}) =>
  pod(name, { labels: { app: 'counter' }, owner: { kind: 'ReplicaSet', name: 'counter-rs', uid: 'uid-counter-rs' }, running: true, nodeName: 'a', ...extra });

test('a ReplicaSet creates the pods it lacks, once, even before its cache shows them', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs('counter-rs', 2));
  const exp = new Expectations();
  await reconcileReplicaSet('default/counter-rs', ctx, exp);
  await reconcileReplicaSet('default/counter-rs', ctx, exp);
  const creates = fake.writes.filter((c) => c.op === 'createPod');
  assert.equal(creates.length, 2, 'the second sync waits for the first two');
  const created = creates[0]!.args[1] as V1Pod;
  assert.equal(created.metadata?.generateName, 'counter-rs-');
  assert.deepEqual(created.metadata?.ownerReferences?.[0], { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'counter-rs', uid: 'uid-counter-rs', controller: true, blockOwnerDeletion: true });
});

test('a pod being replaced by a move counts: no pod is added between its DELETED and ADDED', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs('counter-rs', 1));
  // The old uid is gone from the cache, the new one not there yet.
  ctx.state.replacements.begin('default/counter-rs-abcde', 'uid-counter-rs');
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  assert.deepEqual(fake.writes.filter((c) => c.op === 'createPod'), []);
});

test('a Failed pod whose restore failed still counts (it is replaced afresh under the same name)', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs('counter-rs', 1));
  const failed = owned('counter-rs-abcde', { annotations: { 'kube32.io/restore-from': 'ck' } });
  failed.status = { phase: 'Failed' };
  cache.pods.set(failed);
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  assert.deepEqual(fake.writes.filter((c) => c.op === 'createPod'), []);
});

test('scaling down deletes unbound, then not ready pods first, and never a moving pod before others', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.replicaSets.set(rs('counter-rs', 1));
  cache.pods.set(owned('ready-1'));
  cache.pods.set(owned('moving', { annotations: { 'kube32.io/restore-from': 'ck' } }));
  cache.pods.set(owned('unbound', { nodeName: undefined, running: false }));
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  const deleted = fake.writes.filter((c) => c.op === 'deletePod').map((c) => c.args[1]);
  assert.deepEqual(deleted, ['unbound', 'ready-1']);
});

test('the ReplicaSet status is written only when it changes', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const r = rs('counter-rs', 1);
  cache.replicaSets.set(r);
  cache.pods.set(owned('p1'));
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  assert.deepEqual(fake.writes, [
    { op: 'patchReplicaSetStatus', args: ['default', 'counter-rs', { status: { replicas: 1, fullyLabeledReplicas: 1, readyReplicas: 1, availableReplicas: 1, observedGeneration: 1 } }] },
  ]);
  r.status = { replicas: 1, fullyLabeledReplicas: 1, readyReplicas: 1, availableReplicas: 1, observedGeneration: 1 };
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  assert.equal(fake.writes.length, 1);
});

function deployment(replicas: number, image = 'wasm://counter'): V1Deployment {
  return {
    metadata: { name: 'counter', namespace: 'default', uid: 'uid-d', generation: 2 },
    spec: {
      replicas,
      selector: { matchLabels: { app: 'counter' } },
      template: { metadata: { labels: { app: 'counter' } }, spec: { containers: [{ name: 'app', image }] } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
    },
  };
}

function ownedRs(d: V1Deployment, replicas: number, available: number, revision: string): V1ReplicaSet {
  const hash = templateHash(d.spec!.template);
  return {
    metadata: { name: `counter-${hash}`, namespace: 'default', uid: `uid-${hash}`, labels: { app: 'counter', 'pod-template-hash': hash }, annotations: { 'deployment.kubernetes.io/revision': revision }, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: 'counter', uid: 'uid-d', controller: true }] },
    spec: { replicas, selector: { matchLabels: { app: 'counter', 'pod-template-hash': hash } }, template: d.spec!.template },
    status: { replicas, availableReplicas: available, readyReplicas: available },
  };
}

test('a new Deployment gets a ReplicaSet named after its template hash, revision 1', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const d = deployment(2);
  cache.deployments.set(d);
  await reconcileDeployment('default/counter', ctx);
  const created = fake.writes[0]!;
  assert.equal(created.op, 'createReplicaSet');
  const body = created.args[1] as V1ReplicaSet;
  assert.equal(body.metadata?.name, `counter-${templateHash(d.spec!.template)}`);
  assert.equal(body.spec?.replicas, 2);
  assert.equal(body.metadata?.annotations?.['deployment.kubernetes.io/revision'], '1');
  assert.equal(body.spec?.selector.matchLabels?.['pod-template-hash'], templateHash(d.spec!.template));
});

test('a rolling update surges one new pod, then scales the old down only as new ones become available', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const old = ownedRs(deployment(2, 'wasm://v1'), 2, 2, '1');
  const d = deployment(2, 'wasm://v2');
  d.metadata!.annotations = { 'deployment.kubernetes.io/revision': '2' };
  const fresh = ownedRs(d, 0, 0, '2');
  cache.deployments.set(d);
  cache.replicaSets.set(old);
  cache.replicaSets.set(fresh);
  await reconcileDeployment('default/counter', ctx);
  const scales = fake.writes.filter((c) => c.op === 'patchReplicaSet').map((c) => [c.args[1], (c.args[2] as { spec: { replicas: number } }).spec.replicas]);
  assert.deepEqual(scales, [[fresh.metadata!.name, 1]], 'maxSurge 1, maxUnavailable 0: nothing old goes yet');
  fresh.spec!.replicas = 1;
  fresh.status = { replicas: 1, availableReplicas: 1, readyReplicas: 1 };
  fake.calls.length = 0;
  await reconcileDeployment('default/counter', ctx);
  const next = fake.writes.filter((c) => c.op === 'patchReplicaSet').map((c) => [c.args[1], (c.args[2] as { spec: { replicas: number } }).spec.replicas]);
  assert.deepEqual(next, [[old.metadata!.name, 1]]);
});

test('a pod the API server refuses: FailedCreate on the ReplicaSet with its message, ReplicaFailure, a retry; gone once it works', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const r = rs('counter-rs', 1);
  cache.replicaSets.set(r);
  // The API server names the pod it generated for each try; the event and the condition name the prefix.
  const refusedAs = (name: string) => `Pod "${name}" is invalid: spec.containers[0].image: Not found: "wasm://nosuch": no module "nosuch" is stored (push it with kube32-cli push)`;
  const refusal = refusedAs('counter-rs-');
  fake.failures.set('createPod', new ApiError('create pod default/counter-rs-', 422, 'Invalid', refusedAs('counter-rs-x7k2q'), { kind: 'Status', reason: 'Invalid', message: refusedAs('counter-rs-x7k2q') }));
  await assert.rejects(reconcileReplicaSet('default/counter-rs', ctx, new Expectations()), /422 Invalid/, 'thrown after the status, for the back-off');
  assert.deepEqual(fake.events.map((e) => [e.type, e.reason, e.message, e.involvedObject.kind, e.involvedObject.name]), [
    ['Warning', 'FailedCreate', `Error creating: ${refusal}`, 'ReplicaSet', 'counter-rs'],
  ]);
  const status = (fake.writes.find((c) => c.op === 'patchReplicaSetStatus')!.args[2] as { status: V1ReplicaSet['status'] }).status!;
  assert.deepEqual(
    status.conditions?.map((c) => [c.type, c.status, c.reason, c.message]),
    [['ReplicaFailure', 'True', 'FailedCreate', refusal]],
  );
  // The retry fails the same way (another generated name): the event's count rises, no second event, and
  // the status is not written again (a write would bring the ReplicaSet back at once, past its back-off).
  r.status = status;
  fake.failures.set('createPod', new ApiError('create pod default/counter-rs-', 422, 'Invalid', refusedAs('counter-rs-m4pz9'), { kind: 'Status', reason: 'Invalid', message: refusedAs('counter-rs-m4pz9') }));
  await assert.rejects(reconcileReplicaSet('default/counter-rs', ctx, new Expectations()));
  assert.equal(fake.events.length, 1);
  assert.equal(fake.writes.filter((c) => c.op === 'patchReplicaSetStatus').length, 1);
  assert.deepEqual(fake.calls.filter((c) => c.op === 'patchEvent').map((c) => (c.args[2] as { count: number }).count), [2]);
  // The module is pushed: the pod is created and the condition goes.
  await reconcileReplicaSet('default/counter-rs', ctx, new Expectations());
  assert.deepEqual(fake.events.map((e) => e.reason), ['FailedCreate', 'SuccessfulCreate']);
  const last = (fake.writes.filter((c) => c.op === 'patchReplicaSetStatus').at(-1)!.args[2] as { status: V1ReplicaSet['status'] }).status!;
  assert.deepEqual(last.conditions, []);
});

test('a Deployment shows the ReplicaFailure of its ReplicaSet, and loses it with the ReplicaSet', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const d = deployment(1);
  const current = ownedRs(d, 1, 0, '1');
  current.status!.conditions = [{ type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate', message: 'no module "nosuch" is stored' }];
  d.metadata!.annotations = { 'deployment.kubernetes.io/revision': '1' };
  cache.deployments.set(d);
  cache.replicaSets.set(current);
  await reconcileDeployment('default/counter', ctx);
  const status = (fake.writes.find((c) => c.op === 'patchDeploymentStatus')!.args[2] as { status: V1Deployment['status'] }).status!;
  const failure = status.conditions?.find((c) => c.type === 'ReplicaFailure');
  assert.deepEqual([failure?.status, failure?.reason, failure?.message], ['True', 'FailedCreate', 'no module "nosuch" is stored']);
  d.status = status;
  current.status!.conditions = [];
  await reconcileDeployment('default/counter', ctx);
  const next = (fake.writes.filter((c) => c.op === 'patchDeploymentStatus').at(-1)!.args[2] as { status: V1Deployment['status'] }).status!;
  assert.deepEqual(next.conditions?.map((c) => c.type), ['Available', 'Progressing']);
});

test('going back to an old template reuses its ReplicaSet with the next revision, the old one in revision-history', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const a = ownedRs(deployment(2, 'wasm://v1'), 0, 0, '3');
  a.metadata!.annotations![REVISION_HISTORY_ANNOTATION] = '1';
  const b = ownedRs(deployment(2, 'wasm://v2'), 2, 2, '4');
  const d = deployment(2, 'wasm://v1');
  d.metadata!.annotations = { 'deployment.kubernetes.io/revision': '4', 'kubernetes.io/change-cause': 'back to v1', 'kubectl.kubernetes.io/last-applied-configuration': '{}' };
  cache.deployments.set(d);
  cache.replicaSets.set(a);
  cache.replicaSets.set(b);
  await reconcileDeployment('default/counter', ctx);
  assert.equal(fake.writes.filter((c) => c.op === 'createReplicaSet').length, 0, 'no new ReplicaSet');
  const raised = fake.writes.find((c) => c.op === 'patchReplicaSet' && c.args[1] === a.metadata!.name && (c.args[2] as { metadata?: unknown }).metadata)!;
  assert.deepEqual((raised.args[2] as { metadata: { annotations: Record<string, string> } }).metadata.annotations, {
    'deployment.kubernetes.io/revision': '5',
    [REVISION_HISTORY_ANNOTATION]: '1,3',
    'kubernetes.io/change-cause': 'back to v1',
  });
  const revision = fake.writes.find((c) => c.op === 'patchDeployment')!;
  assert.deepEqual(revision.args[2], { metadata: { annotations: { 'deployment.kubernetes.io/revision': '5' } } });
});

test('revision-history keeps at most 2000 characters, dropping the oldest numbers; a revision already highest stays', () => {
  const d = deployment(1);
  const long = Array.from({ length: 400 }, (_, i) => String(1000 + i)).join(','); // 1999 characters
  const out = newReplicaSetAnnotations(d, { 'deployment.kubernetes.io/revision': '1400', [REVISION_HISTORY_ANNOTATION]: long }, 1401);
  const history = out[REVISION_HISTORY_ANNOTATION]!;
  assert.ok(history.length <= 2000, `${history.length} characters`);
  assert.ok(history.endsWith(',1400') && history.startsWith('1001,'), history.slice(0, 20));
  assert.deepEqual(newReplicaSetAnnotations(d, { 'deployment.kubernetes.io/revision': '7' }, 5), { 'deployment.kubernetes.io/revision': '7' });
  assert.deepEqual(newReplicaSetAnnotations(d, undefined, 1), { 'deployment.kubernetes.io/revision': '1' }, 'a first revision has no history');
});

test('templates equal but for null, {}, [], zero generation and hostPort, and the pod-template-hash label are the same template, and hash equal', () => {
  const sent = { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'c', image: 'wasm://a', resources: {}, ports: [{ containerPort: 80 }] }] } };
  const readBack = { metadata: { creationTimestamp: null, generation: 0, labels: { app: 'web', 'pod-template-hash': 'x' }, annotations: {} }, spec: { containers: [{ name: 'c', image: 'wasm://a', args: [], ports: [{ containerPort: 80, hostPort: 0 }] }] } };
  assert.ok(sameTemplate(readBack as never, sent as never));
  assert.equal(templateHash({ ...readBack, metadata: { ...readBack.metadata, labels: { app: 'web' } } }), templateHash(sent));
  assert.ok(!sameTemplate(sent as never, { ...sent, spec: { containers: [{ ...sent.spec.containers[0], image: 'wasm://b' }] } } as never));
  assert.notEqual(templateHash(sent, 1), templateHash(sent), 'a collision count changes the hash');
});

test('each scaling is a ScalingReplicaSet event on the Deployment, in v1.32 words', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const d = deployment(3);
  cache.deployments.set(d);
  await reconcileDeployment('default/counter', ctx);
  const name = `counter-${templateHash(d.spec!.template)}`;
  assert.deepEqual(fake.events.map((e) => [e.reason, e.message, e.involvedObject.kind, e.involvedObject.name]), [
    ['ScalingReplicaSet', `Scaled up replica set ${name} from 0 to 3`, 'Deployment', 'counter'],
  ]);
  assert.equal((fake.events[0] as unknown as { source: { component: string } }).source.component, 'deployment-controller');
  // A rollout: the new one up by the surge, the old one down as its pods are not available.
  const old = ownedRs(deployment(3, 'wasm://v1'), 3, 0, '1');
  const fresh = ownedRs(d, 1, 0, '2');
  d.metadata!.annotations = { 'deployment.kubernetes.io/revision': '2' };
  cache.replicaSets.set(old);
  cache.replicaSets.set(fresh);
  fake.calls.length = 0;
  await reconcileDeployment('default/counter', ctx);
  assert.deepEqual(fake.events.map((e) => e.message), [`Scaled down replica set ${old.metadata!.name} from 3 to 0`]);
  const patch = fake.writes.find((c) => c.op === 'patchReplicaSet')!.args[2] as { metadata: { annotations: Record<string, string> } };
  assert.deepEqual(patch.metadata.annotations, { 'deployment.kubernetes.io/desired-replicas': '3', 'deployment.kubernetes.io/max-replicas': '4' });
});

test('a ReplicaSet of the new name with another template is a hash collision: collisionCount rises', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const d = deployment(1, 'wasm://v2');
  const squatter = ownedRs(deployment(1, 'wasm://v1'), 1, 1, '1');
  squatter.metadata!.name = `counter-${templateHash(d.spec!.template)}`;
  cache.deployments.set(d);
  cache.replicaSets.set(squatter);
  fake.failures.set('createReplicaSet', new ApiError('create replicaset', 409, 'AlreadyExists', 'already exists'));
  await reconcileDeployment('default/counter', ctx);
  const status = fake.writes.find((c) => c.op === 'patchDeploymentStatus')!;
  assert.deepEqual(status.args[2], { status: { collisionCount: 1 } });
  d.status = { collisionCount: 1 };
  fake.calls.length = 0;
  await reconcileDeployment('default/counter', ctx);
  const created = fake.writes.find((c) => c.op === 'createReplicaSet')!.args[1] as V1ReplicaSet;
  assert.equal(created.metadata?.name, `counter-${templateHash(d.spec!.template, 1)}`);
});
