/**
 * The scheduler's binding cycles (kube-scheduler's `bindingCycle`, run in a goroutine per pod): a decision
 * is made and its pod assumed on the node in the scheduling cycle, and the bind is sent asynchronously, so
 * that the next decision does not wait for the API server's answer. At most {@link BINDS_IN_FLIGHT} binds
 * are in flight; a scheduling cycle waits for a free one first ({@link Binds.slot}), so that a decision is
 * made as late, and on as fresh a cache, as the binds allow. Events recorded after a bind (`Scheduled`) are
 * sent beside it and never hold a slot, as client-go's event recorder never blocks its caller.
 */

/**
 * Binds in flight at most (kube-scheduler has no such cap; its API client's QPS limit is one). 16: on the
 * shared 2-core machine 64 made no pod bind sooner (the binds then wait in the API server instead) and
 * raised every other client's latency (docs/scale.md).
 */
export const BINDS_IN_FLIGHT = 16;

/** The binds (and the events after them) in flight. */
export class Binds {
  readonly #max: number;
  #binding = 0;
  readonly #waiting: (() => void)[] = [];
  readonly #tasks = new Set<Promise<void>>();

  /** @param max binds in flight at most @default {@link BINDS_IN_FLIGHT} @throws RangeError when not a positive integer */
  constructor(max = BINDS_IN_FLIGHT) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`binds in flight must be a positive integer: current value is ${max}`);
    this.#max = max;
  }

  /** How many binds are in flight now. */
  get inFlight(): number {
    return this.#binding;
  }

  /**
   * Reserves a bind: resolves at once while fewer than the maximum are in flight (or reserved), else when
   * one ends. The reservation is used by {@link start} or given back by {@link release}.
   */
  async slot(): Promise<void> {
    while (this.#binding >= this.#max) await new Promise<void>((r) => this.#waiting.push(r));
    this.#binding++;
  }

  /** Gives back a reservation that {@link start} did not use (the pod needed no bind). */
  release(): void {
    this.#binding--;
    this.#waiting.shift()?.();
  }

  /**
   * Runs `bind` on a reservation of {@link slot}, then `after` once it succeeded, outside the count of
   * binds. Neither throws to the caller: `bind` reports its own failures.
   * @param bind the bind; resolves whether `after` should run
   * @param after what follows a successful bind (its event)
   */
  start(bind: () => Promise<boolean>, after: () => Promise<void>): void {
    const task = (async () => {
      let ok = false;
      try {
        ok = await bind();
      } finally {
        this.release();
      }
      if (ok) await after();
    })().catch(() => {});
    this.#tasks.add(task);
    void task.finally(() => this.#tasks.delete(task));
  }

  /** Resolves once every bind started so far, and its event, has ended. */
  async idle(): Promise<void> {
    while (this.#tasks.size > 0) await Promise.all([...this.#tasks]);
  }
}
