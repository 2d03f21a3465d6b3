/**
 * Retention of finished Checkpoints (seed "Retention"):
 *
 * - The latest Saved periodic checkpoint of each pod stays; older ones go, and all of a pod's periodic
 *   checkpoints go with the pod.
 * - Other Checkpoints, Failed ones included, go 1 hour after they finished.
 * - A Checkpoint stays while a pod's `kube32.io/restore-from` names it.
 *
 * "Finished" is the annotation `kube32.io/finished-at`, which this controller writes the first time it sees a
 * Checkpoint finished (its own clock), so the hour survives a control plane restart.
 */
import type { ReconcileResult } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, isNotFound, LABELS, isPodRunning } from '../../api/index.ts';
import { removeRestoreAnnotation } from './move.ts';
import { ckKey } from './status.ts';

/** Whether some pod's `kube32.io/restore-from` names the Checkpoint. */
export function namedByRestore(ctx: ControllerContext, ck: Checkpoint): boolean {
  return ctx.cache.pods
    .list(ck.metadata?.namespace)
    .some((p) => p.metadata?.annotations?.[ANNOTATIONS.restoreFrom] === ck.metadata?.name);
}

/** The pod's latest Saved periodic Checkpoint (by `takenAt`, then name). */
export function latestPeriodic(ctx: ControllerContext, namespace: string, podName: string): Checkpoint | undefined {
  let best: Checkpoint | undefined;
  for (const c of ctx.cache.checkpoints.list(namespace)) {
    if (c.metadata?.labels?.[LABELS.trigger] !== 'periodic' || c.spec?.podName !== podName) continue;
    if (c.status?.phase !== 'Saved' || c.metadata?.deletionTimestamp) continue;
    if (!best || order(c) > order(best)) best = c;
  }
  return best;
}

function order(c: Checkpoint): string {
  return `${c.status?.takenAt ?? ''}|${c.metadata?.name ?? ''}`;
}

async function remove(ctx: ControllerContext, ck: Checkpoint, why: string): Promise<undefined> {
  try {
    await ctx.api.deleteCheckpoint(ck.metadata?.namespace ?? 'default', ck.metadata?.name ?? '');
    ctx.log.info({ checkpoint: ckKey(ck), why }, 'checkpoint removed');
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
  return undefined;
}

/** Applies retention to a finished Checkpoint; requeues at its expiry. */
export async function retain(ctx: ControllerContext, ck: Checkpoint): Promise<ReconcileResult | undefined> {
  const ns = ck.metadata?.namespace ?? 'default';
  const now = ctx.clock.now();
  const finishedText = ck.metadata?.annotations?.[ANNOTATIONS.finishedAt];
  let finished = Date.parse(finishedText ?? '');
  if (!Number.isFinite(finished)) {
    try {
      await ctx.api.patchCheckpoint(ns, ck.metadata?.name ?? '', {
        metadata: { annotations: { [ANNOTATIONS.finishedAt]: new Date(now).toISOString() } },
      });
    } catch (err: unknown) {
      // Deleted already (often just after it finished); the cache has not seen it go yet. Nothing to retain.
      if (isNotFound(err)) return undefined;
      throw err;
    }
    finished = now;
  }
  if (ck.status?.phase === 'Completed') {
    const pod = ctx.cache.pods.get(ck.spec.podName, ns);
    if (pod && pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] === ck.metadata?.name && isPodRunning(pod)) {
      await removeRestoreAnnotation(ctx, pod);
      return undefined;
    }
  }
  if (namedByRestore(ctx, ck)) return undefined; // a pod event brings it back
  if (ck.metadata?.labels?.[LABELS.trigger] === 'periodic') {
    const podKey = `${ns}/${ck.spec.podName}`;
    const pod = ctx.cache.pods.get(ck.spec.podName, ns);
    if (!pod && !ctx.state.replacements.has(podKey)) return remove(ctx, ck, 'its pod is gone');
    const latest = latestPeriodic(ctx, ns, ck.spec.podName);
    if (ck.status?.phase === 'Saved') {
      if (latest && latest.metadata?.name !== ck.metadata?.name) return remove(ctx, ck, 'a newer periodic checkpoint is saved');
      return undefined; // the latest stays
    }
    if (latest) return remove(ctx, ck, 'a newer periodic checkpoint is saved');
  }
  const expiry = finished + ctx.timings.checkpointRetentionMs;
  if (expiry <= now) return remove(ctx, ck, 'retention period over');
  return { requeueAfterMs: expiry - now };
}
