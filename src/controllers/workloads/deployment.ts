/**
 * The Deployment sync: one ReplicaSet per pod template (named `<deployment>-<pod-template-hash>`), rolled
 * out with `RollingUpdate` (`maxSurge`, `maxUnavailable`, 25 % each by default) or `Recreate`, and the status
 * `kubectl rollout status` reads, with the `ReplicaFailure` condition of its ReplicaSets (a pod that cannot
 * be created). A move never changes the template, so it never starts a rollout.
 */
import { createHash } from 'node:crypto';
import type { V1Deployment, V1ReplicaSet } from '@kubernetes/client-node';
import type { ReconcileResult } from '../runtime/controller.ts';
import { splitKey } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { isAlreadyExists, isNotFound } from '../runtime/errors.ts';
import { controllerOf } from '../runtime/pods.ts';
import { ownedPods, countsForOwner } from './replicaset.ts';

const REVISION = 'deployment.kubernetes.io/revision';
const HASH_LABEL = 'pod-template-hash';

/** A stable hash of a pod template (canonical JSON, SHA-256), 10 characters of [0-9a-z]. */
export function templateHash(template: unknown): string {
  const canon = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(canon)
      : v && typeof v === 'object'
        ? Object.fromEntries(Object.keys(v as object).sort().filter((k) => (v as Record<string, unknown>)[k] !== undefined && (v as Record<string, unknown>)[k] !== null).map((k) => [k, canon((v as Record<string, unknown>)[k])]))
        : v;
  const digest = createHash('sha256').update(JSON.stringify(canon(template))).digest();
  return BigInt(`0x${digest.subarray(0, 8).toString('hex')}`).toString(36).slice(0, 10);
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

function revisionOf(rs: V1ReplicaSet): number {
  return Number(rs.metadata?.annotations?.[REVISION] ?? 0) || 0;
}

function newReplicaSet(d: V1Deployment, hash: string, revision: number, replicas: number): V1ReplicaSet {
  const name = d.metadata!.name!;
  const template = structuredClone(d.spec!.template);
  template.metadata = { ...(template.metadata ?? {}), labels: { ...(template.metadata?.labels ?? {}), [HASH_LABEL]: hash } };
  return {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: {
      name: `${name}-${hash}`,
      namespace: d.metadata?.namespace,
      labels: { ...(d.spec!.template.metadata?.labels ?? {}), [HASH_LABEL]: hash },
      annotations: { [REVISION]: String(revision), 'deployment.kubernetes.io/desired-replicas': String(d.spec?.replicas ?? 1) },
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

async function scale(ctx: ControllerContext, rs: V1ReplicaSet, replicas: number): Promise<void> {
  if ((rs.spec?.replicas ?? 1) === replicas) return;
  await ctx.api.patchReplicaSet(rs.metadata?.namespace ?? 'default', rs.metadata?.name ?? '', { spec: { replicas } });
  ctx.log.info({ replicaset: `${rs.metadata?.namespace}/${rs.metadata?.name}`, replicas }, 'scaled');
}

/** Reconciles the Deployment `namespace/name`. */
export async function reconcileDeployment(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const d = ctx.cache.deployments.get(name, namespace);
  if (!d || d.metadata?.deletionTimestamp || !d.spec) return undefined;
  const uid = d.metadata?.uid;
  const rss = ctx.cache.replicaSets.list(namespace).filter((rs) => controllerOf(rs)?.uid === uid);
  const hash = templateHash(d.spec.template);
  let current = rss.find((rs) => rs.metadata?.labels?.[HASH_LABEL] === hash);
  const old = rss.filter((rs) => rs !== current).sort((a, b) => revisionOf(a) - revisionOf(b));
  const replicas = d.spec.replicas ?? 1;
  const recreate = d.spec.strategy?.type === 'Recreate';
  const surge = recreate ? 0 : intOrPercent(d.spec.strategy?.rollingUpdate?.maxSurge, replicas, '25%', true);
  let unavailable = recreate ? replicas : intOrPercent(d.spec.strategy?.rollingUpdate?.maxUnavailable, replicas, '25%', false);
  if (surge === 0 && unavailable === 0) unavailable = 1;
  const oldActive = old.reduce((n, rs) => n + (rs.spec?.replicas ?? 0), 0);

  if (!d.spec.paused) {
    if (!current) {
      const revision = Math.max(0, ...rss.map(revisionOf)) + 1;
      let initial: number;
      if (oldActive === 0) initial = replicas;
      else if (recreate) initial = 0;
      else initial = Math.max(0, Math.min(replicas, replicas + surge - oldActive));
      try {
        current = await ctx.api.createReplicaSet(namespace, newReplicaSet(d, hash, revision, initial));
        ctx.log.info({ deployment: key, replicaset: current.metadata?.name, replicas: initial }, 'created replica set');
      } catch (err: unknown) {
        if (isAlreadyExists(err)) return { requeueAfterMs: 200 }; // the cache has not caught up
        throw err;
      }
      await setRevision(ctx, d, revision);
      return undefined; // its events bring us back
    }
    await setRevision(ctx, d, revisionOf(current));
    if (recreate) {
      for (const rs of old) await scale(ctx, rs, 0);
      const oldPods = old.flatMap((rs) => ownedPods(ctx, namespace, rs.metadata?.uid)).filter(countsForOwner);
      if (oldPods.length === 0) await scale(ctx, current, replicas);
    } else if (oldActive === 0) {
      await scale(ctx, current, replicas);
    } else {
      const all = [current, ...old];
      const totalSpec = all.reduce((n, rs) => n + (rs.spec?.replicas ?? 0), 0);
      const maxTotal = replicas + surge;
      const curSpec = current.spec?.replicas ?? 0;
      if (totalSpec < maxTotal && curSpec < replicas) {
        await scale(ctx, current, Math.min(replicas, curSpec + (maxTotal - totalSpec)));
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
          await scale(ctx, rs, spec - down);
          canDown -= Math.max(0, down - unhealthy);
        }
      }
    }
    // Old ReplicaSets beyond the history limit go once empty.
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

async function setRevision(ctx: ControllerContext, d: V1Deployment, revision: number): Promise<void> {
  if (d.metadata?.annotations?.[REVISION] === String(revision)) return;
  await ctx.api.patchDeployment(d.metadata?.namespace ?? 'default', d.metadata?.name ?? '', {
    metadata: { annotations: { [REVISION]: String(revision) } },
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
