/**
 * What a pod uses on its thread, shared between the thread and the main thread through a
 * `SharedArrayBuffer` (no message, no wait), for the kubelet's `/stats/summary`: the time its own
 * code has run (the sum of its runs, in ns) and the bytes of its linear memory after its last run.
 * The thread writes, the main thread reads; both fields are `BigInt64` cells written with `Atomics`,
 * so a read never sees half a write.
 */
import type { ThreadStatus } from './thread-status.ts';

/** Bytes of a usage buffer: run time (ns), then memory bytes, each a BigInt64. */
const BYTES = 16;

/** One reading of a pod's usage. */
export interface PodUsageReading {
  /** Nanoseconds the pod's own code has run on its thread (calls, ticks, events, start steps). */
  runNs: number;
  /** Bytes of the pod's linear memory after its last run (0 for a module without memory). */
  memoryBytes: number;
}

/** A pod's usage cells over their shared buffer. */
export class PodUsage {
  readonly buffer: SharedArrayBuffer;
  readonly #cells: BigInt64Array;

  /** @param buffer a buffer of another PodUsage (the thread's side), or a new one */
  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(BYTES)) {
    this.buffer = buffer;
    this.#cells = new BigInt64Array(buffer, 0, 2);
  }

  /** The thread: one run of the pod's code took `ns` nanoseconds. */
  addRun(ns: bigint): void {
    Atomics.add(this.#cells, 0, ns);
  }

  /** The thread: the pod's linear memory is `bytes` long now. */
  setMemoryBytes(bytes: number): void {
    Atomics.store(this.#cells, 1, BigInt(bytes));
  }

  /** The main thread: what the pod has used. */
  read(): PodUsageReading {
    return { runNs: Number(Atomics.load(this.#cells, 0)), memoryBytes: Number(Atomics.load(this.#cells, 1)) };
  }
}

/** What a pod's context records its runs in: the thread's status, and the pod's usage beside it. */
export type RunRecorder = Pick<ThreadStatus, 'enter' | 'leave'>;

/**
 * The thread's status for one pod, with its runs also counted in its usage: `enter` notes the time,
 * `leave` adds the run's length and the memory's size now (`leave` without an `enter` adds nothing).
 * @param memoryBytes the pod's linear memory's length now (0 without one)
 */
export function accountedStatus(status: ThreadStatus, usage: PodUsage, memoryBytes: () => number): RunRecorder {
  let since: bigint | undefined;
  return {
    enter(slot: number): void {
      since = process.hrtime.bigint();
      status.enter(slot);
    },
    leave(): void {
      status.leave();
      if (since === undefined) return;
      usage.addRun(process.hrtime.bigint() - since);
      since = undefined;
      usage.setMemoryBytes(memoryBytes());
    },
  };
}
