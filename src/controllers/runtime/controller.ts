/**
 * The worker loop every controller shares (STYLE.md 5.4): take a key, reconcile it, and let one function,
 * {@link Controller.handleResult}, decide what happens next: forget it, queue it again later
 * (`requeueAfterMs`), back off after an error, or drop it after {@link MAX_RETRIES} failures with a log line
 * (the next event brings it back).
 */
import { type TimerClock, WorkQueue } from '../../lib/index.ts';
import { errorMessage } from '../../api/index.ts';

/**
 * How many failures in a row a key may have before it is dropped: with a 5 ms base doubling, 15 tries
 * span about 82 s of back-off (5 ms * 2^14), capped at 60 s a try.
 */
export const MAX_RETRIES = 15;

/** What a reconcile asks for after it succeeds. */
export interface ReconcileResult {
  /** Look at the key again after this many ms (a deadline the object carries: a timeout, a cooldown). */
  requeueAfterMs?: number;
}

/** Reconciles one key; throws to be retried with back-off. */
export type Reconciler = (key: string) => Promise<ReconcileResult | undefined>;

/** The minimal logger the controllers use (pino's shape). */
export interface ControllerLog {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** A named controller: a queue of keys and workers that reconcile them. */
export class Controller {
  readonly name: string;
  readonly queue: WorkQueue<string>;
  readonly #reconcile: Reconciler;
  readonly #log: ControllerLog;
  readonly #workers: number;
  readonly #maxRetries: number;
  #running: Promise<void>[] = [];

  /**
   * @param name the controller's name, in its log lines
   * @param reconcile the sync handler
   * @param options `workers` (how many keys at once, @default 2); `maxRetries` (failures in a row before a
   *   key is dropped, @default {@link MAX_RETRIES}; `Infinity` retries for ever, at the back-off's cap, as
   *   Kubernetes' ReplicaSet controller does for pods it cannot create); the clock and the logger
   * @throws RangeError when `workers` is not a positive integer or `maxRetries` is not a number >= 0
   */
  constructor(
    name: string,
    reconcile: Reconciler,
    options: { workers?: number; maxRetries?: number; clock: TimerClock; log: ControllerLog },
  ) {
    this.name = name;
    this.#reconcile = reconcile;
    this.#log = options.log;
    this.#workers = options.workers ?? 2;
    this.#maxRetries = options.maxRetries ?? MAX_RETRIES;
    if (!Number.isInteger(this.#workers) || this.#workers < 1) {
      throw new RangeError(`controller ${name}: 'workers' must be a positive integer: current value is ${options.workers}`);
    }
    if (Number.isNaN(this.#maxRetries) || this.#maxRetries < 0) {
      throw new RangeError(`controller ${name}: 'maxRetries' must be a number >= 0: current value is ${options.maxRetries}`);
    }
    this.queue = new WorkQueue<string>({ clock: options.clock });
  }

  /** Queues a key (from an event handler). */
  enqueue(key: string): void {
    this.queue.add(key);
  }

  /** Starts the workers; call once every cache has synced. */
  start(): void {
    for (let i = 0; i < this.#workers; i++) this.#running.push(this.#worker());
  }

  /** Stops taking keys and waits for the reconciles in progress. */
  async stop(): Promise<void> {
    this.queue.shutDown();
    await Promise.all(this.#running);
    this.#running = [];
  }

  async #worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        this.handleResult(key, await this.#reconcile(key));
      } catch (err: unknown) {
        this.handleResult(key, undefined, err);
      } finally {
        this.queue.done(key);
      }
    }
  }

  /** The retry policy, in one place. Exported for tests. */
  handleResult(key: string, result: ReconcileResult | undefined, err?: unknown): void {
    if (err === undefined) {
      this.queue.forget(key);
      if (result?.requeueAfterMs !== undefined) this.queue.addAfter(key, Math.max(1, result.requeueAfterMs));
      return;
    }
    const tries = this.queue.numRequeues(key);
    if (tries < this.#maxRetries) {
      this.#log.warn({ controller: this.name, key, tries: tries + 1, err: errorMessage(err) }, 'reconcile failed; retrying');
      this.queue.addRateLimited(key);
      return;
    }
    this.#log.error({ controller: this.name, key, tries, err: errorMessage(err) }, 'reconcile failed too often; dropping the key');
    this.queue.forget(key);
  }
}

/** `namespace/name` of an object (just `name` for cluster-scoped ones). */
export function keyOf(obj: { metadata?: { namespace?: string; name?: string } }): string {
  const ns = obj.metadata?.namespace;
  return ns ? `${ns}/${obj.metadata?.name ?? ''}` : (obj.metadata?.name ?? '');
}

/** Splits a key made by {@link keyOf}. */
export function splitKey(key: string): { namespace: string; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { namespace: '', name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}
