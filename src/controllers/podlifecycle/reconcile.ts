/**
 * What the control plane does for one pod outside a move (seed "Periodic checkpoints and node loss",
 * "Moves" rollback):
 *
 * - A pod that restored from a Checkpoint outside a move (after a node loss or a rollback) and runs: the
 *   `Restored` event with the checkpoint's age, and `kube32.io/restore-from` removed.
 * - A pod whose restore failed (`RestoreError`): the `MoveFailed` event, and the pod replaced without the
 *   annotation so that it starts afresh.
 * - A pod whose seed annotations hold a value the controllers cannot use: an `InvalidAnnotation` warning,
 *   once per pod uid, saying what is used instead (`annotations.ts`).
 * - A pod with `kube32.io/checkpoint-interval`: a Save Checkpoint labelled `kube32.io/trigger: periodic` at
 *   that interval (10 s at least), named after the interval's slot so that a retry after a crash does not
 *   make a second one; none while the pod's node is not Ready (the snapshot could not be taken).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { parseDuration } from '../../lib/index.ts';
import { removeRestoreAnnotation, replacePod, restoredMessage } from '../checkpoint/move.ts';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, isAlreadyExists, LABELS, isPodRunning, migrationPolicy, nodeReadyStatus, podSpecBlockers } from '../../api/index.ts';
import { restoreFailure } from '../runtime/pods.ts';
import { forgetAnnotationWarnings, warnAboutAnnotations } from './annotations.ts';

/** Reconciles the pod `namespace/name`. */
export async function reconcilePod(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const pod = ctx.cache.pods.get(name, namespace);
  if (!pod || pod.metadata?.deletionTimestamp) {
    if (!pod) forgetAnnotationWarnings(ctx, key);
    return undefined;
  }
  await warnAboutAnnotations(ctx, pod);
  const restoreFrom = pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom];
  if (restoreFrom !== undefined) {
    const done = await followRestore(ctx, pod, restoreFrom);
    if (done) return undefined;
  }
  return periodic(ctx, pod);
}

/** @returns true when the pod was handled (the periodic step waits for the next event) */
async function followRestore(ctx: ControllerContext, pod: V1Pod, ckName: string): Promise<boolean> {
  const ns = pod.metadata?.namespace ?? 'default';
  const ck = ctx.cache.checkpoints.get(ckName, ns);
  // A move in progress to this pod's node is the checkpoint controller's.
  if (ck?.status?.phase === 'Moving' && ck.status.targetNode === pod.spec?.nodeName) return true;
  if (ck && (ck.status?.phase === 'Saving' || ck.status?.phase === 'Pending' || ck.status?.phase === 'Completed')) return true;
  if (isPodRunning(pod)) {
    // The event goes with the write that removes the annotation, conditional on the pod's version: a second
    // run on a stale cache gets 409 and records nothing (the pod's watch brings it back).
    const removed = await removeRestoreAnnotation(ctx, pod, pod.metadata?.resourceVersion);
    if (removed && ck) await recordPodEvent(ctx, pod, 'Normal', 'Restored', restoredMessage(ck, ctx.clock.now()));
    ctx.log.info({ pod: `${ns}/${pod.metadata?.name}`, checkpoint: ckName, removed }, 'restored');
    return true;
  }
  const failure = restoreFailure(pod);
  if (failure) {
    // The replacement's uid precondition makes it happen once; the event follows it, on the new pod.
    const fresh = await replacePod(ctx, pod, undefined, undefined);
    if (fresh) await recordPodEvent(ctx, fresh, 'Warning', 'MoveFailed', `cannot restore from checkpoint ${ckName}: ${failure}; starting afresh`);
    ctx.log.info({ pod: `${ns}/${pod.metadata?.name}`, checkpoint: ckName, replaced: fresh !== undefined }, 'restore failed; replaced afresh');
    return true;
  }
  return true; // still starting
}

/** The pod's periodic checkpoint interval, ms (clamped to the minimum), or undefined. */
export function checkpointInterval(ctx: ControllerContext, pod: V1Pod): number | undefined {
  const text = pod.metadata?.annotations?.[ANNOTATIONS.checkpointInterval];
  if (text === undefined) return undefined;
  try {
    return Math.max(ctx.timings.minCheckpointIntervalMs, parseDuration(text));
  } catch {
    return undefined; // the InvalidAnnotation warning says so (annotations.ts)
  }
}

function lastPeriodicAt(ctx: ControllerContext, pod: V1Pod): number | undefined {
  let last: number | undefined;
  for (const c of ctx.cache.checkpoints.list(pod.metadata?.namespace)) {
    if (c.metadata?.labels?.[LABELS.trigger] !== 'periodic' || c.spec?.podName !== pod.metadata?.name) continue;
    const t = Date.parse(String(c.metadata?.creationTimestamp ?? ''));
    if (Number.isFinite(t) && (last === undefined || t > last)) last = t;
  }
  return last;
}

const lastCreated = new WeakMap<ControllerContext, Map<string, number>>();

async function periodic(ctx: ControllerContext, pod: V1Pod): Promise<ReconcileResult | undefined> {
  const interval = checkpointInterval(ctx, pod);
  if (interval === undefined || migrationPolicy(pod) === 'Never' || podSpecBlockers(pod).length > 0) return undefined;
  if (!isPodRunning(pod)) return undefined; // the pod's next update brings it back
  // A node the control plane sees as not Ready (lost, or its kubelet down) cannot answer a snapshot: each
  // try was a Failed Checkpoint and a CheckpointFailed warning, every interval until the pod was evicted.
  const node = pod.spec?.nodeName ? ctx.cache.nodes.get(pod.spec.nodeName) : undefined;
  if (node && nodeReadyStatus(node) !== 'True') return { requeueAfterMs: interval };
  const ns = pod.metadata?.namespace ?? 'default';
  const podName = pod.metadata?.name ?? '';
  const key = `${ns}/${podName}`;
  const active = ctx.cache.checkpoints
    .list(ns)
    .some((c) => c.spec?.podName === podName && !['Saved', 'Completed', 'Failed'].includes(c.status?.phase ?? 'Pending'));
  if (active) return { requeueAfterMs: 1000 };
  const mine = lastCreated.get(ctx) ?? new Map<string, number>();
  lastCreated.set(ctx, mine);
  const now = ctx.clock.now();
  const startedAt = Date.parse(String(pod.status?.startTime ?? pod.metadata?.creationTimestamp ?? ''));
  const last = Math.max(mine.get(key) ?? 0, lastPeriodicAt(ctx, pod) ?? 0) || (Number.isFinite(startedAt) ? startedAt : now);
  const due = last + interval;
  if (due > now) return { requeueAfterMs: due - now };
  const slot = Math.floor(now / interval);
  const name = `${podName.slice(0, 200)}-periodic-${slot.toString(36)}`;
  const ck: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name, namespace: ns, labels: { [LABELS.trigger]: 'periodic', [LABELS.pod]: podName.slice(0, 63) } },
    spec: { podName, action: 'Save' },
  };
  try {
    await ctx.api.createCheckpoint(ns, ck);
    ctx.log.debug({ pod: key, checkpoint: name }, 'periodic checkpoint');
  } catch (err: unknown) {
    if (!isAlreadyExists(err)) throw err;
  }
  mine.set(key, now);
  return { requeueAfterMs: interval };
}
