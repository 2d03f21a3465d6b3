/**
 * The garbage collector and the namespace finalizer, run inside the API server on the store's
 * events:
 * - an object whose owners (ownerReferences, by uid) are all gone is deleted (background
 *   propagation); an owner deleted with `Foreground` keeps its `foregroundDeletion` finalizer until
 *   its dependents are gone; with `Orphan`, its dependents lose the reference and the `orphan`
 *   finalizer goes;
 * - a namespace being deleted has its content deleted, then goes itself.
 * Pods replaced by a move (`replacedUids`) are not owners that went away.
 * Work is queued by key and done in order, off the request path; a sweep at start catches what a
 * restart missed.
 */
import { Backoff, type Logger } from '../../lib/index.ts';
import { ApiError } from '../errors.ts';
import type { KubeObject, StorageEvent, WatchHandle } from '../storage/index.ts';
import { RESOURCES, resourceByKey } from './catalog.ts';
import { EventExpiry } from './event-expiry.ts';
import { FINALIZER_FOREGROUND, FINALIZER_ORPHAN, type Registry } from './store.ts';
import { type ResourceDef, storageKey } from './types.ts';

const NONE: ReadonlySet<string> = new Set();

type Task = { kind: 'owner'; resource: string; namespace: string; name: string; uid: string } | { kind: 'orphans'; namespace: string | undefined } | { kind: 'namespace'; name: string };

/** Runs the garbage collector and namespace finalizer until `stop()`. */
export class GarbageCollector {
  private readonly reg: Registry;
  private readonly log: Logger;
  private readonly queue: Task[] = [];
  private readonly queued = new Set<string>();
  private handle: WatchHandle | undefined;
  private scheduled = false;
  private idleWaiters: (() => void)[] = [];
  private expiry: EventExpiry | undefined;
  /** Owner uid → keys (`resource/namespace/name`) of the objects that name it, kept from the store's events. */
  private readonly owned = new Map<string, Set<string>>();

  constructor(reg: Registry, log: Logger) {
    this.reg = reg;
    this.log = log;
  }

  /**
   * Subscribes to the store and sweeps once; with `eventTtlMs`, deletes each core event once its last
   * occurrence is older than that, at its due time (Kubernetes keeps events for 1 h; `EventExpiry`: a heap
   * of due times fed from the same watch, not a scan of every event).
   */
  async start(eventTtlMs?: number): Promise<void> {
    this.reg.ownerIndex = this;
    if (eventTtlMs !== undefined && eventTtlMs > 0) this.expiry = new EventExpiry(this.reg.storage, eventTtlMs, this.log, () => this.reg.now().getTime());
    await this.subscribe();
  }

  /** Times the store ended the collector's watch and it listed everything again. */
  relists = 0;
  private stopped = false;

  /**
   * Watches every resource, lists them all, and sweeps. The watch comes before the lists (their reads are
   * asynchronous): what changes meanwhile is replayed after them, so the index ends at the store's state.
   * The index and the events' due times are replaced by the lists' at once (no reader sees them empty).
   */
  private async subscribe(): Promise<void> {
    const rv = this.reg.storage.currentResourceVersion();
    const replay: StorageEvent[] = [];
    let listed = false;
    this.handle = this.reg.storage.watch('*', rv, (e) => {
      if (!listed) {
        replay.push(e);
        return;
      }
      this.observe(e);
    }, (err) => this.onWatchEnd(err));
    const listedItems = await Promise.all(RESOURCES.map((def) => this.reg.storage.list(storageKey(def))));
    this.owned.clear();
    this.expiry?.reset();
    const seen = new Set<string>();
    RESOURCES.forEach((def, i) => {
      const key = storageKey(def);
      // events.k8s.io Events are core Events: one storage key, listed once.
      if (seen.has(key)) return;
      seen.add(key);
      for (const o of listedItems[i]!.items) {
        this.index(key, undefined, o);
        if (key === 'events') this.expiry?.observe(o);
      }
    });
    listed = true;
    for (const e of replay.splice(0)) this.observe(e);
    this.enqueue({ kind: 'orphans', namespace: undefined });
    for (const ns of (await this.reg.storage.list('namespaces')).items) if (ns.metadata.deletionTimestamp) this.enqueue({ kind: 'namespace', name: ns.metadata.name! });
    for (const def of RESOURCES) {
      for (const o of (await this.reg.storage.list(storageKey(def))).items) {
        const f = o.metadata.finalizers ?? [];
        if (o.metadata.deletionTimestamp && (f.includes(FINALIZER_FOREGROUND) || f.includes(FINALIZER_ORPHAN))) {
          this.enqueue({ kind: 'owner', resource: storageKey(def), namespace: o.metadata.namespace ?? '', name: o.metadata.name!, uid: o.metadata.uid! });
        }
      }
    }
  }

  /**
   * The store ended the watch (etcd compacted events it had not delivered): the index and the events' due
   * times missed them, so everything is listed again and watched from there (tried again with back-off).
   */
  private onWatchEnd(err: Error): void {
    this.handle = undefined;
    if (this.stopped) return;
    this.relists++;
    this.log.warn({ err: err.message }, 'garbage collector: the store ended its watch; listing everything again');
    const backoff = new Backoff({ initialMs: 100, maxMs: 5000 });
    const again = (): void => {
      if (this.stopped) return;
      this.subscribe().catch((e: unknown) => {
        this.handle?.stop();
        this.handle = undefined;
        this.log.warn({ err: e instanceof Error ? e.message : String(e) }, 'garbage collector: listing again failed; trying again');
        setTimeout(again, backoff.next()).unref();
      });
    };
    again();
  }

  stop(): void {
    this.stopped = true;
    if (this.reg.ownerIndex === this) this.reg.ownerIndex = undefined;
    this.expiry?.stop();
    this.handle?.stop();
    this.queue.length = 0;
  }

  /** Resolves when the queue is empty (for tests). */
  idle(): Promise<void> {
    if (this.queue.length === 0 && !this.scheduled) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  /** The keys (`resource/namespace/name`) of the objects whose ownerReferences name `uid`, as the store's events last showed them. */
  dependentsOf(uid: string): ReadonlySet<string> {
    return this.owned.get(uid) ?? NONE;
  }

  /** One store event: the owner index, the event's time to live, then the collector's work. */
  private observe(e: StorageEvent): void {
    this.index(e.resource, e.previous, e.type === 'DELETED' ? undefined : e.object);
    if (e.resource === 'events') {
      if (e.type === 'DELETED') this.expiry?.forget(e.object);
      else this.expiry?.observe(e.object, this.reg.now().getTime());
    }
    this.onEvent(e).catch((err: unknown) => this.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'garbage collector: event failed'));
  }

  private index(resource: string, before: KubeObject | undefined, after: KubeObject | undefined): void {
    const o = after ?? before;
    if (!o) return;
    const key = `${resource}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    for (const r of before?.metadata.ownerReferences ?? []) this.owned.get(r.uid)?.delete(key);
    for (const r of after?.metadata.ownerReferences ?? []) {
      let set = this.owned.get(r.uid);
      if (!set) {
        set = new Set();
        this.owned.set(r.uid, set);
      }
      set.add(key);
    }
    for (const r of before?.metadata.ownerReferences ?? []) if (this.owned.get(r.uid)?.size === 0) this.owned.delete(r.uid);
  }

  private enqueue(t: Task): void {
    const k = JSON.stringify(t);
    if (this.queued.has(k)) return;
    this.queued.add(k);
    this.queue.push(t);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.drain());
    }
  }

  private async drain(): Promise<void> {
    const started = Date.now();
    while (this.queue.length > 0 && Date.now() - started < 20) {
      const t = this.queue.shift()!;
      this.queued.delete(JSON.stringify(t));
      try {
        await this.run(t);
      } catch (err: unknown) {
        if (!(err instanceof ApiError && (err.reason === 'NotFound' || err.reason === 'Conflict'))) {
          this.log.warn({ task: t, err: err instanceof Error ? err.message : String(err) }, 'garbage collector: task failed');
        }
      }
    }
    if (this.queue.length > 0) {
      setImmediate(() => void this.drain());
      return;
    }
    this.scheduled = false;
    for (const w of this.idleWaiters.splice(0)) w();
  }

  private async onEvent(e: StorageEvent): Promise<void> {
    const m = e.object.metadata;
    if (e.type === 'DELETED') {
      if (!this.reg.replacedUids.has(m.uid ?? '')) this.enqueue({ kind: 'owner', resource: e.resource, namespace: e.namespace, name: e.name, uid: m.uid! });
      else this.reg.replacedUids.delete(m.uid!);
      // A dependent gone may let a foreground owner finish; a namespace may now be empty.
      for (const ref of m.ownerReferences ?? []) {
        const def = RESOURCES.find((r) => r.kind === ref.kind && ref.apiVersion === (r.group ? `${r.group}/${r.version}` : r.version));
        if (def) this.enqueue({ kind: 'owner', resource: storageKey(def), namespace: def.namespaced ? e.namespace : '', name: ref.name, uid: ref.uid });
      }
      if (e.namespace) {
        const ns = await this.reg.storage.get({ resource: 'namespaces', namespace: '', name: e.namespace });
        if (ns?.metadata.deletionTimestamp) this.enqueue({ kind: 'namespace', name: e.namespace });
      }
      return;
    }
    if (m.deletionTimestamp) {
      if (e.resource === 'namespaces') this.enqueue({ kind: 'namespace', name: e.name });
      const f = m.finalizers ?? [];
      if (f.includes(FINALIZER_FOREGROUND) || f.includes(FINALIZER_ORPHAN)) this.enqueue({ kind: 'owner', resource: e.resource, namespace: e.namespace, name: e.name, uid: m.uid! });
    }
  }

  private async ownerAlive(ref: { apiVersion: string; kind: string; name: string; uid: string }, namespace: string): Promise<boolean> {
    const def = RESOURCES.find((r) => r.kind === ref.kind && ref.apiVersion === (r.group ? `${r.group}/${r.version}` : r.version));
    if (!def) return true; // an owner of a kind we do not serve: leave the dependent alone
    const o = await this.reg.storage.get({ resource: storageKey(def), namespace: def.namespaced ? namespace : '', name: ref.name });
    if (!o || o.metadata.uid !== ref.uid) return false;
    // An owner being deleted in the foreground still owns its dependents, but wants them gone.
    return !(o.metadata.deletionTimestamp && (o.metadata.finalizers ?? []).includes(FINALIZER_FOREGROUND));
  }

  /** Dependents of an owner uid, from the index. */
  private async dependents(uid: string): Promise<{ def: ResourceDef; obj: KubeObject }[]> {
    const out: { def: ResourceDef; obj: KubeObject }[] = [];
    for (const key of this.owned.get(uid) ?? []) {
      const [resource, namespace, ...rest] = key.split('/');
      const def = resourceByKey(resource!);
      const obj = def && await this.reg.storage.get({ resource: resource!, namespace: namespace!, name: rest.join('/') });
      if (def && obj && (obj.metadata.ownerReferences ?? []).some((r) => r.uid === uid)) out.push({ def, obj });
    }
    return out;
  }

  private async run(t: Task): Promise<void> {
    if (t.kind === 'namespace') {
      await this.finalizeNamespace(t.name);
      return;
    }
    if (t.kind === 'orphans') {
      for (const def of RESOURCES) {
        for (const obj of (await this.reg.storage.list(storageKey(def), t.namespace)).items) await this.collectIfOrphaned(def, obj);
      }
      return;
    }
    const def = resourceByKey(t.resource);
    if (!def) return;
    const owner = await this.reg.storage.get({ resource: t.resource, namespace: t.namespace, name: t.name });
    const alive = owner && owner.metadata.uid === t.uid;
    // The dependents are read (one storage get each) only when something is to be done with them: a
    // live owner without a deletion finalizer (a ReplicaSet one of whose 10 000 pods was deleted)
    // needs nothing, and reading them all on every pod's deletion stalled drains at scale.
    if (!alive) {
      for (const d of await this.dependents(t.uid)) await this.collectIfOrphaned(d.def, d.obj);
      return;
    }
    const f = owner.metadata.finalizers ?? [];
    if (!f.includes(FINALIZER_ORPHAN) && !f.includes(FINALIZER_FOREGROUND)) return;
    const deps = await this.dependents(t.uid);
    if (f.includes(FINALIZER_ORPHAN)) {
      for (const d of deps) {
        await this.reg.serverUpdate(d.def, d.obj.metadata.namespace ?? '', d.obj.metadata.name!, (o) => {
          o.metadata.ownerReferences = (o.metadata.ownerReferences ?? []).filter((r) => r.uid !== t.uid);
          if (o.metadata.ownerReferences.length === 0) delete o.metadata.ownerReferences;
          return o;
        });
      }
      await this.removeFinalizer(def, owner, FINALIZER_ORPHAN);
      return;
    }
    if (f.includes(FINALIZER_FOREGROUND)) {
      for (const d of deps) {
        if (!d.obj.metadata.deletionTimestamp) await this.deleteDependent(d.def, d.obj, 'Foreground');
      }
      if ((await this.dependents(t.uid)).length === 0) await this.removeFinalizer(def, owner, FINALIZER_FOREGROUND);
    }
  }

  private async collectIfOrphaned(def: ResourceDef, obj: KubeObject): Promise<void> {
    const refs = obj.metadata.ownerReferences ?? [];
    if (refs.length === 0 || obj.metadata.deletionTimestamp) return;
    const ns = obj.metadata.namespace ?? '';
    const aliveFlags = await Promise.all(refs.map((r) => this.ownerAlive(r, ns)));
    const alive = refs.filter((_, i) => aliveFlags[i]);
    if (alive.length > 0) {
      if (alive.length < refs.length) {
        // Drop references to owners that are gone, keep the object.
        const gone = new Set(refs.filter((r) => !alive.includes(r)).map((r) => r.uid));
        const dying = refs.some((r) => gone.has(r.uid));
        if (dying) {
          await this.reg.serverUpdate(def, ns, obj.metadata.name!, async (o) => {
            const current = o.metadata.ownerReferences ?? [];
            const keep = await Promise.all(current.map(async (r) => !gone.has(r.uid) || (await this.ownerAlive(r, ns))));
            o.metadata.ownerReferences = current.filter((_, i) => keep[i]);
            return o;
          });
        }
      }
      return;
    }
    await this.deleteDependent(def, obj, 'Background');
  }

  private async deleteDependent(def: ResourceDef, obj: KubeObject, policy: 'Background' | 'Foreground'): Promise<void> {
    this.log.debug({ resource: storageKey(def), namespace: obj.metadata.namespace, name: obj.metadata.name }, 'garbage collector: deleting dependent');
    try {
      await this.reg.delete(def, obj.metadata.namespace ?? '', obj.metadata.name!, { propagationPolicy: policy, preconditions: { uid: obj.metadata.uid } });
    } catch (err: unknown) {
      if (!(err instanceof ApiError && (err.reason === 'NotFound' || err.reason === 'Conflict'))) throw err;
    }
  }

  private async removeFinalizer(def: ResourceDef, owner: KubeObject, finalizer: string): Promise<void> {
    await this.reg.serverUpdate(def, owner.metadata.namespace ?? '', owner.metadata.name!, (o) => {
      o.metadata.finalizers = (o.metadata.finalizers ?? []).filter((f) => f !== finalizer);
      if (o.metadata.finalizers.length === 0) delete o.metadata.finalizers;
      return o;
    });
  }

  private async finalizeNamespace(name: string): Promise<void> {
    const ns = await this.reg.storage.get({ resource: 'namespaces', namespace: '', name });
    if (!ns?.metadata.deletionTimestamp) return;
    let remaining = 0;
    for (const def of RESOURCES) {
      if (!def.namespaced) continue;
      for (const obj of (await this.reg.storage.list(storageKey(def), name)).items) {
        remaining++;
        if (!obj.metadata.deletionTimestamp) {
          try {
            await this.reg.delete(def, name, obj.metadata.name!, { propagationPolicy: 'Background' });
          } catch (err: unknown) {
            if (!(err instanceof ApiError && err.reason === 'NotFound')) throw err;
          }
        }
      }
    }
    if (remaining > 0) {
      // Whatever is left is terminating; its DELETED events bring the namespace back here.
      let left = false;
      for (const d of RESOURCES) if (d.namespaced && (await this.reg.storage.list(storageKey(d), name)).items.length > 0) left = true;
      if (left) return;
    }
    try {
      await this.reg.storage.delete({ resource: 'namespaces', namespace: '', name }, { uid: ns.metadata.uid });
      this.log.info({ namespace: name }, 'namespace deleted');
    } catch {
      // gone already
    }
  }
}
