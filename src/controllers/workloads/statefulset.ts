/**
 * The StatefulSet sync (Kubernetes' `StatefulSetControl`): pods of stable names `<set>-<ordinal>` for the
 * ordinals `start … start+replicas-1` (`spec.ordinals.start`, 0 by default), each labelled
 * `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and `controller-revision-hash`, with
 * `spec.hostname` its name and `spec.subdomain` the set's `serviceName`.
 *
 * - `OrderedReady` (the default): one pod at a time, lowest ordinal first, each created only once every lower
 *   one is Running and Ready; scale down removes the highest ordinal first, one at a time, while the others
 *   are Running and Ready. `Parallel`: every missing pod created and every condemned pod deleted in one sync.
 * - `RollingUpdate` (partition 0 by default): once every pod is there (and, OrderedReady, Ready), the pod of
 *   the highest ordinal at or above the partition whose `controller-revision-hash` is not the update revision
 *   is deleted, and comes back from the new template; one at a time. `OnDelete`: pods change only when
 *   deleted by hand. A pod is created at the update revision, or, below a RollingUpdate's partition, at the
 *   current revision from its ControllerRevision's template (Kubernetes' `newVersionedStatefulSetPod`).
 * - Revisions: a ControllerRevision `<set>-<hash>` per template (the hash is the Deployment's
 *   `templateHash`), `revision` one more than the newest (a rollback raises the reused one's the same way),
 *   the oldest beyond `revisionHistoryLimit` that no pod runs removed; `status.currentRevision`/`updateRevision` name them, as `kubectl rollout status` reads.
 * - A pod `Failed` is deleted and made again (as Kubernetes), except one whose restore failed (the pod
 *   lifecycle controller replaces it with the state it has, see podlifecycle).
 *
 * Moves (seed "Moves", docs/checkpoints.md): a move replaces a pod by one write that keeps its name, labels
 * and owner (`pods/<name>/replace`), so the replacement is this set's pod of the same ordinal, adopted as it
 * is. Between the DELETED of the old uid and the ADDED of the new one the ordinal counts as present (the
 * shared `replacements`), and a pod being restored (`kube32.io/restore-from`) is never deleted by a scale
 * down or a rolling update while it moves: the set never makes a second pod of one ordinal, nor one that
 * would start without the state. Should a create race a replacement anyway (another control plane), the
 * name is taken and the API server answers 409 AlreadyExists, which the sync takes as "present".
 */
import type { V1ControllerRevision, V1Pod, V1PodTemplateSpec, V1StatefulSet } from '@kubernetes/client-node';
import { ANNOTATIONS, controllerOf, errorMessage, isAlreadyExists, isConflict, isNotFound, isPodReady, statusMessage } from '../../api/index.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { podFromTemplate } from '../runtime/pods.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';
import { templateHash } from './deployment.ts';
import { countsForOwner, ownedPods } from './replicaset.ts';

/** The labels Kubernetes' StatefulSet controller puts on its pods. */
export const STS_POD_NAME_LABEL = 'statefulset.kubernetes.io/pod-name';
export const STS_POD_INDEX_LABEL = 'apps.kubernetes.io/pod-index';
export const REVISION_HASH_LABEL = 'controller-revision-hash';

/** The `source.component` of a StatefulSet's events, as Kubernetes names it. */
const COMPONENT = 'statefulset-controller';

/** The ordinal of `pod` in the set `setName` (`web-2` → 2), or undefined when the name is not `<set>-<n>`. */
export function ordinalOf(setName: string, podName: string | undefined): number | undefined {
  if (!podName?.startsWith(`${setName}-`)) return undefined;
  const rest = podName.slice(setName.length + 1);
  if (!/^(0|[1-9][0-9]*)$/.test(rest)) return undefined;
  return Number(rest);
}

/** Running with the Ready condition True (Kubernetes' `isRunningAndReady`). */
function runningAndReady(p: V1Pod): boolean {
  return p.status?.phase === 'Running' && isPodReady(p);
}

/** Whether a move (or a restore) is replacing the pod now: it must not be deleted under the move. */
function moving(ctx: ControllerContext, p: V1Pod): boolean {
  return p.metadata?.annotations?.[ANNOTATIONS.restoreFrom] !== undefined || ctx.state.replacements.has(`${p.metadata?.namespace}/${p.metadata?.name}`);
}

function stsRef(s: V1StatefulSet) {
  return { apiVersion: 'apps/v1', kind: 'StatefulSet', namespace: s.metadata?.namespace, name: s.metadata?.name, uid: s.metadata?.uid };
}

/**
 * The pod of ordinal `ordinal` at `revision` (Kubernetes' `newVersionedStatefulSetPod`), from `template` (the
 * revision's; the set's own by default).
 */
export function statefulSetPod(set: V1StatefulSet, ordinal: number, revision: string, template = set.spec?.template): V1Pod {
  const name = `${set.metadata?.name}-${ordinal}`;
  const pod = podFromTemplate({ metadata: set.metadata, spec: { template } }, { apiVersion: 'apps/v1', kind: 'StatefulSet' });
  delete pod.metadata!.generateName;
  pod.metadata!.name = name;
  pod.metadata!.labels = { ...pod.metadata!.labels, [STS_POD_NAME_LABEL]: name, [STS_POD_INDEX_LABEL]: String(ordinal), [REVISION_HASH_LABEL]: revision };
  pod.spec!.hostname = name;
  if (set.spec?.serviceName) pod.spec!.subdomain = set.spec.serviceName;
  return pod;
}

/** The ControllerRevisions the set controls, oldest revision first. */
function ownedRevisions(ctx: ControllerContext, set: V1StatefulSet): V1ControllerRevision[] {
  const uid = set.metadata?.uid;
  return ctx.cache.controllerRevisions
    .list(set.metadata?.namespace)
    .filter((r) => controllerOf(r)?.uid === uid)
    .sort((a, b) => a.revision - b.revision);
}

/**
 * The update revision's name, its ControllerRevision created when missing (409 AlreadyExists: another sync
 * made it), and the history trimmed to `revisionHistoryLimit` revisions that no pod runs.
 */
async function syncRevisions(ctx: ControllerContext, set: V1StatefulSet, pods: V1Pod[]): Promise<{ update: string; number: number }> {
  const ns = set.metadata?.namespace ?? 'default';
  const name = `${set.metadata?.name}-${templateHash(set.spec?.template, set.status?.collisionCount)}`;
  const revisions = ownedRevisions(ctx, set);
  const existing = revisions.find((r) => r.metadata?.name === name);
  const newest = revisions.at(-1)?.revision ?? 0;
  let number = existing?.revision ?? newest + 1;
  if (existing && existing !== revisions.at(-1) && existing.revision <= newest) {
    // A rollback to an older template: that revision becomes the newest (Kubernetes' history, `kubectl rollout history`).
    number = newest + 1;
    try {
      await ctx.api.patchControllerRevision(ns, name, { revision: number });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
  }
  if (!existing) {
    const cr: V1ControllerRevision = {
      metadata: {
        name,
        namespace: ns,
        labels: { ...(set.spec?.selector?.matchLabels ?? {}), [REVISION_HASH_LABEL]: name },
        ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: set.metadata!.name!, uid: set.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
      },
      data: { spec: { template: { ...structuredClone(set.spec?.template), $patch: 'replace' } } },
      revision: number,
    };
    try {
      number = (await ctx.api.createControllerRevision(ns, cr)).revision ?? number;
    } catch (err: unknown) {
      if (!isAlreadyExists(err)) throw err;
    }
  }
  const limit = set.spec?.revisionHistoryLimit ?? 10;
  const live = new Set([name, set.status?.currentRevision, ...pods.map((p) => p.metadata?.labels?.[REVISION_HASH_LABEL])]);
  const old = revisions.filter((r) => !live.has(r.metadata?.name));
  for (const r of old.slice(0, Math.max(0, old.length - limit))) {
    try {
      await ctx.api.deleteControllerRevision(ns, r.metadata?.name ?? '');
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
  }
  return { update: name, number };
}

/** Reconciles the StatefulSet `namespace/name`. */
export async function reconcileStatefulSet(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const set = ctx.cache.statefulSets.get(name, namespace);
  if (!set || set.metadata?.deletionTimestamp) return undefined;
  const uid = set.metadata?.uid ?? '';
  // Adopt the orphans that match and are members by name (Kubernetes' `isMemberOf`): a pod made by hand as
  // `web-1`, or one whose set was deleted with `--cascade=orphan` and made again.
  for (const p of ctx.state.podsByOwner?.orphans(namespace) ?? ctx.cache.pods.list(namespace).filter((x) => !controllerOf(x))) {
    if (p.metadata?.deletionTimestamp || ordinalOf(name, p.metadata?.name) === undefined || !matchLabelSelector(set.spec?.selector, p.metadata?.labels)) continue;
    try {
      await ctx.api.patchPod(namespace, p.metadata?.name ?? '', {
        metadata: { ownerReferences: [...(p.metadata?.ownerReferences ?? []), { apiVersion: 'apps/v1', kind: 'StatefulSet', name, uid, controller: true, blockOwnerDeletion: true }] },
      });
    } catch (err: unknown) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }
  const owned = ownedPods(ctx, namespace, uid);
  const { update } = await syncRevisions(ctx, set, owned);
  const current = set.status?.currentRevision || update;
  const strategy = set.spec?.updateStrategy?.type ?? 'RollingUpdate';
  const partition = strategy === 'RollingUpdate' ? (set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0) : 0;
  // Below the partition a pod is made at the current revision, from the template its ControllerRevision keeps.
  const currentTemplate =
    current === update
      ? undefined
      : (ctx.cache.controllerRevisions.get(current, namespace)?.data as { spec?: { template?: V1PodTemplateSpec & { $patch?: string } } } | undefined)?.spec?.template;
  const replicas = set.spec?.replicas ?? 1;
  const start = set.spec?.ordinals?.start ?? 0;
  const parallel = set.spec?.podManagementPolicy === 'Parallel';
  const byOrdinal = new Map<number, V1Pod>();
  const condemned: V1Pod[] = [];
  for (const p of owned) {
    const o = ordinalOf(name, p.metadata?.name);
    if (o !== undefined && o >= start && o < start + replicas) byOrdinal.set(o, p);
    else condemned.push(p);
  }
  condemned.sort((a, b) => (ordinalOf(name, b.metadata?.name) ?? -1) - (ordinalOf(name, a.metadata?.name) ?? -1));

  let failure: unknown;
  // Scale up, and pods that failed made again.
  let blocked = false;
  for (let o = start; o < start + replicas && !blocked; o++) {
    const podName = `${name}-${o}`;
    const pod = byOrdinal.get(o);
    if (!pod) {
      if (ctx.state.replacements.has(`${namespace}/${podName}`)) {
        blocked = !parallel; // being moved: present, not Ready yet
        continue;
      }
      try {
        const old = currentTemplate && o < start + partition ? (({ $patch: _, ...t }) => t)(currentTemplate) : undefined;
        await ctx.api.createPod(namespace, old ? statefulSetPod(set, o, current, old) : statefulSetPod(set, o, update));
        ctx.log.info({ statefulset: key, pod: podName }, 'created pod');
        await recordEvent(ctx, stsRef(set), 'Normal', 'SuccessfulCreate', `create Pod ${podName} in StatefulSet ${name} successful`, { component: COMPONENT });
      } catch (err: unknown) {
        if (!isAlreadyExists(err)) {
          failure = err;
          ctx.log.warn({ statefulset: key, pod: podName, err: errorMessage(err) }, 'cannot create pod');
          await recordEvent(ctx, stsRef(set), 'Warning', 'FailedCreate', `create Pod ${podName} in StatefulSet ${name} failed error: ${statusMessage(err)}`, { component: COMPONENT });
          break;
        }
      }
      blocked = !parallel;
      continue;
    }
    if (pod.status?.phase === 'Failed' && !countsForOwner(pod) && !pod.metadata?.deletionTimestamp) {
      await deleteMember(ctx, set, pod);
      blocked = !parallel;
      continue;
    }
    if (!parallel && (pod.metadata?.deletionTimestamp || !runningAndReady(pod))) blocked = true;
  }

  // Scale down: the highest ordinal first; OrderedReady one at a time once the others are Running and Ready.
  if (failure === undefined && !blocked) {
    const unhealthy = [...byOrdinal.values()].some((p) => !runningAndReady(p) || p.metadata?.deletionTimestamp);
    for (const p of condemned) {
      if (moving(ctx, p)) {
        if (!parallel) break;
        continue;
      }
      if (p.metadata?.deletionTimestamp) {
        if (!parallel) break;
        continue;
      }
      if (!parallel && unhealthy) break;
      await deleteMember(ctx, set, p);
      if (!parallel) break;
    }
  }

  // RollingUpdate: the highest ordinal at or above the partition not at the update revision, once every
  // pod is there; one at a time.
  if (failure === undefined && !blocked && condemned.length === 0 && strategy === 'RollingUpdate') {
    const present = [...byOrdinal.entries()].sort((a, b) => b[0] - a[0]);
    const settled = present.length === replicas && present.every(([, p]) => runningAndReady(p) && !p.metadata?.deletionTimestamp);
    if (settled) {
      const stale = present.find(([o, p]) => o >= start + partition && p.metadata?.labels?.[REVISION_HASH_LABEL] !== update && !moving(ctx, p));
      if (stale) await deleteMember(ctx, set, stale[1]);
    }
  }

  const availableIn = await writeStatus(ctx, set, owned, current, update);
  if (failure !== undefined) throw failure;
  return availableIn === undefined ? undefined : { requeueAfterMs: availableIn };
}

async function deleteMember(ctx: ControllerContext, set: V1StatefulSet, p: V1Pod): Promise<void> {
  const ns = set.metadata?.namespace ?? 'default';
  const podName = p.metadata?.name ?? '';
  try {
    await ctx.api.deletePod(ns, podName, { uid: p.metadata?.uid });
  } catch (err: unknown) {
    if (isNotFound(err) || isConflict(err)) return; // gone already, or another pod by now
    throw err;
  }
  ctx.log.info({ statefulset: `${ns}/${set.metadata?.name}`, pod: podName }, 'deleted pod');
  await recordEvent(ctx, stsRef(set), 'Normal', 'SuccessfulDelete', `delete Pod ${podName} in StatefulSet ${set.metadata?.name} successful`, { component: COMPONENT });
}

/**
 * The status as Kubernetes' `updateStatefulSetStatus` computes it: pods counted (those that count for their
 * owner, moving ones included), Ready, available (Ready for `minReadySeconds`), at the current and the update
 * revision; the current revision becomes the update revision once every pod runs it and is Ready.
 * @returns ms until the next pod becomes available (a sync is due then), or undefined
 */
async function writeStatus(ctx: ControllerContext, set: V1StatefulSet, owned: V1Pod[], current: string, update: string): Promise<number | undefined> {
  const counted = owned.filter(countsForOwner);
  const readyPods = counted.filter((p) => isPodReady(p));
  const ready = readyPods.length;
  const minReadyMs = (set.spec?.minReadySeconds ?? 0) * 1000;
  const now = ctx.clock.now();
  let available = 0;
  let next: number | undefined;
  for (const p of readyPods) {
    const since = Date.parse(String(p.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime ?? ''));
    const left = minReadyMs === 0 || Number.isNaN(since) ? 0 : since + minReadyMs - now;
    if (left <= 0) available++;
    else next = Math.min(next ?? left, left);
  }
  const rev = (p: V1Pod) => p.metadata?.labels?.[REVISION_HASH_LABEL];
  const updated = counted.filter((p) => rev(p) === update).length;
  const replicas = set.spec?.replicas ?? 1;
  let currentRevision = current;
  let currentReplicas = counted.filter((p) => rev(p) === current).length;
  if (updated === replicas && ready === replicas && counted.length === replicas) {
    currentRevision = update;
    currentReplicas = updated;
  }
  const status = {
    observedGeneration: set.metadata?.generation ?? 1,
    replicas: counted.length,
    readyReplicas: ready,
    availableReplicas: available,
    currentReplicas,
    updatedReplicas: updated,
    currentRevision,
    updateRevision: update,
    collisionCount: set.status?.collisionCount ?? 0,
  };
  const cur = (set.status ?? {}) as Record<string, unknown>;
  if (Object.entries(status).every(([k, v]) => (cur[k] ?? (typeof v === 'number' ? 0 : '')) === v)) return next;
  try {
    await ctx.api.patchStatefulSetStatus(set.metadata?.namespace ?? 'default', set.metadata?.name ?? '', { status });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
  return next;
}
