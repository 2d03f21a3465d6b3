/**
 * The steps of a Save or a Move as the checkpoint controller passes them, logged at `debug` as
 * `{ checkpoint, step }` with the message {@link MOVE_STEP_MESSAGE}, the log line's `time` (ms, the
 * machine's clock) being the step's time. `bench/moves` reads them, with the kubelets' own lines, to print
 * where a move's time goes (issue 6, "Performance"); an operator reads them the same way with
 * `LOG_LEVEL=debug`. Logging a step does no I/O beyond the log line and never throws.
 */
import { pauseAt } from '../../lib/index.ts';
import type { ControllerContext } from '../runtime/context.ts';
import type { Checkpoint } from '../../api/index.ts';
import { ckKey } from './status.ts';

/** The message of every step's log line. */
export const MOVE_STEP_MESSAGE = 'checkpoint step';

/**
 * The controller's steps, in the order a move passes them:
 *
 * | step | when |
 * |---|---|
 * | `seen` | the first reconcile of the `Pending` Checkpoint starts |
 * | `saving` | `Saving` is written (the target chosen) |
 * | `freeze-requested` | the checkpoint request leaves for the node proxy |
 * | `snapshot-answered` | the kubelet answered 200: the pod is frozen and its snapshot streams |
 * | `data-stored` | the data PUT answered: the snapshot is whole in the data store |
 * | `replaced` | the one-write replacement answered |
 * | `moving` | `Moving` is written |
 * | `running-seen` | the replacement is seen Running (the figure of `Moved` is taken here) |
 * | `completed` | `Completed` is written |
 */
export type CheckpointStep =
  | 'seen'
  | 'saving'
  | 'freeze-requested'
  | 'snapshot-answered'
  | 'data-stored'
  | 'replaced'
  | 'moving'
  | 'running-seen'
  | 'completed';

/** Logs that `ck` reached `step` (debug level). */
export function logStep(ctx: ControllerContext, ck: Checkpoint, step: CheckpointStep): void {
  ctx.log.debug({ checkpoint: ckKey(ck), step }, MOVE_STEP_MESSAGE);
}

/**
 * Logs that `ck` reached `step`, then passes the test-only pause of that step (src/lib/test-pause.ts:
 * a fault test stops the control plane exactly there); without it, the same as {@link logStep}.
 */
export async function passStep(ctx: ControllerContext, ck: Checkpoint, step: CheckpointStep): Promise<void> {
  logStep(ctx, ck, step);
  await pauseAt(step);
}
