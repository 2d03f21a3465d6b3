/**
 * The ReplicaSet sync: as many active pods as `spec.replicas`, and the status kubectl prints.
 *
 * A pod being replaced by a move, a rollback or a restore (between the DELETED of its old uid and the ADDED
 * of its new one) counts as present, and so does a `Failed` pod whose restore failed, which the pod
 * lifecycle controller replaces afresh: the ReplicaSet never adds a pod that would start without the state
 * (seed "Moves"). Pods it created or deleted but that the cache does not show yet are counted through
 * {@link Expectations}, so that a burst of events does not create or delete twice.
 *
 * Pods are created as Kubernetes' ReplicaSet controller creates them: at most {@link BURST_REPLICAS} a
 * sync, in slow-start batches of 1, 2, 4, … made concurrently (`slowStartBatch`), each pod counted in the
 * expectations as soon as its create answers; a batch with a failure ends the sync. A sync never
 * overlaps another of the same ReplicaSet (the work queue), so pods in flight are never counted twice.
 *
 * A pod that cannot be created (the API server refuses it: its module is not pushed, say) is a `Warning`
 * `FailedCreate` event on the ReplicaSet with the API server's message, and the `ReplicaFailure` condition
 * (reason `FailedCreate`) in its status, which the Deployment copies, as in Kubernetes; the sync then
 * fails, so the worker tries again with back-off (5 ms doubling to 1 min, for ever), and the repeats of the
 * event raise its count. The condition goes once a pod is created.
 */
import type { V1Pod, V1ReplicaSet, V1ReplicaSetCondition } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { ANNOTATIONS, errorMessage, isConflict, isNotFound, statusMessage, controllerOf, isPodActive, isPodReady } from '../../api/index.ts';
import { podFromTemplate } from '../runtime/pods.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';
import { slowStartBatch } from '../runtime/slow-start.ts';

/**
 * The most pods one sync creates or deletes (the rest follow in the next sync): Kubernetes'
 * `BurstReplicas`, 500.
 */
export const BURST_REPLICAS = 500;

/** The first slow-start batch: Kubernetes' `SlowStartInitialBatchSize`, 1. */
export const SLOW_START_INITIAL_BATCH = 1;

/**
 * How long a creation or deletion is expected before it is forgotten although the cache does not show
 * it: Kubernetes' `ExpectationsTimeout`, 5 min. (30 s was too short under load: with the control plane
 * busy, the informer showed a burst's pods more than 30 s after their creates answered, and the
 * ReplicaSet created them again, then deleted the surplus.)
 */
export const EXPECTATIONS_TIMEOUT_MS = 300_000;

/** Creations and deletions a controller made that its cache does not show yet. */
export class Expectations {
  readonly #creates = new Map<string, Map<string, number>>();
  readonly #deletes = new Map<string, Map<string, number>>();
  /** Forget what the cache shows (or what is older than {@link EXPECTATIONS_TIMEOUT_MS}). */
  observe(ownerKey: string, pods: readonly V1Pod[], now: number): void {
    const c = this.#creates.get(ownerKey);
    const d = this.#deletes.get(ownerKey);
    if (!c?.size && !d?.size) return; // nothing expected: no need to look at the pods
    const uids = new Set(pods.map((p) => p.metadata?.uid ?? ''));
    for (const [uid, at] of c ?? []) if (uids.has(uid) || at + EXPECTATIONS_TIMEOUT_MS < now) c!.delete(uid);
    for (const [uid, at] of d ?? []) if (!uids.has(uid) || at + EXPECTATIONS_TIMEOUT_MS < now) d!.delete(uid);
  }
  /** A pod created with `uid` (the API's answer), not yet in the cache. */
  created(ownerKey: string, uid: string, now: number): void {
    const m = this.#creates.get(ownerKey) ?? new Map<string, number>();
    m.set(uid, now);
    this.#creates.set(ownerKey, m);
  }
  deleted(ownerKey: string, uid: string, now: number): void {
    const m = this.#deletes.get(ownerKey) ?? new Map<string, number>();
    m.set(uid, now);
    this.#deletes.set(ownerKey, m);
  }
  pendingCreates(ownerKey: string): number {
    return this.#creates.get(ownerKey)?.size ?? 0;
  }
  isDeleting(ownerKey: string, uid: string): boolean {
    return this.#deletes.get(ownerKey)?.has(uid) ?? false;
  }
}

/** Whether a pod counts for its owner: active, or Failed on a restore the pod lifecycle controller replaces. */
export function countsForOwner(pod: V1Pod): boolean {
  if (isPodActive(pod)) return true;
  return pod.status?.phase === 'Failed' && !pod.metadata?.deletionTimestamp && pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] !== undefined;
}

/** The pods an owner controls (by controller reference uid), from the owner index when there is one. */
export function ownedPods(ctx: ControllerContext, namespace: string, ownerUid: string | undefined): V1Pod[] {
  const index = ctx.state.podsByOwner;
  if (index && ownerUid) return index.owned(ownerUid).filter((p) => p.metadata?.namespace === namespace);
  return ctx.cache.pods.list(namespace).filter((p) => controllerOf(p)?.uid === ownerUid);
}

/** The pods of `namespace` with no controller, from the owner index when there is one. */
function orphanPods(ctx: ControllerContext, namespace: string): V1Pod[] {
  const index = ctx.state.podsByOwner;
  if (index) return index.orphans(namespace);
  return ctx.cache.pods.list(namespace).filter((p) => !controllerOf(p));
}

/** Deletion order: unbound first, then not running, then not ready, then the newest; moving pods last. */
function deletionRank(p: V1Pod): [number, number, number, number, number] {
  const moving = p.metadata?.annotations?.[ANNOTATIONS.restoreFrom] !== undefined ? 1 : 0;
  const created = Date.parse(String(p.metadata?.creationTimestamp ?? '')) || 0;
  return [moving, p.spec?.nodeName ? 1 : 0, p.status?.phase === 'Running' ? 1 : 0, isPodReady(p) ? 1 : 0, -created];
}

function compareRank(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return 0;
}

/** Reconciles the ReplicaSet `namespace/name`. */
export async function reconcileReplicaSet(key: string, ctx: ControllerContext, exp: Expectations): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const rs = ctx.cache.replicaSets.get(name, namespace);
  if (!rs || rs.metadata?.deletionTimestamp) return undefined;
  const uid = rs.metadata?.uid ?? '';
  const now = ctx.clock.now();
  // Adopt orphans that match (as Kubernetes does), so that a pod recreated by hand is counted.
  for (const p of orphanPods(ctx, namespace)) {
    if (isPodActive(p) && matchLabelSelector(rs.spec?.selector, p.metadata?.labels)) {
      try {
        await ctx.api.patchPod(namespace, p.metadata?.name ?? '', {
          metadata: {
            ownerReferences: [
              ...(p.metadata?.ownerReferences ?? []),
              { apiVersion: 'apps/v1', kind: 'ReplicaSet', name, uid, controller: true, blockOwnerDeletion: true },
            ],
          },
        });
      } catch (err: unknown) {
        if (!isNotFound(err) && !isConflict(err)) throw err;
      }
    }
  }
  const owned = ownedPods(ctx, namespace, uid);
  exp.observe(key, owned, now);
  const active = owned.filter((p) => countsForOwner(p) && !exp.isDeleting(key, p.metadata?.uid ?? ''));
  const replacing = ctx.state.replacements.ownedBy(uid);
  const present = replacing.length === 0 ? undefined : new Set(owned.map((p) => `${namespace}/${p.metadata?.name}`));
  const ghosts = replacing.filter((k) => !present?.has(k)).length;
  const want = rs.spec?.replicas ?? 1;
  const have = active.length + ghosts + exp.pendingCreates(key);
  let createError: unknown;
  if (have < want) {
    const outcome = await slowStartBatch(Math.min(BURST_REPLICAS, want - have), SLOW_START_INITIAL_BATCH, async (i) => {
      const created = await ctx.api.createPod(namespace, podFromTemplate(rs, { apiVersion: 'apps/v1', kind: 'ReplicaSet' }));
      exp.created(key, created.metadata?.uid ?? `unknown-${now}-${i}`, now);
      ctx.log.info({ replicaset: key, pod: created.metadata?.name }, 'created pod');
      await recordEvent(ctx, rsRef(rs), 'Normal', 'SuccessfulCreate', `Created pod: ${created.metadata?.name}`, { component: COMPONENT });
    });
    if (outcome.error !== undefined) {
      // As Kubernetes: a FailedCreate event with the API server's words, the ReplicaFailure condition, and
      // the error thrown after the status so that the worker tries again with back-off. The rest wait.
      createError = outcome.error;
      ctx.log.warn({ replicaset: key, err: errorMessage(createError), created: outcome.successes, skipped: outcome.skipped }, 'cannot create pod');
      await recordEvent(ctx, rsRef(rs), 'Warning', 'FailedCreate', `Error creating: ${createFailure(rs, createError)}`, { component: COMPONENT });
    }
  } else if (active.length + ghosts > want) {
    const victims = [...active].sort((a, b) => compareRank(deletionRank(a), deletionRank(b))).slice(0, Math.min(BURST_REPLICAS, active.length + ghosts - want));
    // Concurrently, as Kubernetes deletes them; the first unexpected error is thrown once all have answered.
    const results = await Promise.allSettled(
      victims.map(async (p) => {
        let deleted = true;
        try {
          await ctx.api.deletePod(namespace, p.metadata?.name ?? '', { uid: p.metadata?.uid });
        } catch (err: unknown) {
          if (!isNotFound(err) && !isConflict(err)) throw err;
          deleted = false; // gone already, or another pod by now: nothing this sync did
        }
        exp.deleted(key, p.metadata?.uid ?? '', now);
        if (deleted) {
          ctx.log.info({ replicaset: key, pod: p.metadata?.name }, 'deleted pod');
          await recordEvent(ctx, rsRef(rs), 'Normal', 'SuccessfulDelete', `Deleted pod: ${p.metadata?.name}`, { component: COMPONENT });
        }
      }),
    );
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }
  await writeReplicaSetStatus(ctx, rs, active, createError === undefined ? undefined : createFailure(rs, createError));
  if (createError !== undefined) throw createError;
  return undefined;
}

/**
 * The API server's message for a pod it refused, with the name it generated for that try written as the
 * `generateName` prefix (`Pod "counter-5d9-"`, as Kubernetes' messages read): every try then gives the same
 * message, so the event's repeats aggregate and the condition (and the status write) stays the same, which
 * would otherwise bring the ReplicaSet back at once and defeat the back-off.
 */
export function createFailure(rs: V1ReplicaSet, err: unknown): string {
  const prefix = `${rs.metadata?.name ?? ''}-`;
  const generated = new RegExp(`"${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[a-z0-9]{5}"`, 'g');
  return statusMessage(err).replace(generated, `"${prefix}"`);
}

/** The `source.component` of a ReplicaSet's events, as Kubernetes names it. */
const COMPONENT = 'replicaset-controller';

function rsRef(rs: V1ReplicaSet) {
  return { apiVersion: 'apps/v1', kind: 'ReplicaSet', namespace: rs.metadata?.namespace, name: rs.metadata?.name, uid: rs.metadata?.uid };
}

/**
 * The `ReplicaFailure` condition as it should be: `True` with reason `FailedCreate` and the API server's
 * message while pods cannot be created, absent otherwise (Kubernetes' `calculateStatus`).
 */
export function replicaFailureConditions(rs: V1ReplicaSet, failure: string | undefined, now: number): V1ReplicaSetCondition[] {
  const others = (rs.status?.conditions ?? []).filter((c) => c.type !== 'ReplicaFailure');
  if (failure === undefined) return others;
  const prev = rs.status?.conditions?.find((c) => c.type === 'ReplicaFailure');
  const since = prev?.status === 'True' ? prev.lastTransitionTime : (new Date(now).toISOString() as unknown as Date);
  return [...others, { type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate', message: failure, lastTransitionTime: since }];
}

function sameConditions(a: V1ReplicaSetCondition[] | undefined, b: V1ReplicaSetCondition[]): boolean {
  const x = a ?? [];
  return x.length === b.length && b.every((c) => x.some((p) => p.type === c.type && p.status === c.status && p.reason === c.reason && p.message === c.message));
}

async function writeReplicaSetStatus(ctx: ControllerContext, rs: V1ReplicaSet, active: V1Pod[], failure: string | undefined): Promise<void> {
  const wanted = Object.entries(rs.spec?.template?.metadata?.labels ?? {});
  const ready = active.filter((p) => isPodReady(p)).length;
  const conditions = replicaFailureConditions(rs, failure, ctx.clock.now());
  const status = {
    replicas: active.length,
    fullyLabeledReplicas: active.filter((p) => wanted.every(([k, v]) => p.metadata?.labels?.[k] === v)).length,
    readyReplicas: ready,
    availableReplicas: ready,
    observedGeneration: rs.metadata?.generation ?? 1,
    // Written when there is one, or to remove one (a merge patch replaces the whole list).
    ...(conditions.length > 0 || (rs.status?.conditions?.length ?? 0) > 0 ? { conditions } : {}),
  };
  const cur = rs.status ?? { replicas: 0 };
  if (
    cur.replicas === status.replicas &&
    (cur.fullyLabeledReplicas ?? 0) === status.fullyLabeledReplicas &&
    (cur.readyReplicas ?? 0) === status.readyReplicas &&
    (cur.availableReplicas ?? 0) === status.availableReplicas &&
    (cur.observedGeneration ?? 0) === status.observedGeneration &&
    sameConditions(cur.conditions, conditions)
  ) {
    return;
  }
  try {
    await ctx.api.patchReplicaSetStatus(rs.metadata?.namespace ?? 'default', rs.metadata?.name ?? '', { status });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
}
