/**
 * The disruption controller with the real kubectl: `kubectl create pdb` (protobuf body), then `kubectl get
 * pdb` shows ALLOWED DISRUPTIONS from the budget's pods, and it follows them as they come and go (the
 * status the API server's eviction check agrees with).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1PodDisruptionBudget } from '@kubernetes/client-node';
import { counterPod, runPod, startControllersCluster } from './cluster.ts';

test('kubectl get pdb shows the disruptions its pods allow, kept in step with them', { timeout: 120_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  const labels = { app: 'web' };
  await runPod(c, counterPod('web-1', 18231, { nodeName: 'w1', labels }));
  await runPod(c, counterPod('web-2', 18232, { nodeName: 'w1', labels }));
  const created = await c.api.kubectl(['create', 'pdb', 'web', '--selector=app=web', '--min-available=1']);
  assert.equal(created.code, 0, created.stderr);
  const pdb = () => c.rest.json<V1PodDisruptionBudget>({ method: 'GET', path: '/apis/policy/v1/namespaces/default/poddisruptionbudgets/web' });
  const two = await c.until('the budget status of two healthy pods', async () => {
    const p = await pdb();
    return p.status?.disruptionsAllowed === 1 ? p : undefined;
  });
  assert.equal(two.status?.expectedPods, 2);
  assert.equal(two.status?.currentHealthy, 2);
  assert.equal(two.status?.desiredHealthy, 1);
  assert.equal(two.status?.observedGeneration, two.metadata?.generation);
  const allowed = two.status?.conditions?.find((x) => x.type === 'DisruptionAllowed');
  assert.equal(allowed?.status, 'True');
  assert.equal(allowed?.reason, 'SufficientPods');
  const table = await c.api.kubectl(['get', 'pdb', 'web']);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /^NAME\s+MIN AVAILABLE\s+MAX UNAVAILABLE\s+ALLOWED DISRUPTIONS\s+AGE\nweb\s+1\s+N\/A\s+1\s+/);

  // One pod gone: nothing may be disrupted, and the eviction check says the same.
  const del = await c.api.kubectl(['delete', 'pod', 'web-2', '--wait=true']);
  assert.equal(del.code, 0, del.stderr);
  const one = await c.until('the budget status of one healthy pod', async () => {
    const p = await pdb();
    return p.status?.expectedPods === 1 ? p : undefined;
  });
  assert.equal(one.status?.disruptionsAllowed, 0);
  assert.equal(one.status?.conditions?.find((x) => x.type === 'DisruptionAllowed')?.reason, 'InsufficientPods');
  const evict = await c.rest.request({
    method: 'POST',
    path: '/api/v1/namespaces/default/pods/web-1/eviction',
    body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: 'web-1', namespace: 'default' } },
  });
  assert.equal(evict.status, 429);
  evict.body.resume();
});
