/**
 * One sync of a PodDisruptionBudget (Kubernetes' disruption controller): its status from the pods its
 * selector matches (budget.ts): `expectedPods`, `currentHealthy`, `desiredHealthy`, `disruptionsAllowed`,
 * `observedGeneration`, `disruptedPods`, and the `DisruptionAllowed` condition (True `SufficientPods` /
 * False `InsufficientPods`, its `lastTransitionTime` kept while its status holds). Written only when it
 * changes, bound to the budget's `resourceVersion` (an eviction's write of the same status in between is
 * not overwritten: the write is a Conflict and the budget's update brings it back).
 *
 * `disruptedPods` holds the pods the API server's eviction accepted (name -> eviction time): such a pod
 * counts as not healthy until it is gone, being deleted, replaced by a move (another pod of its name: a
 * later `creationTimestamp`, or another uid than the one seen with the entry), or its entry is older than
 * {@link DELETION_TIMEOUT_MS} (kube's `DeletionTimeout`; a Warning `NotDeleted` on the pod then). Such
 * entries are removed; the budget is looked at again when the oldest remaining one is due.
 */
import type { V1Pod, V1PodDisruptionBudget, V1PodDisruptionBudgetStatus } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { budgetCounts, isConflict, isNotFound } from '../../api/index.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';

/** How long a pod in `disruptedPods` is expected to go (kube's disruption controller `DeletionTimeout`). */
export const DELETION_TIMEOUT_MS = 2 * 60_000;

/**
 * The uid each pod of a `disruptedPods` entry had when this controller first saw the entry
 * (`<ns>/<budget>/<pod>@<time>` -> uid): a later pod of the same name is a move's replacement.
 */
export type DisruptedUids = Map<string, string>;

/** The pending entries of a budget's `disruptedPods` and when the first of them is due. */
interface Disrupted {
  /** Entries still pending (the pod counts as not healthy). */
  kept: Record<string, Date>;
  /** Pods whose entry expired while they stayed (the `NotDeleted` warning). */
  expired: V1Pod[];
  /** Observer ms when the first kept entry expires. */
  recheckAt?: number;
}

function epochMs(t: unknown): number {
  return t instanceof Date ? t.getTime() : Date.parse(String(t ?? ''));
}

/** kube's `buildDisruptedPodMap`, with a move's replacement counted as the evicted pod gone. */
function disruptedPods(pdb: V1PodDisruptionBudget, pods: readonly V1Pod[], now: number, uids: DisruptedUids): Disrupted {
  const out: Disrupted = { kept: {}, expired: [] };
  const entries = pdb.status?.disruptedPods ?? {};
  const prefix = `${pdb.metadata?.namespace}/${pdb.metadata?.name}/`;
  const live = new Set<string>();
  for (const pod of pods) {
    const name = pod.metadata?.name ?? '';
    const at = epochMs(entries[name]);
    if (!(name in entries) || !Number.isFinite(at) || pod.metadata?.deletionTimestamp) continue;
    const key = `${prefix}${name}@${at}`;
    const uid = pod.metadata?.uid ?? '';
    // Created after the eviction, or another uid than the one seen with the entry: a move's replacement.
    if (epochMs(pod.metadata?.creationTimestamp) > at || (uids.has(key) && uids.get(key) !== uid)) continue;
    live.add(key);
    if (at + DELETION_TIMEOUT_MS <= now) {
      out.expired.push(pod);
      continue;
    }
    if (!uids.has(key)) uids.set(key, uid);
    out.kept[name] = new Date(at);
    if (out.recheckAt === undefined || at + DELETION_TIMEOUT_MS < out.recheckAt) out.recheckAt = at + DELETION_TIMEOUT_MS;
  }
  for (const key of uids.keys()) if (key.startsWith(prefix) && !live.has(key)) uids.delete(key);
  return out;
}

/**
 * The status a budget should have now, given its current one (for the condition's transition time and
 * `disruptedPods`).
 * @param uids the uids seen with `disruptedPods` entries (kept across syncs by the controller)
 */
export function desiredBudgetStatus(pdb: V1PodDisruptionBudget, ctx: ControllerContext, uids: DisruptedUids = new Map()): V1PodDisruptionBudgetStatus {
  return budgetSync(pdb, ctx, uids).status;
}

function budgetSync(pdb: V1PodDisruptionBudget, ctx: ControllerContext, uids: DisruptedUids): { status: V1PodDisruptionBudgetStatus; disrupted: Disrupted } {
  const ns = pdb.metadata?.namespace ?? 'default';
  const selector = pdb.spec?.selector;
  // policy/v1: an empty selector matches every pod of the namespace; none matches none.
  const pods = selector ? ctx.cache.pods.list(ns).filter((p) => matchLabelSelector(selector, p.metadata?.labels ?? {})) : [];
  const disrupted = disruptedPods(pdb, pods, ctx.clock.now(), uids);
  const counts = budgetCounts(pdb.spec ?? {}, pods, (p) => ((p as V1Pod).metadata?.name ?? '') in disrupted.kept);
  const allowed = counts.disruptionsAllowed > 0;
  const previous = pdb.status?.conditions?.find((c) => c.type === 'DisruptionAllowed');
  const status = allowed ? 'True' : 'False';
  return {
    disrupted,
    status: {
      observedGeneration: pdb.metadata?.generation,
      ...counts,
      disruptedPods: disrupted.kept,
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
    },
  };
}

function sameDisrupted(a: Record<string, Date> | undefined, b: Record<string, Date>): boolean {
  const ka = Object.keys(a ?? {});
  return ka.length === Object.keys(b).length && ka.every((k) => k in b && epochMs(a![k]) === b[k]!.getTime());
}

function same(a: V1PodDisruptionBudgetStatus | undefined, b: V1PodDisruptionBudgetStatus): boolean {
  const ca = a?.conditions?.find((c) => c.type === 'DisruptionAllowed');
  const cb = b.conditions?.[0];
  return a?.observedGeneration === b.observedGeneration && a?.expectedPods === b.expectedPods && a?.currentHealthy === b.currentHealthy &&
    a?.desiredHealthy === b.desiredHealthy && a?.disruptionsAllowed === b.disruptionsAllowed && ca?.status === cb?.status && ca?.reason === cb?.reason &&
    sameDisrupted(a?.disruptedPods, b.disruptedPods ?? {});
}

/**
 * Reconciles the budget `namespace/name`: writes its status when it differs from what its pods say.
 * @param uids the controller's memory of `disruptedPods` entries' uids ({@link DisruptedUids})
 * @returns a look again when the first pending `disruptedPods` entry expires
 */
export async function reconcileBudget(key: string, ctx: ControllerContext, uids: DisruptedUids = new Map()): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const pdb = ctx.cache.podDisruptionBudgets.get(name, namespace);
  if (!pdb || pdb.metadata?.deletionTimestamp) return undefined;
  const { status, disrupted } = budgetSync(pdb, ctx, uids);
  const result = disrupted.recheckAt === undefined ? undefined : { requeueAfterMs: disrupted.recheckAt - ctx.clock.now() };
  if (same(pdb.status, status)) return result;
  for (const pod of disrupted.expired) {
    await recordEvent(ctx, { kind: 'Pod', apiVersion: 'v1', namespace, name: pod.metadata?.name, uid: pod.metadata?.uid }, 'Warning', 'NotDeleted',
      `Pod was expected by PDB ${namespace}/${name} to be deleted but it wasn't`, { component: 'controllermanager' });
  }
  // A merge patch: entries no longer pending are removed by name (null), the rest replaced.
  const removed = Object.fromEntries(Object.keys(pdb.status?.disruptedPods ?? {}).filter((k) => !(k in disrupted.kept)).map((k) => [k, null]));
  try {
    await ctx.api.patchPodDisruptionBudgetStatus(namespace, name, {
      metadata: { resourceVersion: pdb.metadata?.resourceVersion },
      status: { ...status, disruptedPods: { ...removed, ...status.disruptedPods } },
    });
  } catch (err: unknown) {
    if (isNotFound(err)) return undefined; // deleted meanwhile
    // Written meanwhile (an eviction took a disruption): the budget's update event brings it back.
    if (isConflict(err)) return result;
    throw err;
  }
  return result;
}
