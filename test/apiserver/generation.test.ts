/**
 * `metadata.generation` as kube-apiserver keeps it, read with the real kubectl: the kinds whose
 * strategy counts their spec (Deployment, Job, PodDisruptionBudget, EndpointSlice, Pod...) start at 1
 * and count each spec change; ConfigMap, Secret, ServiceAccount, Endpoints, Event, Lease, Service,
 * Node and Namespace have none, not even after an update or when the client sends one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

const NS = 'gen-test';

/** One object of every kind in question, as a user would create it (JSON lines kubectl reads as a stream). */
const OBJECTS: Record<string, unknown>[] = [
  { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm', namespace: NS }, data: { a: '1' } },
  // A generation sent by the client (an object copied from another cluster) is not kept either.
  { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'sec', namespace: NS, generation: 7 }, stringData: { a: '1' } },
  { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'sa', namespace: NS } },
  { apiVersion: 'v1', kind: 'Endpoints', metadata: { name: 'ep', namespace: NS }, subsets: [{ addresses: [{ ip: '10.0.0.1' }], ports: [{ port: 80 }] }] },
  { apiVersion: 'v1', kind: 'Event', metadata: { name: 'ev', namespace: NS }, involvedObject: { kind: 'ConfigMap', name: 'cm', namespace: NS }, reason: 'Test', message: 'a test event', type: 'Normal' },
  { apiVersion: 'events.k8s.io/v1', kind: 'Event', metadata: { name: 'ev2', namespace: NS }, eventTime: '2026-11-29T22:00:00.000000Z', reportingController: 'test', reportingInstance: 'test-1', action: 'Test', reason: 'Test', type: 'Normal', regarding: { kind: 'ConfigMap', name: 'cm', namespace: NS } },
  { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'lease', namespace: NS }, spec: { holderIdentity: 'me', leaseDurationSeconds: 15 } },
  { apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: NS }, spec: { selector: { app: 'x' }, ports: [{ port: 80 }] } },
  { apiVersion: 'v1', kind: 'Node', metadata: { name: 'gen-node' } },
  { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'dep', namespace: NS }, spec: { replicas: 0, selector: { matchLabels: { app: 'x' } }, template: { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'c', image: 'hello' }] } } } },
  { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'job', namespace: NS }, spec: { suspend: true, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'hello' }] } } } },
  { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'pdb', namespace: NS }, spec: { minAvailable: 1, selector: { matchLabels: { app: 'x' } } } },
  { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'slice', namespace: NS }, addressType: 'IPv4', endpoints: [{ addresses: ['10.0.0.1'] }], ports: [{ port: 80 }] },
  { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'pod', namespace: NS }, spec: { containers: [{ name: 'c', image: 'hello' }] } },
];

/** kube-apiserver's generation of each after create: none, or 1. */
const AFTER_CREATE: Record<string, number | undefined> = {
  'configmap/cm': undefined,
  'secret/sec': undefined,
  'serviceaccount/sa': undefined,
  'endpoints/ep': undefined,
  'event/ev': undefined,
  'event.events.k8s.io/ev2': undefined,
  'lease.coordination.k8s.io/lease': undefined,
  'service/svc': undefined,
  'node/gen-node': undefined,
  'deployment.apps/dep': 1,
  'job.batch/job': 1,
  'poddisruptionbudget.policy/pdb': 1,
  'endpointslice.discovery.k8s.io/slice': 1,
  'pod/pod': 1,
};

test('metadata.generation only on the kinds kube-apiserver gives one', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  let r = await api.kubectl(['create', 'namespace', NS]);
  assert.equal(r.code, 0, r.stderr);
  t.after(async () => {
    await api.kubectl(['delete', 'node', 'gen-node', '--ignore-not-found']);
  });

  /** Each object's generation (undefined when it has none), by `kind.group/name` as kubectl names them. */
  const generations = async (): Promise<Record<string, number | undefined>> => {
    const out: Record<string, number | undefined> = {};
    for (const key of Object.keys(AFTER_CREATE)) {
      const g = await api.kubectl(['get', key, '-n', NS, '-o', 'json']);
      assert.equal(g.code, 0, g.stderr);
      out[key] = (JSON.parse(g.stdout) as { metadata: { generation?: number } }).metadata.generation;
    }
    return out;
  };

  await t.test('after create', async () => {
    r = await api.kubectl(['create', '-f', '-'], { input: OBJECTS.map((o) => JSON.stringify(o)).join('\n') });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(await generations(), AFTER_CREATE);
    r = await api.kubectl(['get', 'namespace', NS, '-o', 'jsonpath={.metadata.generation}']);
    assert.equal(r.stdout, '');
  });

  await t.test('after a change of each one’s content: counted where kept, still none elsewhere', async () => {
    const patches: [string, string][] = [
      ['configmap/cm', '{"data":{"a":"2"}}'],
      ['secret/sec', '{"stringData":{"a":"2"}}'],
      ['lease.coordination.k8s.io/lease', '{"spec":{"holderIdentity":"you"}}'],
      ['service/svc', '{"spec":{"selector":{"app":"y"}}}'],
      ['node/gen-node', '{"spec":{"unschedulable":true}}'],
      ['deployment.apps/dep', '{"spec":{"replicas":0,"minReadySeconds":5}}'],
      ['poddisruptionbudget.policy/pdb', '{"spec":{"minAvailable":2}}'],
    ];
    for (const [key, patch] of patches) {
      r = await api.kubectl(['patch', key, '-n', NS, '--type', 'merge', '-p', patch]);
      assert.equal(r.code, 0, `${key}: ${r.stderr}`);
    }
    // A label is metadata: no new generation.
    r = await api.kubectl(['label', 'job.batch/job', '-n', NS, 'x=y']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(await generations(), { ...AFTER_CREATE, 'deployment.apps/dep': 2, 'poddisruptionbudget.policy/pdb': 2 });
  });
});
