/**
 * The watch window shared by every storage backend: the latest events in resourceVersion order, from
 * which a watch resumes. A watch from a resourceVersion older than the window gets 410 Expired.
 */
import { StorageError, type StorageEvent } from './interface.ts';

/** The last `size` events, in resourceVersion order. */
export class WatchWindow {
  readonly #events: StorageEvent[] = [];
  #start = 0;
  readonly #size: number;
  /** Events with rv <= this are not in the window (a watch from an older version is Expired). */
  droppedUpTo: number;

  /**
   * @param size how many events it keeps
   * @param droppedUpTo the resourceVersion before the first event it can replay
   */
  constructor(size: number, droppedUpTo = 0) {
    this.#size = size;
    this.droppedUpTo = droppedUpTo;
  }

  /** Adds the newest event, dropping the oldest past the window's size. */
  push(e: StorageEvent): void {
    this.#events.push(e);
    if (this.#events.length - this.#start > this.#size) {
      this.droppedUpTo = this.#events[this.#start]!.rv;
      this.#start++;
      // Compact now and then rather than shift on every event.
      if (this.#start > 4096 && this.#start * 2 > this.#events.length) {
        this.#events.splice(0, this.#start);
        this.#start = 0;
      }
    }
  }

  /**
   * Calls `listener` for every event after `sinceRv` of `resource` (every resource for `'*'`).
   * @throws StorageError Expired when events after `sinceRv` have left the window
   */
  replay(resource: string, sinceRv: number, listener: (e: StorageEvent) => void): void {
    if (sinceRv < this.droppedUpTo) {
      throw new StorageError('Expired', `too old resource version: ${sinceRv} (${this.droppedUpTo + 1})`);
    }
    for (let i = this.#firstIndexAfter(sinceRv); i < this.#events.length; i++) {
      const e = this.#events[i]!;
      if (resource === '*' || e.resource === resource) listener(e);
    }
  }

  #firstIndexAfter(rv: number): number {
    return firstIndexAfter(this.#events, this.#start, rv);
  }
}

/**
 * The index of the first of `events[start..]` (sorted by `rv`) whose `rv` is above `rv`, by binary
 * search; `events.length` when there is none. Shared by the store's window and the watch cache's.
 */
export function firstIndexAfter(events: readonly { rv: number }[], start: number, rv: number): number {
  let lo = start;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (events[mid]!.rv <= rv) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
