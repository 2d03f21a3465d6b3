/**
 * The scheduler's wiring: pending pods → their keys; node changes and freed capacity → every pending pod.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { AssumedPods, needsScheduling, reconcileSchedule } from './reconcile.ts';

/** Builds the scheduler and subscribes it to pods and nodes. */
export function newScheduler(ctx: ControllerContext, informers: Informers): Controller {
  const assumed = new AssumedPods();
  const c = new Controller('scheduler', (key) => reconcileSchedule(key, ctx, assumed), {
    clock: ctx.clock,
    log: ctx.log,
    workers: 1, // one at a time: each decision sees the previous one
  });
  const enqueuePending = () => {
    for (const p of ctx.cache.pods.list()) if (needsScheduling(p)) c.enqueue(keyOf(p));
  };
  informers.on('pods', (verb, pod: V1Pod) => {
    if (verb === 'delete') {
      assumed.forget(keyOf(pod));
      if (pod.spec?.nodeName) enqueuePending();
      return;
    }
    if (needsScheduling(pod)) c.enqueue(keyOf(pod));
    else assumed.forget(keyOf(pod));
  });
  informers.on('nodes', () => enqueuePending());
  return c;
}
