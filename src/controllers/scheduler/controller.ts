/**
 * The scheduler's wiring: pending pods → their keys; node changes and freed capacity → every pending pod.
 *
 * Several workers schedule at once, as kube-scheduler's binding cycles run beside its scheduling cycle:
 * each decision is made and assumed (counted on its node) with no await in between, then bound, so a
 * decision always sees every earlier one, and {@link SCHEDULER_WORKERS} binds are in flight. What each
 * node's pods take is kept from the pod events ({@link NodeUsage}), and the pending pods in a set, so that
 * neither a decision nor a node event walks every pod of the cluster.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { AssumedPods, needsScheduling, reconcileSchedule } from './reconcile.ts';
import { NodeUsage } from '../../api/index.ts';

/** Pods being bound at once (each a worker: decide and assume at once, then bind, then the event). */
export const SCHEDULER_WORKERS = 16;

/** Builds the scheduler and subscribes it to pods and nodes. */
export function newScheduler(ctx: ControllerContext, informers: Informers): Controller {
  const usage = new NodeUsage();
  const assumed = new AssumedPods(usage);
  const pending = new Set<string>();
  const c = new Controller('scheduler', (key) => reconcileSchedule(key, ctx, assumed), {
    clock: ctx.clock,
    log: ctx.log,
    workers: SCHEDULER_WORKERS,
  });
  const enqueuePending = () => {
    for (const key of pending) c.enqueue(key);
  };
  informers.on('pods', (verb, pod: V1Pod) => {
    usage.observe(verb, pod);
    const key = keyOf(pod);
    if (verb === 'delete') {
      pending.delete(key);
      assumed.forget(key);
      if (pod.spec?.nodeName) enqueuePending();
      return;
    }
    if (needsScheduling(pod)) {
      pending.add(key);
      c.enqueue(key);
    } else {
      pending.delete(key);
      assumed.forget(key);
    }
  });
  informers.on('nodes', () => enqueuePending());
  return c;
}
