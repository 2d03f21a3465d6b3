/**
 * The process-wide setting of how pods share worker threads (issue 11, "A hundred workers on one
 * machine": 10 000 idle pods on one node). See docs/wasm-runtime.md, "Dense pods".
 */

/** Most pods one worker thread may hold: the upper bound of {@link configurePodThreads}'s `podsPerThread`. */
export const MAX_PODS_PER_THREAD = 10_000;

/** The current setting; read by the thread pool when a pod starts. */
let podsPerThread = 1;
/** Called when the setting changes (the thread pool replaces its spare, booted for the old one). */
const listeners: Array<(podsPerThread: number) => void> = [];

/** Runs `f` with the new setting each time {@link configurePodThreads} changes it. Internal to src/wasm. */
export function onPodThreadsChange(f: (podsPerThread: number) => void): void {
  listeners.push(f);
}

/** Options of {@link configurePodThreads}. */
export interface PodThreadOptions {
  /**
   * Most request pods on one worker thread. 1 gives every pod a thread of its own (the default:
   * a call that loops stalls only its own pod). With N > 1, request pods are packed onto shared
   * threads, at most N a thread, and a new thread starts when every thread is full; app pods always
   * get a thread of their own (their entry point runs until it returns).
   * @default 1
   */
  podsPerThread: number;
}

/**
 * Sets how pods started from now on share worker threads; pods already running keep their thread.
 *
 * @param opts.podsPerThread an integer from 1 to 10000
 * @throws RangeError naming `podsPerThread` and the value received for anything else
 * @example
 * configurePodThreads({ podsPerThread: 100 }); // kube32-sim --pods-per-thread 100
 */
export function configurePodThreads(opts: PodThreadOptions): void {
  const n = opts?.podsPerThread;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PODS_PER_THREAD) {
    throw new RangeError(`podsPerThread must be an integer from 1 to ${MAX_PODS_PER_THREAD}: current value is ${JSON.stringify(n)}`);
  }
  if (n === podsPerThread) return;
  podsPerThread = n;
  for (const f of listeners) f(n);
}

/** The current setting of {@link configurePodThreads}. */
export function podThreadSettings(): Readonly<PodThreadOptions> {
  return { podsPerThread };
}
