/**
 * `BaseStorage`: everything the backends share. A backend supplies raw reads and writes of JSON
 * rows and the resourceVersion counter; this class adds preconditions, no-op detection, the events
 * of each transaction (delivered after commit, in resourceVersion order) and the watch window: the
 * last `windowSize` events kept in memory, so that a watch from a recent resourceVersion resumes
 * exactly and an older one gets 410 Expired.
 */
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

interface Watcher {
  resource: string;
  listener: (e: StorageEvent) => void;
}

/** Raw row access a backend implements; values are the objects' JSON text. */
export abstract class BaseStorage implements Storage {
  protected abstract rawGet(key: ObjectKey): string | undefined;
  protected abstract rawList(resource: string, namespace: string | undefined): string[];
  protected abstract rawPut(key: ObjectKey, json: string): void;
  protected abstract rawDelete(key: ObjectKey): void;
  /** Increments the single counter and answers the new value (inside the current transaction). */
  protected abstract nextRv(): number;
  protected abstract readRv(): number;
  /** Runs `fn` atomically (the backend's transaction). */
  protected abstract atomically<T>(fn: () => T): T;
  abstract putBlob(sha256: string, bytes: Uint8Array): void;
  abstract getBlob(sha256: string): Uint8Array | undefined;
  abstract close(): void;

  private readonly window: WatchWindow;
  private readonly watchers = new Set<Watcher>();
  private pending: StorageEvent[] | undefined;
  private depth = 0;
  constructor(windowSize = DEFAULT_WATCH_WINDOW) {
    this.window = new WatchWindow(windowSize);
  }

  /** Call at the end of a subclass constructor: events before now are not replayable. */
  protected initWindow(): void {
    this.window.droppedUpTo = this.readRv();
  }

  get(key: ObjectKey): KubeObject | undefined {
    const s = this.rawGet(key);
    return s === undefined ? undefined : (JSON.parse(s) as KubeObject);
  }

  getRaw(key: ObjectKey): string | undefined {
    return this.rawGet(key);
  }

  listRaw(resource: string, namespace?: string): { rows: string[]; resourceVersion: number } {
    return this.atomically(() => ({ rows: this.rawList(resource, namespace), resourceVersion: this.readRv() }));
  }

  list(resource: string, namespace?: string): { items: KubeObject[]; resourceVersion: number } {
    return this.atomically(() => ({
      items: this.rawList(resource, namespace).map((s) => JSON.parse(s) as KubeObject),
      resourceVersion: this.readRv(),
    }));
  }

  currentResourceVersion(): number {
    return this.readRv();
  }

  transaction<T>(fn: () => T): T {
    const outer = this.depth === 0;
    if (outer) this.pending = [];
    this.depth++;
    const mark = this.pending?.length ?? 0;
    let events: StorageEvent[] = [];
    try {
      const result = this.atomically(fn);
      if (outer) events = this.pending ?? [];
      return result;
    } catch (err: unknown) {
      // A nested transaction that failed was rolled back to its savepoint: forget its events.
      if (!outer && this.pending) this.pending.length = mark;
      throw err;
    } finally {
      this.depth--;
      if (outer) {
        this.pending = undefined;
        for (const e of events) this.publish(e);
      }
    }
  }

  create(key: ObjectKey, obj: KubeObject): KubeObject {
    return this.transaction(() => {
      if (this.rawGet(key) !== undefined) throw new StorageError('AlreadyExists', `${key.resource} "${key.name}" already exists`);
      const rv = this.nextRv();
      const stored = withRv(obj, rv);
      this.rawPut(key, JSON.stringify(stored));
      this.emit({ type: 'ADDED', ...key, rv, object: stored });
      return stored;
    });
  }

  update(key: ObjectKey, obj: KubeObject, pre?: Preconditions): KubeObject {
    return this.transaction(() => {
      const current = this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(key, current, pre);
      return this.write(key, current, obj);
    });
  }

  guaranteedUpdate(key: ObjectKey, tryUpdate: (current: KubeObject) => KubeObject): KubeObject {
    return this.transaction(() => {
      const current = this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      const next = tryUpdate(structuredClone(current));
      return this.write(key, current, next);
    });
  }

  delete(key: ObjectKey, pre?: Preconditions): KubeObject {
    return this.transaction(() => {
      const current = this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(key, current, pre);
      this.rawDelete(key);
      const rv = this.nextRv();
      const gone = withRv(current, rv);
      this.emit({ type: 'DELETED', ...key, rv, object: gone, previous: current });
      return gone;
    });
  }

  watch(resource: string, sinceRv: number, listener: (e: StorageEvent) => void): WatchHandle {
    // Replay what the window holds after sinceRv, then go live; both happen synchronously, so no event is lost or repeated.
    this.window.replay(resource, sinceRv, listener);
    const w: Watcher = { resource, listener };
    this.watchers.add(w);
    return { stop: () => this.watchers.delete(w) };
  }


  private write(key: ObjectKey, current: KubeObject, next: KubeObject): KubeObject {
    const candidate = withRv(next, Number(current.metadata.resourceVersion));
    if (isDeepStrictEqual(candidate, current)) return current;
    const rv = this.nextRv();
    const stored = withRv(next, rv);
    this.rawPut(key, JSON.stringify(stored));
    this.emit({ type: 'MODIFIED', ...key, rv, object: stored, previous: current });
    return stored;
  }

  private emit(e: StorageEvent): void {
    if (this.pending) this.pending.push(e);
    else this.publish(e);
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

function checkPreconditions(key: ObjectKey, current: KubeObject, pre: Preconditions | undefined): void {
  if (!pre) return;
  if (pre.uid !== undefined && pre.uid !== current.metadata.uid) {
    throw new StorageError('Conflict', `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`);
  }
  if (pre.resourceVersion !== undefined && pre.resourceVersion !== current.metadata.resourceVersion) {
    throw new StorageError('Conflict', 'the object has been modified; please apply your changes to the latest version and try again');
  }
  void key;
}
