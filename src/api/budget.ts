/**
 * A PodDisruptionBudget's arithmetic (policy/v1; Kubernetes' disruption controller, `pkg/controller/
 * disruption`): how many of its pods are expected and healthy, how many must stay healthy, and so how many
 * may be disrupted now. The disruption controller writes it into the budget's status (`kubectl get pdb`),
 * which the API server's eviction checks and decrements (seed 002 "Drain and evictions").
 *
 * One simplification, written down in docs/controllers.md: Kubernetes counts the expected pods of a
 * percentage or a `maxUnavailable` from the scale of the pods' controllers (a Deployment's replicas);
 * here they are the pods the selector matches, as for an integer `minAvailable`. The two differ only while
 * a controller is short of pods.
 */

/** The parts of a pod the arithmetic reads. */
export interface BudgetPod {
  metadata?: { deletionTimestamp?: unknown };
  status?: { conditions?: Array<{ type?: string; status?: string }> };
}

/** The counts of a budget's status (policy/v1 PodDisruptionBudgetStatus), all pod counts. */
export interface BudgetCounts {
  /** Pods the budget's selector matches. */
  expectedPods: number;
  /** Of those, Ready and not being deleted. */
  currentHealthy: number;
  /** How many must stay healthy: `minAvailable`, or `expectedPods - maxUnavailable`. */
  desiredHealthy: number;
  /** `currentHealthy - desiredHealthy`, at least 0: how many may be evicted now. */
  disruptionsAllowed: number;
}

/** Whether a pod counts as healthy for a budget: Ready, and not being deleted. */
export function isBudgetHealthy(pod: BudgetPod): boolean {
  return !pod.metadata?.deletionTimestamp && (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/**
 * An int-or-percent of a budget scaled to `total` pods, rounded up (as Kubernetes'
 * `GetScaledValueFromIntOrPercent(..., roundUp=true)` for both fields). A value that is neither (the
 * API server refuses those) counts as 0.
 */
export function scaledIntOrPercent(v: unknown, total: number): number {
  if (typeof v === 'number') return v;
  const m = /^(\d+)%$/.exec(String(v));
  if (!m) return Number(v) || 0;
  return Math.ceil((Number(m[1]) * total) / 100);
}

/**
 * The counts of a budget over the pods its selector matches.
 * @param spec the budget's `spec` (`minAvailable` or `maxUnavailable`; neither means `minAvailable: 1`)
 * @param pods the pods of the budget's namespace that its selector matches
 * @param disrupted pods an accepted eviction is about to take (the budget's `status.disruptedPods` still
 *   pending): not healthy, whatever their conditions say
 */
export function budgetCounts(spec: { minAvailable?: unknown; maxUnavailable?: unknown }, pods: readonly BudgetPod[], disrupted: (pod: BudgetPod) => boolean = () => false): BudgetCounts {
  const expectedPods = pods.length;
  const currentHealthy = pods.filter((p) => isBudgetHealthy(p) && !disrupted(p)).length;
  const desiredHealthy = spec.maxUnavailable !== undefined && spec.maxUnavailable !== null
    ? Math.max(0, expectedPods - scaledIntOrPercent(spec.maxUnavailable, expectedPods))
    : scaledIntOrPercent(spec.minAvailable ?? 1, expectedPods);
  return { expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed: Math.max(0, currentHealthy - desiredHealthy) };
}
