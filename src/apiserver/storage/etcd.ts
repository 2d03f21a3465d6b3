/**
 * `EtcdStorage`: the object store on etcd v3, for several API servers on one cluster (ARCHITECTURE.md
 * "Storage"; issue 11). The same asynchronous `Storage` interface as SQLite, through etcd's async
 * client (npm `etcd3`, gRPC) in the API server's thread: many calls in flight, each bounded by
 * `requestTimeoutMs` (the gRPC deadline). No thread blocks on etcd (issue 20).
 *
 * Layout as in Kubernetes: `/registry/<resource>/<namespace>/<name>` (cluster-scoped:
 * `/registry/<resource>/<name>`), values the object's JSON. `resourceVersion` is etcd's revision:
 * the key's mod revision, spliced into the value when read (the stored value's own is not used).
 *
 * Writes are etcd transactions. `transaction(fn)` runs `fn` as software transactional memory: reads
 * go to etcd (linearizable) and record each key's mod revision, writes are buffered, and the commit
 * is one etcd txn that compares every mod revision read (and, for lists read, that no key of the
 * range changed) before it writes. When another writer got there first the commit fails and `fn`
 * runs again on fresh reads (at most `maxAttempts` times, then Conflict): the optimistic
 * concurrency of kube-apiserver's GuaranteedUpdate, for whole transactions. Every write of one
 * transaction gets the same resourceVersion, the commit's revision: the objects that writes inside
 * the transaction answered carry a guess until the commit and the real revision after it.
 *
 * Each read is an etcd round trip, so a transaction's first attempt reads keys from what this API server last knew of them (its watch, its reads, its
 * commits) and a create takes a key it never saw as absent, with no round trip: the commit's
 * comparisons check every such read, and the attempt is accepted only when its commit succeeds;
 * otherwise (a stale read lost the comparison, or the attempt failed or wrote nothing) `fn` runs
 * again on etcd's reads. A create is then one round trip instead of three or four
 * (docs/control-plane-performance.md).
 *
 * Watch: one etcd watch on `/registry/` from a revision feeds a window of recent events in this
 * thread (the watch cache); a watch from a resourceVersion replays the window, then goes live, and
 * one older than the window (or than etcd's compaction when the window was filled) is 410 Expired.
 * Events reach watchers asynchronously, in revision order, whichever API server wrote them; a put
 * that changes a key's uid (a pod replaced in one transaction) is DELETED then ADDED.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { isDeepStrictEqual } from 'node:util';
import { ExponentialBackoff, handleType, noop, retry } from 'cockatiel';
import { Etcd3, GRPCUnavailableError } from 'etcd3';
import { EtcdKv, scheduleCompaction, toRow } from './etcd-kv.ts';
import { RegistryWatch } from './etcd-watch.ts';
import { type Cond, num, prefixEnd, REGISTRY_PREFIX, type Row, type WatchBatch, type WireEvent, type Write, withResourceVersion } from './etcd-wire.ts';
import { type KubeObject, type ObjectKey, type Preconditions, type Storage, StorageError, type StorageEvent, type WatchHandle } from './interface.ts';
import { WatchWindow } from './watch-window.ts';

/** Options of `EtcdStorage`. */
export interface EtcdStorageOptions {
  /** etcd client URLs, e.g. `['http://127.0.0.1:2379']`. */
  endpoints: string[];
  /** Events kept in memory for watch resumption. @default 50000 */
  watchWindow?: number;
  /** Revisions of etcd history replayed into the window at start (so that a watch from a recent resourceVersion of another API server resumes). @default 5000 */
  replayRevisions?: number;
  /** Bound of one etcd call (its gRPC deadline), ms. @default 10000 */
  requestTimeoutMs?: number;
  /** Interval of compaction (kube-apiserver's `--etcd-compaction-interval`), ms; 0 disables it. @default 300000 */
  compactionIntervalMs?: number;
  /** Commits tried by one transaction before it answers Conflict. @default 16 */
  maxAttempts?: number;
  /**
   * Whether a transaction's first attempt reads keys from what this API server last saw of them (its
   * watch, its reads and its commits) instead of etcd; its commit compares their mod revisions as
   * always, and an attempt that read such a key is accepted only when that commit succeeds (a stale
   * read makes it run again on etcd's reads). kube-apiserver's GuaranteedUpdate does the same with its
   * watch cache. @default true
   */
  cachedReads?: boolean;
}

/** An etcd call that failed or did not answer in time (not a Kubernetes status: the registry answers 500). */
export class EtcdError extends Error {
  readonly op: string;
  constructor(op: string, message: string, options?: { cause?: unknown }) {
    super(`etcd ${op}: ${message}`, options);
    this.name = 'EtcdError';
    this.op = op;
  }
}

/** A commit lost to another writer: the transaction runs again. */
class CommitConflict extends Error {}

interface Pending {
  /** Buffered writes by etcd key; the last one of a key wins (etcd allows one write per key per txn). */
  writes: Map<string, { object: KubeObject; json: string } | { deleted: KubeObject }>;
  /** Mod revision read for each key (0: absent). */
  reads: Map<string, number>;
  /** Prefixes listed, with the revision of the list. */
  ranges: { prefix: string; rev: number }[];
  /** Objects answered by writes: their resourceVersion becomes the commit's revision. */
  answered: KubeObject[];
  /** The latest revision seen; the guess of the commit's is one more. */
  rev: number;
  /** Whether reads may be answered from what this API server knows of each key (the first attempt). */
  cached: boolean;
  /** Whether a read was answered from that knowledge (so only a successful commit validates it). */
  usedCache: boolean;
  /** Set when the attempt ended: calls still carrying its async context are not part of it. */
  done: boolean;
}

/** What this API server last knew of a key: its value (undefined: absent), mod revision, and as of which revision. */
interface Known {
  value: string | undefined;
  mod: number;
  at: number;
}

interface Watcher {
  resource: string;
  sinceRv: number;
  listener: (e: StorageEvent) => void;
  onEnd?: (err: StorageError) => void;
}

const DEFAULTS = { watchWindow: 50_000, replayRevisions: 5000, requestTimeoutMs: 10_000, compactionIntervalMs: 300_000, maxAttempts: 16, cachedReads: true };

/** Keys whose last value is kept for transactions' first attempts, per watch window entry allowed. */
const KNOWN_PER_WINDOW = 2;

/** The etcd key of an object. */
export function etcdKey(key: ObjectKey): string {
  return key.namespace ? `${REGISTRY_PREFIX}${key.resource}/${key.namespace}/${key.name}` : `${REGISTRY_PREFIX}${key.resource}/${key.name}`;
}

function prefixOf(resource: string, namespace: string | undefined): string {
  return namespace === undefined ? `${REGISTRY_PREFIX}${resource}/` : `${REGISTRY_PREFIX}${resource}/${namespace}/`;
}

/** Resource, namespace and name of an etcd key, or undefined for keys that are not objects. */
function parseKey(k: string): ObjectKey | undefined {
  const parts = k.slice(REGISTRY_PREFIX.length).split('/');
  if (parts.length === 2) return { resource: parts[0]!, namespace: '', name: parts[1]! };
  if (parts.length === 3) return { resource: parts[0]!, namespace: parts[1]!, name: parts[2]! };
  return undefined;
}

/** The value written for `obj`: its resourceVersion first and empty, so that reads splice it in without parsing. */
function encode(obj: KubeObject): string {
  const { metadata, ...rest } = obj;
  const { resourceVersion: _rv, ...meta } = metadata;
  return JSON.stringify({ metadata: { resourceVersion: '', ...meta }, ...rest });
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

/**
 * Objects in etcd, behind the asynchronous `Storage` interface (see the file's header for the design).
 * Every call may also reject with `EtcdError` (etcd failed or did not answer within `requestTimeoutMs`).
 * @example
 * const s = await EtcdStorage.open({ endpoints: ['http://127.0.0.1:2379'] });
 * await s.create({ resource: 'pods', namespace: 'default', name: 'a' }, { metadata: { name: 'a', namespace: 'default' } });
 * await s.close();
 */
export class EtcdStorage implements Storage {
  private readonly client: Etcd3;
  private readonly kv: EtcdKv;
  private readonly registryWatch: RegistryWatch;
  private stopCompaction: () => void = () => {};
  private readonly opts: Required<EtcdStorageOptions>;
  /** Settles when the client is connected and the watch open; every call waits for it. */
  readonly ready: Promise<void>;
  private closed = false;
  /** Set while events are handed to watchers. */
  private publishing = false;
  private readonly als = new AsyncLocalStorage<Pending>();
  private window: WatchWindow;
  /** The revision of the latest event delivered. */
  private deliveredUpTo = 0;
  private readonly watchers = new Set<Watcher>();
  /** Called when `deliveredUpTo` moves (syncedResourceVersion). */
  private readonly deliveryWaiters: (() => void)[] = [];
  /** Revisions of this server's writes outside `/registry/` (blobs) not yet passed by `deliveredUpTo`. */
  private readonly foreign = new Set<number>();
  /** etcd key → its last value known here (from the watch, reads and commits), for transactions' first attempts. */
  private readonly known = new Map<string, Known>();

  /**
   * Connects to etcd and opens the watch, in the background (`ready`, or use `EtcdStorage.open`).
   * @throws RangeError for bad options
   */
  constructor(options: EtcdStorageOptions) {
    // Options given as undefined take their defaults.
    const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as Partial<EtcdStorageOptions>;
    const opts = { ...DEFAULTS, endpoints: [], ...given };
    if (!Array.isArray(opts.endpoints) || opts.endpoints.length === 0) throw new RangeError('EtcdStorage: endpoints must list at least one etcd URL (--etcd-endpoints http://HOST:2379,...)');
    for (const e of opts.endpoints) {
      if (!/^https?:\/\/[^/\s]+\/?$/.test(e)) throw new RangeError(`EtcdStorage: endpoint must be a URL like http://127.0.0.1:2379: current value is ${JSON.stringify(e)}`);
    }
    for (const k of ['watchWindow', 'requestTimeoutMs', 'maxAttempts'] as const) {
      if (!Number.isInteger(opts[k]) || opts[k] < 1) throw new RangeError(`EtcdStorage: ${k} must be a positive integer: current value is ${opts[k]}`);
    }
    for (const k of ['replayRevisions', 'compactionIntervalMs'] as const) {
      if (!Number.isInteger(opts[k]) || opts[k] < 0) throw new RangeError(`EtcdStorage: ${k} must be a non-negative integer: current value is ${opts[k]}`);
    }
    if (typeof opts.cachedReads !== 'boolean') throw new RangeError(`EtcdStorage: cachedReads must be a boolean: current value is ${String(opts.cachedReads)}`);
    this.opts = opts;
    this.window = new WatchWindow(opts.watchWindow);
    this.client = new Etcd3({
      hosts: opts.endpoints.map((e) => e.replace(/\/$/, '')),
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + opts.requestTimeoutMs }),
      grpcOptions: { 'grpc.max_receive_message_length': 256 * 1024 * 1024 },
      // No circuit breaker per host. etcd3's default opens one after three consecutive recoverable
      // errors (a deadline passed, Unavailable, ...) and then refuses every call for 5 s with "Execution
      // prevented because the circuit breaker is open", without asking etcd: one busy moment (a drain's
      // hundred evictions at 10 000 pods timed out three reads) made the API server answer every
      // request with 500s for seconds after etcd was well again. kube-apiserver's clientv3 has no
      // breaker: each call is bounded by its deadline (`requestTimeoutMs`) and the next call tries again.
      // Nor a retry of a call that ran out of time (etcd3's default retries every recoverable error three
      // times, so a call took up to four deadlines): only an Unavailable one (no connection to etcd, the
      // request was not sent) is tried again, after 50, 100 and 200 ms, as clientv3 retries Unavailable.
      faultHandling: {
        host: () => noop,
        global: retry(handleType(GRPCUnavailableError), { maxAttempts: 3, backoff: new ExponentialBackoff({ initialDelay: 50, maxDelay: 200 }) }),
      },
    });
    this.kv = new EtcdKv(this.client);
    this.registryWatch = new RegistryWatch(this.client, { postMessage: (m) => this.onBatch(m) });
    this.ready = this.init();
    // A failed start is seen by every call (and by `open`); not an unhandled rejection meanwhile.
    this.ready.catch(() => {});
  }

  /**
   * A store whose client is connected and whose watch is open.
   * @throws RangeError for bad options; EtcdError when etcd does not answer within `requestTimeoutMs`
   */
  static async open(options: EtcdStorageOptions): Promise<EtcdStorage> {
    const s = new EtcdStorage(options);
    try {
      await s.ready;
    } catch (err: unknown) {
      await s.close();
      throw err;
    }
    return s;
  }

  private async init(): Promise<void> {
    try {
      const rev = await this.kv.currentRev();
      const start = await this.registryWatch.open(await this.kv.oldestReadable(Math.max(1, rev + 1 - this.opts.replayRevisions), rev));
      this.window = new WatchWindow(this.opts.watchWindow, start - 1);
      this.deliveredUpTo = Math.max(this.deliveredUpTo, start - 1);
      if (!this.closed) this.stopCompaction = scheduleCompaction(this.client, this.opts.compactionIntervalMs, (rev) => this.wroteOutside([rev]));
    } catch (err: unknown) {
      throw new EtcdError('init', `${err instanceof Error ? err.message : String(err)} (endpoints ${this.opts.endpoints.join(',')})`, { cause: err });
    }
  }

  /** One etcd call, once the store is ready; etcd's errors as EtcdError. */
  private async call<T>(op: string, fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw new EtcdError(op, 'the storage is closed');
    await this.ready;
    try {
      return await fn();
    } catch (err: unknown) {
      throw new EtcdError(op, `${err instanceof Error ? err.message : String(err)} (endpoints ${this.opts.endpoints.join(',')})`, { cause: err });
    }
  }

  /** The current attempt of the transaction whose async context this is, if any. */
  private get txn(): Pending | undefined {
    const t = this.als.getStore();
    return t && !t.done ? t : undefined;
  }

  // ---- reads ----

  private async readRow(k: string): Promise<{ row: Row | undefined; rev: number }> {
    const r = await this.call('get', () => this.kv.range(k));
    const got = { row: r.kvs[0] ? toRow(r.kvs[0]) : undefined, rev: num(r.header.revision) };
    this.remember(k, got.row?.value, got.row?.mod ?? 0, got.rev);
    return got;
  }

  /** Records what `key` held as of revision `at` (older news than what is known is ignored). */
  private remember(key: string, value: string | undefined, mod: number, at: number): void {
    if (!this.opts.cachedReads) return;
    const cur = this.known.get(key);
    if (cur) {
      if (at < cur.at) return;
      cur.value = value;
      cur.mod = mod;
      cur.at = at;
      return;
    }
    this.known.set(key, { value, mod, at });
    if (this.known.size > this.opts.watchWindow * KNOWN_PER_WINDOW) {
      const oldest = this.known.keys().next().value;
      if (oldest !== undefined) this.known.delete(oldest);
    }
  }

  async get(key: ObjectKey): Promise<KubeObject | undefined> {
    const s = await this.getRaw(key);
    return s === undefined ? undefined : (JSON.parse(s) as KubeObject);
  }

  async getRaw(key: ObjectKey): Promise<string | undefined> {
    const k = etcdKey(key);
    const t = this.txn;
    if (t) {
      const w = t.writes.get(k);
      if (w) return 'deleted' in w ? undefined : JSON.stringify(w.object);
      const known = t.cached ? this.known.get(k) : undefined;
      if (known) {
        if (!t.reads.has(k)) t.reads.set(k, known.mod);
        t.rev = Math.max(t.rev, known.at);
        t.usedCache = true;
        return known.value;
      }
    }
    const { row, rev } = await this.readRow(k);
    if (t) {
      if (!t.reads.has(k)) t.reads.set(k, row?.mod ?? 0);
      t.rev = Math.max(t.rev, rev);
    }
    return row?.value;
  }

  async listRaw(resource: string, namespace?: string): Promise<{ rows: string[]; resourceVersion: number }> {
    const prefix = prefixOf(resource, namespace);
    const { rows, rev } = await this.call('range', () => this.kv.rangeAll(prefix));
    const t = this.txn;
    if (!t) return { rows: sortRows(rows).map((r) => r.value), resourceVersion: rev };
    t.ranges.push({ prefix, rev });
    t.rev = Math.max(t.rev, rev);
    const byKey = new Map(rows.map((r) => [r.key, r.value]));
    for (const [k, w] of t.writes) {
      if (!k.startsWith(prefix)) continue;
      if ('deleted' in w) byKey.delete(k);
      else byKey.set(k, JSON.stringify(w.object));
    }
    const merged = sortRows([...byKey].map(([key, value]) => ({ key, value, mod: 0 })));
    return { rows: merged.map((r) => r.value), resourceVersion: rev };
  }

  async list(resource: string, namespace?: string): Promise<{ items: KubeObject[]; resourceVersion: number }> {
    const { rows, resourceVersion } = await this.listRaw(resource, namespace);
    return { items: rows.map((s) => JSON.parse(s) as KubeObject), resourceVersion };
  }

  /**
   * The watch cache's revision: every event up to it has been delivered to this API server's
   * watchers. It trails etcd's
   * latest revision by the watch's latency, as kube-apiserver's cacher does, so that a BOOKMARK or
   * a watch started from it never skips an event.
   */
  currentResourceVersion(): number {
    return this.deliveredUpTo;
  }

  /**
   * A consistent read's revision, as kube-apiserver's consistent reads from the watch cache: etcd's
   * latest revision (a linearizable read), once every event up to it has been handed to watchers.
   * Revisions of this server's writes outside `/registry/` (blobs) carry no event and are skipped;
   * etcd's progress notifications are not used (before 3.4.31 / 3.5.13, the etcd Debian ships is
   * 3.4.23, one may come ahead of events still to be sent, as kube's ConsistentListFromCache notes).
   * @throws EtcdError when the watch has not reached it within `requestTimeoutMs` (another API
   *   server's blob write, with no object written since: the caller reads etcd instead)
   */
  async syncedResourceVersion(): Promise<number> {
    const rev = await this.etcdRevision();
    const deadline = Date.now() + this.opts.requestTimeoutMs;
    while (this.deliveredUpTo < rev) {
      if (this.closed) throw new EtcdError('sync', 'the storage is closed');
      const left = deadline - Date.now();
      if (left <= 0) throw new EtcdError('sync', `the watch did not reach revision ${rev} within ${this.opts.requestTimeoutMs} ms (at ${this.deliveredUpTo})`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        t.unref();
        this.deliveryWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return rev;
  }

  /** Records revisions of this server's writes outside `/registry/`. */
  private wroteOutside(revisions: number[]): void {
    for (const r of revisions) if (r > this.deliveredUpTo) this.foreign.add(r);
    this.skipForeign();
  }

  /** Moves `deliveredUpTo` over the revisions of this server's blob writes that follow it (they carry no event), and wakes syncedResourceVersion. */
  private skipForeign(): void {
    while (this.foreign.has(this.deliveredUpTo + 1)) {
      this.foreign.delete(this.deliveredUpTo + 1);
      this.deliveredUpTo++;
    }
    for (const r of this.foreign) if (r <= this.deliveredUpTo) this.foreign.delete(r);
    for (const w of this.deliveryWaiters.splice(0)) w();
  }

  /** etcd's latest revision (a linearizable read; may be ahead of what watchers have seen). */
  etcdRevision(): Promise<number> {
    return this.call('rev', () => this.kv.currentRev());
  }

  // ---- writes ----

  /**
   * Runs `fn` as one etcd transaction: reads recorded, writes buffered, one compare-and-write commit;
   * `fn` runs again when another writer committed first. Nested calls are savepoints. `fn` must be
   * safe to run more than once (it is, for the registry: it only reads and writes the store).
   * @throws StorageError Conflict after `maxAttempts` lost commits; whatever `fn` throws; EtcdError
   */
  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    const outer = this.txn;
    if (outer) {
      // Nested: a savepoint of the buffer.
      const writes = new Map(outer.writes);
      const answered = outer.answered.length;
      try {
        return await fn();
      } catch (err: unknown) {
        outer.writes = writes;
        outer.answered.length = answered;
        throw err;
      }
    }
    for (let attempt = 1; ; attempt++) {
      const t: Pending = { writes: new Map(), reads: new Map(), ranges: [], answered: [], rev: 0, cached: attempt === 1 && this.opts.cachedReads, usedCache: false, done: false };
      let result: T;
      try {
        result = await this.als.run(t, fn);
      } catch (err: unknown) {
        t.done = true;
        // A decision taken on what this server knew (NotFound, AlreadyExists, a precondition) is checked on etcd.
        if (t.usedCache && !(err instanceof EtcdError)) continue;
        // Reads of several round trips are not one snapshot: an answer (AlreadyExists after a list that
        // did not show the key) stands only when every read is still current, else `fn` runs again.
        if (!(err instanceof EtcdError) && (t.reads.size > 1 || t.ranges.length > 0) && !(await this.stillCurrent(t)) && attempt < this.opts.maxAttempts) continue;
        throw err;
      } finally {
        t.done = true;
      }
      // Reads no commit will check (nothing to write) must be etcd's own.
      if (t.usedCache && t.writes.size === 0) continue;
      try {
        await this.commit(t);
        return result;
      } catch (err: unknown) {
        if (!(err instanceof CommitConflict)) throw err;
        if (attempt >= this.opts.maxAttempts) {
          throw new StorageError('Conflict', `the transaction lost to other writers ${attempt} times; please try again`);
        }
      }
    }
  }

  /** Whether every read of `t` still holds in etcd (a commit of no writes under its conditions). */
  private async stillCurrent(t: Pending): Promise<boolean> {
    const { ok } = await this.call('commit', () => this.kv.commit(conditions(t), []));
    return ok;
  }

  private async commit(t: Pending): Promise<void> {
    if (t.writes.size === 0) return;
    const conds = conditions(t);
    const writes: Write[] = [...t.writes].map(([key, w]) => ('deleted' in w ? { key, del: true as const } : { key, put: w.json }));
    const { ok, rev } = await this.call('commit', () => this.kv.commit(conds, writes));
    if (!ok) throw new CommitConflict();
    for (const o of t.answered) o.metadata.resourceVersion = String(rev);
    for (const w of writes) this.remember(w.key, 'del' in w ? undefined : withResourceVersion(w.put, rev), 'del' in w ? 0 : rev, rev);
  }

  /** Runs `fn` in a transaction (the current one, or a new one committed at its end). */
  private inTxn<T>(fn: (t: Pending) => Promise<T>): Promise<T> {
    return this.transaction(() => fn(this.txn!));
  }

  private put(t: Pending, key: ObjectKey, obj: KubeObject): KubeObject {
    const answered = withRv(obj, t.rev + 1);
    t.writes.set(etcdKey(key), { object: answered, json: encode(obj) });
    t.answered.push(answered);
    return answered;
  }

  create(key: ObjectKey, obj: KubeObject): Promise<KubeObject> {
    return this.inTxn(async (t) => {
      if (await this.exists(t, key)) throw new StorageError('AlreadyExists', `${key.resource} "${key.name}" already exists`);
      return this.put(t, key, obj);
    });
  }

  /**
   * Whether `key` holds an object, for a create. On a first attempt a key this server has never seen
   * (a generated name) is taken as absent without asking etcd: the commit's condition that its mod
   * revision is 0 checks it, as kube-apiserver's create does.
   */
  private async exists(t: Pending, key: ObjectKey): Promise<boolean> {
    const k = etcdKey(key);
    if (t.cached && !t.writes.has(k) && !this.known.has(k)) {
      if (!t.reads.has(k)) t.reads.set(k, 0);
      t.usedCache = true;
      return false;
    }
    return (await this.getRaw(key)) !== undefined;
  }

  update(key: ObjectKey, obj: KubeObject, pre?: Preconditions): Promise<KubeObject> {
    return this.inTxn(async (t) => {
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(current, pre);
      return this.write(t, key, current, obj);
    });
  }

  guaranteedUpdate(key: ObjectKey, tryUpdate: (current: KubeObject) => KubeObject | Promise<KubeObject>): Promise<KubeObject> {
    return this.inTxn(async (t) => {
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      return this.write(t, key, current, await tryUpdate(structuredClone(current)));
    });
  }

  delete(key: ObjectKey, pre?: Preconditions): Promise<KubeObject> {
    return this.inTxn(async (t) => {
      const current = await this.get(key);
      if (!current) throw new StorageError('NotFound', `${key.resource} "${key.name}" not found`);
      checkPreconditions(current, pre);
      const gone = withRv(current, t.rev + 1);
      t.writes.set(etcdKey(key), { deleted: gone });
      t.answered.push(gone);
      return gone;
    });
  }

  private write(t: Pending, key: ObjectKey, current: KubeObject, next: KubeObject): KubeObject {
    if (isDeepStrictEqual(withRv(next, Number(current.metadata.resourceVersion)), current)) return current;
    return this.put(t, key, next);
  }

  // ---- watch ----

  watch(resource: string, sinceRv: number, listener: (e: StorageEvent) => void, onEnd?: (err: StorageError) => void): WatchHandle {
    // The replay and the registration happen with no event published in between (a listener that
    // asks for currentResourceVersion must not publish events this watcher would then miss).
    const was = this.publishing;
    this.publishing = true;
    try {
      this.window.replay(resource, sinceRv, listener);
    } finally {
      this.publishing = was;
    }
    const w: Watcher = { resource, sinceRv, listener, onEnd };
    this.watchers.add(w);
    return { stop: () => this.watchers.delete(w) };
  }

  private onBatch(m: WatchBatch): void {
    if ('events' in m) {
      // A watch that reconnected resumes from its last event: what was delivered before is skipped.
      const fresh = m.events.filter((e) => e.rev > this.deliveredUpTo);
      for (const e of fresh) this.remember(e.key, e.value, e.value === undefined ? 0 : e.rev, e.rev);
      const was = this.publishing;
      this.publishing = true;
      try {
        for (const e of fresh) for (const se of toStorageEvents(e)) this.publish(se);
      } finally {
        this.publishing = was;
      }
      this.skipForeign();
    } else if ('gap' in m) {
      // Events were compacted away while the watch was disconnected: no watch can resume before the gap,
      // and every watch open now missed them: each is ended (its user lists again), as kube's cacher
      // ends its watchers when its own watch of etcd is compacted. The events in the gap will never
      // come: the store has passed them.
      this.window.droppedUpTo = Math.max(this.window.droppedUpTo, m.gap);
      this.deliveredUpTo = Math.max(this.deliveredUpTo, m.gap);
      process.emitWarning(m.message, 'EtcdWatchGap');
      this.endWatchers(m.message);
      this.skipForeign();
    }
  }

  /** Ends every watch (removed, `onEnd` called with Expired): they missed events that are gone. */
  private endWatchers(message: string): void {
    const ended = [...this.watchers];
    this.watchers.clear();
    for (const w of ended) {
      try {
        w.onEnd?.(new StorageError('Expired', `the watch ended: ${message}`));
      } catch {
        // A watcher's failure is the watcher's.
      }
    }
  }

  private publish(e: StorageEvent): void {
    this.window.push(e);
    this.deliveredUpTo = e.rv;
    for (const w of [...this.watchers]) {
      if (e.rv <= w.sinceRv || (w.resource !== '*' && w.resource !== e.resource)) continue;
      try {
        w.listener(e);
      } catch {
        // A watcher's failure is the watcher's: it never stops delivery to others.
      }
    }
  }

  // ---- blobs ----

  /** Stores `bytes` under `/blobs/<sha256>` in 1 MiB chunks, at once (not part of an enclosing transaction). */
  async putBlob(sha256: string, bytes: Uint8Array): Promise<void> {
    if (!/^[0-9A-Za-z]+$/.test(sha256)) throw new RangeError(`putBlob: sha256 must be a hex digest: current value is ${JSON.stringify(sha256)}`);
    this.wroteOutside(await this.call('putBlob', () => this.kv.putBlob(sha256, bytes)));
  }

  async getBlob(sha256: string): Promise<Uint8Array | undefined> {
    if (!/^[0-9A-Za-z]+$/.test(sha256)) return undefined;
    return this.call('getBlob', () => this.kv.getBlob(sha256));
  }

  /** Compacts etcd's history up to `revision` (what the schedule does; for operators and tests). */
  async compact(revision: number): Promise<void> {
    await this.call('compact', () => this.client.kv.compact({ revision, physical: true }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopCompaction();
    this.watchers.clear();
    // A start still under way ends first (its watch is then closed with the client).
    await this.ready.catch(() => {});
    this.stopCompaction();
    this.registryWatch.close();
    this.client.close();
  }
}

/** The commit conditions of `t`: every key read has its mod revision, no key of a range listed changed. */
function conditions(t: Pending): Cond[] {
  const conds: Cond[] = [...t.reads].map(([key, mod]) => ({ key, cmp: 'eq' as const, mod }));
  for (const r of t.ranges) conds.push({ key: r.prefix, end: prefixEnd(r.prefix), cmp: 'lt', mod: r.rev + 1 });
  return conds;
}

/** Rows in `(namespace, name)` order, as the interface promises (etcd's byte order differs around `-`). */
function sortRows(rows: Row[]): Row[] {
  const keyed = rows.map((r) => {
    const k = parseKey(r.key);
    return { r, ns: k?.namespace ?? '', name: k?.name ?? r.key };
  });
  keyed.sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return keyed.map((k) => k.r);
}

/** The Storage events of one etcd event. */
function toStorageEvents(e: WireEvent): StorageEvent[] {
  const key = parseKey(e.key);
  if (!key) return [];
  const previous = e.prev === undefined ? undefined : (JSON.parse(e.prev) as KubeObject);
  if (e.value === undefined) {
    const object = previous ? withRv(previous, e.rev) : { metadata: { name: key.name, namespace: key.namespace || undefined, resourceVersion: String(e.rev) } };
    return [{ type: 'DELETED', ...key, rv: e.rev, object, previous }];
  }
  const object = JSON.parse(e.value) as KubeObject;
  if (e.created || !previous) return [{ type: 'ADDED', ...key, rv: e.rev, object }];
  if (previous.metadata.uid !== undefined && previous.metadata.uid !== object.metadata.uid) {
    return [
      { type: 'DELETED', ...key, rv: e.rev, object: withRv(previous, e.rev), previous },
      { type: 'ADDED', ...key, rv: e.rev, object },
    ];
  }
  return [{ type: 'MODIFIED', ...key, rv: e.rev, object, previous }];
}
