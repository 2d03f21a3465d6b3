/** The pod lifecycle controller's wiring: pods → their key; a Checkpoint's change → its pod. */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import type { Checkpoint } from '../../api/index.ts';
import { reconcilePod } from './reconcile.ts';

/** Builds the pod lifecycle controller (restores outside moves, periodic checkpoints) and subscribes it. */
export function newPodLifecycleController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('podlifecycle', (key) => reconcilePod(key, ctx), { clock: ctx.clock, log: ctx.log, workers: 2 });
  informers.on('pods', (verb, pod: V1Pod) => {
    if (verb !== 'delete') c.enqueue(keyOf(pod));
  });
  informers.on('checkpoints', (_verb, ck: Checkpoint) => {
    if (ck.spec?.podName) c.enqueue(`${ck.metadata?.namespace ?? 'default'}/${ck.spec.podName}`);
  });
  return c;
}
