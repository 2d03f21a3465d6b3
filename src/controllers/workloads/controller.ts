/**
 * The workload controllers' wiring: ReplicaSets (pods → their controlling ReplicaSet, or for an orphan every
 * ReplicaSet whose selector matches it; a Module pushed → every ReplicaSet reporting `ReplicaFailure`), Deployments (ReplicaSets → their Deployment), DaemonSets (pods →
 * their DaemonSet; nodes → every DaemonSet), StatefulSets (pods and ControllerRevisions → their StatefulSet, or
 * for an orphan every StatefulSet whose selector matches it).
 */
import type { V1DaemonSet, V1Deployment, V1Pod, V1ReplicaSet, V1StatefulSet } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { controllerOf, isPodReady, ANNOTATIONS } from '../../api/index.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';
import { reconcileDaemonSet } from './daemonset.ts';
import { reconcileDeployment } from './deployment.ts';
import { Expectations, reconcileReplicaSet } from './replicaset.ts';
import { reconcileStatefulSet } from './statefulset.ts';

/**
 * The fields of a pod that a ReplicaSet's sync reads (whether it counts, is ready, is labelled, is being
 * restored, and whose it is), as one string to compare between events.
 */
function replicaSetView(pod: V1Pod): string {
  const m = pod.metadata;
  return [
    m?.uid,
    pod.status?.phase,
    m?.deletionTimestamp ?? '',
    isPodReady(pod) ? 'ready' : '',
    controllerOf(pod)?.uid ?? '',
    m?.annotations?.[ANNOTATIONS.restoreFrom] ?? '',
    JSON.stringify(m?.labels ?? {}),
  ].join('\u0000');
}

/** Builds the ReplicaSet, Deployment, DaemonSet and StatefulSet controllers and subscribes them. */
export function newWorkloadControllers(ctx: ControllerContext, informers: Informers): Controller[] {
  const rsExp = new Expectations();
  const dsExp = new Expectations();
  // A pod it cannot create (its module not pushed yet, say) is tried again for ever, at most a minute apart:
  // nothing else would bring the ReplicaSet back once the cause is gone.
  const rs = new Controller('replicaset', (k) => reconcileReplicaSet(k, ctx, rsExp), {
    clock: ctx.clock,
    log: ctx.log,
    workers: 2,
    maxRetries: Number.POSITIVE_INFINITY,
  });
  const dep = new Controller('deployment', (k) => reconcileDeployment(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 2 });
  const ds = new Controller('daemonset', (k) => reconcileDaemonSet(k, ctx, dsExp), { clock: ctx.clock, log: ctx.log, workers: 1 });
  // As the ReplicaSet's: a pod it cannot create (over quota, say) is tried again, at most a minute apart.
  const sts = new Controller('statefulset', (k) => reconcileStatefulSet(k, ctx), {
    clock: ctx.clock,
    log: ctx.log,
    workers: 1,
    maxRetries: Number.POSITIVE_INFINITY,
  });

  informers.on('replicaSets', (_verb, obj: V1ReplicaSet) => {
    rs.enqueue(keyOf(obj));
    const owner = controllerOf(obj);
    if (owner?.kind === 'Deployment') dep.enqueue(`${obj.metadata?.namespace}/${owner.name}`);
  });
  // A module pushed (or replaced) may be what a ReplicaSet lacked: try those that report ReplicaFailure now
  // rather than at their next back-off.
  informers.on('modules', (verb) => {
    if (verb === 'delete') return;
    for (const r of ctx.cache.replicaSets.list()) {
      if (r.status?.conditions?.some((c) => c.type === 'ReplicaFailure' && c.status === 'True')) rs.enqueue(keyOf(r));
    }
  });
  informers.on('deployments', (verb, obj: V1Deployment) => {
    if (verb !== 'delete') dep.enqueue(keyOf(obj));
  });
  informers.on('daemonSets', (verb, obj: V1DaemonSet) => {
    if (verb !== 'delete') ds.enqueue(keyOf(obj));
  });
  informers.on('statefulSets', (verb, obj: V1StatefulSet) => {
    if (verb !== 'delete') sts.enqueue(keyOf(obj));
  });
  informers.on('controllerRevisions', (_verb, obj) => {
    const owner = controllerOf(obj);
    if (owner?.kind === 'StatefulSet') sts.enqueue(`${obj.metadata?.namespace}/${owner.name}`);
  });
  // What a ReplicaSet's sync reads of each of its pods; an update that changes none of it (a bind, a status
  // heartbeat) does not bring the ReplicaSet back: at 10 000 pods each sync walks 10 000 pods.
  const seenForRs = new Map<string, string>();
  informers.on('pods', (verb, pod: V1Pod) => {
    const ns = pod.metadata?.namespace ?? 'default';
    const podKey = `${ns}/${pod.metadata?.name}`;
    if (verb === 'add') ctx.state.replacements.end(podKey);
    const owner = controllerOf(pod);
    if (owner?.kind === 'ReplicaSet') {
      const sig = replicaSetView(pod);
      const unchanged = verb === 'update' && seenForRs.get(podKey) === sig;
      if (verb === 'delete') seenForRs.delete(podKey);
      else seenForRs.set(podKey, sig);
      if (!unchanged) rs.enqueue(`${ns}/${owner.name}`);
      return;
    }
    seenForRs.delete(podKey);
    if (owner?.kind === 'DaemonSet') ds.enqueue(`${ns}/${owner.name}`);
    else if (owner?.kind === 'StatefulSet') sts.enqueue(`${ns}/${owner.name}`);
    else if (!owner) {
      for (const r of ctx.cache.replicaSets.list(ns)) if (matchLabelSelector(r.spec?.selector, pod.metadata?.labels)) rs.enqueue(keyOf(r));
      for (const s of ctx.cache.statefulSets.list(ns)) if (matchLabelSelector(s.spec?.selector, pod.metadata?.labels)) sts.enqueue(keyOf(s));
    }
  });
  const lastReady = new Map<string, string | undefined>();
  informers.on('nodes', (verb, node) => {
    // Heartbeats change nothing for DaemonSets; a node joining, leaving or changing readiness does.
    const name = node.metadata?.name ?? '';
    const ready = verb === 'delete' ? 'gone' : node.status?.conditions?.find((c) => c.type === 'Ready')?.status;
    if (lastReady.get(name) === ready) return;
    lastReady.set(name, ready);
    for (const d of ctx.cache.daemonSets.list()) ds.enqueue(keyOf(d));
  });
  return [rs, dep, ds, sts];
}
