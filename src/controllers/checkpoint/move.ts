/**
 * The move's replacement and its outcome (seed "Moves", steps 3 and 4, and the rollback paragraph).
 *
 * - {@link replaceForMove}: one write replaces the pod: the same name, spec, labels, annotations, owners and
 *   finalizers, a new uid, `spec.nodeName` the target, `kube32.io/restore-from` the Checkpoint. The old uid is
 *   the precondition. Prerequisite: the snapshot is stored. Effect: `Moving`, the `Moving` event.
 * - {@link watchMove}: `Completed` once the replacement runs (the `Moved` event with the time from the freeze,
 *   the annotation removed); a rollback when it fails to restore, fails, or does not run within 60 s.
 * - {@link rollBack}: the pod goes back to its source node (or, the source not Ready, to the scheduler) and
 *   restores there from the same Checkpoint; the Checkpoint turns `Failed` with the reason.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { humanDuration } from '../../lib/index.ts';
import type { ReconcileResult } from '../runtime/controller.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, type CheckpointStatus, errorMessage, isConflict, isNotFound, isPodRunning, nodeReadyStatus } from '../../api/index.ts';
import { restoreFailure } from '../runtime/pods.ts';
import { ckKey, failCheckpoint, writeStatus } from './status.ts';
import { logStep, passStep } from './timeline.ts';
import { moveDeadlineMs } from './microvm.ts';

/**
 * The replacement pod for `pod`: what the seed says carries over, and `nodeName` (undefined: the scheduler
 * binds it). `restoreFrom` undefined removes the annotation (a fresh start).
 */
export function replacementPod(pod: V1Pod, nodeName: string | undefined, restoreFrom: string | undefined): V1Pod {
  const annotations = { ...(pod.metadata?.annotations ?? {}) };
  if (restoreFrom === undefined) delete annotations[ANNOTATIONS.restoreFrom];
  else annotations[ANNOTATIONS.restoreFrom] = restoreFrom;
  const spec = { ...pod.spec!, nodeName };
  if (nodeName === undefined) delete spec.nodeName;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: pod.metadata?.name,
      namespace: pod.metadata?.namespace,
      uid: pod.metadata?.uid, // the precondition: the CURRENT uid
      labels: pod.metadata?.labels,
      annotations,
      ownerReferences: pod.metadata?.ownerReferences,
      finalizers: pod.metadata?.finalizers,
    },
    spec,
  };
}

/**
 * Replaces `pod` by one write (`POST .../pods/<name>/replace`), telling the workload controllers that the
 * pod is being replaced so that they count it throughout.
 * @returns the new pod, or undefined when the pod changed or went meanwhile (409/404)
 * @throws ApiError for other failures
 */
export async function replacePod(ctx: ControllerContext, pod: V1Pod, nodeName: string | undefined, restoreFrom: string | undefined): Promise<V1Pod | undefined> {
  const ns = pod.metadata?.namespace ?? 'default';
  const name = pod.metadata?.name ?? '';
  const key = `${ns}/${name}`;
  ctx.state.replacements.begin(key, pod.metadata?.ownerReferences?.find((r) => r.controller)?.uid);
  try {
    return await ctx.api.replacePod(ns, name, replacementPod(pod, nodeName, restoreFrom));
  } catch (err: unknown) {
    ctx.state.replacements.end(key);
    if (isConflict(err) || isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * Step 3 of a move, once the data is stored.
 * @returns a requeue at the move's deadline
 */
export async function replaceForMove(
  ctx: ControllerContext,
  ck: Checkpoint,
  pod: V1Pod,
  target: string,
  frozenAt: number,
  facts: CheckpointStatus = {},
): Promise<ReconcileResult | undefined> {
  const key = ckKey(ck);
  let replaced: V1Pod | undefined;
  try {
    replaced = await replacePod(ctx, pod, target, ck.metadata?.name);
  } catch (err: unknown) {
    await thawQuietly(ctx, ck, pod);
    await failCheckpoint(ctx, ck, { message: `replacing the pod: ${errorMessage(err)}`, pod, beforeReplacement: true });
    return undefined;
  }
  if (!replaced) {
    await thawQuietly(ctx, ck, pod);
    await failCheckpoint(ctx, ck, { message: 'the pod was deleted or replaced during the move', pod, beforeReplacement: true });
    return undefined;
  }
  await passStep(ctx, ck, 'replaced');
  ctx.state.frozenAt.set(key, frozenAt);
  ctx.state.replacedAt.set(key, ctx.clock.now());
  // A 409 here (the Checkpoint changed meanwhile) ends the reconcile: the next one finds the pod replaced
  // and writes `Moving`, with its event, then (see `saving`).
  await writeStatus(ctx, ck, { ...facts, phase: 'Moving', targetNode: target, newPodName: replaced.metadata?.name });
  await passStep(ctx, ck, 'moving');
  ctx.log.info(
    { checkpoint: key, pod: pod.metadata?.name, from: ck.status?.nodeName, to: target, sinceFreezeMs: ctx.clock.now() - frozenAt },
    'replacement bound to the target',
  );
  void recordPodEvent(ctx, replaced, 'Normal', 'Moving', `${ck.metadata?.name}: the replacement is bound to ${target}`);
  return { requeueAfterMs: moveDeadlineMs(ctx, ck) };
}

/** Thaws the pod on the Checkpoint's source node; a failure is logged (the node thaws on its own timeout). */
export async function thawQuietly(ctx: ControllerContext, ck: Checkpoint, pod: V1Pod): Promise<void> {
  const node = ck.status?.nodeName ?? pod.spec?.nodeName;
  const container = ck.spec.containerName ?? pod.spec?.containers?.[0]?.name ?? '';
  if (!node) return;
  try {
    await ctx.api.thaw(node, pod.metadata?.namespace ?? 'default', pod.metadata?.name ?? '', container);
  } catch (err: unknown) {
    ctx.log.warn({ checkpoint: ckKey(ck), node, err: errorMessage(err) }, 'cannot thaw the pod');
  }
}

function replacedAt(ctx: ControllerContext, ck: Checkpoint, pod: V1Pod): number {
  const seen = ctx.state.replacedAt.get(ckKey(ck));
  if (seen !== undefined) return seen;
  // After a control plane restart: the replacement's creation time (the server's clock), first seen now at the latest.
  const created = Date.parse(String(pod.metadata?.creationTimestamp ?? ''));
  const at = Number.isFinite(created) ? Math.min(created, ctx.clock.now()) : ctx.clock.now();
  ctx.state.replacedAt.set(ckKey(ck), at);
  return at;
}

/** Phase `Moving`: wait for the replacement to run, or roll back. */
export async function watchMove(ctx: ControllerContext, ck: Checkpoint): Promise<ReconcileResult | undefined> {
  const ns = ck.metadata?.namespace ?? 'default';
  const pod = ctx.cache.pods.get(ck.spec.podName, ns);
  const target = ck.status?.targetNode;
  if (!pod) {
    if (ctx.state.replacements.has(`${ns}/${ck.spec.podName}`)) return { requeueAfterMs: 1000 };
    await failCheckpoint(ctx, ck, { message: 'the pod was deleted during the move' });
    return undefined;
  }
  const onTarget = pod.spec?.nodeName === target;
  const names = pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] === ck.metadata?.name;
  if (!onTarget && ctx.state.replacements.has(`${ns}/${ck.spec.podName}`)) {
    // The pods' watch has not delivered the replacement yet (the Checkpoints' watch can be ahead of it).
    return { requeueAfterMs: 100 };
  }
  if (!onTarget) {
    const source = ck.status?.nodeName;
    if (names && (pod.spec?.nodeName === source || !pod.spec?.nodeName)) {
      // Rolled back, but the Failed status was not written (an error or a restart in between).
      const reason = (ck.status?.message ?? 'the move failed').replace(/; rolling back$/, '');
      const where = pod.spec?.nodeName ? `to ${source}` : `to the scheduler (${source} is not Ready)`;
      await failCheckpoint(ctx, ck, { message: `${reason}; rolled back ${where}`, pod });
      return undefined;
    }
    // Moved away by someone else.
    await failCheckpoint(ctx, ck, { message: `the pod is no longer on ${target}`, pod });
    return undefined;
  }
  if (isPodRunning(pod)) return complete(ctx, ck, pod, names);
  const failure = restoreFailure(pod);
  if (failure) return rollBack(ctx, ck, pod, `the replacement on ${target} failed: ${failure}`);
  const timeoutMs = moveDeadlineMs(ctx, ck);
  const deadline = replacedAt(ctx, ck, pod) + timeoutMs;
  const left = deadline - ctx.clock.now();
  if (left <= 0) {
    return rollBack(ctx, ck, pod, `the replacement did not run on ${target} within ${Math.round(timeoutMs / 1000)} s`);
  }
  return { requeueAfterMs: left };
}

/**
 * Step 4: the replacement runs. The time from the freeze is computed here, once, and the same figure goes
 * into `status.message` and the `Moved` event; the event is recorded only when the `Completed` write
 * succeeds. That write is conditional on the Checkpoint's `resourceVersion`, so a second run on a stale
 * cache (the pod's annotation removal brings the key back before the Checkpoints' watch shows `Completed`)
 * gets 409 and records nothing: one `Moved` event per move.
 */
async function complete(ctx: ControllerContext, ck: Checkpoint, pod: V1Pod, annotated: boolean): Promise<undefined> {
  const key = ckKey(ck);
  const ms = moveMs(ctx, ck);
  logStep(ctx, ck, 'running-seen');
  // The annotation goes first, so that `Completed` means the pod no longer names the Checkpoint (a later
  // restart of its container starts afresh). A crash in between completes again, without the annotation.
  if (annotated) await removeRestoreAnnotation(ctx, pod);
  await writeStatus(ctx, ck, { phase: 'Completed', message: ms !== undefined ? `moved in ${ms} ms from the freeze` : 'moved' });
  logStep(ctx, ck, 'completed');
  ctx.state.frozenAt.delete(key);
  ctx.state.replacedAt.delete(key);
  ctx.log.info({ checkpoint: key, ms }, 'move completed');
  await recordPodEvent(
    ctx,
    pod,
    'Normal',
    'Moved',
    `${ck.metadata?.name}: moved from ${ck.status?.nodeName} to ${ck.status?.targetNode}${ms !== undefined ? ` in ${ms} ms from the freeze to Running` : ''}`,
  );
  return undefined;
}

/**
 * The move's time from the freeze to now, ms: from the freeze this process saw, else (after a restart)
 * from `status.takenAt`; undefined when neither is known.
 */
function moveMs(ctx: ControllerContext, ck: Checkpoint): number | undefined {
  const frozen = ctx.state.frozenAt.get(ckKey(ck)) ?? Date.parse(ck.status?.takenAt ?? '');
  return Number.isFinite(frozen) ? Math.max(0, ctx.clock.now() - frozen) : undefined;
}

/**
 * Removes `kube32.io/restore-from` from a running pod (a later restart starts afresh).
 * @param ifResourceVersion only when the pod is still at this version (409 otherwise): a caller that records
 *   an event with the removal records it once
 * @returns false when the pod is gone, or changed since `ifResourceVersion`
 * @throws ApiError for other failures
 */
export async function removeRestoreAnnotation(ctx: ControllerContext, pod: V1Pod, ifResourceVersion?: string): Promise<boolean> {
  const metadata: Record<string, unknown> = { annotations: { [ANNOTATIONS.restoreFrom]: null } };
  if (ifResourceVersion) metadata.resourceVersion = ifResourceVersion;
  try {
    await ctx.api.patchPod(pod.metadata?.namespace ?? 'default', pod.metadata?.name ?? '', { metadata });
    return true;
  } catch (err: unknown) {
    if (isNotFound(err) || (ifResourceVersion && isConflict(err))) return false;
    throw err;
  }
}

/**
 * Rolls a move back: the pod returns to its source node (Ready) or to the scheduler (source not Ready) and
 * restores there from the same Checkpoint. Then `Failed` with the reason and a `MoveFailed` event.
 */
export async function rollBack(ctx: ControllerContext, ck: Checkpoint, pod: V1Pod, reason: string): Promise<undefined> {
  const key = ckKey(ck);
  const source = ck.status?.nodeName;
  const sourceNode = source ? ctx.cache.nodes.get(source) : undefined;
  const back = sourceNode && nodeReadyStatus(sourceNode) === 'True' ? source : undefined;
  // The reason first, so that a retry after the replacement still knows why it rolled back.
  // Conditional: a second run on a stale cache stops here with 409 and replaces nothing.
  const marked = ck.status?.message !== `${reason}; rolling back` ? await writeStatus(ctx, ck, { message: `${reason}; rolling back` }) : ck;
  const replaced = await replacePod(ctx, pod, back, ck.metadata?.name);
  if (!replaced) throw new Error(`rollback of ${key}: the pod changed meanwhile; trying again`);
  const where = back ? `to ${back}` : `to the scheduler (${source} is not Ready)`;
  await failCheckpoint(ctx, marked, { message: `${reason}; rolled back ${where}`, pod: replaced });
  ctx.state.frozenAt.delete(key);
  ctx.state.replacedAt.delete(key);
  return undefined;
}

/** The Restored event's message: the checkpoint and its age. */
export function restoredMessage(ck: Checkpoint, now: number): string {
  const taken = Date.parse(ck.status?.takenAt ?? String(ck.metadata?.creationTimestamp ?? ''));
  const age = Number.isFinite(taken) ? humanDuration(now - taken) : 'unknown';
  return `restored from checkpoint ${ck.metadata?.name}, taken ${age} ago`;
}
