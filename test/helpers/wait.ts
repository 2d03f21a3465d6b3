/**
 * The one wait of the test suites (docs/test-isolation.md "Waiting"): poll a condition until it holds or
 * a deadline passes. A poll interval is not a synchronisation sleep: each try reads the real state (an
 * API call, a pod's answer), and the deadline bounds the wait.
 */

/** Options of {@link waitFor}. */
export interface WaitOptions {
  /** Pause between two tries, ms; 0 yields to the event loop only (`setImmediate`). @default 50 */
  intervalMs?: number;
  /** More words for the timeout's error (what the processes said last, say). */
  describe?: () => string;
}

/**
 * Tries `check` until it answers a value other than `undefined` and `false`, and answers that value. A try
 * that throws counts as not yet; the last error or value is named when time is up.
 * @param what the condition, as the error says it: `pod x Running`
 * @param timeoutMs the deadline, from now
 * @throws Error `timed out after <ms> ms waiting for <what>; last: <error or value>` once the deadline has passed
 * @example const pod = await waitFor('pod p Running', 20_000, async () => ((await getPod('p'))?.status?.phase === 'Running' ? pod : undefined));
 */
export async function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false> | T | undefined | false, o: WaitOptions = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  const interval = o.intervalMs ?? 50;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v as T;
      last = v;
    } catch (err: unknown) {
      last = err;
    }
    if (Date.now() > deadline) {
      const seen = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${seen}${o.describe ? `\n${o.describe()}` : ''}`);
    }
    await new Promise((r) => (interval > 0 ? setTimeout(r, interval) : setImmediate(r))); // a poll interval, not a synchronisation
  }
}
