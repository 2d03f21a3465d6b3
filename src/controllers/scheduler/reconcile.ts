/**
 * The scheduler's sync: bind one pending pod to the node {@link pickNode} chooses, or say why none fits
 * in the pod's `PodScheduled` condition (reason `Unschedulable`) and a `FailedScheduling` event.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import type { Binds } from './binds.ts';
import { isConflict, isNotFound, LABELS, type NodeUsage, pickNode, isPodActive, RUNTIME_FEOS } from '../../api/index.ts';

/**
 * Pods this scheduler placed that the cache does not show bound yet (kube-scheduler's assumed pods): a pod
 * is assumed on its node as soon as it is chosen, before its bind is sent, so that decisions made while
 * binds are in flight (several workers) see it; a failed bind forgets it. An assumption lasts at most 30 s.
 * With a {@link NodeUsage}, each assumption also counts in that node's sums.
 */
export class AssumedPods {
  readonly #pods = new Map<string, { pod: V1Pod; until: number }>();
  /** The per-node sums the assumptions are added to, when the scheduler keeps them. */
  readonly usage: NodeUsage | undefined;
  constructor(usage?: NodeUsage) {
    this.usage = usage;
  }
  /** Remembers `pod` as bound to `nodeName` for at most 30 s. */
  assume(key: string, pod: V1Pod, nodeName: string, now: number): void {
    this.#pods.set(key, { pod: { ...pod, spec: { ...pod.spec!, nodeName } }, until: now + ASSUME_TTL_MS });
    this.usage?.assume(key, pod, nodeName);
  }
  forget(key: string): void {
    if (this.#pods.delete(key)) this.usage?.unassume(key);
  }
  has(key: string, now: number): boolean {
    const a = this.#pods.get(key);
    if (a && a.until < now) this.forget(key);
    return a !== undefined && a.until >= now;
  }
  /** The assumed pods (bound to their node), dropping those older than 30 s. */
  list(now: number): V1Pod[] {
    return [...this.#pods.entries()].filter(([k]) => this.has(k, now)).map(([, a]) => a.pod);
  }
}

/** How long an assumed pod counts without the cache showing it bound: 30 s. */
const ASSUME_TTL_MS = 30_000;

/** Whether this scheduler handles the pod: unbound, active, default scheduler. */
export function needsScheduling(pod: V1Pod): boolean {
  const scheduler = pod.spec?.schedulerName;
  return (
    !pod.spec?.nodeName &&
    isPodActive(pod) &&
    (scheduler === undefined || scheduler === '' || scheduler === 'default-scheduler')
  );
}

/**
 * How the binds go when they are asynchronous (the scheduler's): the binding cycles in flight, and what to
 * do when one fails (the pod is no longer assumed; it is queued again after a back-off).
 */
export interface AsyncBinding {
  binds: Binds;
  /** A bind failed for another reason than a conflict (bound meanwhile) or a missing pod. */
  failed(key: string, err: unknown): void;
  /** A bind succeeded. */
  bound(key: string): void;
}

/**
 * Schedules the pod `namespace/name`: the scheduling cycle (a decision on the cache, the pod assumed on its
 * node at once), then the binding cycle: with `binding`, sent asynchronously ({@link Binds}: the call
 * returns once the bind is started, after waiting for one of the binds in flight to end when they are
 * all taken); without, awaited here, with its `Scheduled` event (unit tests).
 * @returns a requeue after `unschedulableRetryMs` when nothing fits
 * @throws ApiError when the status write fails, or binding fails without `binding` (retried with back-off)
 */
export async function reconcileSchedule(
  key: string,
  ctx: ControllerContext,
  assumed: AssumedPods,
  binding?: AsyncBinding,
): Promise<ReconcileResult | undefined> {
  if (binding) await binding.binds.slot();
  const slot = { held: binding !== undefined };
  try {
    return await schedule(key, ctx, assumed, binding, slot);
  } finally {
    if (slot.held) binding?.binds.release();
  }
}

async function schedule(
  key: string,
  ctx: ControllerContext,
  assumed: AssumedPods,
  binding: AsyncBinding | undefined,
  slot: { held: boolean },
): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const pod = ctx.cache.pods.get(name, namespace);
  if (!pod || !needsScheduling(pod)) {
    assumed.forget(key);
    return undefined;
  }
  const now = ctx.clock.now();
  if (assumed.has(key, now)) return undefined;
  // With the scheduler's per-node sums, a decision costs O(nodes); without (unit tests), every pod is summed.
  const placement = assumed.usage
    ? pickNode(pod, ctx.cache.nodes.list(), [], { usage: assumed.usage.nodes })
    : pickNode(pod, ctx.cache.nodes.list(), ctx.cache.pods.list(), { assumed: assumed.list(now) });
  if (placement.nodeName !== undefined) {
    const nodeName = placement.nodeName;
    // Assumed before the bind is sent: every later decision counts this pod on its node.
    assumed.assume(key, pod, nodeName, now);
    // Stamped with the time of the decision, before the bind: the kubelet acts on the binding as soon as it
    // sees it, so an event stamped after the bind (a slow write) could sort after the kubelet's Pulling.
    const scheduled = () => recordPodEvent(ctx, pod, 'Normal', 'Scheduled', `Successfully assigned ${key} to ${nodeName}`, 'default-scheduler', now);
    const bind = async (): Promise<boolean> => {
      try {
        await ctx.api.bindPod(namespace, name, pod.metadata?.uid, nodeName);
      } catch (err: unknown) {
        assumed.forget(key);
        // Bound meanwhile (409) or gone (404): the next event tells the truth.
        if (isConflict(err) || isNotFound(err)) return false;
        throw err;
      }
      ctx.log.info({ pod: key, node: nodeName, bindMs: ctx.clock.now() - now }, 'scheduled');
      return true;
    };
    if (!binding) {
      if (await bind()) await scheduled();
      return undefined;
    }
    slot.held = false; // the reservation passes to the binding cycle
    binding.binds.start(async () => {
      try {
        const ok = await bind();
        if (ok) binding.bound(key);
        return ok;
      } catch (err: unknown) {
        binding.failed(key, err);
        return false;
      }
    }, scheduled);
    return undefined;
  }
  if (slot.held) {
    binding?.binds.release(); // no bind: a status write and an event, which need no reservation
    slot.held = false;
  }
  placement.message = withRuntimeClass(pod, placement.message);
  const current = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (current?.status !== 'False' || current.reason !== 'Unschedulable' || current.message !== placement.message) {
    const others = (pod.status?.conditions ?? []).filter((c) => c.type !== 'PodScheduled');
    try {
      await ctx.api.patchPodStatus(namespace, name, {
        status: {
          phase: pod.status?.phase ?? 'Pending',
          conditions: [
            ...others,
            {
              type: 'PodScheduled',
              status: 'False',
              reason: 'Unschedulable',
              message: placement.message,
              lastTransitionTime: new Date(now).toISOString(),
            },
          ],
        },
      });
    } catch (err: unknown) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
    await recordPodEvent(ctx, pod, 'Warning', 'FailedScheduling', placement.message, 'default-scheduler');
    ctx.log.info({ pod: key, why: placement.message }, 'unschedulable');
  }
  return { requeueAfterMs: ctx.timings.unschedulableRetryMs };
}


/**
 * The message of an unschedulable pod with a `runtimeClassName`, naming the class and the nodes it
 * selects (issue 18: a pod of RuntimeClass `feos` and no FeOS node says so), e.g. `0/2 nodes are
 * available: 2 node(s) didn't match Pod's node affinity/selector. RuntimeClass "feos" runs the pod on
 * nodes labelled kube32.io/runtime=feos (FeOS nodes, joined with feosd --control-plane).`
 */
export function withRuntimeClass(pod: V1Pod, message: string): string {
  const rc = pod.spec?.runtimeClassName;
  if (!rc) return message;
  const selector = Object.entries(pod.spec?.nodeSelector ?? {}).map(([k, v]) => `${k}=${v}`).join(',');
  const feos = pod.spec?.nodeSelector?.[LABELS.runtime] === RUNTIME_FEOS ? ' (FeOS nodes, joined with feosd --control-plane)' : '';
  return `${message} RuntimeClass ${JSON.stringify(rc)} runs the pod on ${selector ? `nodes labelled ${selector}${feos}` : 'the nodes its handler runs on'}.`;
}
