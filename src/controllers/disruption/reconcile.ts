/**
 * One sync of a PodDisruptionBudget (Kubernetes' disruption controller): its status from the pods its
 * selector matches (budget.ts): `expectedPods`, `currentHealthy`, `desiredHealthy`, `disruptionsAllowed`,
 * `observedGeneration`, and the `DisruptionAllowed` condition (True `SufficientPods` / False
 * `InsufficientPods`, its `lastTransitionTime` kept while its status holds). Written only when it changes.
 * `disruptedPods` stays empty: the API server's eviction counts the pods live instead of reserving them.
 */
import type { V1PodDisruptionBudget, V1PodDisruptionBudgetStatus } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { budgetCounts, isNotFound } from '../../api/index.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';

/** The status a budget should have now, given its current one (for the condition's transition time). */
export function desiredBudgetStatus(pdb: V1PodDisruptionBudget, ctx: ControllerContext): V1PodDisruptionBudgetStatus {
  const ns = pdb.metadata?.namespace ?? 'default';
  const selector = pdb.spec?.selector;
  // policy/v1: an empty selector matches every pod of the namespace; none matches none.
  const pods = selector ? ctx.cache.pods.list(ns).filter((p) => matchLabelSelector(selector, p.metadata?.labels ?? {})) : [];
  const counts = budgetCounts(pdb.spec ?? {}, pods);
  const allowed = counts.disruptionsAllowed > 0;
  const previous = pdb.status?.conditions?.find((c) => c.type === 'DisruptionAllowed');
  const status = allowed ? 'True' : 'False';
  return {
    observedGeneration: pdb.metadata?.generation,
    ...counts,
    disruptedPods: pdb.status?.disruptedPods ?? {},
    conditions: [
      {
        type: 'DisruptionAllowed',
        status,
        reason: allowed ? 'SufficientPods' : 'InsufficientPods',
        message: '',
        observedGeneration: pdb.metadata?.generation,
        lastTransitionTime: previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : new Date(ctx.clock.now()),
      },
    ],
  };
}

function same(a: V1PodDisruptionBudgetStatus | undefined, b: V1PodDisruptionBudgetStatus): boolean {
  const ca = a?.conditions?.find((c) => c.type === 'DisruptionAllowed');
  const cb = b.conditions?.[0];
  return a?.observedGeneration === b.observedGeneration && a?.expectedPods === b.expectedPods && a?.currentHealthy === b.currentHealthy &&
    a?.desiredHealthy === b.desiredHealthy && a?.disruptionsAllowed === b.disruptionsAllowed && ca?.status === cb?.status && ca?.reason === cb?.reason;
}

/** Reconciles the budget `namespace/name`: writes its status when it differs from what its pods say. */
export async function reconcileBudget(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const pdb = ctx.cache.podDisruptionBudgets.get(name, namespace);
  if (!pdb || pdb.metadata?.deletionTimestamp) return undefined;
  const status = desiredBudgetStatus(pdb, ctx);
  if (same(pdb.status, status)) return undefined;
  try {
    await ctx.api.patchPodDisruptionBudgetStatus(namespace, name, { status });
  } catch (err: unknown) {
    if (isNotFound(err)) return undefined; // deleted meanwhile
    throw err;
  }
  return undefined;
}
