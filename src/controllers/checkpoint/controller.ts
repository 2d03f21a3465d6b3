/**
 * The checkpoint controller's wiring: Checkpoint events → their key; pod events → the Checkpoints that name
 * the pod (a move waiting for its replacement, retention waiting for `restore-from` to go, periodic ones to
 * remove with their pod).
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { ANNOTATIONS, LABELS, type Checkpoint } from '../../api/index.ts';
import { reconcileCheckpoint } from './reconcile.ts';

/** Builds the checkpoint controller and subscribes it. */
export function newCheckpointController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('checkpoint', (key) => reconcileCheckpoint(key, ctx), { clock: ctx.clock, log: ctx.log, workers: 4 });
  informers.on('checkpoints', (verb, ck: Checkpoint) => {
    if (verb !== 'delete') c.enqueue(keyOf(ck));
    // A newly Saved periodic checkpoint makes the pod's older ones go (retention): look at them now.
    if (ck.metadata?.labels?.[LABELS.trigger] === 'periodic' && ck.status?.phase === 'Saved') {
      const ns = ck.metadata?.namespace ?? 'default';
      for (const other of ctx.cache.checkpoints.list(ns)) {
        if (other !== ck && other.spec?.podName === ck.spec?.podName && other.metadata?.labels?.[LABELS.trigger] === 'periodic') c.enqueue(keyOf(other));
      }
    }
  });
  informers.on('pods', (verb, pod: V1Pod) => {
    const ns = pod.metadata?.namespace ?? 'default';
    // The replacement's ADDED: the pod is no longer in the middle of a replacement.
    if (verb === 'add') ctx.state.replacements.end(`${ns}/${pod.metadata?.name}`);
    const restoreFrom = pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom];
    if (restoreFrom) c.enqueue(`${ns}/${restoreFrom}`);
    for (const ck of ctx.cache.checkpoints.list(ns)) {
      if (ck.spec?.podName === pod.metadata?.name) c.enqueue(keyOf(ck));
    }
  });
  return c;
}
