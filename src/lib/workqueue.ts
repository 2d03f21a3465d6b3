/**
 * The controllers' work queue: a queue of keys (`namespace/name`) in the manner of client-go's
 * rate-limited delaying queue, small enough to read in one sitting.
 *
 * - Duplicates collapse: a key waiting in the queue is queued once however often it is added.
 * - No two workers hold one key: a key being processed is not handed out again; when it is added
 *   meanwhile it runs once more after `done(key)`.
 * - `addAfter(key, ms)` queues a key later (the earliest pending time wins); `addRateLimited(key)`
 *   queues it after its own exponential back-off, which `forget(key)` resets.
 * - Time comes from an injectable {@link TimerClock}, so tests move it forward by hand.
 *
 * See STYLE.md section 5.5.
 */

/** Node's `setTimeout` ceiling: larger delays fire after 1 ms, so every delay is clamped to it. */
export const MAX_TIMER_DELAY_MS = 2_147_483_647;

/** The time source of a queue or a controller: wall time in ms and one-shot timers. */
export interface TimerClock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Calls `fn` once after `ms` milliseconds (already clamped by the caller); returns a handle. */
  setTimer(fn: () => void, ms: number): unknown;
  /** Cancels a timer made by {@link TimerClock.setTimer}; unknown handles are ignored. */
  clearTimer(handle: unknown): void;
}

/** The process's clock: `Date.now()` and unref'd Node timers (a pending requeue never keeps a process alive). */
export const realClock: TimerClock = {
  now: () => Date.now(),
  setTimer(fn, ms) {
    const t = setTimeout(fn, clampDelay(ms));
    t.unref();
    return t;
  },
  clearTimer(handle) {
    clearTimeout(handle as NodeJS.Timeout);
  },
};

/** Clamps a delay to `[0, MAX_TIMER_DELAY_MS]`; NaN becomes 0. */
export function clampDelay(ms: number): number {
  if (!(ms > 0)) return 0;
  return Math.min(ms, MAX_TIMER_DELAY_MS);
}

/** Options of a {@link WorkQueue}. */
export interface WorkQueueOptions {
  /** The time source. @default realClock */
  clock?: TimerClock;
  /** First back-off delay of `addRateLimited`, doubled on each further failure. @default 5 */
  baseDelayMs?: number;
  /** Largest back-off delay. @default 60000 */
  maxDelayMs?: number;
}

/**
 * A de-duplicating work queue of keys with per-key back-off and delayed adds.
 * @example
 * const q = new WorkQueue<string>();
 * q.add('default/echo');
 * const key = await q.get(); // 'default/echo'
 * try { await reconcile(key); q.forget(key); } catch { q.addRateLimited(key); } finally { q.done(key); }
 */
export class WorkQueue<K = string> {
  readonly #clock: TimerClock;
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  /** Keys ready to be handed out, in order. */
  readonly #queue: K[] = [];
  /** Keys that need processing (in #queue, or being processed and added again). */
  readonly #dirty = new Set<K>();
  /** Keys handed out and not yet done. */
  readonly #processing = new Set<K>();
  /** Pending delayed adds: when each fires and its timer. */
  readonly #delayed = new Map<K, { at: number; timer: unknown }>();
  readonly #failures = new Map<K, number>();
  readonly #waiters: Array<(key: K | undefined) => void> = [];
  #shuttingDown = false;

  /** @throws RangeError when a delay option is negative or not finite */
  constructor(options: WorkQueueOptions = {}) {
    this.#clock = options.clock ?? realClock;
    this.#baseDelayMs = options.baseDelayMs ?? 5;
    this.#maxDelayMs = options.maxDelayMs ?? 60_000;
    if (!Number.isFinite(this.#baseDelayMs) || this.#baseDelayMs < 0) {
      throw new RangeError(`WorkQueue: 'baseDelayMs' must be a finite number >= 0: current value is ${options.baseDelayMs}`);
    }
    if (!Number.isFinite(this.#maxDelayMs) || this.#maxDelayMs < this.#baseDelayMs) {
      throw new RangeError(`WorkQueue: 'maxDelayMs' must be a finite number >= baseDelayMs: current value is ${options.maxDelayMs}`);
    }
  }

  /** Queues `key` now, unless it is already waiting. Ignored after {@link shutDown}. */
  add(key: K): void {
    if (this.#shuttingDown || this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (this.#processing.has(key)) return; // runs again after done()
    const waiter = this.#waiters.shift();
    if (waiter) {
      this.#dirty.delete(key);
      this.#processing.add(key);
      waiter(key);
    } else {
      this.#queue.push(key);
    }
  }

  /**
   * Queues `key` after `ms` milliseconds (clamped to 2^31-1); `ms <= 0` adds it now. When the key
   * already has a delayed add, the earlier of the two stays.
   */
  addAfter(key: K, ms: number): void {
    if (this.#shuttingDown) return;
    if (!(ms > 0)) {
      this.add(key);
      return;
    }
    const delay = clampDelay(ms);
    const at = this.#clock.now() + delay;
    const pending = this.#delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) this.#clock.clearTimer(pending.timer);
    const timer = this.#clock.setTimer(() => {
      const current = this.#delayed.get(key);
      if (current?.timer === timer) this.#delayed.delete(key);
      this.add(key);
    }, delay);
    this.#delayed.set(key, { at, timer });
  }

  /** Queues `key` after its back-off: `baseDelayMs * 2^failures`, at most `maxDelayMs`. */
  addRateLimited(key: K): void {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    this.addAfter(key, Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** failures));
  }

  /** Resets the back-off of `key` (after a success, or when giving up on it). */
  forget(key: K): void {
    this.#failures.delete(key);
  }

  /** How many times `key` was added rate-limited since its last {@link forget}. */
  numRequeues(key: K): number {
    return this.#failures.get(key) ?? 0;
  }

  /**
   * The next key to process, waiting for one; `undefined` once the queue is shut down. The caller
   * owns the key until it calls {@link done}.
   */
  get(): Promise<K | undefined> {
    const key = this.#queue.shift();
    if (key !== undefined) {
      this.#dirty.delete(key);
      this.#processing.add(key);
      return Promise.resolve(key);
    }
    if (this.#shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Ends the processing of `key`; if it was added meanwhile, it is queued again. */
  done(key: K): void {
    this.#processing.delete(key);
    if (this.#dirty.has(key)) {
      this.#dirty.delete(key);
      this.add(key);
    }
  }

  /** Keys waiting to be handed out (not counting delayed ones). */
  get length(): number {
    return this.#queue.length;
  }

  /** Whether {@link shutDown} was called. */
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** Stops the queue: cancels delayed adds, wakes every waiting `get()` with `undefined`, drops new adds. */
  shutDown(): void {
    this.#shuttingDown = true;
    for (const { timer } of this.#delayed.values()) this.#clock.clearTimer(timer);
    this.#delayed.clear();
    this.#queue.length = 0;
    this.#dirty.clear();
    for (const waiter of this.#waiters.splice(0)) waiter(undefined);
  }
}

/**
 * A clock that moves only when told: for tests of queues, back-off and controllers' timed waits.
 * @example
 * const clock = new ManualClock(1_000);
 * const q = new WorkQueue({ clock });
 * q.addAfter('a', 500);
 * clock.advance(500); // 'a' is now queued
 */
export class ManualClock implements TimerClock {
  #now: number;
  #next = 0;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();

  /** @param startMs the initial time, ms since the epoch @default 1_700_000_000_000 */
  constructor(startMs = 1_700_000_000_000) {
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  setTimer(fn: () => void, ms: number): unknown {
    const id = ++this.#next;
    this.#timers.set(id, { at: this.#now + clampDelay(ms), fn });
    return id;
  }

  clearTimer(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  /** Timers not yet fired. */
  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Moves time forward by `ms`, firing due timers in time order (each at its own time). */
  advance(ms: number): void {
    const end = this.#now + ms;
    for (;;) {
      let dueId: number | undefined;
      let due: { at: number; fn: () => void } | undefined;
      for (const [id, t] of this.#timers) {
        if (t.at <= end && (due === undefined || t.at < due.at)) {
          dueId = id;
          due = t;
        }
      }
      if (dueId === undefined || due === undefined) break;
      this.#timers.delete(dueId);
      this.#now = Math.max(this.#now, due.at);
      due.fn();
    }
    this.#now = end;
  }
}
