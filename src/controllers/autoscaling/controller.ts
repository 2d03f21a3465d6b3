/**
 * The HorizontalPodAutoscaler controller (Kubernetes' `horizontal-pod-autoscaler` of
 * kube-controller-manager): each HPA is synced when it is made or its spec changes, and then every
 * sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s), by reconcile.ts. Its own status writes
 * do not bring it back early: an update whose `metadata.generation` is the one already seen is skipped.
 */
import type { V2HorizontalPodAutoscaler } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import { type AutoscalerState, reconcileHorizontalPodAutoscaler } from './reconcile.ts';

/** Builds the HorizontalPodAutoscaler controller. */
export function newHorizontalPodAutoscalerController(ctx: ControllerContext, informers: Informers): Controller {
  const state: AutoscalerState = new Map();
  const c = new Controller('horizontalpodautoscaler', (k) => reconcileHorizontalPodAutoscaler(k, ctx, state), { clock: ctx.clock, log: ctx.log, workers: 2 });
  const seen = new Map<string, number | undefined>();
  informers.on('horizontalPodAutoscalers', (verb, hpa: V2HorizontalPodAutoscaler) => {
    const key = keyOf(hpa);
    if (verb === 'delete') {
      seen.delete(key);
      state.delete(key);
      return;
    }
    const generation = hpa.metadata?.generation;
    if (verb === 'update' && seen.has(key) && seen.get(key) === generation) return;
    seen.set(key, generation);
    c.enqueue(key);
  });
  return c;
}
