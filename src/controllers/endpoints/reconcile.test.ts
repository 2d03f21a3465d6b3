import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice, V1Endpoints, V1Service } from '@kubernetes/client-node';
import { fakeContext, pod } from '../testing/fakes.ts';
import { reconcileEndpoints } from './reconcile.ts';

test('a Service lists ready pods under addresses and a frozen (not Ready) one under notReadyAddresses', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  const svc: V1Service = { metadata: { name: 'counter', namespace: 'default' }, spec: { selector: { app: 'counter' }, ports: [{ name: 'http', port: 80, targetPort: 'web' as unknown as number }] } };
  cache.services.set(svc);
  const ready = pod('c1', { nodeName: 'a', running: true, labels: { app: 'counter' } });
  ready.spec!.containers[0]!.ports = [{ name: 'web', containerPort: 8080 }];
  ready.status!.podIP = '127.0.0.2';
  const frozen = pod('c2', { nodeName: 'b', running: true, labels: { app: 'counter' } });
  frozen.spec!.containers[0]!.ports = [{ name: 'web', containerPort: 8080 }];
  frozen.status!.podIP = '127.0.0.3';
  frozen.status!.conditions = [{ type: 'Ready', status: 'False' }];
  cache.pods.set(ready);
  cache.pods.set(frozen);
  cache.pods.set(pod('other', { nodeName: 'a', running: true, labels: { app: 'x' } }));
  await reconcileEndpoints('default/counter', ctx);
  assert.deepEqual(fake.writes.map((w) => w.op), ['createEndpoints', 'createEndpointSlice']);
  const ep = fake.writes[0]!.args[1] as V1Endpoints;
  assert.deepEqual(ep.subsets?.[0]?.addresses?.map((a) => a.ip), ['127.0.0.2']);
  assert.deepEqual(ep.subsets?.[0]?.notReadyAddresses?.map((a) => a.ip), ['127.0.0.3']);
  assert.deepEqual(ep.subsets?.[0]?.ports, [{ name: 'http', port: 8080, protocol: 'TCP' }]);
  // Unchanged: no write.
  cache.endpoints.set({ ...ep, metadata: { name: 'counter', namespace: 'default', resourceVersion: '5' } });
  const slice = fake.writes[1]!.args[1] as V1EndpointSlice;
  cache.endpointSlices.set({ ...slice, metadata: { ...slice.metadata, resourceVersion: '6' } });
  fake.calls.length = 0;
  await reconcileEndpoints('default/counter', ctx);
  assert.deepEqual(fake.calls, []);
});
