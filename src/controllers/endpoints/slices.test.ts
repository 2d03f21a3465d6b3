import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import { fakeContext, pod } from '../testing/fakes.ts';
import { PodsInSlices } from './controller.ts';
import { reconcileEndpoints } from './reconcile.ts';
import { CONTROLLER_NAME, desiredSlices, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MAX_ENDPOINTS_PER_SLICE } from './slices.ts';

function service(): V1Service {
  return {
    metadata: { name: 'counter', namespace: 'default', uid: 'svc-uid', labels: { tier: 'web' } },
    spec: { selector: { app: 'counter' }, clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'web' as unknown as number }] },
  };
}

function counter(name: string, ip: string, opts: { node?: string; ready?: boolean; port?: number } = {}): V1Pod {
  const p = pod(name, { nodeName: opts.node ?? 'a', running: true, labels: { app: 'counter' } });
  p.metadata!.uid = `uid-${name}`;
  p.spec!.containers[0]!.ports = [{ name: 'web', containerPort: opts.port ?? 8080 }];
  p.status!.podIP = ip;
  p.status!.conditions = [{ type: 'Ready', status: opts.ready === false ? 'False' : 'True' }];
  return p;
}

test('one slice per port set, with the shape kube-controller-manager writes', { timeout: 5000 }, () => {
  const slices = desiredSlices(service(), [counter('c2', '127.0.0.3', { ready: false }), counter('c1', '127.0.0.2'), counter('c3', '127.0.0.2', { port: 8081 })]);
  assert.equal(slices.length, 2);
  const [a, b] = slices as [V1EndpointSlice, V1EndpointSlice];
  assert.match(a.metadata!.name!, /^counter-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
  assert.notEqual(a.metadata!.name, b.metadata!.name);
  assert.deepEqual(a.metadata!.labels, { tier: 'web', [LABEL_SERVICE_NAME]: 'counter', [LABEL_MANAGED_BY]: CONTROLLER_NAME });
  assert.deepEqual(a.metadata!.ownerReferences, [{ apiVersion: 'v1', kind: 'Service', name: 'counter', uid: 'svc-uid', controller: true, blockOwnerDeletion: true }]);
  assert.equal(a.addressType, 'IPv4');
  assert.deepEqual(a.ports, [{ name: 'http', port: 8080, protocol: 'TCP' }]);
  assert.deepEqual(a.endpoints, [
    { addresses: ['127.0.0.2'], conditions: { ready: true, serving: true, terminating: false }, nodeName: 'a', targetRef: { kind: 'Pod', namespace: 'default', name: 'c1', uid: 'uid-c1' } },
    { addresses: ['127.0.0.3'], conditions: { ready: false, serving: false, terminating: false }, nodeName: 'a', targetRef: { kind: 'Pod', namespace: 'default', name: 'c2', uid: 'uid-c2' } },
  ]);
  assert.deepEqual(b.ports, [{ name: 'http', port: 8081, protocol: 'TCP' }]);
  assert.deepEqual(b.endpoints?.map((e) => e.targetRef?.name), ['c3']);
  // Deterministic: the same input names the same slices.
  assert.deepEqual(desiredSlices(service(), [counter('c1', '127.0.0.2')]).map((s) => s.metadata?.name), [a.metadata!.name]);
});

test('a terminating pod stays, serving but not ready; terminal pods and pods without an address leave', { timeout: 5000 }, () => {
  const going = counter('going', '127.0.0.4');
  going.metadata!.deletionTimestamp = new Date();
  const done = counter('done', '127.0.0.5');
  done.status!.phase = 'Succeeded';
  const pending = counter('pending', '127.0.0.6');
  delete pending.status!.podIP;
  const [s] = desiredSlices(service(), [going, done, pending]);
  assert.deepEqual(s!.endpoints?.map((e) => [e.targetRef?.name, e.conditions]), [['going', { ready: false, serving: true, terminating: true }]]);
});

test('no endpoints: one placeholder slice without ports; many: slices of at most 100', { timeout: 5000 }, () => {
  const empty = desiredSlices(service(), []);
  assert.equal(empty.length, 1);
  assert.deepEqual([empty[0]!.endpoints, empty[0]!.ports, empty[0]!.addressType], [[], undefined, 'IPv4']);
  const many = Array.from({ length: 250 }, (_, i) => counter(`p${String(i).padStart(3, '0')}`, `127.0.${Math.floor(i / 200)}.${(i % 200) + 2}`));
  const slices = desiredSlices(service(), many);
  assert.deepEqual(slices.map((s) => s.endpoints?.length), [MAX_ENDPOINTS_PER_SLICE, MAX_ENDPOINTS_PER_SLICE, 50]);
  assert.equal(new Set(slices.map((s) => s.metadata?.name)).size, 3);
});

test('reconcile replaces a changed slice with its resourceVersion, deletes stale ones, and leaves others\u2019 slices alone', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const svc = service();
  cache.services.set(svc);
  cache.pods.set(counter('c1', '127.0.0.2'));
  const [want] = desiredSlices(svc, [counter('c1', '127.0.0.2')]);
  cache.endpointSlices.set({ ...want!, metadata: { ...want!.metadata, resourceVersion: '7' }, endpoints: [] });
  const stale: V1EndpointSlice = { metadata: { name: 'counter-old', namespace: 'default', labels: { [LABEL_SERVICE_NAME]: 'counter', [LABEL_MANAGED_BY]: CONTROLLER_NAME } }, addressType: 'IPv4', endpoints: [] };
  const mirrored: V1EndpointSlice = { metadata: { name: 'counter-byhand', namespace: 'default', labels: { [LABEL_SERVICE_NAME]: 'counter', [LABEL_MANAGED_BY]: 'someone-else' } }, addressType: 'IPv4', endpoints: [] };
  cache.endpointSlices.set(stale);
  cache.endpointSlices.set(mirrored);
  cache.endpoints.set({ metadata: { name: 'counter', namespace: 'default' }, subsets: [{ addresses: [{ ip: '127.0.0.2', nodeName: 'a', targetRef: { kind: 'Pod', namespace: 'default', name: 'c1', uid: 'uid-c1' } }], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] }] });
  await reconcileEndpoints('default/counter', ctx);
  assert.deepEqual(fake.writes.map((w) => [w.op, w.args[1]]), [['replaceEndpointSlice', want!.metadata!.name], ['deleteEndpointSlice', 'counter-old']]);
  assert.equal((fake.writes[0]!.args[2] as V1EndpointSlice).metadata?.resourceVersion, '7');
  // A selector removed: the managed slices go.
  fake.calls.length = 0;
  cache.services.set({ ...svc, spec: { ...svc.spec, selector: undefined } });
  cache.endpointSlices.remove('counter-old', 'default');
  await reconcileEndpoints('default/counter', ctx);
  assert.deepEqual(fake.writes.map((w) => [w.op, w.args[1]]), [['deleteEndpointSlice', want!.metadata!.name]]);
  // Against an API server without EndpointSlices, none are written.
  fake.calls.length = 0;
  cache.services.set(svc);
  cache.endpointSlices.items = [];
  await reconcileEndpoints('default/counter', ctx, { slices: false });
  assert.deepEqual(fake.writes, []);
});

test('the pods listed in slices lead back to their Service (a pod relabelled out of its selector)', { timeout: 5000 }, () => {
  const index = new PodsInSlices();
  const [slice] = desiredSlices(service(), [counter('c1', '127.0.0.2'), counter('c2', '127.0.0.3')]);
  index.set(slice!, false);
  assert.deepEqual([...index.servicesOf('default', 'c1')], ['counter']);
  index.set({ ...slice!, endpoints: slice!.endpoints!.slice(1) }, false);
  assert.deepEqual([...index.servicesOf('default', 'c1')], []);
  assert.deepEqual([...index.servicesOf('default', 'c2')], ['counter']);
  index.set(slice!, true);
  assert.deepEqual([...index.servicesOf('default', 'c2')], []);
});
