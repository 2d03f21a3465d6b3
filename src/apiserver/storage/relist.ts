/**
 * A copy of one resource kept from the store (client-go's reflector, over `Storage` instead of HTTP): list,
 * then watch from the list's resourceVersion; when the store ends the watch (etcd compacted events it had
 * not delivered: see `Storage.watch`), list again and watch again, so the copy never goes stale silently.
 */
import { Backoff } from '../../lib/index.ts';
import type { KubeObject, Storage, StorageError, StorageEvent, WatchHandle } from './interface.ts';

/** What {@link keepListed} feeds. */
export interface ListedCopy {
  /** The whole state, listed (at the start, and again after a watch ended): the copy is replaced by it. */
  replace(items: readonly KubeObject[]): void;
  /** One change after the list. */
  event(e: StorageEvent): void;
  /** Told when a watch ended and the copy is being listed again (logs, metrics, tests). */
  relisted?(err: StorageError): void;
}

/** A running {@link keepListed}. */
export interface KeptCopy extends WatchHandle {
  /** How many times it listed again after its watch ended. */
  readonly relists: number;
}

/**
 * Lists `resource` into `copy`, then keeps it from the store's watch, listing again whenever the watch ends.
 * A list that fails after the first is tried again with back-off (100 ms doubling to 5 s).
 * @returns once the first list is in
 * @throws whatever the first list throws (the caller decides whether to try again)
 */
export async function keepListed(storage: Storage, resource: string, copy: ListedCopy): Promise<KeptCopy> {
  let handle: WatchHandle | undefined;
  let stopped = false;
  let relists = 0;
  const backoff = new Backoff({ initialMs: 100, maxMs: 5000 });
  const start = async (): Promise<void> => {
    const { items, resourceVersion } = await storage.list(resource);
    if (stopped) return;
    copy.replace(items);
    handle = storage.watch(resource, resourceVersion, (e) => copy.event(e), (err) => {
      handle = undefined;
      if (stopped) return;
      relists++;
      copy.relisted?.(err);
      void again();
    });
  };
  const again = async (): Promise<void> => {
    while (!stopped) {
      try {
        await start();
        backoff.reset();
        return;
      } catch {
        await new Promise<void>((r) => setTimeout(r, backoff.next()).unref());
      }
    }
  };
  await start();
  return {
    get relists() {
      return relists;
    },
    stop() {
      stopped = true;
      handle?.stop();
      handle = undefined;
    },
  };
}

/**
 * Watches `resource` from `resourceVersion` and, whenever the store ends the watch (etcd compacted events it
 * had not delivered), watches again from the store's position and calls `gap`: for a user whose state is
 * not a copy to list again (a cache to drop, work to redo for everything), where {@link keepListed} lists.
 * @param gap told after each new watch began: changes may have been missed since the last event
 * @returns the handle whose stop ends the current watch (and no gap is told after it)
 */
export function keepWatching(storage: Storage, resource: string, resourceVersion: number, listener: (e: StorageEvent) => void, gap: (err: StorageError) => void): WatchHandle {
  let stopped = false;
  let handle: WatchHandle;
  const watch = (rv: number): void => {
    // onEnd comes from the store's watch, never from within watch(): handle is set by then.
    handle = storage.watch(resource, rv, listener, (err) => {
      if (stopped) return;
      watch(storage.currentResourceVersion());
      gap(err);
    });
  };
  watch(resourceVersion);
  return {
    stop() {
      stopped = true;
      handle.stop();
    },
  };
}
