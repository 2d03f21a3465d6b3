/**
 * The disruption controller with the real kubectl: `kubectl create pdb` (protobuf body), then `kubectl get
 * pdb` shows ALLOWED DISRUPTIONS from the budget's pods, and it follows them as they come and go (the
 * status the API server's eviction check agrees with); three evictions at the same moment under a budget
 * allowing one: exactly one accepted (its pod in `disruptedPods`, the pod moved), the others 429.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ApiException, V1PodDisruptionBudget } from '@kubernetes/client-node';
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

test('three evictions at the same moment under a budget allowing one: one is accepted and moves its pod, the others get 429; the budget comes back once the moved pod is Ready', { timeout: 150_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  await c.startWorker('w2');
  const labels = { app: 'guarded' };
  const names = ['g-1', 'g-2', 'g-3'];
  await Promise.all(names.map((n, i) => runPod(c, counterPod(n, 18241 + i, { nodeName: 'w1', labels }))));
  const created = await c.api.kubectl(['create', 'pdb', 'guarded', '--selector=app=guarded', '--min-available=2']);
  assert.equal(created.code, 0, created.stderr);
  const pdb = () => c.rest.json<V1PodDisruptionBudget>({ method: 'GET', path: '/apis/policy/v1/namespaces/default/poddisruptionbudgets/guarded' });
  await c.until('the budget to allow one disruption', async () => (await pdb()).status?.disruptionsAllowed === 1);

  // Three clients evict at once, as kubectl drain does.
  const results = await Promise.allSettled(names.map((name) =>
    c.core.createNamespacedPodEviction({ name, namespace: 'default', body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace: 'default' } } })));
  const accepted = names.filter((_, i) => results[i]!.status === 'fulfilled');
  const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as ApiException<unknown>);
  assert.equal(accepted.length, 1, `exactly one eviction accepted: ${JSON.stringify(results.map((r) => (r.status === 'rejected' ? (r.reason as ApiException<unknown>).code : 201)))}`);
  assert.equal(refused.length, 2);
  for (const err of refused) {
    assert.equal(err.code, 429, String(err));
    const status = (typeof err.body === 'string' ? JSON.parse(err.body) : err.body) as { reason: string; message: string; details: { causes: Array<{ reason: string; message: string }> } };
    assert.equal(status.reason, 'TooManyRequests');
    assert.equal(status.message, "Cannot evict pod as it would violate the pod's disruption budget.");
    assert.equal(status.details.causes[0]!.reason, 'DisruptionBudget');
    assert.match(status.details.causes[0]!.message, /^The disruption budget guarded (needs 2 healthy pods and has 3 currently|is still being processed by the server\.)$/);
  }
  const winner = accepted[0]!;
  const taken = await pdb();
  assert.equal(taken.status?.disruptionsAllowed, 0, 'the accepted eviction took the one disruption');
  assert.deepEqual(Object.keys(taken.status?.disruptedPods ?? {}), [winner], 'the evicted pod is in disruptedPods');

  // The pod moves (the same name, on w2); once it is Ready there the controller drops its entry and the
  // budget allows one disruption again, well before the 2-minute timeout of an entry.
  const moved = await c.until(`${winner} to run on w2`, async () => {
    const p = await c.getPod(winner);
    return p?.spec?.nodeName === 'w2' && p.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'True') ? p : undefined;
  }, 60_000);
  assert.equal(moved.metadata?.name, winner);
  const back = await c.until('the budget to allow one disruption again', async () => {
    const p = await pdb();
    return p.status?.disruptionsAllowed === 1 ? p : undefined;
  }, 30_000);
  assert.deepEqual(back.status?.disruptedPods ?? {}, {}, 'the moved pod left disruptedPods');
  assert.equal(back.status?.currentHealthy, 3);
  const next = names.find((n) => n !== winner)!;
  await c.core.createNamespacedPodEviction({ name: next, namespace: 'default', body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: next, namespace: 'default' } } });
});
