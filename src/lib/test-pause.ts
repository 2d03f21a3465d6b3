/**
 * A test-only hook that stops a process at a named step, so that a fault test can kill it exactly
 * there (issue 26, "No lost state") without sleeping: with `KUBE32_TEST_PAUSE_DIR=<dir>` and
 * `KUBE32_TEST_PAUSE_AT=<step>[,<step>...]` in its environment, the process writes
 * `<dir>/<step>.paused` (its pid) when it reaches one of those steps, and waits there until
 * `<dir>/<step>.go` exists; from then on that step does not pause again. Without the two variables
 * {@link pauseAt} returns at once and costs nothing. The steps: the checkpoint controller's
 * (`saving`, `data-stored`, `replaced`, `moving`, see src/controllers/checkpoint/timeline.ts) and the
 * kubelet's `kubelet-frozen` (a pod frozen for a snapshot, before its bytes stream),
 * `kubelet-prepared` (a move's target holds a restore prepared from the snapshot pushed to it, written
 * and waiting for its commit) and `kubelet-restore` (a restore about to ask for the Checkpoint's data).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** How often a paused step looks for its `.go` file, ms (test-only code). */
const POLL_MS = 10;

/**
 * Pauses at `step` when the environment asks for it (see the file's comment); resolves at once otherwise.
 * @param step the step's name (letters, digits, `-`)
 */
export async function pauseAt(step: string): Promise<void> {
  const dir = process.env.KUBE32_TEST_PAUSE_DIR;
  if (!dir) return;
  if (!(process.env.KUBE32_TEST_PAUSE_AT ?? '').split(',').includes(step)) return;
  const go = join(dir, `${step}.go`);
  if (existsSync(go)) return;
  writeFileSync(join(dir, `${step}.paused`), `${process.pid}\n`);
  while (!existsSync(go)) await new Promise((r) => setTimeout(r, POLL_MS));
}
