/**
 * The disruption controller's wiring: a budget's add or update queues it; a pod's add, update or delete
 * queues the budgets of its namespace whose selector matches it (before or after the change: a pod
 * relabelled out of a budget changes that budget too). See `reconcile.ts`.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { matchLabelSelector } from '../runtime/selectors.ts';
import { type DisruptedUids, reconcileBudget } from './reconcile.ts';

/** Builds the disruption controller (PodDisruptionBudget status) and subscribes it. */
export function newDisruptionController(ctx: ControllerContext, informers: Informers): Controller {
  const uids: DisruptedUids = new Map();
  const c = new Controller('disruption', (k) => reconcileBudget(k, ctx, uids), { clock: ctx.clock, log: ctx.log, workers: 1 });
  informers.on('podDisruptionBudgets', (verb, pdb) => {
    if (verb !== 'delete') c.enqueue(keyOf(pdb));
  });
  // The labels each pod had when last seen, so that a pod leaving a budget's selector queues it too.
  const seen = new Map<string, Record<string, string>>();
  informers.on('pods', (verb, pod: V1Pod) => {
    const key = keyOf(pod);
    const before = seen.get(key);
    const labels = pod.metadata?.labels ?? {};
    if (verb === 'delete') seen.delete(key);
    else seen.set(key, labels);
    for (const pdb of ctx.cache.podDisruptionBudgets.list(pod.metadata?.namespace)) {
      const sel = pdb.spec?.selector;
      if (sel && (matchLabelSelector(sel, labels) || (before !== undefined && matchLabelSelector(sel, before)))) c.enqueue(keyOf(pdb));
    }
  });
  return c;
}
