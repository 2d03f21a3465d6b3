/**
 * The object store of the API server: keys, resourceVersions and watch, nothing about HTTP.
 * One interface, two backends (`SqliteStorage`, the default, and `MemoryStorage` for tests), both
 * built on `BaseStorage`, which owns the resourceVersion counter's use, transactions' events and the
 * watch window. (STYLE.md §5.7.)
 */

/** Any Kubernetes object as stored: JSON with `metadata`. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** `metav1.OwnerReference`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** `metav1.ObjectMeta`, the fields the server reads. */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  [field: string]: unknown;
}

/** Where an object lives: its resource (`pods`, `deployments.apps`), namespace (`''` when cluster-scoped) and name. */
export interface ObjectKey {
  resource: string;
  namespace: string;
  name: string;
}

/** A change to the store, as watchers receive it. `rv` is the resourceVersion of the write. */
export interface StorageEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  resource: string;
  namespace: string;
  name: string;
  rv: number;
  /** The object after the change (for DELETED: as it was, with the deletion's resourceVersion). */
  object: KubeObject;
  /** The object before the change (MODIFIED, DELETED). */
  previous?: KubeObject;
}

/** Preconditions of a write: the stored object's resourceVersion and/or uid must match. */
export interface Preconditions {
  resourceVersion?: string;
  uid?: string;
}

/** Thrown by storage operations; the registry maps it to a Status. */
export class StorageError extends Error {
  readonly code: 'NotFound' | 'AlreadyExists' | 'Conflict' | 'Expired';
  constructor(code: StorageError['code'], message: string) {
    super(message);
    this.name = 'StorageError';
    this.code = code;
  }
}

/** A watch subscription; `stop()` is idempotent. */
export interface WatchHandle {
  stop(): void;
}

/**
 * The operations every backend offers, asynchronous as kube-apiserver's `storage.Interface`: many
 * calls may be in flight. A write's promise settles once the write is durable (SQLite: its group
 * commit's fsync; etcd: the txn's answer), and watchers see its event no earlier. Reads answer what
 * is durable; inside `transaction(fn)` they also see the transaction's own writes.
 */
export interface Storage {
  /** The object at `key`, or undefined. */
  get(key: ObjectKey): Promise<KubeObject | undefined>;
  /** The stored JSON text of the object at `key` (no apiVersion/kind), or undefined: for answers that need no parsing. */
  getRaw(key: ObjectKey): Promise<string | undefined>;
  /** The stored JSON texts of `resource` (as `list`), with the store's current resourceVersion. */
  listRaw(resource: string, namespace?: string): Promise<{ rows: string[]; resourceVersion: number }>;
  /** Every object of `resource`, in one namespace or (undefined) all, sorted by namespace and name, with the store's current resourceVersion. */
  list(resource: string, namespace?: string): Promise<{ items: KubeObject[]; resourceVersion: number }>;
  /**
   * Stores a new object; sets `metadata.resourceVersion`.
   * @throws StorageError AlreadyExists
   */
  create(key: ObjectKey, obj: KubeObject): Promise<KubeObject>;
  /**
   * Replaces an object; sets `metadata.resourceVersion`. A write that changes nothing is skipped and answers the stored object.
   * @throws StorageError NotFound, Conflict (preconditions)
   */
  update(key: ObjectKey, obj: KubeObject, pre?: Preconditions): Promise<KubeObject>;
  /**
   * Removes an object and answers it with the deletion's resourceVersion.
   * @throws StorageError NotFound, Conflict (preconditions)
   */
  delete(key: ObjectKey, pre?: Preconditions): Promise<KubeObject>;
  /**
   * Reads `key`, calls `tryUpdate(current)` and writes its result, in one transaction (kube-apiserver's
   * GuaranteedUpdate: on etcd, `tryUpdate` runs again on the fresh object when another writer won). Answers
   * the stored object (unchanged when `tryUpdate` answered an equal object: no write, no event).
   * @throws StorageError NotFound; whatever `tryUpdate` throws
   */
  guaranteedUpdate(key: ObjectKey, tryUpdate: (current: KubeObject) => KubeObject | Promise<KubeObject>): Promise<KubeObject>;
  /**
   * Runs `fn` in one transaction: all its writes or none; watchers see its events after the commit, in
   * order. Calls made from `fn` (followed through its awaits) are part of it; a call inside is a savepoint.
   * `fn` must be safe to run more than once (etcd runs it again when another writer committed first).
   */
  transaction<T>(fn: () => Promise<T>): Promise<T>;
  /** The latest resourceVersion whose event watchers have been handed (every write up to it is durable). */
  currentResourceVersion(): number;
  /**
   * The resourceVersion a consistent read must reflect (kube-apiserver's consistent reads from the
   * watch cache): the store's current revision, resolved once every event up to it has been handed to
   * watchers, so that a cache fed by `watch` serves a read at it from memory. Local stores answer
   * `currentResourceVersion()` at once, as a number (no Promise: a GET from the cache waits on nothing);
   * etcd reads its revision and waits for its watch.
   * @throws Error when the watch does not catch up in time (the caller reads the store instead)
   */
  syncedResourceVersion(): number | Promise<number>;
  /**
   * Calls `listener` for every event with `rv > sinceRv` on `resource` (all resources when `'*'`),
   * first those still in the watch window, then live ones (synchronously: nothing is missed between).
   * A watch that cannot go on in order (etcd compacted events it had not delivered yet: the store's own
   * watch was away meanwhile) is ended: removed, and `onEnd` called once with StorageError Expired. Its
   * user lists again and watches from that list's resourceVersion ({@link keepListed} does it); a watch
   * without `onEnd` would miss those events silently. The local stores never end a watch.
   * @throws StorageError Expired when events after `sinceRv` have left the window (410 Gone)
   */
  watch(resource: string, sinceRv: number, listener: (e: StorageEvent) => void, onEnd?: (err: StorageError) => void): WatchHandle;
  /** Content-addressed bytes (the module store): stores `bytes` under its SHA-256 hex digest. */
  putBlob(sha256: string, bytes: Uint8Array): Promise<void>;
  /** The bytes stored under `sha256`, or undefined. */
  getBlob(sha256: string): Promise<Uint8Array | undefined>;
  /** Releases the backend (waits for writes in flight, then closes the database). */
  close(): Promise<void>;
}
