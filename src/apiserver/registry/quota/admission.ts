/**
 * The LimitRanger and ResourceQuota admission of a create, as kube-apiserver's plugins do them
 * (plugin/pkg/admission/limitranger, k8s.io/apiserver/pkg/admission/plugin/resourcequota). Both run inside
 * the create's storage transaction (the registry's `admitCreate`), so what they read of the namespace is
 * compared at commit: two API servers never both admit the last pod a quota allows.
 *
 * - LimitRanger, on pods: each `Container` item's `default` and `defaultRequest` fill the limits and requests
 *   a container lacks (the pod is annotated `kubernetes.io/limit-ranger: LimitRanger plugin set: cpu, memory
 *   request for container app; ...`), then `min`, `max` and `maxLimitRequestRatio` bound each container (a
 *   `Pod` item bounds their sums): 403 Forbidden `pods "x" is forbidden: maximum memory usage per Container is
 *   1Gi, but limit is 2Gi`.
 * - ResourceQuota, on every namespaced kind: the namespace's usage (counted afresh from storage, as the quota
 *   controller counts `status.used`) plus the object's must stay within each quota's `spec.hard`, else 403
 *   `exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2`; a quota tracking compute resources
 *   refuses a pod whose containers do not set them: `failed quota: q: must specify limits.cpu for: app`.
 */
import {
  type Amount,
  amountAtMost,
  amountOf,
  formatQuantity,
  namespaceUsage,
  quotaSources,
  objectUsage,
  podComputeUsage,
  QUOTA_COMPUTE_RESOURCES,
  quotaMatches,
} from '../../../api/index.ts';
import { ApiError } from '../../errors.ts';
import { type KubeObject, keepListed, type Storage, type WatchHandle } from '../../storage/index.ts';
import { qosClass } from '../pods/index.ts';
import type { ResourceDef } from '../types.ts';
import { storageKey } from '../types.ts';
import { arr, rec } from '../util.ts';

/** The annotation LimitRanger writes on a pod it defaulted. */
export const LIMIT_RANGER_ANNOTATION = 'kubernetes.io/limit-ranger';

function forbidden(def: ResourceDef, obj: KubeObject, why: string): ApiError {
  const name = obj.metadata.name ?? obj.metadata.generateName ?? '';
  const qualified = def.group ? `${def.plural}.${def.group}` : def.plural;
  return new ApiError('Forbidden', `${qualified} "${name}" is forbidden: ${why}`, { name, group: def.group || undefined, kind: def.plural });
}

const canonical = (q: unknown): string => {
  try {
    return formatQuantity(amountOf(q));
  } catch {
    return String(q);
  }
};

/** Kubernetes' `utilerrors.NewAggregate(errs).Error()`: one message as it is, several in brackets. */
function aggregate(errs: string[]): string {
  return errs.length === 1 ? errs[0]! : `[${errs.join(', ')}]`;
}

function minConstraint(kind: string, res: string, min: unknown, req: Record<string, unknown>, lim: Record<string, unknown>): string | undefined {
  const enforced = amountOf(min);
  if (req[res] === undefined) return `minimum ${res} usage per ${kind} is ${canonical(min)}.  No request is specified`;
  if (!amountAtMost(enforced, amountOf(req[res]))) return `minimum ${res} usage per ${kind} is ${canonical(min)}, but request is ${canonical(req[res])}`;
  if (lim[res] !== undefined && !amountAtMost(enforced, amountOf(lim[res]))) return `minimum ${res} usage per ${kind} is ${canonical(min)}, but limit is ${canonical(lim[res])}`;
  return undefined;
}

function maxConstraint(kind: string, res: string, max: unknown, req: Record<string, unknown>, lim: Record<string, unknown>): string | undefined {
  const enforced = amountOf(max);
  if (lim[res] === undefined) return `maximum ${res} usage per ${kind} is ${canonical(max)}.  No limit is specified`;
  if (!amountAtMost(amountOf(lim[res]), enforced)) return `maximum ${res} usage per ${kind} is ${canonical(max)}, but limit is ${canonical(lim[res])}`;
  if (req[res] !== undefined && !amountAtMost(amountOf(req[res]), enforced)) return `maximum ${res} usage per ${kind} is ${canonical(max)}, but request is ${canonical(req[res])}`;
  return undefined;
}

function ratioConstraint(kind: string, res: string, ratio: unknown, req: Record<string, unknown>, lim: Record<string, unknown>): string | undefined {
  if (lim[res] === undefined) return `${res} max limit to request ratio per ${kind} is ${canonical(ratio)}, but no limit is specified`;
  if (req[res] === undefined) return `${res} max limit to request ratio per ${kind} is ${canonical(ratio)}, but no request is specified or request is 0`;
  const r = amountOf(lim[res]).value / amountOf(req[res]).value;
  if (!Number.isFinite(r) || r > amountOf(ratio).value) return `${res} max limit to request ratio per ${kind} is ${canonical(ratio)}, but provided ratio is ${r.toFixed(6)}`;
  return undefined;
}

function constraints(kind: string, item: Record<string, unknown>, req: Record<string, unknown>, lim: Record<string, unknown>): string[] {
  const out: string[] = [];
  for (const [res, v] of Object.entries(rec(item.min))) out.push(minConstraint(kind, res, v, req, lim) ?? '');
  for (const [res, v] of Object.entries(rec(item.max))) out.push(maxConstraint(kind, res, v, req, lim) ?? '');
  for (const [res, v] of Object.entries(rec(item.maxLimitRequestRatio))) out.push(ratioConstraint(kind, res, v, req, lim) ?? '');
  return out.filter((m) => m !== '');
}

/**
 * Applies the namespace's LimitRanges to a new pod, in place.
 * @throws ApiError Forbidden when a container (or the pod) is outside a range
 */
export async function admitLimitRanges(storage: Storage, def: ResourceDef, obj: KubeObject): Promise<void> {
  if (storageKey(def) !== 'pods' || obj.spec === undefined) return;
  const ranges = (await storage.list('limitranges', obj.metadata.namespace)).items.filter((r) => !r.metadata.deletionTimestamp);
  if (ranges.length === 0) return;
  const spec = rec(obj.spec);
  const items = ranges.flatMap((r) => arr(rec(r.spec).limits));
  // Defaults: the first item that sets a resource wins (Kubernetes reads the ranges in order too).
  const defLimits: Record<string, unknown> = {};
  const defRequests: Record<string, unknown> = {};
  for (const item of items.filter((i) => i.type === 'Container')) {
    for (const [k, v] of Object.entries(rec(item.default))) defLimits[k] ??= v;
    for (const [k, v] of Object.entries(rec(item.defaultRequest))) defRequests[k] ??= v;
  }
  const notes: string[] = [];
  for (const [list, prefix] of [
    ['containers', 'container'],
    ['initContainers', 'init container'],
  ] as const) {
    for (const c of arr(spec[list])) {
      const resources = rec(c.resources);
      c.resources = resources;
      const limits = { ...rec(resources.limits) };
      const requests = { ...rec(resources.requests) };
      const setLimits = Object.keys(defLimits).filter((k) => limits[k] === undefined);
      const setRequests = Object.keys(defRequests).filter((k) => requests[k] === undefined);
      for (const k of setLimits) limits[k] = defLimits[k];
      for (const k of setRequests) requests[k] = defRequests[k];
      if (Object.keys(limits).length > 0) resources.limits = limits;
      if (Object.keys(requests).length > 0) resources.requests = requests;
      if (setRequests.length > 0) notes.push(`${setRequests.sort().join(', ')} request for ${prefix} ${String(c.name)}`);
      if (setLimits.length > 0) notes.push(`${setLimits.sort().join(', ')} limit for ${prefix} ${String(c.name)}`);
    }
  }
  if (notes.length > 0) {
    obj.metadata.annotations = { ...(obj.metadata.annotations ?? {}), [LIMIT_RANGER_ANNOTATION]: `LimitRanger plugin set: ${notes.join('; ')}` };
    // The QoS class follows the resources the pod now has (kube-apiserver admits before it computes it).
    obj.status = { ...rec(obj.status), qosClass: qosClass(spec) };
  }
  const errs: string[] = [];
  for (const item of items) {
    if (item.type === 'Container') {
      for (const c of [...arr(spec.containers), ...arr(spec.initContainers)]) {
        errs.push(...constraints('Container', item, rec(rec(c.resources).requests), rec(rec(c.resources).limits)));
      }
    } else if (item.type === 'Pod') {
      const usage = podComputeUsage(spec);
      const sum = (kind: 'requests' | 'limits') =>
        Object.fromEntries(
          ['cpu', 'memory']
            .map((r) => [r, usage[`${kind}.${r}`]] as const)
            .filter(([, a]) => a !== undefined)
            .map(([r, a]) => [r, formatQuantity(a!)]),
        );
      errs.push(...constraints('Pod', item, sum('requests'), sum('limits')));
    }
  }
  if (errs.length > 0) throw forbidden(def, obj, aggregate(errs));
}

/** `k=v,k2=v2` sorted by key, as Kubernetes' quota `prettyPrint`. */
function prettyPrint(list: Record<string, Amount>, keys: string[]): string {
  return [...keys]
    .sort()
    .map((k) => `${k}=${formatQuantity(list[k] ?? { value: 0, format: 'DecimalSI' })}`)
    .join(',');
}

/**
 * Checks a new object against the namespace's ResourceQuotas.
 * @throws ApiError Forbidden `exceeded quota: ...` or `failed quota: ...: must specify ...`
 */
export async function admitQuota(storage: Storage, def: ResourceDef, obj: KubeObject): Promise<void> {
  if (!def.namespaced || obj.metadata.namespace === undefined) return;
  const ns = obj.metadata.namespace;
  const quotas = (await storage.list('resourcequotas', ns)).items.filter((q) => !q.metadata.deletionTimestamp);
  if (quotas.length === 0) return;
  const key = storageKey(def);
  for (const q of [...quotas].sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''))) {
    const hard = rec(rec(q.spec).hard);
    const tracked = Object.keys(hard);
    const scopes = (Array.isArray(rec(q.spec).scopes) ? rec(q.spec).scopes : []) as string[];
    if (!quotaMatches(scopes, key, obj as { spec?: unknown })) continue;
    const requested = objectUsage(key, obj, tracked);
    if (Object.keys(requested).length === 0 && key !== 'pods') continue;
    if (key === 'pods') {
      const required = tracked.filter((t) => (QUOTA_COMPUTE_RESOURCES as readonly string[]).includes(t));
      const missing = new Map<string, string[]>();
      for (const c of [...arr(rec(obj.spec).containers), ...arr(rec(obj.spec).initContainers)]) {
        const own = podComputeUsage({ containers: [c] });
        for (const r of required) if (own[r] === undefined) missing.set(r, [...(missing.get(r) ?? []), String(c.name)]);
      }
      if (missing.size > 0) {
        const parts = [...missing.keys()].sort().map((r) => `${r} for: ${[...new Set(missing.get(r))].sort().join(',')}`);
        throw forbidden(def, obj, `failed quota: ${q.metadata.name}: must specify ${parts.join('; ')}`);
      }
      if (Object.keys(requested).length === 0) continue;
    }
    const names = Object.keys(requested);
    // An object of the same name is the one being replaced (`pods/<name>/replace`, a move): not counted twice.
    // The lists first (the store's reads are asynchronous; namespaceUsage counts synchronously).
    const lists = new Map<string, KubeObject[]>();
    for (const k of quotaSources(names)) lists.set(k, (await storage.list(k, ns)).items.filter((o) => k !== key || o.metadata.name !== obj.metadata.name));
    const used = namespaceUsage(names, (k) => lists.get(k) ?? [], scopes);
    const exceeded = names.filter((n) => {
      const limit = amountOf(hard[n]);
      return !amountAtMost({ value: used[n]!.value + requested[n]!.value, format: used[n]!.format }, limit);
    });
    if (exceeded.length > 0) {
      const limited = Object.fromEntries(exceeded.map((n) => [n, amountOf(hard[n])]));
      throw forbidden(
        def,
        obj,
        `exceeded quota: ${q.metadata.name}, requested: ${prettyPrint(requested, exceeded)}, used: ${prettyPrint(used, exceeded)}, limited: ${prettyPrint(limited, exceeded)}`,
      );
    }
  }
}

/**
 * Which namespaces hold a ResourceQuota or a LimitRange, kept from the store's watch (as kube-apiserver's
 * plugins read theirs from informers): a create in a namespace with neither reads nothing more in its
 * transaction, so pods of namespaces without quotas cost no extra read (on etcd a read in a transaction is a
 * round trip). Where there is one, admission reads the quotas and the usage in the transaction itself.
 */
export class QuotaNamespaces {
  readonly #storage: Storage;
  readonly #counts = new Map<string, Map<string, Set<string>>>();
  readonly #watches: WatchHandle[] = [];

  constructor(storage: Storage) {
    this.#storage = storage;
  }

  /** Lists both kinds and follows them. */
  async start(): Promise<void> {
    for (const key of ['resourcequotas', 'limitranges']) {
      const names = new Map<string, Set<string>>();
      const add = (ns: string, name: string) => names.set(ns, (names.get(ns) ?? new Set()).add(name));
      // Listed again when the store ends the watch (etcd compacted past it): keepListed. Until that list is
      // in, the kind is unknown (`has` answers true: admission reads the store) rather than stale.
      this.#watches.push(
        await keepListed(this.#storage, key, {
          replace: (items) => {
            names.clear();
            for (const o of items) add(o.metadata.namespace ?? '', o.metadata.name ?? '');
            this.#counts.set(key, names);
          },
          event: (e) => {
            if (e.type === 'DELETED') {
              names.get(e.namespace)?.delete(e.name);
              if (names.get(e.namespace)?.size === 0) names.delete(e.namespace);
            } else add(e.namespace, e.name);
          },
          relisted: () => this.#counts.delete(key),
        }),
      );
    }
  }

  /** Whether `namespace` holds an object of `key` (`resourcequotas`, `limitranges`); true before `start`. */
  has(key: 'resourcequotas' | 'limitranges', namespace: string): boolean {
    const names = this.#counts.get(key);
    return names === undefined || names.has(namespace);
  }

  /** Stops the watches. */
  stop(): void {
    for (const w of this.#watches.splice(0)) w.stop();
  }
}
