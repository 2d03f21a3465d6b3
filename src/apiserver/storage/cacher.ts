/**
 * The watch cache (kube-apiserver's cacher, `staging/src/k8s.io/apiserver/pkg/storage/cacher`): per
 * resource, the current objects sorted by namespace and name and a window of recent events, fed by
 * one storage watch (`watch('*')`, shared by every resource), so that the API's lists, gets and
 * watches are served from memory without reading the store.
 *
 * - Every object is kept with its resourceVersion and its JSON encoding (with apiVersion and kind),
 *   made once when the object is stored; a GET or LIST answers those bytes.
 * - A read at the latest state is consistent: `syncedResourceVersion()` (etcd: its current revision,
 *   once the watch has delivered it) before reading, as kube-apiserver 1.31's consistent reads from
 *   cache. A read at an older resourceVersion (`Exact`, a `continue` token) is answered from the
 *   window: the state at that version is the current one with later events undone (kube 1.33's
 *   list from cache snapshots); one older than the window is 410 Expired.
 * - Watchers ({@link CacheWatcher}) are handed the events of a write after the writer was answered
 *   (a setImmediate batch, kube's dispatchEvents), each batch in one write per watcher; their
 *   encoder makes each event's bytes once for every watcher of a form. A watcher whose unsent bytes
 *   pass its bound is ended (kube's "Forcing watcher close due to unresponsiveness"): its client
 *   watches again from the last version it saw instead of holding the others back.
 * - A resource may have an index on one field ({@link CacheIndex}; pods by `spec.nodeName`, kube's
 *   IndexerFuncs): a list that names the field's value (`index`) reads only the keys that have it,
 *   and a watcher that names one (`indexValue`) is offered only the events whose object before or
 *   after has that value (kube's "indexed triggers"), instead of every event.
 */
import { StorageError, type KubeObject, type Storage, type StorageEvent, type WatchHandle } from './interface.ts';
import { firstIndexAfter } from './watch-window.ts';

/** Events kept per resource for watches and reads at an older resourceVersion. */
export const DEFAULT_CACHE_WINDOW = 10_000;

/** One object as the cache keeps it: parsed, with its resourceVersion and its JSON text. */
export class CachedObject {
  /** `namespace\0name`: sorts as (namespace, name). */
  readonly key: string;
  readonly object: KubeObject;
  readonly rv: number;
  #json: string | undefined;
  readonly #prefix: string;

  /**
   * @param object the stored object
   * @param prefix `{"apiVersion":"v1","kind":"Pod",` of its resource
   * @param stored its stored JSON text (no apiVersion/kind), when the store gave it
   */
  constructor(object: KubeObject, prefix: string, stored?: string) {
    this.object = object;
    this.key = `${object.metadata.namespace ?? ''}\0${object.metadata.name ?? ''}`;
    this.rv = Number(object.metadata.resourceVersion ?? 0);
    this.#prefix = prefix;
    if (stored !== undefined) this.#json = `${prefix}${stored.slice(1)}`;
  }

  /** The object's JSON with apiVersion and kind, made once. */
  get json(): string {
    if (this.#json === undefined) {
      const { apiVersion: _a, kind: _k, ...rest } = this.object;
      this.#json = `${this.#prefix}${JSON.stringify(rest).slice(1)}`;
    }
    return this.#json;
  }
}

/** An event as the cache keeps it: the object after the change (DELETED: the tombstone) and before. */
export interface CacheEvent {
  type: StorageEvent['type'];
  rv: number;
  object: CachedObject;
  /** What the cache held before (undefined for ADDED). */
  previous: CachedObject | undefined;
  /** Bytes made from this event per form (the watch encoder's), shared by every watcher. */
  encoded?: Map<string, Buffer>;
}

/**
 * The field a resource's cache indexes (kube's IndexerFuncs and indexed trigger): its name as a field
 * selector names it and how to read it from an object ('' when absent).
 */
export interface CacheIndex {
  field: string;
  read: (o: KubeObject) => string;
}

/** The fields indexed by resource (storage key), as kube-apiserver's pod storage indexes `spec.nodeName`. */
export const INDEXED_FIELDS: Readonly<Record<string, string>> = { pods: 'spec.nodeName' };

/** A watcher of a {@link ResourceCache}: called with each dispatched batch, in resourceVersion order. */
export interface CacheWatcher {
  /** Events up to this version were given to it at its start: later ones only are dispatched. */
  fromRv: number;
  /**
   * The value of the cache's indexed field that its selector requires: it is offered only events whose
   * object after or before the change has it (others could not enter, stay in or leave its selection).
   */
  indexValue?: string;
  /** Handles one batch (writes it to the client); the cache ignores what it throws. */
  deliver(events: readonly CacheEvent[]): void;
  /**
   * Called once when the cache ends the watcher because the cache itself is being listed again (the store
   * ended its watch: etcd compacted past it): the client must list again (a 410 Expired ERROR event).
   */
  end?(err: StorageError): void;
}

/** A page of a list. */
export interface CachePage {
  items: CachedObject[];
  /** The resourceVersion the page reflects. */
  rv: number;
  /** Set when matching objects follow the last item. */
  more: boolean;
  /** Objects after the last item (counted only without a `match`). */
  remaining?: number;
}

/** What `list` reads. */
export interface CacheListOptions {
  /** One namespace, or every one. */
  namespace?: string;
  /** The version to read at (a snapshot from the window); the latest when undefined. */
  atRv?: number;
  /** Start after this key (`namespace\0name`). */
  after?: string;
  limit?: number;
  /**
   * Only objects whose indexed field has this value (the cache's {@link CacheIndex}; ignored when it has
   * none): `match` must require it too, as the index only narrows what is read.
   */
  index?: string;
  match?: (o: KubeObject) => boolean;
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The cache of one resource. Build through {@link Cacher.cache}. */
export class ResourceCache {
  readonly resource: string;
  readonly #prefix: string;
  readonly #cacher: Cacher;
  /** Current objects by key, and their keys sorted. */
  readonly #byKey = new Map<string, CachedObject>();
  #sorted: string[] = [];
  /** Events in resourceVersion order, `#start` the first kept. */
  #events: CacheEvent[] = [];
  #start = 0;
  readonly #windowSize: number;
  /** Events with rv <= this are not in the window. */
  #droppedUpTo = 0;
  /** The version of the last event applied (or of the initial list). */
  #appliedRv = 0;
  /** Watchers offered every event, and those offered only their index value's. */
  readonly #watchers = new Set<CacheWatcher>();
  readonly #indexedWatchers = new Map<string, Set<CacheWatcher>>();
  #watcherTotal = 0;
  /** The indexed field, and the sorted keys of the current objects per value of it. */
  readonly index: CacheIndex | undefined;
  readonly #byValue = new Map<string, string[]>();
  #pending: CacheEvent[] = [];
  #dispatchScheduled = false;
  /** Events that arrived while the initial list was read. */
  #early: StorageEvent[] | undefined = [];
  /** Settles when the initial list is in. */
  readonly ready: Promise<void>;

  constructor(cacher: Cacher, resource: string, prefix: string, windowSize: number, index?: CacheIndex) {
    this.#cacher = cacher;
    this.index = index;
    this.resource = resource;
    this.#prefix = prefix;
    this.#windowSize = windowSize;
    this.ready = this.#init();
  }

  /** Set once the initial list is in. */
  isReady = false;

  async #init(): Promise<void> {
    const { rows, resourceVersion } = await this.#cacher.storage.listRaw(this.resource);
    for (const r of rows) {
      const o = new CachedObject(JSON.parse(r) as KubeObject, this.#prefix, r);
      this.#byKey.set(o.key, o);
    }
    this.#sorted = [...this.#byKey.keys()].sort(cmp);
    if (this.index) {
      for (const k of this.#sorted) {
        this.#keysOf(this.index.read(this.#byKey.get(k)!.object)).push(k);
      }
    }
    this.#droppedUpTo = resourceVersion;
    this.#appliedRv = resourceVersion;
    const early = this.#early ?? [];
    this.#early = undefined;
    for (const e of early) if (e.rv > resourceVersion) this.apply(e);
    this.isReady = true;
  }

  /** The latest version this cache reflects: every event up to it is applied. */
  get rv(): number {
    return Math.max(this.#appliedRv, this.#cacher.storage.currentResourceVersion());
  }

  /** The oldest version a read or watch can start from (this resource's window and the store-wide one, whichever is later). */
  get oldestRv(): number {
    return Math.max(this.#droppedUpTo, this.#cacher.oldestRv);
  }

  /** How many objects it holds. */
  get size(): number {
    return this.#byKey.size;
  }

  /** Applies one storage event (called by the Cacher, synchronously with the store's publication). */
  apply(e: StorageEvent): void {
    if (this.#early) {
      this.#early.push(e);
      return;
    }
    if (e.rv < this.#appliedRv) return;
    const obj = new CachedObject(e.object, this.#prefix);
    const previous = this.#byKey.get(obj.key);
    if (e.type === 'DELETED') {
      if (previous) {
        this.#byKey.delete(obj.key);
        this.#sorted.splice(this.#indexOf(obj.key), 1);
        this.#unindex(previous);
      }
    } else {
      if (!previous) this.#sorted.splice(this.#indexOf(obj.key), 0, obj.key);
      this.#byKey.set(obj.key, obj);
      if (this.index) {
        const v = this.index.read(obj.object);
        if (!previous || this.index.read(previous.object) !== v) {
          if (previous) this.#unindex(previous);
          const keys = this.#keysOf(v);
          keys.splice(indexIn(keys, obj.key), 0, obj.key);
        }
      }
    }
    // An update that did not change the key's state to the cache's eyes (a replayed ADDED) still moves the version.
    this.#appliedRv = e.rv;
    const ce: CacheEvent = { type: e.type === 'ADDED' && previous ? 'MODIFIED' : e.type, rv: e.rv, object: obj, previous };
    this.#events.push(ce);
    if (this.#events.length - this.#start > this.#windowSize) {
      this.#droppedUpTo = this.#events[this.#start]!.rv;
      this.#start++;
      if (this.#start > 4096 && this.#start * 2 > this.#events.length) {
        this.#events = this.#events.slice(this.#start);
        this.#start = 0;
      }
    }
    if (this.#watcherTotal > 0) {
      this.#pending.push(ce);
      this.#scheduleDispatch();
    }
  }

  /** The first index in #sorted whose key is >= `key`. */
  #indexOf(key: string): number {
    return indexIn(this.#sorted, key);
  }

  /** The sorted keys of the objects whose indexed field is `value` (made empty when none). */
  #keysOf(value: string): string[] {
    let keys = this.#byValue.get(value);
    if (!keys) {
      keys = [];
      this.#byValue.set(value, keys);
    }
    return keys;
  }

  /** Removes `o`'s key from its index value's keys. */
  #unindex(o: CachedObject): void {
    if (!this.index) return;
    const v = this.index.read(o.object);
    const keys = this.#byValue.get(v);
    if (!keys) return;
    const i = indexIn(keys, o.key);
    if (keys[i] === o.key) keys.splice(i, 1);
    if (keys.length === 0) this.#byValue.delete(v);
  }

  /** The object at `namespace/name` now. */
  get(namespace: string, name: string): CachedObject | undefined {
    return this.#byKey.get(`${namespace}\0${name}`);
  }

  /**
   * A page of the objects at `atRv` (or now), in (namespace, name) order.
   * @throws StorageError Expired when `atRv` is older than the window
   */
  list(opts: CacheListOptions = {}): CachePage {
    const now = this.rv;
    const at = opts.atRv ?? now;
    if (at < this.oldestRv) throw new StorageError('Expired', `too old resource version: ${at} (${this.oldestRv + 1})`);
    const lo = opts.namespace === undefined ? '' : `${opts.namespace}\0`;
    const hi = opts.namespace === undefined ? undefined : `${opts.namespace}\x01`;
    const from = opts.after !== undefined && opts.after >= lo ? `${opts.after}\0` : lo;
    const inRange = (k: string) => k >= from && (hi === undefined || k < hi);
    // The state at `at`: each key an event after `at` touched is as the first such event found it.
    const undone = new Map<string, CachedObject | undefined>();
    if (at < this.#appliedRv) {
      for (let i = this.#firstAfter(at); i < this.#events.length; i++) {
        const e = this.#events[i]!;
        if (!undone.has(e.object.key)) undone.set(e.object.key, e.previous);
      }
    }
    // With the index, the current keys read are the value's only, and an undone object counts when it had the value then.
    const index = this.index && opts.index !== undefined ? this.index : undefined;
    const sorted = index ? (this.#byValue.get(opts.index!) ?? []) : this.#sorted;
    const restored = [...undone.values()].filter((o): o is CachedObject => o !== undefined && inRange(o.key) && (!index || index.read(o.object) === opts.index)).sort((a, b) => cmp(a.key, b.key));
    const limit = opts.limit && opts.limit > 0 ? opts.limit : Number.POSITIVE_INFINITY;
    const items: CachedObject[] = [];
    let i = indexIn(sorted, from);
    let j = 0;
    const end = hi === undefined ? sorted.length : indexIn(sorted, hi);
    const next = (): CachedObject | undefined => {
      for (;;) {
        const k = i < end ? sorted[i]! : undefined;
        const r = restored[j];
        if (k !== undefined && undone.has(k)) {
          i++;
          continue;
        }
        if (k === undefined && r === undefined) return undefined;
        if (r === undefined || (k !== undefined && k < r.key)) {
          i++;
          return this.#byKey.get(k!)!;
        }
        j++;
        return r;
      }
    };
    let more = false;
    for (let o = next(); o !== undefined; o = next()) {
      if (opts.match && !opts.match(o.object)) continue;
      if (items.length >= limit) {
        more = true;
        break;
      }
      items.push(o);
    }
    const page: CachePage = { items, rv: at, more };
    if (more && !opts.match) {
      // The one looked ahead, then what is left of both sources (an undone key still counts once).
      let rest = 1;
      for (; i < end; i++) if (!undone.has(sorted[i]!)) rest++;
      page.remaining = rest + (restored.length - j);
    }
    return page;
  }

  #firstAfter(rv: number): number {
    return firstIndexAfter(this.#events, this.#start, rv);
  }

  /**
   * Starts a watcher after `sinceRv`: calls `start(events)` synchronously with the window's events
   * after it (all of them kept), then dispatches every later one. Answers the handle and the version
   * it started at.
   * @throws StorageError Expired when `sinceRv` is older than the window
   */
  watch(sinceRv: number, w: CacheWatcher, start: (replayed: CacheEvent[]) => void): WatchHandle {
    if (sinceRv < this.oldestRv) throw new StorageError('Expired', `too old resource version: ${sinceRv} (${this.oldestRv + 1})`);
    const replayed: CacheEvent[] = [];
    for (let i = this.#firstAfter(sinceRv); i < this.#events.length; i++) replayed.push(this.#events[i]!);
    w.fromRv = Math.max(sinceRv, this.#appliedRv);
    start(replayed);
    return this.#add(w);
  }

  /** Registers `w` for the events after the current state (which the caller sent as it is now). */
  watchFromNow(w: CacheWatcher): WatchHandle {
    w.fromRv = this.#appliedRv;
    return this.#add(w);
  }

  /** Adds `w` to the watchers of every event, or of its index value's when the cache has the index. */
  #add(w: CacheWatcher): WatchHandle {
    const value = this.index ? w.indexValue : undefined;
    let set = this.#watchers;
    if (value !== undefined) {
      set = this.#indexedWatchers.get(value) ?? new Set();
      this.#indexedWatchers.set(value, set);
    }
    set.add(w);
    this.#watcherTotal++;
    let stopped = false;
    return {
      stop: () => {
        if (stopped) return;
        stopped = true;
        set.delete(w);
        this.#watcherTotal--;
        if (value !== undefined && set.size === 0 && this.#indexedWatchers.get(value) === set) this.#indexedWatchers.delete(value);
      },
    };
  }

  /** Ends every watcher (the cache is stale: {@link CacheWatcher.end}); the cache takes no more. */
  endWatchers(err: StorageError): void {
    const all = [...this.#watchers, ...[...this.#indexedWatchers.values()].flatMap((set) => [...set])];
    this.#watchers.clear();
    this.#indexedWatchers.clear();
    this.#watcherTotal = 0;
    this.#pending = [];
    for (const w of all) {
      try {
        w.end?.(err);
      } catch {
        // A watcher's failure is its own.
      }
    }
  }

  #scheduleDispatch(): void {
    if (this.#dispatchScheduled) return;
    this.#dispatchScheduled = true;
    setImmediate(() => this.dispatch());
  }

  /** Hands the pending events to every watcher now (also before a bookmark, so that it claims nothing unsent). */
  dispatch(): void {
    this.#dispatchScheduled = false;
    const batch = this.#pending;
    if (batch.length === 0) return;
    this.#pending = [];
    const offer = (w: CacheWatcher, events: readonly CacheEvent[]) => {
      const after = events[0]!.rv > w.fromRv ? events : events.filter((e) => e.rv > w.fromRv);
      if (after.length === 0) return;
      try {
        w.deliver(after);
      } catch {
        // A watcher's failure is its own.
      }
    };
    for (const w of [...this.#watchers]) offer(w, batch);
    if (this.index && this.#indexedWatchers.size > 0) {
      // Indexed triggers: each event to the watchers of its object's value after and before the change, in order.
      const read = this.index.read;
      const per = new Map<CacheWatcher, CacheEvent[]>();
      const add = (value: string, e: CacheEvent) => {
        const set = this.#indexedWatchers.get(value);
        if (!set) return;
        for (const w of set) {
          const list = per.get(w);
          if (!list) per.set(w, [e]);
          else if (list[list.length - 1] !== e) list.push(e);
        }
      };
      for (const e of batch) {
        const now = read(e.object.object);
        add(now, e);
        if (e.previous) {
          const before = read(e.previous.object);
          if (before !== now) add(before, e);
        }
      }
      for (const [w, events] of per) offer(w, events);
    }
    // The encodings were for this dispatch's watchers: the window keeps the events, not their bytes.
    for (const e of batch) e.encoded = undefined;
  }

  /** How many watchers it has. */
  get watcherCount(): number {
    return this.#watcherTotal;
  }
}

/** The first index in sorted `keys` whose key is >= `key`. */
function indexIn(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The caches of every resource, fed by one storage watch. Created once per API server; `cache()`
 * builds a resource's cache on its first use (its initial list read once from the store).
 */
export class Cacher {
  readonly storage: Storage;
  readonly #caches = new Map<string, ResourceCache>();
  readonly #windowSize: number;
  #handle: WatchHandle | undefined;
  /** Reads waiting for a resourceVersion (NotOlderThan). */
  readonly #rvWaiters = new Set<{ rv: number; resolve: (ok: boolean) => void }>();

  /** The versions of the last `storeWindow` events of every resource (a ring), as the store's window counts them. */
  readonly #ring: Float64Array;
  #count = 0;
  #droppedUpTo: number;

  /**
   * Subscribes to every event of `storage` from its current version.
   * @param windowSize events kept per resource
   * @param storeWindow events the store's window keeps (all resources): no read or watch starts before
   *   them either, so that `--watch-window` means what it did before the cache
   */
  constructor(storage: Storage, windowSize = DEFAULT_CACHE_WINDOW, storeWindow = 50_000) {
    this.storage = storage;
    this.#windowSize = windowSize;
    this.#ring = new Float64Array(Math.max(1, storeWindow));
    this.#droppedUpTo = storage.currentResourceVersion();
    this.#subscribe();
  }

  /** Times the store ended the caches' watch and every cache was dropped to be listed again. */
  restarts = 0;

  #subscribe(): void {
    this.#handle = this.storage.watch('*', this.storage.currentResourceVersion(), (e) => {
      const slot = this.#count++ % this.#ring.length;
      if (this.#count > this.#ring.length) this.#droppedUpTo = Math.max(this.#droppedUpTo, this.#ring[slot]!);
      this.#ring[slot] = e.rv;
      this.#caches.get(e.resource)?.apply(e);
      for (const w of this.#rvWaiters) if (e.rv >= w.rv) w.resolve(true);
    }, (err) => this.#restart(err));
  }

  /**
   * The store ended the watch (etcd compacted events it had not delivered): every cache missed them. As
   * kube's cacher re-initializes, each cache's watchers are ended (their clients list again and watch from
   * there), the caches are dropped (the next use of each lists the store afresh), reads at older versions
   * become Expired, and the watch starts again from the store's position.
   */
  #restart(err: StorageError): void {
    this.#handle = undefined;
    if (this.#stopped) return;
    this.restarts++;
    const caches = [...this.#caches.values()];
    this.#caches.clear();
    for (const c of caches) c.endWatchers(err);
    this.#droppedUpTo = this.storage.currentResourceVersion();
    this.#count = 0;
    this.#subscribe();
  }

  #stopped = false;

  /** Events with a version up to this one have left the store-wide window. */
  get oldestRv(): number {
    return this.#droppedUpTo;
  }

  /**
   * The cache of `resource` (a storage key, `pods`, `deployments.apps`), ready.
   * @param prefix `{"apiVersion":...,"kind":...,` of its objects' encoding
   * @param index the field to index (when the cache is made by this call)
   */
  async cache(resource: string, prefix: string, index?: CacheIndex): Promise<ResourceCache> {
    for (;;) {
      let c = this.#caches.get(resource);
      if (c?.isReady) return c;
      if (!c) {
        c = new ResourceCache(this, resource, prefix, this.#windowSize, index);
        this.#caches.set(resource, c);
        const made = c;
        made.ready.catch(() => {
          if (this.#caches.get(resource) === made) this.#caches.delete(resource);
        });
      }
      await c.ready;
      // Dropped while it listed (the store ended the watch: #restart): list afresh.
      if (this.#caches.get(resource) === c) return c;
    }
  }

  /**
   * Waits until the caches reflect the store's current revision (a consistent read), within
   * `timeoutMs`; answers whether they do (false: read the store instead, as kube falls back to etcd).
   */
  async sync(timeoutMs = 3000): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    try {
      const synced = this.storage.syncedResourceVersion();
      // A local store is in step with its watchers: nothing to wait for.
      if (typeof synced === 'number') return true;
      await Promise.race([
        synced,
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('timeout')), timeoutMs);
          timer.unref();
        }),
      ]);
      return true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Waits until the caches reflect `rv` (NotOlderThan): the store asked once for its revision, then
   * the events awaited; answers whether they do within `timeoutMs`.
   */
  async waitFor(rv: number, timeoutMs = 3000): Promise<boolean> {
    if (this.storage.currentResourceVersion() >= rv) return true;
    const deadline = Date.now() + timeoutMs;
    if (!(await this.sync(timeoutMs))) return false;
    if (this.storage.currentResourceVersion() >= rv) return true;
    return new Promise<boolean>((resolve) => {
      const w = { rv, resolve: (ok: boolean) => {
        clearTimeout(t);
        this.#rvWaiters.delete(w);
        resolve(ok);
      } };
      const t = setTimeout(() => w.resolve(this.storage.currentResourceVersion() >= rv), Math.max(1, deadline - Date.now()));
      t.unref();
      this.#rvWaiters.add(w);
    });
  }

  /** How many objects of `resource` the cache holds, or undefined when it has no ready cache of it. */
  sizeOf(resource: string): number | undefined {
    const c = this.#caches.get(resource);
    return c?.isReady ? c.size : undefined;
  }

  /** Watchers ended as too slow, by resource (`apiserver_terminated_watchers_total`). */
  readonly terminatedWatchers = new Map<string, number>();

  /** Counts a watcher of `resource` ended as too slow. */
  noteTerminated(resource: string): void {
    this.terminatedWatchers.set(resource, (this.terminatedWatchers.get(resource) ?? 0) + 1);
  }

  /** Stops feeding the caches. */
  stop(): void {
    this.#stopped = true;
    this.#handle?.stop();
    this.#handle = undefined;
  }
}
