/**
 * `Registry`: the verbs on stored resources, applying each resource's strategy in a fixed order
 * (STYLE.md §5.7): prepare (defaults, status kept apart), validate (pure), then one storage write.
 * Graceful deletion, finalizers and delete propagation live here; the garbage collector and the
 * namespace finalizer (gc.ts) carry out what deletion leaves to them.
 */
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { ApiError, alreadyExists, badRequest, conflict, invalid, notFound } from '../errors.ts';
import { type KubeObject, type ObjectKey, type Preconditions, type Storage, StorageError } from '../storage/index.ts';
import { checkBodyShape, type FieldValidation, normalizeMeta, randomSuffix, timestamp, validateCommon, withTypeMeta } from './meta.ts';
import { managedFieldsForCreate, serverSideApply } from './apply.ts';
import { jsonPatch, mergePatch, strategicMergePatch } from './patch.ts';
import { type FieldRequirement, parseFieldSelector, parseLabelSelector } from './selectors.ts';
import { type ResourceDef, type StrategyContext, apiVersionOf, storageKey } from './types.ts';
import { rec } from './util.ts';

/** Options every write takes. */
export interface WriteOptions {
  dryRun?: boolean;
  fieldValidation?: FieldValidation;
  fieldManager?: string;
  /** Collects warnings for the `Warning` response header. */
  warnings?: string[];
  /** managedFields of an object created by server-side apply. */
  managedFields?: unknown[];
  /**
   * The request's own admission (RBAC's escalation check), called inside the write with the object to be
   * stored and, on update and patch, the stored one; may throw an ApiError.
   */
  admit?: (obj: KubeObject, old?: KubeObject) => void | Promise<void>;
}

/** The patch content types. */
export type PatchType = 'merge' | 'strategic' | 'json' | 'apply';

/** `metav1.DeleteOptions`, the fields the server honours. */
export interface DeleteOptions {
  gracePeriodSeconds?: number;
  propagationPolicy?: 'Orphan' | 'Background' | 'Foreground';
  preconditions?: Preconditions;
  dryRun?: boolean;
  orphanDependents?: boolean;
}

/** What list and watch filter on. */
export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
}

/** The result of a delete: `deleted` false when the object stays (graceful deletion, finalizers). */
export interface DeleteResult {
  object: KubeObject;
  deleted: boolean;
}

/** Hooks other parts of the server plug into the registry (image resolution, data dropped with a Checkpoint). */
export interface RegistryHooks {
  /** Admission on create, after defaults and before validation; may mutate or throw an ApiError. */
  admitCreate?(def: ResourceDef, obj: KubeObject): void | Promise<void>;
  /** Called after an object is removed from storage (not on dry runs). */
  afterDelete?(def: ResourceDef, obj: KubeObject): void;
}

/** The finalizers the server itself carries out. */
export const FINALIZER_ORPHAN = 'orphan';
export const FINALIZER_FOREGROUND = 'foregroundDeletion';

/** Stored JSON text (an object without apiVersion/kind) with apiVersion and kind in front. */
function withTypeMetaJson(def: ResourceDef, raw: string): string {
  return `{"apiVersion":"${apiVersionOf(def)}","kind":"${def.kind}",${raw.slice(1)}`;
}

/**
 * The kinds kube-apiserver gives no `metadata.generation`, by `group/Kind`: their strategies'
 * PrepareForCreate does not set it (objects without a spec a controller works towards: ConfigMap,
 * Secret, ServiceAccount, Endpoints, both Events, Lease; and Service, Node and Namespace, whose
 * strategies do not count their spec either). Every other kind has one (1 at create, one more at each
 * change of what is neither metadata nor status): Deployment, ReplicaSet, DaemonSet, Job, CronJob,
 * ReplicationController, PodDisruptionBudget, EndpointSlice, Pod (as Kubernetes 1.33+) and Kube32's own.
 */
const WITHOUT_GENERATION = new Set([
  '/ConfigMap',
  '/Secret',
  '/ServiceAccount',
  '/Endpoints',
  '/Event',
  'events.k8s.io/Event',
  'coordination.k8s.io/Lease',
  'apps/ControllerRevision',
  '/Service',
  '/Node',
  '/Namespace',
  'rbac.authorization.k8s.io/Role',
  'rbac.authorization.k8s.io/ClusterRole',
  'rbac.authorization.k8s.io/RoleBinding',
  'rbac.authorization.k8s.io/ClusterRoleBinding',
]);

/** Whether objects of `def` carry `metadata.generation` (see WITHOUT_GENERATION). */
const hasGeneration = (def: ResourceDef): boolean => !WITHOUT_GENERATION.has(`${def.group}/${def.kind}`);

/**
 * The status kube-apiserver answers for an object created without one, by storage key: the Go zero
 * value of the kind's status struct as `encoding/json` writes it (fields without `omitempty` appear,
 * so `{}` for a Deployment, `{replicas: 0}` for a ReplicaSet). Clients read `status.availableReplicas`
 * of a Deployment they just created. Pods, Services and Namespaces get theirs from their strategy;
 * Kube32's own kinds (as custom resources would) get none.
 */
const STATUS_ON_CREATE: Record<string, Record<string, unknown>> = {
  'deployments.apps': {},
  'replicasets.apps': { replicas: 0 },
  'statefulsets.apps': { replicas: 0, availableReplicas: 0 },
  resourcequotas: {},
  'daemonsets.apps': { currentNumberScheduled: 0, numberMisscheduled: 0, desiredNumberScheduled: 0, numberReady: 0 },
  'jobs.batch': {},
  'cronjobs.batch': {},
  'poddisruptionbudgets.policy': { disruptionsAllowed: 0, currentHealthy: 0, desiredHealthy: 0, expectedPods: 0 },
  nodes: {
    daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
    nodeInfo: { machineID: '', systemUUID: '', bootID: '', kernelVersion: '', osImage: '', containerRuntimeVersion: '', kubeletVersion: '', kubeProxyVersion: '', operatingSystem: '', architecture: '' },
  },
};

function keyOf(def: ResourceDef, namespace: string, name: string): ObjectKey {
  return { resource: storageKey(def), namespace: def.namespaced ? namespace : '', name };
}

function mapStorageError(def: ResourceDef, name: string, err: unknown): unknown {
  if (!(err instanceof StorageError)) return err;
  switch (err.code) {
    case 'NotFound':
      return notFound(def.plural, def.group, name);
    case 'AlreadyExists':
      return alreadyExists(def.plural, def.group, name);
    case 'Conflict':
      return conflict(def.plural, def.group, name, err.message);
    case 'Expired':
      return new ApiError('Expired', err.message);
  }
}

/** The verbs, over one storage. */
export class Registry {
  readonly storage: Storage;
  readonly hooks: RegistryHooks;
  /** The clock; tests may replace it. */
  now: () => Date = () => new Date();
  /** Uids of pods removed by a one-write replacement (a move), which the garbage collector leaves alone. */
  readonly replacedUids = new Set<string>();
  /**
   * Who names an owner uid in its ownerReferences (keys `resource/namespace/name`), kept from the
   * store's events by the garbage collector (gc.ts), which sets it when it starts; undefined without
   * one. Lets a move find the moved pod's dependents without reading every object of its namespace.
   */
  ownerIndex: { dependentsOf(uid: string): ReadonlySet<string> } | undefined;

  constructor(storage: Storage, hooks: RegistryHooks = {}) {
    this.storage = storage;
    this.hooks = hooks;
  }

  private ctx(): StrategyContext {
    return { now: this.now(), list: async (resource, ns) => (await this.storage.list(resource, ns)).items };
  }

  /**
   * Reads one object.
   * @throws ApiError NotFound
   */
  async get(def: ResourceDef, namespace: string, name: string): Promise<KubeObject> {
    const obj = await this.storage.get(keyOf(def, namespace, name));
    if (!obj) throw notFound(def.plural, def.group, name);
    return withTypeMeta(def, obj);
  }

  /**
   * One object as JSON text with apiVersion and kind, straight from the store (no parse, no
   * stringify): the answer of a plain GET.
   * @throws ApiError NotFound
   */
  async getJson(def: ResourceDef, namespace: string, name: string): Promise<string> {
    const raw = await this.storage.getRaw(keyOf(def, namespace, name));
    if (raw === undefined) throw notFound(def.plural, def.group, name);
    return withTypeMetaJson(def, raw);
  }

  /**
   * A list answer as JSON text (`<Kind>List`), filtered and paged like `list`; rows are copied
   * from the store as text.
   * @throws ApiError BadRequest for bad selectors or a bad continue token
   */
  async listJson(def: ResourceDef, namespace: string | undefined, opts: ListOptions = {}): Promise<string> {
    if (opts.labelSelector || opts.fieldSelector || opts.limit || opts.continue) {
      const l = await this.list(def, namespace, opts);
      const metadata: Record<string, unknown> = { resourceVersion: l.resourceVersion };
      if (l.continue) metadata.continue = l.continue;
      if (l.remainingItemCount !== undefined) metadata.remainingItemCount = l.remainingItemCount;
      return JSON.stringify({ kind: def.listKind, apiVersion: apiVersionOf(def), metadata, items: l.items });
    }
    const { rows, resourceVersion } = await this.storage.listRaw(storageKey(def), def.namespaced ? namespace : undefined);
    return `{"kind":"${def.listKind}","apiVersion":"${apiVersionOf(def)}","metadata":{"resourceVersion":"${resourceVersion}"},"items":[${rows.map((r) => withTypeMetaJson(def, r)).join(',')}]}`;
  }

  /** Reads one object or undefined. */
  async find(def: ResourceDef, namespace: string, name: string): Promise<KubeObject | undefined> {
    const obj = await this.storage.get(keyOf(def, namespace, name));
    return obj ? withTypeMeta(def, obj) : undefined;
  }

  /**
   * A compiled filter of label and field selectors for `def`.
   * @throws ApiError BadRequest for a selector that does not parse or names an unsupported field
   */
  matcher(def: ResourceDef, opts: ListOptions): (obj: KubeObject) => boolean {
    const labels = opts.labelSelector ? parseLabelSelector(opts.labelSelector) : undefined;
    const fields: FieldRequirement[] = opts.fieldSelector ? parseFieldSelector(opts.fieldSelector) : [];
    const readers = fields.map((f) => {
      let read: ((o: KubeObject) => string | undefined) | undefined;
      if (f.field === 'metadata.name') read = (o) => o.metadata.name;
      else if (f.field === 'metadata.namespace') read = (o) => o.metadata.namespace ?? '';
      else read = def.fieldSelectors?.[f.field];
      if (!read) throw badRequest(`field label not supported: ${f.field}`);
      return { ...f, read };
    });
    return (obj) => {
      if (labels && !labels(obj.metadata.labels ?? {})) return false;
      for (const f of readers) {
        const v = f.read(obj) ?? '';
        if ((v === f.value) !== (f.op === '=')) return false;
      }
      return true;
    };
  }

  /**
   * Lists objects, filtered, optionally paged (`limit`, `continue`: an opaque token of the last name).
   * @throws ApiError BadRequest for bad selectors or a bad continue token
   */
  async list(def: ResourceDef, namespace: string | undefined, opts: ListOptions = {}): Promise<{ items: KubeObject[]; resourceVersion: string; continue?: string; remainingItemCount?: number }> {
    const match = this.matcher(def, opts);
    const { items, resourceVersion } = await this.storage.list(storageKey(def), def.namespaced ? namespace : undefined);
    let filtered = items.filter(match);
    let after: string | undefined;
    if (opts.continue) {
      try {
        const tok = JSON.parse(Buffer.from(opts.continue, 'base64url').toString()) as { start: string };
        after = String(tok.start);
      } catch {
        throw badRequest('continue key is not valid: illegal base64 data');
      }
      filtered = filtered.filter((o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}` > after!);
    }
    const out: { items: KubeObject[]; resourceVersion: string; continue?: string; remainingItemCount?: number } = { items: filtered, resourceVersion: String(resourceVersion) };
    if (opts.limit && opts.limit > 0 && filtered.length > opts.limit) {
      out.items = filtered.slice(0, opts.limit);
      const last = out.items[out.items.length - 1]!;
      out.continue = Buffer.from(JSON.stringify({ rv: resourceVersion, start: `${last.metadata.namespace ?? ''}/${last.metadata.name}` })).toString('base64url');
      out.remainingItemCount = filtered.length - opts.limit;
    }
    out.items = out.items.map((o) => withTypeMeta(def, o));
    return out;
  }

  private async checkNamespace(def: ResourceDef, namespace: string): Promise<void> {
    if (!def.namespaced) return;
    const ns = await this.storage.get({ resource: 'namespaces', namespace: '', name: namespace });
    if (!ns) throw notFound('namespaces', '', namespace);
    if (ns.metadata.deletionTimestamp) {
      throw new ApiError('Forbidden', `${def.plural} "${''}" is forbidden: unable to create new content in namespace ${namespace} because it is being terminated`, {
        kind: def.plural,
        group: def.group || undefined,
      });
    }
  }

  /**
   * Creates an object (POST). Status is dropped (the strategy sets the initial one), the server sets
   * uid, creationTimestamp, generation (1; none for the kinds kube-apiserver gives none, WITHOUT_GENERATION)
   * and resourceVersion; `generateName` gets a random suffix.
   * @throws ApiError BadRequest (shape), Invalid, AlreadyExists, NotFound (namespace), Forbidden (namespace terminating)
   */
  async create(def: ResourceDef, namespace: string, body: unknown, opts: WriteOptions = {}): Promise<KubeObject> {
    const warnings = checkBodyShape(def, body, opts.fieldValidation ?? 'Ignore');
    opts.warnings?.push(...warnings);
    const obj = structuredClone(body) as KubeObject;
    obj.metadata = { ...(obj.metadata ?? {}) };
    const m = obj.metadata;
    const shape = validateCommon(obj);
    if (shape.length) throw invalid(def.kind, def.group, typeof m.name === 'string' ? m.name : '', shape);
    if (def.namespaced) {
      if (m.namespace && m.namespace !== namespace) throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      m.namespace = namespace;
    } else delete m.namespace;
    if (!m.name && m.generateName) m.name = `${m.generateName}${randomSuffix()}`;
    const now = this.now();
    m.uid = randomUUID();
    m.creationTimestamp = timestamp(now);
    if (hasGeneration(def)) m.generation = 1;
    else delete m.generation;
    delete m.resourceVersion;
    delete m.deletionTimestamp;
    delete m.deletionGracePeriodSeconds;
    delete m.selfLink;
    delete m.managedFields;
    if (opts.managedFields) m.managedFields = opts.managedFields;
    if (def.hasStatus) delete obj.status;
    normalizeMeta(obj);
    // Defaults, admission and validation, in this order; done inside the write's transaction below, so
    // that what admission reads (the Module a pod names) is read with it: on etcd that read then costs no
    // round trip of its own and the commit checks it (docs/control-plane-performance.md).
    const admit = async (target: KubeObject): Promise<void> => {
      def.prepareForCreate?.(target, this.ctx());
      const zero = def.hasStatus && target.status === undefined ? STATUS_ON_CREATE[storageKey(def)] : undefined;
      if (zero) target.status = structuredClone(zero);
      await this.hooks.admitCreate?.(def, target);
      await opts.admit?.(target);
      const causes = def.validate?.(target) ?? [];
      if (causes.length) throw invalid(def.kind, def.group, m.name ?? m.generateName ?? '', causes);
      delete target.apiVersion;
      delete target.kind;
    };
    if (opts.dryRun) {
      await admit(obj);
      await this.checkNamespace(def, namespace);
      if (await this.storage.get(keyOf(def, namespace, m.name!))) throw alreadyExists(def.plural, def.group, m.name!);
      const allocated = (await def.allocate?.(obj, this.ctx())) ?? [];
      if (allocated.length) throw invalid(def.kind, def.group, m.name!, allocated);
      return withTypeMeta(def, obj);
    }
    try {
      const stored = await this.storage.transaction(async () => {
        // A fresh copy at each attempt (a transaction may run again).
        const toStore = structuredClone(obj);
        await admit(toStore);
        await this.checkNamespace(def, namespace);
        // Allocations read and write in the same transaction: two API servers never hand out one value.
        const allocated = (await def.allocate?.(toStore, this.ctx())) ?? [];
        if (allocated.length) throw invalid(def.kind, def.group, m.name!, allocated);
        return await this.storage.create(keyOf(def, namespace, m.name!), toStore);
      });
      return withTypeMeta(def, stored);
    } catch (err: unknown) {
      throw mapStorageError(def, m.name!, err);
    }
  }

  /**
   * Computes the next state of an object from a client's full object (PUT) for the main resource
   * or a subresource (`status`): the main resource keeps the stored status, `status` keeps
   * everything but status; server-owned metadata always stays. Pure but for the strategy's context.
   * @throws ApiError BadRequest, Invalid, Conflict (stale resourceVersion)
   */
  private nextState(def: ResourceDef, current: KubeObject, body: KubeObject, sub: 'status' | undefined, keepManagedFields = false): KubeObject {
    const name = current.metadata.name!;
    const rv = body.metadata?.resourceVersion;
    if (rv !== undefined && rv !== '' && rv !== current.metadata.resourceVersion) {
      throw conflict(def.plural, def.group, name, 'the object has been modified; please apply your changes to the latest version and try again');
    }
    if (body.metadata?.uid && body.metadata.uid !== current.metadata.uid) {
      throw conflict(def.plural, def.group, name, `Precondition failed: UID in precondition: ${body.metadata.uid}, UID in object meta: ${current.metadata.uid}`);
    }
    const shape = validateCommon({ ...body, metadata: body.metadata ?? {} });
    if (shape.length) throw invalid(def.kind, def.group, name, shape);
    if (body.metadata?.name && body.metadata.name !== name) throw badRequest(`the name of the object (${body.metadata.name}) does not match the name on the URL (${name})`);
    let next: KubeObject;
    if (sub === 'status') {
      next = structuredClone(current);
      if (body.status === undefined) delete next.status;
      else next.status = structuredClone(body.status);
    } else {
      next = structuredClone(body);
      next.metadata = { ...(body.metadata ?? {}) };
      for (const k of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'namespace', 'name', 'generation'] as const) {
        if (current.metadata[k] === undefined) delete next.metadata[k];
        else (next.metadata as Record<string, unknown>)[k] = current.metadata[k];
      }
      // managedFields are the server's: an apply computes them (kept from the patched object), other writes keep them.
      if (!keepManagedFields) {
        if (current.metadata.managedFields === undefined) delete next.metadata.managedFields;
        else next.metadata.managedFields = current.metadata.managedFields;
      }
      delete next.metadata.selfLink;
      if (def.hasStatus) {
        if (current.status === undefined) delete next.status;
        else next.status = structuredClone(current.status);
      }
      def.prepareForUpdate?.(next, current, this.ctx());
      // Finalizers may be removed but not added once deletion began.
      if (current.metadata.deletionTimestamp) {
        const had = new Set(current.metadata.finalizers ?? []);
        const added = (next.metadata.finalizers ?? []).filter((f) => !had.has(f));
        if (added.length) throw invalid(def.kind, def.group, name, [{ reason: 'FieldValueForbidden', message: `Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`, field: 'metadata.finalizers' }]);
      }
      const specOf = (o: KubeObject) => Object.fromEntries(Object.entries(o).filter(([k]) => k !== 'metadata' && k !== 'status' && k !== 'apiVersion' && k !== 'kind'));
      // A kind without generation loses one stored before it had none (Kube32 before 2026-11 gave every object one).
      if (!hasGeneration(def)) delete next.metadata.generation;
      else if (!isDeepStrictEqual(specOf(next), specOf(current))) next.metadata.generation = (current.metadata.generation ?? 1) + 1;
    }
    delete next.apiVersion;
    delete next.kind;
    normalizeMeta(next);
    next.metadata.resourceVersion = current.metadata.resourceVersion;
    const causes = def.validate?.(next, current) ?? [];
    if (causes.length) throw invalid(def.kind, def.group, name, causes);
    return next;
  }

  /** Removes an object whose deletion is complete (no finalizers left, grace over) after an update. */
  private async finishIfDone(def: ResourceDef, key: ObjectKey, obj: KubeObject): Promise<{ object: KubeObject; deleted: boolean }> {
    const m = obj.metadata;
    if (m.deletionTimestamp && (m.finalizers ?? []).length === 0 && (m.deletionGracePeriodSeconds ?? 0) === 0) {
      const gone = await this.storage.delete(key, { uid: m.uid });
      this.hooks.afterDelete?.(def, gone);
      return { object: gone, deleted: true };
    }
    return { object: obj, deleted: false };
  }

  /**
   * Replaces an object (PUT) or its status (`sub = 'status'`).
   * @throws ApiError NotFound, Conflict, Invalid, BadRequest
   */
  async update(def: ResourceDef, namespace: string, name: string, body: unknown, opts: WriteOptions = {}, sub?: 'status'): Promise<KubeObject> {
    const warnings = checkBodyShape(def, body, opts.fieldValidation ?? 'Ignore');
    opts.warnings?.push(...warnings);
    const key = keyOf(def, namespace, name);
    try {
      return await this.storage.transaction(async () => {
        const current = await this.storage.get(key);
        if (!current) throw notFound(def.plural, def.group, name);
        const next = this.nextState(def, current, body as KubeObject, sub);
        await opts.admit?.(next, current);
        if (opts.dryRun) return withTypeMeta(def, next);
        const stored = await this.storage.update(key, next, { resourceVersion: current.metadata.resourceVersion });
        return withTypeMeta(def, (await this.finishIfDone(def, key, stored)).object);
      });
    } catch (err: unknown) {
      throw mapStorageError(def, name, err);
    }
  }

  /**
   * Patches an object or its status. `apply` (server-side apply) creates the object when missing and
   * otherwise merges the applied configuration like a strategic merge patch.
   * @returns the object and whether it was created (201)
   * @throws ApiError NotFound, Conflict, Invalid, BadRequest, UnsupportedMediaType
   */
  async patch(def: ResourceDef, namespace: string, name: string, type: PatchType, patch: unknown, opts: WriteOptions = {}, sub?: 'status'): Promise<{ object: KubeObject; created: boolean }> {
    const key = keyOf(def, namespace, name);
    if (type !== 'json' && (patch === null || typeof patch !== 'object' || Array.isArray(patch))) throw badRequest('the patch must be a JSON object');
    try {
      return await this.storage.transaction(async () => {
        const current = await this.storage.get(key);
        if (!current) {
          if (type === 'apply' && sub === undefined) {
            const body = structuredClone(patch) as KubeObject;
            body.metadata = { ...(body.metadata ?? {}), name };
            if (!opts.fieldManager) throw badRequest('PATCH of type apply requires a fieldManager');
            const managedFields = managedFieldsForCreate(patch as Record<string, unknown>, opts.fieldManager, apiVersionOf(def), this.now());
            return { object: await this.create(def, namespace, body, { ...opts, managedFields }), created: true };
          }
          throw notFound(def.plural, def.group, name);
        }
        if (type === 'apply') checkBodyShape(def, patch, opts.fieldValidation ?? 'Strict');
        const base = withTypeMeta(def, current);
        let patched: unknown;
        switch (type) {
          case 'merge':
            patched = mergePatch(base, patch);
            break;
          case 'json':
            patched = jsonPatch(base, patch);
            break;
          case 'strategic':
            if (def.group === 'kube32.io') {
              throw new ApiError('UnsupportedMediaType', 'the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml');
            }
            patched = strategicMergePatch(base, patch);
            break;
          case 'apply':
            patched = serverSideApply(base, patch as Record<string, unknown>, opts.fieldManager ?? 'unknown', apiVersionOf(def), this.now());
            break;
        }
        const p = rec(patched) as KubeObject;
        if (!p.metadata || typeof p.metadata !== 'object') throw badRequest('the patched object has no metadata');
        // A patch never carries a stale resourceVersion unless the client put one in it on purpose.
        const patchRv = rec(rec(patch).metadata).resourceVersion;
        p.metadata.resourceVersion = typeof patchRv === 'string' ? patchRv : current.metadata.resourceVersion;
        // Strict validation looks at what the client sent (the patch), as Kubernetes does, not at fields already stored.
        if (type === 'merge' || type === 'strategic') opts.warnings?.push(...checkBodyShape(def, patch, opts.fieldValidation ?? 'Ignore'));
        else if (type === 'json') checkBodyShape(def, p, 'Ignore');
        const next = this.nextState(def, current, p, sub, type === 'apply');
        await opts.admit?.(next, current);
        if (opts.dryRun) return { object: withTypeMeta(def, next), created: false };
        const stored = await this.storage.update(key, next, { resourceVersion: current.metadata.resourceVersion });
        return { object: withTypeMeta(def, (await this.finishIfDone(def, key, stored)).object), created: false };
      });
    } catch (err: unknown) {
      throw mapStorageError(def, name, err);
    }
  }

  /**
   * Deletes an object. With a grace period (pods bound to a node) or finalizers it is only marked
   * (`deletionTimestamp`) and stays until the kubelet or the finalizers' owners finish.
   * @throws ApiError NotFound, Conflict (preconditions), Forbidden (protected namespaces)
   */
  async delete(def: ResourceDef, namespace: string, name: string, options: DeleteOptions = {}): Promise<DeleteResult> {
    const key = keyOf(def, namespace, name);
    if (def.plural === 'namespaces' && def.group === '' && ['default', 'kube-system', 'kube-public'].includes(name)) {
      throw new ApiError('Forbidden', `namespaces "${name}" is forbidden: this namespace may not be deleted`, { name, kind: 'namespaces' });
    }
    const policy = options.propagationPolicy ?? (options.orphanDependents ? 'Orphan' : 'Background');
    if (!['Orphan', 'Background', 'Foreground'].includes(policy)) {
      throw invalid('DeleteOptions', '', '', [{ reason: 'FieldValueNotSupported', message: `Unsupported value: "${policy}": supported values: "Foreground", "Background", "Orphan"`, field: 'propagationPolicy' }]);
    }
    try {
      return await this.storage.transaction(async () => {
        const current = await this.storage.get(key);
        if (!current) throw notFound(def.plural, def.group, name);
        const pre = options.preconditions;
        if (pre?.uid && pre.uid !== current.metadata.uid) {
          throw conflict(def.plural, def.group, name, `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`);
        }
        if (pre?.resourceVersion && pre.resourceVersion !== current.metadata.resourceVersion) {
          throw conflict(def.plural, def.group, name, `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`);
        }
        const now = this.now();
        const finalizers = [...(current.metadata.finalizers ?? [])];
        if (policy === 'Orphan' && !finalizers.includes(FINALIZER_ORPHAN) && !current.metadata.deletionTimestamp) finalizers.push(FINALIZER_ORPHAN);
        if (policy === 'Foreground' && !finalizers.includes(FINALIZER_FOREGROUND) && !current.metadata.deletionTimestamp) finalizers.push(FINALIZER_FOREGROUND);
        const defaultGrace = def.gracePeriod?.(current);
        let grace = options.gracePeriodSeconds ?? defaultGrace ?? 0;
        if (defaultGrace === 0) grace = 0;
        if (grace < 0) grace = 0;
        const isNamespace = def.plural === 'namespaces' && def.group === '';
        const marks = finalizers.length > 0 || grace > 0 || isNamespace;
        if (!marks) {
          if (options.dryRun) return { object: withTypeMeta(def, current), deleted: true };
          const gone = await this.storage.delete(key, { uid: current.metadata.uid });
          this.hooks.afterDelete?.(def, gone);
          return { object: withTypeMeta(def, gone), deleted: true };
        }
        const next = structuredClone(current);
        const m = next.metadata;
        if (!m.deletionTimestamp) {
          m.deletionTimestamp = timestamp(new Date(now.getTime() + grace * 1000));
          m.deletionGracePeriodSeconds = grace;
        } else if (grace < (m.deletionGracePeriodSeconds ?? 0)) {
          // A shorter grace period shortens a pending graceful deletion (the kubelet's grace 0 ends it).
          m.deletionTimestamp = timestamp(new Date(now.getTime() + grace * 1000));
          m.deletionGracePeriodSeconds = grace;
        }
        m.finalizers = finalizers;
        if (finalizers.length === 0) delete m.finalizers;
        if (isNamespace) next.status = { ...rec(next.status), phase: 'Terminating' };
        if (options.dryRun) return { object: withTypeMeta(def, next), deleted: false };
        const stored = await this.storage.update(key, next);
        if (!isNamespace) {
          const done = await this.finishIfDone(def, key, stored);
          return { object: withTypeMeta(def, done.object), deleted: done.deleted };
        }
        return { object: withTypeMeta(def, stored), deleted: false };
      });
    } catch (err: unknown) {
      throw mapStorageError(def, name, err);
    }
  }

  /**
   * Deletes every object a list with `opts` selects (deletecollection); answers those deleted or marked.
   * @throws ApiError BadRequest for bad selectors
   */
  async deleteCollection(def: ResourceDef, namespace: string | undefined, opts: ListOptions, options: DeleteOptions = {}): Promise<KubeObject[]> {
    const { items } = await this.list(def, namespace, { labelSelector: opts.labelSelector, fieldSelector: opts.fieldSelector });
    const out: KubeObject[] = [];
    for (const o of items) {
      try {
        out.push((await this.delete(def, o.metadata.namespace ?? '', o.metadata.name!, options)).object);
      } catch (err: unknown) {
        if (!(err instanceof ApiError && err.reason === 'NotFound')) throw err;
      }
    }
    return out;
  }

  /**
   * Writes an object as the server itself (controllers inside the API server: GC, eviction):
   * `mutate(current)` on the latest version, retried by the storage transaction.
   * @throws ApiError NotFound
   */
  async serverUpdate(def: ResourceDef, namespace: string, name: string, mutate: (o: KubeObject) => KubeObject | Promise<KubeObject>): Promise<KubeObject> {
    const key = keyOf(def, namespace, name);
    try {
      return await this.storage.transaction(async () => {
        const stored = await this.storage.guaranteedUpdate(key, mutate);
        return withTypeMeta(def, (await this.finishIfDone(def, key, stored)).object);
      });
    } catch (err: unknown) {
      throw mapStorageError(def, name, err);
    }
  }

  /** The storage key of `def` at `namespace/name` (for the pods' one-write replacement and the GC). */
  keyOf(def: ResourceDef, namespace: string, name: string): ObjectKey {
    return keyOf(def, namespace, name);
  }
}
