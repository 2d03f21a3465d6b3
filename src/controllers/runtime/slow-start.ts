/**
 * Kubernetes' `slowStartBatch` (pkg/controller/replicaset/replica_set.go): calls that may all fail for
 * the same reason (a quota, a missing module, an admission webhook) are made in batches of 1, 2, 4, 8, …
 * each batch concurrently, and the next batch starts only when every call of the previous one
 * succeeded. A controller that must create 500 pods thus makes them at the API server's pace, with at
 * most `initialBatchSize * 2^k` calls in flight, while a cause that fails every call costs one call, not 500.
 */

/** What {@link slowStartBatch} did. */
export interface SlowStartOutcome {
  /** Calls that succeeded (in every batch run, including the failed one). */
  successes: number;
  /** Calls not made because a batch failed: `count - successes - failures`. */
  skipped: number;
  /** The first error of the batch that failed, when one did. */
  error?: unknown;
}

/**
 * Calls `fn(index)` `count` times, for indexes 0 … count-1, in batches growing from `initialBatchSize`
 * by doubling; stops after the first batch in which a call failed.
 * @param count how many calls in all (0 makes none)
 * @param initialBatchSize the size of the first batch (Kubernetes: `SlowStartInitialBatchSize`, 1)
 * @param fn one call; a rejection counts as a failure
 * @throws RangeError when `count` is not an integer >= 0 or `initialBatchSize` not an integer >= 1
 * @example
 * const { successes, error } = await slowStartBatch(diff, 1, () => api.createPod(ns, podFromTemplate(rs, { apiVersion: 'apps/v1', kind: 'ReplicaSet' })));
 */
export async function slowStartBatch(count: number, initialBatchSize: number, fn: (index: number) => Promise<unknown>): Promise<SlowStartOutcome> {
  if (!Number.isInteger(count) || count < 0) throw new RangeError(`slowStartBatch: 'count' must be an integer >= 0: current value is ${count}`);
  if (!Number.isInteger(initialBatchSize) || initialBatchSize < 1) {
    throw new RangeError(`slowStartBatch: 'initialBatchSize' must be an integer >= 1: current value is ${initialBatchSize}`);
  }
  let successes = 0;
  let next = 0;
  for (let batch = Math.min(count, initialBatchSize); batch > 0; batch = Math.min(2 * batch, count - next)) {
    const results = await Promise.allSettled(Array.from({ length: batch }, () => fn(next++)));
    let error: unknown;
    let failed = false;
    for (const r of results) {
      if (r.status === 'fulfilled') successes++;
      else if (!failed) {
        failed = true;
        error = r.reason;
      }
    }
    if (failed) return { successes, skipped: count - next, error };
  }
  return { successes, skipped: 0 };
}
