/**
 * The one back-off of Kube32 (src/lib, for every component; src/api re-exports it beside its client): a
 * delay that starts at `initialMs`, doubles at each failure up to `maxMs`, and starts afresh once the other side answers (`reset()`). Informers listing again, a kubelet
 * waiting for its control plane, the etcd worker reopening its watch: all wait with one of these.
 */

/** Options of a {@link Backoff}, ms. */
export interface BackoffOptions {
  /** The first delay. @default 500 */
  initialMs?: number;
  /** The longest delay. @default 30000 */
  maxMs?: number;
}

/** An exponential back-off (×2 a failure). */
export class Backoff {
  readonly initialMs: number;
  readonly maxMs: number;
  #next: number;

  /** @throws RangeError when a delay is not a positive number or `maxMs` is below `initialMs` */
  constructor(o: BackoffOptions = {}) {
    this.initialMs = o.initialMs ?? 500;
    this.maxMs = o.maxMs ?? 30_000;
    if (!(this.initialMs > 0) || !(this.maxMs >= this.initialMs)) {
      throw new RangeError(`back-off: initialMs must be positive and maxMs at least initialMs: current values are ${this.initialMs} and ${this.maxMs}`);
    }
    this.#next = this.initialMs;
  }

  /** The delay to wait after a failure, ms; the one after it is twice as long (at most `maxMs`). */
  next(): number {
    const d = this.#next;
    this.#next = Math.min(d * 2, this.maxMs);
    return d;
  }

  /** The delay {@link next} would answer, without taking it. */
  peek(): number {
    return this.#next;
  }

  /** The other side answered: the next failure waits `initialMs` again. */
  reset(): void {
    this.#next = this.initialMs;
  }

  /** Waits the next delay (a timer that keeps the process alive); resolves early, false, when `signal` aborts. */
  wait(signal?: AbortSignal): Promise<boolean> {
    const ms = this.next();
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve(false);
      const t = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      }, ms);
      const onAbort = () => {
        clearTimeout(t);
        resolve(false);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
