/**
 * `BaseStorage`: everything the local backends (SQLite, memory) share. A backend supplies durable
 * reads of JSON rows and one `persist` of a group of writes; this class adds the asynchronous
 * `Storage` over them:
 *
 * - Transactions run one at a time (a FIFO lock), each in its own async context (AsyncLocalStorage),
 *   so that the calls `fn` makes, through any number of awaits, are its own while other requests'
 *   reads go on beside it. A transaction's writes are buffered; nested calls are savepoints of the
 *   buffer; a failed transaction leaves nothing.
 * - Group commit: a transaction that succeeds hands its writes to the open group and releases the
 *   lock at once; the next transactions read its writes (not yet durable) and join the same group.
 *   The group is persisted in one backend transaction (SQLite: one fsync) when the event loop comes
 *   round, or when the previous group's persist ends; every write of the group is answered, and its
 *   events handed to watchers in resourceVersion order, only after that.
 * - Reads outside a transaction answer what is durable, so nothing a client saw can be lost.
 * - The watch window: the last `windowSize` events kept in memory, so that a watch from a recent
 *   resourceVersion resumes exactly and an older one gets 410 Expired.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { isDeepStrictEqual } from 'node:util';
import {
  StorageError,
  type KubeObject,
  type ObjectKey,
  type Preconditions,
  type Storage,
  type StorageEvent,
  type WatchHandle,
} from './interface.ts';
import { WatchWindow } from './watch-window.ts';

/** Default number of events kept for watch resumption. */
export const DEFAULT_WATCH_WINDOW = 50_000;

/** A stored row as a backend lists it. */
export interface StoredRow {
  namespace: string;
  name: string;
  /** The object's JSON text. */
  value: string;
}

/** One write of a group: the key's new JSON text, or undefined when it is deleted. */
export interface Change {
  key: ObjectKey;
  value: string | undefined;
}

interface Watcher {
  resource: string;
  listener: (e: StorageEvent) => void;
}

/** A transaction's buffer. */
interface Tx {
  writes: Map<string, Change>;
  events: StorageEvent[];
  /** The latest resourceVersion handed out in it. */
  rv: number;
  /** Set when it committed or failed: calls still carrying its context are not part of it. */
  done: boolean;
}

/** The writes waiting for one persist. */
interface Group {
  changes: Change[];
  events: StorageEvent[];
  rv: number;
  waiters: { resolve: () => void; reject: (err: unknown) => void }[];
}

const rowKey = (k: ObjectKey): string => `${k.resource}\0${k.namespace}\0${k.name}`;

/** Raw row access a backend implements; values are the objects' JSON text. */
export abstract class BaseStorage implements Storage {
  /** The durable JSON text at `key`. */
  protected abstract rawGet(key: ObjectKey): string | undefined;
  /** The durable rows of `resource` (in `namespace`, or all), sorted by namespace then name. */
  protected abstract rawList(resource: string, namespace: string | undefined): StoredRow[];
  /**
   * The durable JSON texts of `resource` in {@link rawList}'s order: what a read outside a
   * transaction (every client's list) answers, without a row object a value. A backend with a
   * cheaper way (SQLite: a plucked column) overrides it.
   */
  protected rawListValues(resource: string, namespace: string | undefined): string[] {
    return this.rawList(resource, namespace).map((r) => r.value);
  }
  /** The durable resourceVersion counter. */
  protected abstract readRv(): number;
  /**
   * Makes `changes` (in order; a later change of a key wins) and the counter `rv` durable, all or
   * none; resolves once they are. Never called again before the previous call settled.
   */
  protected abstract persist(changes: Change[], rv: number): void | Promise<void>;
  abstract putBlob(sha256: string, bytes: Uint8Array): Promise<void>;
  abstract getBlob(sha256: string): Promise<Uint8Array | undefined>;
  /** Closes the backend; called once every write in flight is durable. */
  protected abstract closeBackend(): void;

  private readonly window: WatchWindow;
  private readonly watchers = new Set<Watcher>();
  private readonly als = new AsyncLocalStorage<Tx>();
  /** Writes of committed transactions not yet durable (what transactions read before the backend). */
  private readonly applied = new Map<string, Change>();
  private appliedRv = 0;
  private publishedRv = 0;
  private lockTail: Promise<void> = Promise.resolve();
  private open: Group | undefined;
  private flushing: Promise<void> | undefined;
  private flushScheduled = false;
  /** Why persisting failed: the store refuses writes from then on (restart the server). */
  private failure: unknown;
  private closing = false;
  constructor(windowSize = DEFAULT_WATCH_WINDOW) {
    this.window = new WatchWindow(windowSize);
  }

  /** Call at the end of a subclass constructor: events before now are not replayable. */
  protected initWindow(): void {
    const rv = this.readRv();
    this.window.droppedUpTo = rv;
    this.appliedRv = rv;
    this.publishedRv = rv;
  }

  private tx(): Tx | undefined {
    const t = this.als.getStore();
    return t && !t.done ? t : undefined;
  }

  private read(key: ObjectKey): string | undefined {
    const t = this.tx();
    if (t) {
      const k = rowKey(key);
      const c = t.writes.get(k) ?? this.applied.get(k);
      if (c) return c.value;
    }
    return this.rawGet(key);
  }

  private rows(resource: string, namespace: string | undefined): { rows: string[]; resourceVersion: number } {
    const t = this.tx();
    if (!t) return { rows: this.rawListValues(resource, namespace), resourceVersion: this.publishedRv };
    const overlay: Change[] = [];
    for (const c of this.applied.values()) if (c.key.resource === resource && (namespace === undefined || c.key.namespace === namespace)) overlay.push(c);
    for (const c of t.writes.values()) if (c.key.resource === resource && (namespace === undefined || c.key.namespace === namespace)) overlay.push(c);
    if (overlay.length === 0) return { rows: this.rawListValues(resource, namespace), resourceVersion: t.rv };
    const durable = this.rawList(resource, namespace);
    const byKey = new Map<string, StoredRow>(durable.map((r) => [`${r.namespace}\0${r.name}`, r]));
    for (const c of overlay) {
      const k = `${c.key.namespace}\0${c.key.name}`;
      if (c.value === undefined) byKey.delete(k);
      else byKey.set(k, { namespace: c.key.namespace, name: c.key.name, value: c.value });
    }
    const merged = [...byKey.values()].sort((a, b) => (a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { rows: merged.map((r) => r.value), resourceVersion: t.rv };
  }

  async get(key: ObjectKey): Promise<KubeObject | undefined> {
    const s = this.read(key);
    return s === undefined ? undefined : (JSON.parse(s) as KubeObject);
  }

  async getRaw(key: ObjectKey): Promise<string | undefined> {
    return this.read(key);
  }

  async listRaw(resource: string, namespace?: string): Promise<{ rows: string[]; resourceVersion: number }> {
    return this.rows(resource, namespace);
  }

  async list(resource: string, namespace?: string): Promise<{ items: KubeObject[]; resourceVersion: number }> {
    const { rows, resourceVersion } = this.rows(resource, namespace);
    return { items: rows.map((s) => JSON.parse(s) as KubeObject), resourceVersion };
  }

  currentResourceVersion(): number {
    return this.publishedRv;
  }

  syncedResourceVersion(): number {
    return this.publishedRv;
  }

  /** Takes the transactions' lock (FIFO); resolves with its release. */
  private acquire(): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const before = this.lockTail;
    this.lockTail = before.then(() => mine);
    return before.then(() => release);
  }

  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    const outer = this.tx();
    if (outer) {
      // A savepoint: a failure forgets what `fn` wrote.
      const writes = new Map(outer.writes);
      const events = outer.events.length;
      const rv = outer.rv;
      try {
        return await fn();
      } catch (err: unknown) {
        outer.writes = writes;
        outer.events.length = events;
        outer.rv = rv;
        throw err;
      }
    }
    if (this.closing) throw new Error('the storage is closed');
    const release = await this.acquire();
    let durable: Promise<void> | undefined;
    let result: T;
    try {
      if (this.failure !== undefined) throw new Error(`the storage failed to persist a write (restart the API server): ${String(this.failure)}`);
      const t: Tx = { writes: new Map(), events: [], rv: this.appliedRv, done: false };
      try {
        result = await this.als.run(t, fn);
      } finally {
        t.done = true;
      }
      if (t.writes.size > 0) {
        for (const [k, c] of t.writes) this.applied.set(k, c);
        this.appliedRv = t.rv;
        durable = this.join(t);
      }
    } finally {
      release();
    }
    if (durable) await durable;
    return result;
  }

  /** Adds a committed transaction to the open group; resolves when the group is durable. */
  private join(t: Tx): Promise<void> {
    let g = this.open;
    if (!g) {
      g = { changes: [], events: [], rv: 0, waiters: [] };
      this.open = g;
    }
    for (const c of t.writes.values()) g.changes.push(c);
    for (const e of t.events) g.events.push(e);
    g.rv = t.rv;
    const done = new Promise<void>((resolve, reject) => g.waiters.push({ resolve, reject }));
    this.scheduleFlush();
    return done;
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.flushing) return;
    this.flushScheduled = true;
    // Outside any transaction's context: what the flush calls (watchers) starts its own.
    this.als.exit(() =>
      setImmediate(() => {
        this.flushScheduled = false;
        this.flushing = this.flush().finally(() => {
          this.flushing = undefined;
          if (this.open) this.scheduleFlush();
        });
      }),
    );
  }

  private async flush(): Promise<void> {
    const g = this.open;
    if (!g) return;
    this.open = undefined;
    try {
      await this.persist(g.changes, g.rv);
    } catch (err: unknown) {
      this.failure = err;
      for (const w of g.waiters) w.reject(err);
      const later = this.open as Group | undefined;
      this.open = undefined;
      for (const w of later?.waiters ?? []) w.reject(err);
      return;
    }
    for (const c of g.changes) {
      const k = rowKey(c.key);
      if (this.applied.get(k) === c) this.applied.delete(k);
    }
    for (const e of g.events) this.publish(e);
    this.publishedRv = g.rv;
    for (const w of g.waiters) w.resolve();
  }

  private buffer(): Tx {
    const t = this.tx();
    if (!t) throw new Error('BaseStorage: a write outside a transaction');
    return t;
  }

  private put(t: Tx, key: ObjectKey, value: string | undefined): void {
    t.writes.set(rowKey(key), { key, value });
  }

  create(key: ObjectKey, obj: KubeObject): Promise<KubeObject> {
    return this.transaction(async () => {
      const t = this.buffer();
      if (this.read(key) !== undefined) throw new StorageError('AlreadyExists', `${key.resource} "${key.name}" already exists`);
      const rv = ++t.rv;
      const stored = withRv(obj, rv);
      this.put(t, key, JSON.stringify(stored));
      t.events.push({ type: 'ADDED', ...key, rv, object: stored });
      return stored;
    });
  }

  update(key: ObjectKey, obj: KubeObject, pre?: Preconditions): Promise<KubeObject> {
    return this.transaction(async () => {
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(current, pre);
      return this.write(key, current, obj);
    });
  }

  guaranteedUpdate(key: ObjectKey, tryUpdate: (current: KubeObject) => KubeObject | Promise<KubeObject>): Promise<KubeObject> {
    return this.transaction(async () => {
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      const next = await tryUpdate(structuredClone(current));
      return this.write(key, current, next);
    });
  }

  delete(key: ObjectKey, pre?: Preconditions): Promise<KubeObject> {
    return this.transaction(async () => {
      const t = this.buffer();
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(current, pre);
      this.put(t, key, undefined);
      const rv = ++t.rv;
      const gone = withRv(current, rv);
      t.events.push({ type: 'DELETED', ...key, rv, object: gone, previous: current });
      return gone;
    });
  }

  watch(resource: string, sinceRv: number, listener: (e: StorageEvent) => void, _onEnd?: (err: StorageError) => void): WatchHandle {
    // Replay what the window holds after sinceRv, then go live; both happen synchronously, so no event is lost or
    // repeated, and a watch never has to end (`onEnd` is not called).
    this.window.replay(resource, sinceRv, listener);
    const w: Watcher = { resource, listener };
    this.watchers.add(w);
    return { stop: () => this.watchers.delete(w) };
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    // Every transaction queued before the close, then every group, made durable.
    const release = await this.acquire();
    release();
    while (this.open || this.flushing || this.flushScheduled) {
      if (this.flushing) await this.flushing.catch(() => {});
      else await new Promise((r) => setImmediate(r));
    }
    this.watchers.clear();
    this.closeBackend();
  }

  private write(key: ObjectKey, current: KubeObject, next: KubeObject): KubeObject {
    const t = this.buffer();
    const candidate = withRv(next, Number(current.metadata.resourceVersion));
    if (isDeepStrictEqual(candidate, current)) return current;
    const rv = ++t.rv;
    const stored = withRv(next, rv);
    this.put(t, key, JSON.stringify(stored));
    t.events.push({ type: 'MODIFIED', ...key, rv, object: stored, previous: current });
    return stored;
  }

  private publish(e: StorageEvent): void {
    this.window.push(e);
    for (const w of [...this.watchers]) {
      if (w.resource !== '*' && w.resource !== e.resource) continue;
      try {
        w.listener(e);
      } catch {
        // A watcher's failure is the watcher's: it never stops delivery to others.
      }
    }
  }
}

function withRv(obj: KubeObject, rv: number): KubeObject {
  return { ...obj, metadata: { ...obj.metadata, resourceVersion: String(rv) } };
}

function checkPreconditions(current: KubeObject, pre: Preconditions | undefined): void {
  if (!pre) return;
  if (pre.uid !== undefined && pre.uid !== current.metadata.uid) {
    throw new StorageError('Conflict', `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`);
  }
  if (pre.resourceVersion !== undefined && pre.resourceVersion !== current.metadata.resourceVersion) {
    throw new StorageError('Conflict', 'the object has been modified; please apply your changes to the latest version and try again');
  }
}
