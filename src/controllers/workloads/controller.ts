/**
 * The workload controllers' wiring: ReplicaSets (pods → their controlling ReplicaSet, or for an orphan every
 * ReplicaSet whose selector matches it; a Module pushed → every ReplicaSet reporting `ReplicaFailure`), Deployments (ReplicaSets → their Deployment), DaemonSets (pods →
 * their DaemonSet; nodes → every DaemonSet).
 */
import type { V1DaemonSet, V1Deployment, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { controllerOf } from '../runtime/pods.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';
import { reconcileDaemonSet } from './daemonset.ts';
import { reconcileDeployment } from './deployment.ts';
import { Expectations, reconcileReplicaSet } from './replicaset.ts';

/** Builds the ReplicaSet, Deployment and DaemonSet controllers and subscribes them. */
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
  informers.on('pods', (verb, pod: V1Pod) => {
    const ns = pod.metadata?.namespace ?? 'default';
    if (verb === 'add') ctx.state.replacements.end(`${ns}/${pod.metadata?.name}`);
    const owner = controllerOf(pod);
    if (owner?.kind === 'ReplicaSet') rs.enqueue(`${ns}/${owner.name}`);
    else if (owner?.kind === 'DaemonSet') ds.enqueue(`${ns}/${owner.name}`);
    else if (!owner) {
      for (const r of ctx.cache.replicaSets.list(ns)) if (matchLabelSelector(r.spec?.selector, pod.metadata?.labels)) rs.enqueue(keyOf(r));
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
  return [rs, dep, ds];
}
