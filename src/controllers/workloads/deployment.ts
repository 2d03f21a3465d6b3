/**
 * The Deployment sync: one ReplicaSet per pod template (named `<deployment>-<pod-template-hash>`), rolled
 * out with `RollingUpdate` (`maxSurge`, `maxUnavailable`, 25 % each by default) or `Recreate`, and the status
 * `kubectl rollout status` reads, with the `ReplicaFailure` condition of its ReplicaSets (a pod that cannot
 * be created). A move never changes the template, so it never starts a rollout.
 *
 * Revisions are Kubernetes' (`getNewReplicaSet`, `SetNewReplicaSetAnnotations`): a new ReplicaSet gets the
 * highest revision of the others plus one; a Deployment that goes back to the template of an old ReplicaSet
 * (`kubectl set image` back, `kubectl rollout undo`) reuses it, and it too gets the next revision, its old
 * number appended to `deployment.kubernetes.io/revision-history` (comma-separated, at most 2000
 * characters). The Deployment's `deployment.kubernetes.io/revision` is its new ReplicaSet's; its other
 * annotations (`kubernetes.io/change-cause`, say) are copied to the new ReplicaSet, which is what
 * `kubectl rollout history` lists and `kubectl rollout undo` goes back to.
 *
 * The new ReplicaSet is the oldest one whose template equals the Deployment's, the `pod-template-hash` label
 * aside (Kubernetes' `FindNewReplicaSet`, `EqualIgnoreHash`), compared as {@link canonicalTemplate}s: what
 * Go's JSON would leave out (null, `{}`, `[]`) is left out, so a template read back by kubectl and sent
 * again is the same template. Each scaling is a `ScalingReplicaSet` event on the Deployment, in v1.32's
 * words (`Scaled up replica set web-5d9c7b8f6 from 0 to 3`), as `kubectl describe deployment` shows.
 */
import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { V1Deployment, V1PodTemplateSpec, V1ReplicaSet } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { isAlreadyExists, isNotFound, controllerOf } from '../../api/index.ts';
import { ownedPods, countsForOwner } from './replicaset.ts';

/** The revision of a ReplicaSet, and the Deployment's copy of its new ReplicaSet's. */
export const REVISION_ANNOTATION = 'deployment.kubernetes.io/revision';
/** The earlier revisions a reused ReplicaSet had, comma-separated, oldest first. */
export const REVISION_HISTORY_ANNOTATION = 'deployment.kubernetes.io/revision-history';
const DESIRED_REPLICAS = 'deployment.kubernetes.io/desired-replicas';
const MAX_REPLICAS = 'deployment.kubernetes.io/max-replicas';
const HASH_LABEL = 'pod-template-hash';
/** Kubernetes' `maxRevHistoryLengthInChars`: the longest `revision-history` kept (older numbers drop). */
const MAX_REVISION_HISTORY_CHARS = 2000;
/** The event source, as Kubernetes names its Deployment controller. */
const COMPONENT = 'deployment-controller';
/** Deployment annotations never copied to its ReplicaSets (Kubernetes' `annotationsToSkip`). */
const NOT_COPIED = new Set([
  'kubectl.kubernetes.io/last-applied-configuration',
  REVISION_ANNOTATION,
  REVISION_HISTORY_ANNOTATION,
  DESIRED_REPLICAS,
  MAX_REPLICAS,
  'deprecated.deployment.rollback.to',
]);

/**
 * Numbers that Go keeps in non-pointer `omitempty` fields, where 0 is "not set" (Kubernetes' protobuf sends
 * them anyway; the API server leaves them out of new templates, but older stored ones may have them).
 */
const ZERO_IS_UNSET = new Set(['.metadata.generation', '.spec.containers[].ports[].hostPort', '.spec.initContainers[].ports[].hostPort']);

/**
 * A pod template in the form two equal templates share: keys sorted; null, undefined, `{}` and `[]` left
 * out (Go's JSON omits them, and Kubernetes' semantic equality takes an empty map or list for none), and
 * the zeros of {@link ZERO_IS_UNSET}; with `ignoreHash`, the `pod-template-hash` label left out too (a
 * ReplicaSet's template carries it).
 */
export function canonicalTemplate(template: unknown, ignoreHash = false): unknown {
  const canon = (v: unknown, path: string): unknown => {
    if (Array.isArray(v)) {
      const items = v.map((x) => canon(x, `${path}[]`)).filter((x) => x !== undefined);
      return items.length ? items : undefined;
    }
    if (v === null || v === undefined || (v === 0 && ZERO_IS_UNSET.has(path))) return undefined;
    if (typeof v !== 'object') return v;
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) {
      if (ignoreHash && path === '.metadata.labels' && k === HASH_LABEL) continue;
      const c = canon((v as Record<string, unknown>)[k], `${path}.${k}`);
      if (c !== undefined) out[k] = c;
    }
    return Object.keys(out).length ? out : undefined;
  };
  return canon(template, '') ?? {};
}

/**
 * A stable hash of a pod template: SHA-256 of its {@link canonicalTemplate}'s JSON (and of the Deployment's
 * `status.collisionCount` when set, as Kubernetes' `ComputeHash`), 10 characters of [0-9a-z]. Equal
 * templates hash equal, however they were sent.
 */
export function templateHash(template: unknown, collisionCount?: number): string {
  const h = createHash('sha256').update(JSON.stringify(canonicalTemplate(template)));
  if (collisionCount !== undefined && collisionCount > 0) h.update(`\n${collisionCount}`);
  return BigInt(`0x${h.digest().subarray(0, 8).toString('hex')}`).toString(36).slice(0, 10);
}

/** Whether a ReplicaSet's template is the Deployment's, the `pod-template-hash` label aside. */
export function sameTemplate(rsTemplate: V1PodTemplateSpec | undefined, template: V1PodTemplateSpec | undefined): boolean {
  return isDeepStrictEqual(canonicalTemplate(rsTemplate, true), canonicalTemplate(template, true));
}

/** Resolves an int-or-percent against `total`. */
export function intOrPercent(v: number | string | undefined, total: number, fallback: string, roundUp: boolean): number {
  const value = v ?? fallback;
  if (typeof value === 'number') return value;
  const m = /^(\d+)%$/.exec(value);
  if (!m) return Number(value) || 0;
  const x = (Number(m[1]) * total) / 100;
  return roundUp ? Math.ceil(x) : Math.floor(x);
}

/** A ReplicaSet's revision: 0 without one, or with one that is not a number (Kubernetes skips those). */
function revisionOf(rs: V1ReplicaSet): number {
  const v = rs.metadata?.annotations?.[REVISION_ANNOTATION];
  return v !== undefined && /^\d+$/.test(v) ? Number(v) : 0;
}

/**
 * The annotations of the Deployment's new ReplicaSet at `revision` (Kubernetes' `SetNewReplicaSetAnnotations`):
 * the Deployment's own (but those in {@link NOT_COPIED}), and the revision, raised to `revision` only if
 * lower; a raised revision appends the old one to the history, the oldest numbers dropping past
 * {@link MAX_REVISION_HISTORY_CHARS}.
 */
export function newReplicaSetAnnotations(d: V1Deployment, rsAnnotations: Record<string, string> | undefined, revision: number): Record<string, string> {
  const out = { ...(rsAnnotations ?? {}) };
  for (const [k, v] of Object.entries(d.metadata?.annotations ?? {})) if (!NOT_COPIED.has(k)) out[k] = v;
  const old = out[REVISION_ANNOTATION];
  const oldNumber = old === undefined ? 0 : /^\d+$/.test(old) ? Number(old) : Number.NaN;
  if (Number.isNaN(oldNumber) || oldNumber >= revision) return out; // not a number: left alone, as Kubernetes does
  out[REVISION_ANNOTATION] = String(revision);
  if (old !== undefined) {
    const history = (out[REVISION_HISTORY_ANNOTATION] ?? '').split(',').filter((r) => r !== '');
    history.push(old);
    while (history.length > 1 && history.join(',').length > MAX_REVISION_HISTORY_CHARS) history.shift();
    out[REVISION_HISTORY_ANNOTATION] = history.join(',');
  }
  return out;
}

function newReplicaSet(d: V1Deployment, hash: string, revision: number, replicas: number, maxReplicas: number): V1ReplicaSet {
  const name = d.metadata!.name!;
  const template = structuredClone(d.spec!.template);
  template.metadata = { ...(template.metadata ?? {}), labels: { ...(template.metadata?.labels ?? {}), [HASH_LABEL]: hash } };
  const annotations = newReplicaSetAnnotations(d, undefined, revision);
  annotations[DESIRED_REPLICAS] = String(d.spec?.replicas ?? 1);
  annotations[MAX_REPLICAS] = String(maxReplicas);
  return {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: {
      name: `${name}-${hash}`,
      namespace: d.metadata?.namespace,
      labels: { ...(d.spec!.template.metadata?.labels ?? {}), [HASH_LABEL]: hash },
      annotations,
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name, uid: d.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      replicas,
      minReadySeconds: d.spec?.minReadySeconds,
      selector: { ...d.spec!.selector, matchLabels: { ...(d.spec!.selector.matchLabels ?? {}), [HASH_LABEL]: hash } },
      template,
    },
  };
}

function deploymentRef(d: V1Deployment) {
  return { apiVersion: 'apps/v1', kind: 'Deployment', namespace: d.metadata?.namespace, name: d.metadata?.name, uid: d.metadata?.uid };
}

/**
 * Scales a ReplicaSet of `d` to `replicas` (with the desired and max replicas annotations), and records
 * `ScalingReplicaSet` on the Deployment: `Scaled up|down replica set NAME from OLD to NEW`.
 */
async function scale(ctx: ControllerContext, d: V1Deployment, rs: V1ReplicaSet, replicas: number, maxReplicas: number): Promise<void> {
  const from = rs.spec?.replicas ?? 1;
  if (from === replicas) return;
  await ctx.api.patchReplicaSet(rs.metadata?.namespace ?? 'default', rs.metadata?.name ?? '', {
    metadata: { annotations: { [DESIRED_REPLICAS]: String(d.spec?.replicas ?? 1), [MAX_REPLICAS]: String(maxReplicas) } },
    spec: { replicas },
  });
  ctx.log.info({ replicaset: `${rs.metadata?.namespace}/${rs.metadata?.name}`, replicas }, 'scaled');
  const way = from < replicas ? 'up' : 'down';
  await recordEvent(ctx, deploymentRef(d), 'Normal', 'ScalingReplicaSet', `Scaled ${way} replica set ${rs.metadata?.name} from ${from} to ${replicas}`, { component: COMPONENT });
}

/** Oldest first (Kubernetes' `ReplicaSetsByCreationTimestamp`: the name breaks ties). */
function byCreation(a: V1ReplicaSet, b: V1ReplicaSet): number {
  const t = (rs: V1ReplicaSet) => Date.parse(String(rs.metadata?.creationTimestamp ?? '')) || 0;
  return t(a) - t(b) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '');
}

/** Reconciles the Deployment `namespace/name`. */
export async function reconcileDeployment(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const d = ctx.cache.deployments.get(name, namespace);
  if (!d || d.metadata?.deletionTimestamp || !d.spec) return undefined;
  const uid = d.metadata?.uid;
  const rss = ctx.cache.replicaSets.list(namespace).filter((rs) => controllerOf(rs)?.uid === uid);
  let current = rss.filter((rs) => sameTemplate(rs.spec?.template, d.spec?.template)).sort(byCreation)[0];
  const old = rss.filter((rs) => rs !== current).sort((a, b) => revisionOf(a) - revisionOf(b));
  const replicas = d.spec.replicas ?? 1;
  const recreate = d.spec.strategy?.type === 'Recreate';
  const surge = recreate ? 0 : intOrPercent(d.spec.strategy?.rollingUpdate?.maxSurge, replicas, '25%', true);
  let unavailable = recreate ? replicas : intOrPercent(d.spec.strategy?.rollingUpdate?.maxUnavailable, replicas, '25%', false);
  if (surge === 0 && unavailable === 0) unavailable = 1;
  const maxReplicas = replicas + surge;
  const oldActive = old.reduce((n, rs) => n + (rs.spec?.replicas ?? 0), 0);
  const nextRevision = Math.max(0, ...old.map(revisionOf)) + 1;

  if (current) {
    // Back to an old template (or annotations changed): the next revision, the old one in the history.
    current = await syncNewReplicaSet(ctx, d, current, nextRevision);
    await setRevision(ctx, d, revisionOf(current));
  }
  if (!d.spec.paused) {
    if (!current) {
      const hash = templateHash(d.spec.template, d.status?.collisionCount);
      let initial: number;
      if (oldActive === 0) initial = replicas;
      else if (recreate) initial = 0;
      else initial = Math.max(0, Math.min(replicas, replicas + surge - oldActive));
      try {
        current = await ctx.api.createReplicaSet(namespace, newReplicaSet(d, hash, nextRevision, initial, maxReplicas));
        ctx.log.info({ deployment: key, replicaset: current.metadata?.name, replicas: initial }, 'created replica set');
      } catch (err: unknown) {
        if (isAlreadyExists(err)) return hashCollision(ctx, d, `${name}-${hash}`);
        throw err;
      }
      if (initial > 0) {
        await recordEvent(ctx, deploymentRef(d), 'Normal', 'ScalingReplicaSet', `Scaled up replica set ${current.metadata?.name} from 0 to ${initial}`, { component: COMPONENT });
      }
      await setRevision(ctx, d, nextRevision);
      return undefined; // its events bring us back
    }
    if (recreate) {
      for (const rs of old) await scale(ctx, d, rs, 0, maxReplicas);
      const oldPods = old.flatMap((rs) => ownedPods(ctx, namespace, rs.metadata?.uid)).filter(countsForOwner);
      if (oldPods.length === 0) await scale(ctx, d, current, replicas, maxReplicas);
    } else if (oldActive === 0) {
      await scale(ctx, d, current, replicas, maxReplicas);
    } else {
      const all = [current, ...old];
      const totalSpec = all.reduce((n, rs) => n + (rs.spec?.replicas ?? 0), 0);
      const curSpec = current.spec?.replicas ?? 0;
      if (totalSpec < maxReplicas && curSpec < replicas) {
        await scale(ctx, d, current, Math.min(replicas, curSpec + (maxReplicas - totalSpec)), maxReplicas);
      }
      const minAvailable = replicas - unavailable;
      const available = all.reduce((n, rs) => n + (rs.status?.availableReplicas ?? 0), 0);
      let canDown = available - minAvailable;
      // Old pods that are not available can go at once: they add nothing.
      for (const rs of old) {
        const spec = rs.spec?.replicas ?? 0;
        if (spec === 0) continue;
        const unhealthy = Math.max(0, spec - (rs.status?.availableReplicas ?? 0));
        const down = Math.min(spec, unhealthy + Math.max(0, canDown));
        if (down > 0) {
          await scale(ctx, d, rs, spec - down, maxReplicas);
          canDown -= Math.max(0, down - unhealthy);
        }
      }
    }
    // Old ReplicaSets beyond the history limit go once empty, the lowest revisions first.
    const limit = d.spec.revisionHistoryLimit ?? 10;
    const empty = old.filter((rs) => (rs.spec?.replicas ?? 0) === 0 && (rs.status?.replicas ?? 0) === 0);
    for (const rs of empty.slice(0, Math.max(0, empty.length - limit))) {
      try {
        await ctx.api.deleteReplicaSet(namespace, rs.metadata?.name ?? '');
      } catch (err: unknown) {
        if (!isNotFound(err)) throw err;
      }
    }
  }
  await writeDeploymentStatus(ctx, d, current, old, replicas - unavailable);
  return undefined;
}

/**
 * Brings the new ReplicaSet's annotations ({@link newReplicaSetAnnotations} at `revision`) and
 * `minReadySeconds` to the Deployment's; answers the ReplicaSet as written.
 */
async function syncNewReplicaSet(ctx: ControllerContext, d: V1Deployment, rs: V1ReplicaSet, revision: number): Promise<V1ReplicaSet> {
  const annotations = newReplicaSetAnnotations(d, rs.metadata?.annotations, revision);
  const minReadySeconds = d.spec?.minReadySeconds ?? 0;
  if (isDeepStrictEqual(annotations, rs.metadata?.annotations ?? {}) && (rs.spec?.minReadySeconds ?? 0) === minReadySeconds) return rs;
  await ctx.api.patchReplicaSet(rs.metadata?.namespace ?? 'default', rs.metadata?.name ?? '', { metadata: { annotations }, spec: { minReadySeconds } });
  const from = rs.metadata?.annotations?.[REVISION_ANNOTATION];
  if (from !== annotations[REVISION_ANNOTATION]) {
    ctx.log.info({ replicaset: `${rs.metadata?.namespace}/${rs.metadata?.name}`, from, revision: annotations[REVISION_ANNOTATION] }, 'revision raised');
  }
  return { ...rs, metadata: { ...rs.metadata, annotations }, spec: { ...rs.spec!, minReadySeconds } };
}

/**
 * A ReplicaSet of the new one's name already exists. Owned by the Deployment with its template, it is the
 * cache that has not caught up; else it is a hash collision (Kubernetes' `collisionCount`): the count is
 * raised in the Deployment's status, and the next name differs.
 */
async function hashCollision(ctx: ControllerContext, d: V1Deployment, rsName: string): Promise<ReconcileResult | undefined> {
  const namespace = d.metadata?.namespace ?? 'default';
  const existing = ctx.cache.replicaSets.get(rsName, namespace);
  if (!existing || (controllerOf(existing)?.uid === d.metadata?.uid && sameTemplate(existing.spec?.template, d.spec?.template))) return { requeueAfterMs: 200 };
  const collisionCount = (d.status?.collisionCount ?? 0) + 1;
  ctx.log.warn({ deployment: `${namespace}/${d.metadata?.name}`, replicaset: rsName, collisionCount }, 'pod template hash collision');
  try {
    await ctx.api.patchDeploymentStatus(namespace, d.metadata?.name ?? '', { status: { collisionCount } });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
  return undefined; // the status change brings us back
}

async function setRevision(ctx: ControllerContext, d: V1Deployment, revision: number): Promise<void> {
  if (d.metadata?.annotations?.[REVISION_ANNOTATION] === String(revision)) return;
  await ctx.api.patchDeployment(d.metadata?.namespace ?? 'default', d.metadata?.name ?? '', {
    metadata: { annotations: { [REVISION_ANNOTATION]: String(revision) } },
  });
}

async function writeDeploymentStatus(ctx: ControllerContext, d: V1Deployment, current: V1ReplicaSet | undefined, old: V1ReplicaSet[], minAvailable: number): Promise<void> {
  const all = current ? [current, ...old] : old;
  const sum = (f: (rs: V1ReplicaSet) => number | undefined) => all.reduce((n, rs) => n + (f(rs) ?? 0), 0);
  const replicas = sum((rs) => rs.status?.replicas);
  const available = sum((rs) => rs.status?.availableReplicas);
  const updated = current?.status?.replicas ?? 0;
  const desired = d.spec?.replicas ?? 1;
  const complete = updated === desired && replicas === desired && available === desired;
  const now = new Date(ctx.clock.now()).toISOString();
  const cond = (type: string, ok: boolean, reason: string, message: string) => {
    const prev = d.status?.conditions?.find((c) => c.type === type);
    const status = ok ? 'True' : 'False';
    const changed = prev?.status !== status || prev?.reason !== reason;
    return {
      type,
      status,
      reason,
      message,
      lastUpdateTime: changed ? now : (prev?.lastUpdateTime ?? now),
      lastTransitionTime: prev?.status === status ? (prev?.lastTransitionTime ?? now) : now,
    };
  };
  // The ReplicaFailure of its ReplicaSets, the new one's first (Kubernetes' getReplicaFailures).
  const failed = all.map((rs) => rs.status?.conditions?.find((c) => c.type === 'ReplicaFailure' && c.status === 'True')).find((c) => c !== undefined);
  const conditions = [
    cond(
      'Available',
      available >= minAvailable,
      available >= minAvailable ? 'MinimumReplicasAvailable' : 'MinimumReplicasUnavailable',
      available >= minAvailable ? 'Deployment has minimum availability.' : 'Deployment does not have minimum availability.',
    ),
    cond(
      'Progressing',
      true,
      complete ? 'NewReplicaSetAvailable' : 'ReplicaSetUpdated',
      complete
        ? `ReplicaSet "${current?.metadata?.name}" has successfully progressed.`
        : `ReplicaSet "${current?.metadata?.name}" is progressing.`,
    ),
  ];
  if (failed) conditions.push(cond('ReplicaFailure', true, failed.reason ?? 'FailedCreate', failed.message ?? ''));
  const status = {
    observedGeneration: d.metadata?.generation ?? 1,
    replicas,
    updatedReplicas: updated,
    readyReplicas: sum((rs) => rs.status?.readyReplicas),
    availableReplicas: available,
    unavailableReplicas: Math.max(0, desired - available),
    conditions,
  };
  const cur = d.status ?? {};
  const same =
    cur.observedGeneration === status.observedGeneration &&
    (cur.replicas ?? 0) === status.replicas &&
    (cur.updatedReplicas ?? 0) === status.updatedReplicas &&
    (cur.readyReplicas ?? 0) === status.readyReplicas &&
    (cur.availableReplicas ?? 0) === status.availableReplicas &&
    (cur.unavailableReplicas ?? 0) === status.unavailableReplicas &&
    (cur.conditions ?? []).length === status.conditions.length &&
    status.conditions.every((c) => cur.conditions?.some((p) => p.type === c.type && p.status === c.status && p.reason === c.reason && (c.type !== 'ReplicaFailure' || p.message === c.message)));
  if (same) return;
  try {
    await ctx.api.patchDeploymentStatus(d.metadata?.namespace ?? 'default', d.metadata?.name ?? '', { status });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
}
