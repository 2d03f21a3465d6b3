/**
 * What a pod thread runs now, shared between the thread and the main thread through a
 * `SharedArrayBuffer` (no message, no wait): the slot of the pod whose WebAssembly code runs, a
 * count of runs, and when the current run began. The main thread reads it to measure a call's
 * deadline from when the pod's own code began to run (not from when the call was queued behind
 * co-tenants), and to tell a pod that still runs from one that returned.
 */

/** Wall-clock ms with sub-ms precision, comparable between threads (`timeOrigin + now()`). */
export function nowAbsMs(): number {
  return performance.timeOrigin + performance.now();
}

/** One reading of a thread's status. */
export interface ThreadRun {
  /** The slot of the pod whose code runs (slots start at 1). */
  slot: number;
  /** Which run of the thread this is: a new run of the same pod has another `seq`. */
  seq: number;
  /** When the run began, in {@link nowAbsMs} ms. */
  sinceAbsMs: number;
}

/** Bytes of a status buffer: slot and seq (two int32), then the start time (one float64). */
const BYTES = 16;

/** A thread's status over its shared buffer; the thread writes, the main thread reads. */
export class ThreadStatus {
  readonly buffer: SharedArrayBuffer;
  readonly #ints: Int32Array;
  readonly #since: Float64Array;

  /** @param buffer a buffer from {@link ThreadStatus.allocate} (or a new one) */
  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(BYTES)) {
    this.buffer = buffer;
    this.#ints = new Int32Array(buffer, 0, 2);
    this.#since = new Float64Array(buffer, 8, 1);
  }

  /** The thread: pod `slot`'s code begins to run. */
  enter(slot: number): void {
    // A sequence lock: the count is odd while the fields change.
    Atomics.add(this.#ints, 1, 1);
    this.#since[0] = nowAbsMs();
    Atomics.store(this.#ints, 0, slot);
    Atomics.add(this.#ints, 1, 1);
  }

  /** The thread: the code that ran has returned (or thrown). */
  leave(): void {
    Atomics.store(this.#ints, 0, 0);
  }

  /** The main thread: what runs now, or undefined when the thread runs no pod's code. */
  read(): ThreadRun | undefined {
    // Bounded: a thread terminated in the middle of enter() leaves the count odd for good.
    for (let tries = 0; ; tries++) {
      const seq = Atomics.load(this.#ints, 1);
      if (seq % 2 === 1 && tries < 1000) continue;
      const slot = Atomics.load(this.#ints, 0);
      const sinceAbsMs = this.#since[0]!;
      // A run that began between the loads would mix two runs: read again.
      if (Atomics.load(this.#ints, 1) !== seq && tries < 1000) continue;
      return slot === 0 ? undefined : { slot, seq, sinceAbsMs };
    }
  }
}
