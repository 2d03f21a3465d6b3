/**
 * A pod thread: holds the contexts of the pods attached to it (one, or many for dense pods) and
 * nothing else. Each pod talks to the main thread on a port of its own (see protocol.ts); this
 * thread's own port only attaches and detaches pods. What runs now is recorded in the thread's
 * status buffer (thread-status.ts), which the main thread reads to bound a call.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { PodContext } from './pod-context.ts';
import { errorMessage } from './errors.ts';
import type { FromThread, FromWorker, ToThread } from './protocol.ts';
import { ThreadStatus } from './thread-status.ts';
import { warmUpPodCode, warmUpSnapshotCode } from './warm-up.ts';

const port = parentPort!;
const status = new ThreadStatus((workerData as { status: SharedArrayBuffer }).status);
const contexts = new Map<number, PodContext>();

port.on('message', (m: ToThread) => {
  switch (m.op) {
    case 'attach': {
      let ctx: PodContext;
      try {
        ctx = new PodContext(m.slot, m.port, m.init, status, new Int32Array(m.gone), m.usage, () => contexts.delete(m.slot));
      } catch (err: unknown) {
        // (its fsDir cannot be made, ...): this pod fails to start; the thread and its other pods go on.
        m.port.postMessage({ op: 'startFailed', reason: 'Error', message: `cannot start the pod: ${errorMessage(err)}` } satisfies FromWorker);
        m.port.close();
        break;
      }
      contexts.set(m.slot, ctx);
      ctx.start().catch((err: unknown) => ctx.crash(err));
      break;
    }
    case 'detach': contexts.get(m.slot)?.detach(); break;
  }
});
// Compiled now, while the thread waits as a spare, not during a pod's start, its first snapshot or a
// restore. Only a speed-up: a failure is reported, and the thread serves its pods all the same.
let warmUpError: string | undefined;
try {
  warmUpSnapshotCode();
  await warmUpPodCode();
} catch (err: unknown) {
  warmUpError = errorMessage(err);
  process.emitWarning(`pod thread warm-up failed: ${warmUpError}`);
}
port.postMessage({ op: 'booted', ...(warmUpError !== undefined ? { warmUpError } : {}) } satisfies FromThread);
