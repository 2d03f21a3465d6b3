/**
 * The scheduler's wiring, as kube-scheduler's: a cache of nodes and of what their pods take, fed by the
 * informers ({@link NodeUsage}, assumed pods included); a scheduling queue of the pending pods (their keys;
 * node changes and freed capacity bring back every pending pod); scheduling cycles that decide on the cache
 * and assume the pod on its node with no await in between, so that a decision always sees every earlier
 * one; and binding cycles sent asynchronously ({@link Binds}: up to {@link BINDS_IN_FLIGHT} at once), each
 * followed by its `Scheduled` event, which no cycle waits for. A bind that fails for another reason than a
 * conflict or a missing pod drops the assumption and queues the pod again after kube-scheduler's back-off
 * (1 s doubling to 10 s). The scheduler has its own connections to the API server
 * ({@link SCHEDULER_CONNECTIONS}), as kube-scheduler has its own client: its binds do not queue behind the
 * other controllers' calls (a ReplicaSet's slow-start batch of creates).
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { AssumedPods, needsScheduling, reconcileSchedule } from './reconcile.ts';
import { BINDS_IN_FLIGHT, Binds } from './binds.ts';
import { errorMessage, NodeUsage } from '../../api/index.ts';

/**
 * Scheduling cycles at once. Each decides with no await (so one at a time in effect); several let a cycle
 * that writes an Unschedulable status, or waits for a bind to end, not hold up the others.
 */
export const SCHEDULER_WORKERS = 16;

/** The scheduler's own connections to the API server: the binds in flight and their events. */
export const SCHEDULER_CONNECTIONS = BINDS_IN_FLIGHT + 16;

/** kube-scheduler's `podInitialBackoffSeconds` and `podMaxBackoffSeconds`, in ms: a failed bind is tried again after 1 s, doubling to 10 s. */
export const BIND_BACKOFF_MS = { initial: 1_000, max: 10_000 } as const;

/**
 * Builds the scheduler and subscribes it to pods and nodes.
 * @param ctx the controllers' context; its `api` is used unless `schedulerApi` is given
 * @param schedulerApi the scheduler's own API client (its own connections)
 */
export function newScheduler(ctx: ControllerContext, informers: Informers, schedulerApi?: ControllerContext['api']): Controller {
  const sctx: ControllerContext = schedulerApi ? { ...ctx, api: schedulerApi } : ctx;
  const usage = new NodeUsage();
  const assumed = new AssumedPods(usage);
  const pending = new Set<string>();
  const failures = new Map<string, number>();
  const binds = new Binds();
  const binding = {
    binds,
    bound: (key: string) => failures.delete(key),
    failed: (key: string, err: unknown) => {
      const n = (failures.get(key) ?? 0) + 1;
      failures.set(key, n);
      const delay = Math.min(BIND_BACKOFF_MS.max, BIND_BACKOFF_MS.initial * 2 ** (n - 1));
      ctx.log.warn({ controller: 'scheduler', key, tries: n, retryInMs: delay, err: errorMessage(err) }, 'bind failed; the pod is queued again');
      c.queue.addAfter(key, delay);
    },
  };
  const c = new Controller('scheduler', (key) => reconcileSchedule(key, sctx, assumed, binding), {
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
      failures.delete(key);
      assumed.forget(key);
      if (pod.spec?.nodeName) enqueuePending();
      return;
    }
    if (needsScheduling(pod)) {
      pending.add(key);
      c.enqueue(key);
    } else {
      pending.delete(key);
      failures.delete(key);
      assumed.forget(key);
    }
  });
  informers.on('nodes', () => enqueuePending());
  return c;
}
