import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1PodDisruptionBudget, V1PodDisruptionBudgetStatus } from '@kubernetes/client-node';
import { fakeContext, pod } from '../testing/fakes.ts';
import { ApiError, budgetCounts } from '../../api/index.ts';
import { reconcileBudget } from './reconcile.ts';

function pdb(name: string, spec: V1PodDisruptionBudget['spec'], status?: V1PodDisruptionBudgetStatus): V1PodDisruptionBudget {
  return { metadata: { name, namespace: 'default', generation: 2 }, spec, status };
}

test('budget counts: minAvailable and maxUnavailable, integers and percentages rounded up; unready and deleting pods are not healthy', () => {
  const ready = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };
  const unready = { status: { conditions: [{ type: 'Ready', status: 'False' }] } };
  const deleting = { metadata: { deletionTimestamp: '2026-01-01T00:00:00Z' }, status: ready.status };
  const four = [ready, ready, ready, unready];
  assert.deepEqual(budgetCounts({ minAvailable: 2 }, four), { expectedPods: 4, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 });
  assert.deepEqual(budgetCounts({ minAvailable: '50%' }, four), { expectedPods: 4, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 });
  assert.deepEqual(budgetCounts({ minAvailable: '51%' }, four), { expectedPods: 4, currentHealthy: 3, desiredHealthy: 3, disruptionsAllowed: 0 });
  assert.deepEqual(budgetCounts({ maxUnavailable: 1 }, four), { expectedPods: 4, currentHealthy: 3, desiredHealthy: 3, disruptionsAllowed: 0 });
  assert.deepEqual(budgetCounts({ maxUnavailable: '30%' }, [ready, ready, ready, ready]), { expectedPods: 4, currentHealthy: 4, desiredHealthy: 2, disruptionsAllowed: 2 });
  assert.deepEqual(budgetCounts({}, [ready, deleting]), { expectedPods: 2, currentHealthy: 1, desiredHealthy: 1, disruptionsAllowed: 0 });
  assert.deepEqual(budgetCounts({ maxUnavailable: 5 }, [ready]), { expectedPods: 1, currentHealthy: 1, desiredHealthy: 0, disruptionsAllowed: 1 });
});

test('a budget gets its status from the pods its selector matches, with the DisruptionAllowed condition; nothing is written when it holds', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.pods.set(pod('a', { running: true, labels: { app: 'web' } }));
  cache.pods.set(pod('b', { running: true, labels: { app: 'web' } }));
  cache.pods.set(pod('c', { running: false, labels: { app: 'web' } }));
  cache.pods.set(pod('other', { running: true, labels: { app: 'db' } }));
  cache.podDisruptionBudgets.set(pdb('web', { minAvailable: 1, selector: { matchLabels: { app: 'web' } } }));
  await reconcileBudget('default/web', ctx);
  assert.equal(fake.calls.length, 1);
  assert.equal(fake.calls[0]!.op, 'patchPodDisruptionBudgetStatus');
  const status = (fake.calls[0]!.args[2] as { status: V1PodDisruptionBudgetStatus }).status;
  assert.deepEqual({ ...status, conditions: undefined }, {
    observedGeneration: 2, expectedPods: 3, currentHealthy: 2, desiredHealthy: 1, disruptionsAllowed: 1, disruptedPods: {}, conditions: undefined,
  });
  assert.equal(status.conditions?.[0]?.type, 'DisruptionAllowed');
  assert.equal(status.conditions?.[0]?.status, 'True');
  assert.equal(status.conditions?.[0]?.reason, 'SufficientPods');
  assert.equal(new Date(status.conditions![0]!.lastTransitionTime!).getTime(), clock.now());

  // The same status stored: no write. One pod fewer healthy: InsufficientPods, with a new transition time.
  cache.podDisruptionBudgets.set(pdb('web', { minAvailable: 1, selector: { matchLabels: { app: 'web' } } }, status));
  await reconcileBudget('default/web', ctx);
  assert.equal(fake.calls.length, 1, 'nothing to write');
  cache.pods.set(pod('b', { running: false, labels: { app: 'web' } }));
  clock.advance(5000);
  await reconcileBudget('default/web', ctx);
  assert.equal(fake.calls.length, 2);
  const after = (fake.calls[1]!.args[2] as { status: V1PodDisruptionBudgetStatus }).status;
  assert.equal(after.disruptionsAllowed, 0);
  assert.equal(after.conditions?.[0]?.status, 'False');
  assert.equal(after.conditions?.[0]?.reason, 'InsufficientPods');
  assert.equal(new Date(after.conditions![0]!.lastTransitionTime!).getTime(), clock.now());
});

test('a budget whose selector matches nothing allows no disruption; a deleted budget is left alone', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.podDisruptionBudgets.set(pdb('none', { minAvailable: 1, selector: { matchLabels: { app: 'missing' } } }));
  await reconcileBudget('default/none', ctx);
  const status = (fake.calls[0]!.args[2] as { status: V1PodDisruptionBudgetStatus }).status;
  assert.equal(status.expectedPods, 0);
  assert.equal(status.disruptionsAllowed, 0);
  assert.equal(await reconcileBudget('default/gone', ctx), undefined);
  assert.equal(fake.calls.length, 1);
});

test('pods in disruptedPods count as not healthy until gone, replaced by a move, or 2 minutes old; stale entries are removed', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  const labels = { app: 'web' };
  for (const n of ['a', 'b', 'c']) cache.pods.set(pod(n, { running: true, labels }));
  const spec = { minAvailable: 2, selector: { matchLabels: labels } };
  const evictedAt = new Date(clock.now() - 10_000);
  const uids = new Map<string, string>();
  const budget = (disruptedPods: Record<string, Date>, rv = '7') => {
    const b = pdb('web', spec, { observedGeneration: 2, expectedPods: 3, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 0, disruptedPods });
    b.metadata!.resourceVersion = rv;
    cache.podDisruptionBudgets.set(b);
  };
  const lastStatus = () => fake.calls.at(-1)!.args[2] as { metadata: { resourceVersion: string }; status: V1PodDisruptionBudgetStatus & { disruptedPods: Record<string, Date | null> } };

  // An eviction took a disruption of a (its entry 10 s old): a is not healthy; looked at again when the entry is due.
  budget({ a: evictedAt });
  let result = await reconcileBudget('default/web', ctx, uids);
  assert.equal(fake.calls.length, 1);
  assert.equal(lastStatus().metadata.resourceVersion, '7', 'the write is bound to the version read');
  assert.equal(lastStatus().status.currentHealthy, 2);
  assert.equal(lastStatus().status.disruptionsAllowed, 0);
  assert.deepEqual(lastStatus().status.disruptedPods, { a: evictedAt });
  assert.equal(result?.requeueAfterMs, 110_000);

  // A move replaced a (same name, another uid): the entry goes and the new pod counts by its readiness.
  cache.pods.set(pod('a', { running: true, labels, uid: 'uid-a-moved' }));
  result = await reconcileBudget('default/web', ctx, uids);
  assert.deepEqual(lastStatus().status.disruptedPods, { a: null }, 'removed by a merge patch');
  assert.equal(lastStatus().status.currentHealthy, 3);
  assert.equal(lastStatus().status.disruptionsAllowed, 1);
  assert.equal(result, undefined);

  // A pod that is gone leaves the map; one that stays past 2 minutes too, with a NotDeleted warning.
  cache.pods.remove('c', 'default');
  budget({ b: evictedAt, c: evictedAt }, '8');
  await reconcileBudget('default/web', ctx, uids);
  assert.deepEqual(lastStatus().status.disruptedPods, { b: evictedAt, c: null });
  assert.equal(lastStatus().status.currentHealthy, 1);
  clock.advance(110_000);
  budget({ b: evictedAt }, '9');
  await reconcileBudget('default/web', ctx, uids);
  assert.deepEqual(lastStatus().status.disruptedPods, { b: null });
  assert.equal(lastStatus().status.currentHealthy, 2);
  assert.equal(fake.eventReasons.at(-1), 'NotDeleted');
  assert.equal(fake.eventMessage('NotDeleted'), "Pod was expected by PDB default/web to be deleted but it wasn't");

  // Another write came first (an eviction): no error, the budget's update brings it back.
  budget({ b: new Date(clock.now()) }, '10');
  fake.failures.set('patchPodDisruptionBudgetStatus', new ApiError('patch', 409, 'Conflict', 'the object has been modified'));
  assert.deepEqual(await reconcileBudget('default/web', ctx, uids), { requeueAfterMs: 120_000 });
});
