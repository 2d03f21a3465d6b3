/**
 * Core Events' time to live (kube-apiserver's `--event-ttl`, 1 h by default). As kube-apiserver, which
 * writes each Event under an etcd lease of the TTL granted at the write, an Event lives for the TTL from
 * its last write, whatever times it carries: one created now with an `eventTime` of last week stays its
 * hour, and one written again (a repeat raising `count` and `lastTimestamp`) lives on from that write.
 * The due times are kept in a min-heap fed from the store's events (the garbage collector's watch and its
 * lists), and one timer waits for the earliest: an expiry costs O(log n) and nothing is scanned. A watched
 * write is due a TTL after it is seen; a listed Event (at the start, or a list again after the watch
 * ended) a TTL after the latest time it carries of its writing (`lastWrite`). A stale heap entry (the
 * Event written again since) is skipped when it comes out: its resourceVersion no longer matches.
 */
import type { Logger } from '../../lib/index.ts';
import { clampDelay, MinHeap } from '../../lib/index.ts';
import type { KubeObject, Storage } from '../storage/index.ts';

/** The heap's entry: which version of which Event is due. */
interface Due {
  key: string;
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
}

/**
 * The latest instant (ms) a listed Event tells of its writing: the greatest of `lastTimestamp`,
 * `series.lastObservedTime`, `eventTime`, `metadata.creationTimestamp` and its `managedFields` times
 * (the server sets the last two at each create and update); undefined when it carries none.
 */
export function lastWrite(ev: KubeObject): number | undefined {
  const series = (ev.series ?? {}) as Record<string, unknown>;
  const managed = Array.isArray(ev.metadata.managedFields) ? (ev.metadata.managedFields as { time?: unknown }[]).map((m) => m?.time) : [];
  let latest: number | undefined;
  for (const v of [ev.lastTimestamp, series.lastObservedTime, ev.eventTime, ev.metadata.creationTimestamp, ...managed]) {
    const ms = typeof v === 'string' && v !== '' ? Date.parse(v) : Number.NaN;
    if (Number.isFinite(ms) && (latest === undefined || ms > latest)) latest = ms;
  }
  return latest;
}

/** Deletes core Events past their time to live, each at its due time. */
export class EventExpiry {
  readonly #storage: Storage;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #heap = new MinHeap<Due>();
  /** `namespace/name` -> the resourceVersion whose due time is in the heap. */
  readonly #current = new Map<string, string>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #running = false;
  #stopped = false;

  /**
   * @param ttlMs the time to live (above 0)
   * @param now the server's clock (ms)
   */
  constructor(storage: Storage, ttlMs: number, log: Logger, now: () => number = Date.now) {
    this.#storage = storage;
    this.#ttlMs = ttlMs;
    this.#log = log;
    this.#now = now;
  }

  /** How many Events are tracked (for tests and metrics). */
  get tracked(): number {
    return this.#current.size;
  }

  /**
   * Takes in an Event as stored now.
   * @param writtenAt when it was written (ms, the server's clock): a watched write passes the time it is
   *   seen; a listed Event passes nothing and is dated by `lastWrite`
   */
  observe(ev: KubeObject, writtenAt?: number): void {
    if (this.#stopped) return;
    const at = writtenAt ?? lastWrite(ev);
    const key = `${ev.metadata.namespace ?? ''}/${ev.metadata.name}`;
    const rv = ev.metadata.resourceVersion ?? '';
    if (at === undefined) {
      this.#current.delete(key);
      return;
    }
    this.#current.set(key, rv);
    const due = at + this.#ttlMs;
    this.#heap.push(due, { key, namespace: ev.metadata.namespace ?? '', name: ev.metadata.name ?? '', uid: ev.metadata.uid ?? '', resourceVersion: rv });
    if (due < this.#timerAt) this.#arm(due);
  }

  /** Forgets a deleted Event (its heap entry is skipped when due). */
  forget(ev: KubeObject): void {
    this.#current.delete(`${ev.metadata.namespace ?? ''}/${ev.metadata.name}`);
  }

  /** Forgets every Event (before the caller lists them afresh). */
  reset(): void {
    this.#current.clear();
    this.#heap.clear();
    this.#disarm();
  }

  /** Stops the timer; nothing more is deleted. */
  stop(): void {
    this.#stopped = true;
    this.#disarm();
  }

  #disarm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }

  #arm(at: number): void {
    this.#disarm();
    if (this.#stopped) return;
    this.#timerAt = at;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = Number.POSITIVE_INFINITY;
      void this.#expire();
    }, clampDelay(at - this.#now()));
    this.#timer.unref();
  }

  /** Deletes every Event due now, then waits for the next. */
  async #expire(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    let n = 0;
    try {
      for (let top = this.#heap.peek(); top && top.key <= this.#now() && !this.#stopped; top = this.#heap.peek()) {
        this.#heap.pop();
        const due = top.item;
        // A later version (written again: a new due time) or a deleted Event: this entry is stale.
        if (this.#current.get(due.key) !== due.resourceVersion) continue;
        this.#current.delete(due.key);
        try {
          // Bound to the version seen: an Event written again meanwhile stays (its new version is due later).
          await this.#storage.delete({ resource: 'events', namespace: due.namespace, name: due.name }, { uid: due.uid, resourceVersion: due.resourceVersion });
          n++;
        } catch {
          // changed or gone meanwhile: the store's event for it brings its new state
        }
      }
    } catch (err: unknown) {
      this.#log.warn({ err: err instanceof Error ? err.message : String(err) }, 'expiring events failed');
    } finally {
      this.#running = false;
    }
    if (n > 0) this.#log.debug({ expired: n }, 'events past their time to live deleted');
    const next = this.#heap.peek();
    if (next && !this.#stopped && next.key < this.#timerAt) this.#arm(next.key);
  }
}
