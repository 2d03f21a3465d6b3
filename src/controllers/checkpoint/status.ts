/**
 * Writing a Checkpoint's status and the pod events that go with each outcome (seed "Moves": phases and
 * events; "What keeps a pod from moving": `status.blockers` and the `MoveFailed` event).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import type { MergePatch } from '../runtime/api.ts';
import { type Checkpoint, type CheckpointStatus, isConflict, isNotFound, LABELS } from '../../api/index.ts';

/** `namespace/name` of a Checkpoint. */
export function ckKey(ck: Checkpoint): string {
  return `${ck.metadata?.namespace ?? 'default'}/${ck.metadata?.name ?? ''}`;
}

/** The Checkpoint's action, `Save` by default. */
export function actionOf(ck: Checkpoint): string {
  return ck.spec?.action ?? 'Save';
}

/**
 * Merges `status` into the Checkpoint's status (through `/status`) and returns the Checkpoint as it now is.
 *
 * The write is conditional on the Checkpoint's `metadata.resourceVersion` as the caller saw it (when it has
 * one): a reconcile that runs on a stale cache (the watch has not delivered the controller's own last write
 * yet) gets 409 Conflict instead of deciding a second time. So a phase change, and the event recorded after
 * it, happens once per Checkpoint however often the reconcile runs. The returned Checkpoint carries the new
 * `resourceVersion`, so that one reconcile can make several writes in a row.
 * @throws ApiError 409 when the Checkpoint changed since `ck` was read (see {@link isConflict}), 404 when
 *   it was deleted meanwhile
 */
export async function writeStatus(ctx: ControllerContext, ck: Checkpoint, status: CheckpointStatus): Promise<Checkpoint> {
  const ns = ck.metadata?.namespace ?? 'default';
  const rv = ck.metadata?.resourceVersion;
  const patch: MergePatch = rv ? { metadata: { resourceVersion: rv }, status } : { status };
  const answer = await ctx.api.patchCheckpointStatus(ns, ck.metadata?.name ?? '', patch);
  return withResourceVersion({ ...ck, status: { ...(ck.status ?? {}), ...status } }, answer?.metadata?.resourceVersion);
}

/** `ck` with `resourceVersion` (when defined): the version a write answered. */
export function withResourceVersion(ck: Checkpoint, resourceVersion: string | undefined): Checkpoint {
  if (!resourceVersion) return ck;
  return { ...ck, metadata: { ...(ck.metadata ?? {}), resourceVersion } };
}

/** Options of {@link failCheckpoint}. */
export interface FailOptions {
  /** Why, for `status.message` and the event. */
  message: string;
  /** Every blocker, when the move was refused for them. */
  blockers?: string[];
  /** The pod the event goes on (when it still exists). */
  pod?: V1Pod;
  /**
   * The failure came before the replacement: an eviction's move then deletes the pod as an eviction does,
   * so that `kubectl drain` completes (seed "Drain and evictions").
   */
  beforeReplacement?: boolean;
}

/**
 * Ends a Checkpoint `Failed`: status (phase, message, blockers), then the `MoveFailed` or `CheckpointFailed`
 * event, and, for an eviction's move that failed before the replacement, the pod's deletion (first).
 *
 * The event follows the status write, which is conditional ({@link writeStatus}): a reconcile on a stale
 * cache that decides the same failure again gets 409 and records nothing, so each Checkpoint has one
 * failure event.
 * @throws ApiError 409 when the Checkpoint changed since it was read (the caller's reconcile ends; the
 *   watch brings the newer version)
 */
export async function failCheckpoint(ctx: ControllerContext, ck: Checkpoint, opts: FailOptions): Promise<void> {
  const isMove = actionOf(ck) === 'Move';
  // The deletion comes before the status, so that a retry after a failed deletion still deletes. Its uid
  // precondition makes a second try harmless.
  if (isMove && opts.beforeReplacement && opts.pod && ck.metadata?.labels?.[LABELS.trigger] === 'eviction') {
    const ns = opts.pod.metadata?.namespace ?? 'default';
    try {
      await ctx.api.deletePod(ns, opts.pod.metadata?.name ?? '', { uid: opts.pod.metadata?.uid });
      ctx.log.info({ pod: `${ns}/${opts.pod.metadata?.name}` }, 'the eviction could not move the pod: deleted it');
    } catch (err: unknown) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }
  const status: CheckpointStatus = { phase: 'Failed', message: opts.message };
  if (opts.blockers && opts.blockers.length > 0) status.blockers = opts.blockers;
  try {
    await writeStatus(ctx, ck, status);
  } catch (err: unknown) {
    if (isNotFound(err)) return;
    throw err;
  }
  ctx.log.info({ checkpoint: ckKey(ck), message: opts.message, blockers: opts.blockers }, isMove ? 'move failed' : 'checkpoint failed');
  if (opts.pod) {
    await recordPodEvent(ctx, opts.pod, 'Warning', isMove ? 'MoveFailed' : 'CheckpointFailed', `${ck.metadata?.name}: ${opts.message}`);
  }
}
