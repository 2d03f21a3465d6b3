/**
 * An eviction's PodDisruptionBudget check, as kube-apiserver does it (`pkg/registry/core/pod/storage/
 * eviction.go`, `checkAndDecrement`): the budget's `status.disruptionsAllowed` (written by the disruption
 * controller) is checked, then the budget's status is written with `disruptionsAllowed - 1` and the pod
 * in `status.disruptedPods` (name -> eviction time) by an update bound to the `resourceVersion` read, and
 * only then is the pod deleted or moved. Of several evictions at the same moment one write wins; the
 * others get 409 from storage, read the budget again and check again (so with one disruption allowed
 * they answer 429). The disruption controller counts a pod in `disruptedPods` as not healthy until it is
 * gone (or replaced by a move) or its entry is older than {@link DISRUPTED_POD_TIMEOUT_MS}.
 */
import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { poddisruptionbudgets } from '../policy/index.ts';
import { labelSelectorFromObject } from '../selectors.ts';
import type { Registry } from '../store.ts';
import { arr, rec } from '../util.ts';

/**
 * Most entries a budget's `disruptedPods` may hold before evictions are refused (kube's
 * `MaxDisruptedPodSize`): that many accepted evictions not yet seen by the disruption controller.
 */
export const MAX_DISRUPTED_PODS = 2000;
/** How long a pod in `disruptedPods` counts as about to go (kube's disruption controller `DeletionTimeout`). */
export const DISRUPTED_POD_TIMEOUT_MS = 2 * 60_000;
/** Writes of a budget's status an eviction tries when other evictions keep changing it first. */
export const EVICTION_CONFLICT_TRIES = 20;
/** The `Retry-After` of a budget not processed yet, or still contended after every try (kube's 10 s). */
export const BUDGET_RETRY_AFTER_SECONDS = 10;

const VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget.";

/**
 * 429 for a budget whose status the disruption controller has not written for its generation yet, or that
 * other evictions kept changing under every try (kube's `createTooManyRequestsError`): with `Retry-After`,
 * so clients try again.
 */
export function budgetBusy(name: string): ApiError {
  return new ApiError(
    'TooManyRequests',
    VIOLATION,
    { retryAfterSeconds: BUDGET_RETRY_AFTER_SECONDS, causes: [{ reason: 'DisruptionBudget', message: `The disruption budget ${name} is still being processed by the server.` }] },
    { headers: { 'Retry-After': String(BUDGET_RETRY_AFTER_SECONDS) } },
  );
}

function isReady(pod: KubeObject): boolean {
  return arr(rec(pod.status).conditions).some((c) => c.type === 'Ready' && c.status === 'True') && !pod.metadata.deletionTimestamp;
}

/** The budgets of `pod`'s namespace whose (valid, non-empty) selector matches its labels. */
export async function budgetsOf(reg: Registry, pod: KubeObject): Promise<KubeObject[]> {
  const labels = pod.metadata.labels ?? {};
  return (await reg.list(poddisruptionbudgets, pod.metadata.namespace ?? '')).items.filter((b) => {
    const sel = rec(b.spec).selector;
    try {
      return sel !== undefined && labelSelectorFromObject(sel)(labels);
    } catch {
      return false;
    }
  });
}

/** Whether `pod` is already in `budget`'s `disruptedPods` with an entry younger than the timeout. */
export function isDisrupted(budget: KubeObject, podName: string, now = Date.now()): boolean {
  const at = Date.parse(String(rec(rec(budget.status).disruptedPods)[podName] ?? ''));
  return Number.isFinite(at) && at + DISRUPTED_POD_TIMEOUT_MS > now;
}

/**
 * Checks `budget` and, unless `dryRun`, records the eviction of `podName` in its status (kube's
 * `checkAndDecrement`).
 * @throws ApiError TooManyRequests (no disruption allowed; status not processed yet), Forbidden (a negative
 *   allowance, too many unconfirmed evictions), Conflict (another write of the budget came first)
 */
async function checkAndDecrement(reg: Registry, budget: KubeObject, podName: string, dryRun: boolean): Promise<void> {
  const name = budget.metadata.name ?? '';
  const status = rec(budget.status);
  const allowed = Number(status.disruptionsAllowed ?? 0);
  if (Number(status.observedGeneration ?? 0) < Number(budget.metadata.generation ?? 0)) throw budgetBusy(name);
  if (allowed < 0) throw new ApiError('Forbidden', `poddisruptionbudgets.policy "${name}" is forbidden: pdb disruptions allowed is negative`, { name, group: 'policy', kind: 'poddisruptionbudgets' });
  const disrupted = { ...rec(status.disruptedPods) };
  if (Object.keys(disrupted).length > MAX_DISRUPTED_PODS) {
    throw new ApiError('Forbidden', `poddisruptionbudgets.policy "${name}" is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller`, { name, group: 'policy', kind: 'poddisruptionbudgets' });
  }
  if (allowed === 0) {
    throw new ApiError('TooManyRequests', VIOLATION, {
      causes: [{ reason: 'DisruptionBudget', message: `The disruption budget ${name} needs ${Number(status.desiredHealthy ?? 0)} healthy pods and has ${Number(status.currentHealthy ?? 0)} currently` }],
    });
  }
  const next = structuredClone(budget);
  if (rec(next.status) !== next.status) next.status = {};
  const st = rec(next.status);
  st.disruptionsAllowed = allowed - 1;
  if (allowed - 1 === 0) {
    // kube's UpdateDisruptionAllowedCondition: the condition turns False, InsufficientPods.
    const conditions = arr(st.conditions);
    const previous = conditions.find((c) => c.type === 'DisruptionAllowed');
    const condition = {
      type: 'DisruptionAllowed',
      status: 'False',
      reason: 'InsufficientPods',
      message: '',
      observedGeneration: st.observedGeneration,
      lastTransitionTime: previous?.status === 'False' && previous.lastTransitionTime ? previous.lastTransitionTime : `${new Date().toISOString().slice(0, 19)}Z`,
    };
    st.conditions = [...conditions.filter((c) => c.type !== 'DisruptionAllowed'), condition];
  }
  if (dryRun) return;
  disrupted[podName] = `${new Date().toISOString().slice(0, 19)}Z`;
  st.disruptedPods = disrupted;
  // Bound to the version read: of two evictions reading the same budget, the second write is a Conflict.
  await reg.update(poddisruptionbudgets, budget.metadata.namespace ?? '', name, next, {}, 'status');
}

/**
 * Honours the PodDisruptionBudget of `pod` before an eviction: nothing without a budget, nothing for a pod
 * that is not Ready (evicting it does not lower the healthy count), and otherwise the budget's status
 * checked and written ({@link checkAndDecrement}), again on a conflict with a fresh read, up to
 * {@link EVICTION_CONFLICT_TRIES} times.
 * @param opts.allowCounted a pod already in the budget's `disruptedPods` (an eviction of this very pod whose
 *   move failed) passes without a second entry: it is not counted twice
 * @throws ApiError TooManyRequests (429: the budget allows no disruption now, without Retry-After as kube
 *   answers it; or its status is not processed yet or still contended, with Retry-After), InternalError
 *   (more than one budget), Forbidden
 */
export async function checkDisruptionBudgets(reg: Registry, pod: KubeObject, opts: { dryRun?: boolean; allowCounted?: boolean } = {}): Promise<void> {
  const budgets = await budgetsOf(reg, pod);
  if (budgets.length === 0) return;
  if (budgets.length > 1) throw new ApiError('InternalError', 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.');
  if (!isReady(pod)) return;
  let budget = budgets[0]!;
  const podName = pod.metadata.name ?? '';
  if (opts.allowCounted && isDisrupted(budget, podName)) return;
  for (let tries = 1; ; tries++) {
    try {
      await checkAndDecrement(reg, budget, podName, opts.dryRun === true);
      return;
    } catch (err: unknown) {
      if (!(err instanceof ApiError && err.reason === 'Conflict')) throw err;
      if (tries >= EVICTION_CONFLICT_TRIES) throw budgetBusy(budget.metadata.name ?? '');
    }
    // Another eviction (or the disruption controller) wrote the budget first: read it again and check again.
    // A few ms of jitter from the second retry on, so a crowd of evictions does not retry in lock step.
    if (tries > 1) await sleep(randomInt(1, 20));
    budget = await reg.get(poddisruptionbudgets, budget.metadata.namespace ?? '', budget.metadata.name ?? '');
  }
}
