/**
 * What an HPA says when it cannot scale its target, as kube-controller-manager says it (issue 19), against a
 * real API server and the controllers (no worker: the pods stay Pending, which is all these need):
 * - two HPAs over one Deployment: each is ScalingActive False `AmbiguousSelector` ("pods by selector app=web
 *   are controlled by multiple HPAs: [default/a default/b]"), with that Warning and
 *   `FailedComputeMetricsReplicas`, and scales nothing; once one is deleted, the other is no longer ambiguous;
 * - an HPA over a core-group kind (`apiVersion: v1`) names the core group as `""`, not `"v1"`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startControllersCluster } from './cluster.ts';

interface Condition { type: string; status: string; reason: string; message: string }
interface Hpa { status?: { conditions?: Condition[] } }

test('two HPAs over one Deployment are AmbiguousSelector; a core-group target names the group ""', { timeout: 120_000 }, async (t) => {
  const c = await startControllersCluster(t, { horizontalPodAutoscalerSyncPeriodMs: 1_000 });
  const kubectl = c.api.kubectl;
  const deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'default' },
    spec: { replicas: 1, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'c', image: 'wasm://counter-fixture', resources: { requests: { cpu: '100m' } } }] } } },
  };
  let r = await kubectl(['create', '-f', '-'], { input: JSON.stringify(deployment) });
  assert.equal(r.code, 0, r.stderr);
  await c.until('the Deployment\'s pod', async () => {
    const list = await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dweb' });
    return list.items.length === 1;
  });
  for (const name of ['a', 'b']) {
    r = await kubectl(['autoscale', 'deployment', 'web', `--name=${name}`, '--cpu-percent=50', '--min=1', '--max=3']);
    assert.equal(r.code, 0, r.stderr);
  }
  const condition = async (name: string, type: string) => {
    const h = JSON.parse((await kubectl(['get', 'hpa', name, '-o', 'json'])).stdout) as Hpa;
    return h.status?.conditions?.find((x) => x.type === type);
  };
  const message = 'pods by selector app=web are controlled by multiple HPAs: [default/a default/b]';
  for (const name of ['a', 'b']) {
    const active = await c.until(`HPA ${name} AmbiguousSelector`, async () => {
      const x = await condition(name, 'ScalingActive');
      return x?.reason === 'AmbiguousSelector' ? x : undefined;
    }, 30_000);
    assert.equal(active.status, 'False');
    assert.equal(active.message, message);
    assert.equal((await condition(name, 'AbleToScale'))?.status, 'True', 'it could read the Scale');
  }
  const events = await c.events();
  for (const reason of ['AmbiguousSelector', 'FailedComputeMetricsReplicas']) {
    const e = events.find((x) => x.reason === reason && x.involvedObject.kind === 'HorizontalPodAutoscaler');
    assert.equal(e?.type, 'Warning', reason);
    assert.equal(e?.message, message);
  }
  const described = await kubectl(['describe', 'hpa', 'a']);
  assert.match(described.stdout, /ScalingActive\s+False\s+AmbiguousSelector\s+pods by selector app=web are controlled by multiple HPAs/);

  // One HPA left: it is no longer ambiguous (it goes on to read metrics, which Pending pods do not have).
  assert.equal((await kubectl(['delete', 'hpa', 'b'])).code, 0);
  await c.until('HPA a no longer AmbiguousSelector', async () => {
    const x = await condition('a', 'ScalingActive');
    return x !== undefined && x.reason !== 'AmbiguousSelector';
  }, 30_000);

  // A target of the core group: "" is its name in the message, as Kubernetes' RESTMapper says it.
  const rc = { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', metadata: { name: 'rc' }, spec: { scaleTargetRef: { apiVersion: 'v1', kind: 'ReplicationController', name: 'x' }, maxReplicas: 2 } };
  r = await kubectl(['create', '-f', '-'], { input: JSON.stringify(rc) });
  assert.equal(r.code, 0, r.stderr);
  const able = await c.until('HPA rc FailedGetScale', async () => {
    const x = await condition('rc', 'AbleToScale');
    return x?.reason === 'FailedGetScale' ? x : undefined;
  }, 30_000);
  assert.match(able.message, /no matches for kind "ReplicationController" in group ""/);
});
