/**
 * Writing a Checkpoint's status and the pod events that go with each outcome (seed "Moves": phases and
 * events; "What keeps a pod from moving": `status.blockers` and the `MoveFailed` event).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { isConflict, isNotFound } from '../runtime/errors.ts';
import { type Checkpoint, type CheckpointStatus, LABELS } from '../runtime/types.ts';

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
 * @throws ApiCallError (404 when the Checkpoint was deleted meanwhile)
 */
export async function writeStatus(ctx: ControllerContext, ck: Checkpoint, status: CheckpointStatus): Promise<Checkpoint> {
  const ns = ck.metadata?.namespace ?? 'default';
  await ctx.api.patchCheckpointStatus(ns, ck.metadata?.name ?? '', { status });
  return { ...ck, status: { ...(ck.status ?? {}), ...status } };
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
 * Ends a Checkpoint `Failed`: status (phase, message, blockers), the `MoveFailed` or `CheckpointFailed` event,
 * and, for an eviction's move that failed before the replacement, the pod's deletion.
 */
export async function failCheckpoint(ctx: ControllerContext, ck: Checkpoint, opts: FailOptions): Promise<void> {
  const isMove = actionOf(ck) === 'Move';
  if (opts.pod) {
    await recordPodEvent(ctx, opts.pod, 'Warning', isMove ? 'MoveFailed' : 'CheckpointFailed', `${ck.metadata?.name}: ${opts.message}`);
  }
  // The deletion comes before the status, so that a retry after a failed deletion still deletes.
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
}
