/**
 * The RBAC authorizer (kube-apiserver's `--authorization-mode=RBAC`): a request is allowed when a
 * rule of a role bound to its user (by name, by one of its groups, or as a ServiceAccount) covers
 * its verb, API group, resource (with subresource) and name, or its non-resource path. ClusterRoleBindings
 * grant everywhere, RoleBindings in their namespace. The four kinds are kept in memory, read again
 * (lazily) after any of them changes, which a storage watch reports; an aggregated ClusterRole's rules
 * are written here too, as kube-controller-manager's clusterrole-aggregation controller writes them.
 */
import type { Logger } from '../../lib/index.ts';
import type { UserInfo } from '../handlers/context.ts';
import type { Registry } from '../registry/store.ts';
import { type ResourceDef, storageKey } from '../registry/types.ts';
import { arr, rec } from '../registry/util.ts';
import { type KubeObject, keepWatching, type WatchHandle } from '../storage/index.ts';
import type { PolicyRule } from './policy.ts';
import { clusterrolebindings, clusterroles, rolebindings, roles } from './resources.ts';

/** What a request asks, as kube-apiserver's `authorizer.Attributes` name it. */
export interface Attributes {
  verb: string;
  /** Resource request: API group ('' core), plural, subresource, namespace ('' cluster scope), name. */
  resource?: { group: string; resource: string; subresource?: string; namespace?: string; name?: string };
  /** Non-resource request: the URL path. */
  path?: string;
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

/** Whether `rule` covers `a` (kube's `RuleAllows`). */
export function ruleAllows(rule: PolicyRule, a: Attributes): boolean {
  const verbs = rule.verbs ?? [];
  if (!verbs.includes('*') && !verbs.includes(a.verb)) return false;
  if (a.resource) {
    const res = a.resource;
    if ((rule.nonResourceURLs ?? []).length > 0 && (rule.resources ?? []).length === 0) return false;
    const groups = rule.apiGroups ?? [];
    if (!groups.includes('*') && !groups.includes(res.group)) return false;
    const combined = res.subresource ? `${res.resource}/${res.subresource}` : res.resource;
    const resources = rule.resources ?? [];
    const resOk = resources.some((r) => r === '*' || r === combined || (res.subresource !== undefined && r === `*/${res.subresource}`));
    if (!resOk) return false;
    const names = rule.resourceNames ?? [];
    return names.length === 0 || (res.name !== undefined && names.includes(res.name));
  }
  const path = a.path ?? '';
  return (rule.nonResourceURLs ?? []).some((u) => u === '*' || u === path || (u.endsWith('*') && path.startsWith(u.slice(0, -1))));
}

/** Whether a binding subject is `user` (kube's `appliesToUser`). */
function subjectIs(s: Record<string, unknown>, user: UserInfo, bindingNamespace: string): boolean {
  switch (s.kind) {
    case 'User':
      return s.name === user.name;
    case 'Group':
      return typeof s.name === 'string' && user.groups.includes(s.name);
    case 'ServiceAccount': {
      const ns = typeof s.namespace === 'string' && s.namespace ? s.namespace : bindingNamespace;
      return user.name === `system:serviceaccount:${ns}:${String(s.name)}`;
    }
    default:
      return false;
  }
}

interface Snapshot {
  clusterRoles: Map<string, KubeObject>;
  roles: Map<string, KubeObject>; // ns/name
  clusterBindings: KubeObject[];
  bindingsByNamespace: Map<string, KubeObject[]>;
}

/** A role's `rules` as PolicyRules, every list a list of strings (what is not a string dropped). */
export function toRules(v: unknown): PolicyRule[] {
  return arr(v).map((r) => ({
    verbs: strings(r.verbs),
    apiGroups: strings(r.apiGroups),
    resources: strings(r.resources),
    resourceNames: strings(r.resourceNames),
    nonResourceURLs: strings(r.nonResourceURLs),
  }));
}

/** Whether `labels` match one `metav1.LabelSelector` (matchLabels and matchExpressions). */
function selectorMatches(sel: Record<string, unknown>, labels: Record<string, string>): boolean {
  for (const [k, v] of Object.entries(rec(sel.matchLabels))) if (labels[k] !== v) return false;
  for (const e of arr(sel.matchExpressions)) {
    const key = String(e.key);
    const values = strings(e.values);
    const has = key in labels;
    switch (e.operator) {
      case 'In':
        if (!has || !values.includes(labels[key]!)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(labels[key]!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

/** The RBAC authorizer and the aggregation of ClusterRoles, over one registry. */
export class RbacAuthorizer {
  readonly #registry: Registry;
  readonly #log: Logger;
  #snapshot: Snapshot | undefined;
  readonly #watches: WatchHandle[] = [];
  #aggregating = false;
  /** Bumped by every change of an RBAC kind: a snapshot read across one is not kept. */
  #generation = 0;

  constructor(registry: Registry, log: Logger) {
    this.#registry = registry;
    this.#log = log;
  }

  /** Subscribes to changes of the RBAC kinds (each one makes the next decision read them again) and aggregates once. */
  start(): void {
    const rv = this.#registry.storage.currentResourceVersion();
    for (const def of [roles, clusterroles, rolebindings, clusterrolebindings]) this.#watch(def, rv);
    this.#startAggregation();
  }

  /**
   * Follows one RBAC kind. A watch the store ends (etcd compacted events it had not delivered) may have
   * missed changes: the kind is watched again from the store's position and the snapshot dropped as for a
   * change (the next decision reads the store).
   */
  #watch(def: ResourceDef, rv: number): void {
    const changed = () => {
      this.#snapshot = undefined;
      this.#generation++;
      if (def === clusterroles) this.#scheduleAggregation();
    };
    this.#watches.push(keepWatching(this.#registry.storage, storageKey(def), rv, changed, changed));
  }

  #startAggregation(): void {
    this.#aggregate().catch((err: unknown) => this.#log.warn({ err: err instanceof Error ? err.message : String(err) }, 'cannot aggregate ClusterRoles'));
  }

  /** Stops the watches. */
  stop(): void {
    for (const w of this.#watches.splice(0)) w.stop();
  }

  #scheduleAggregation(): void {
    if (this.#aggregating) return;
    this.#aggregating = true;
    setImmediate(() => {
      this.#aggregating = false;
      this.#startAggregation();
    });
  }

  /** Writes each aggregated ClusterRole's rules: the union of the rules of the ClusterRoles its selectors match. */
  async #aggregate(): Promise<void> {
    const all = (await this.#registry.list(clusterroles, undefined)).items;
    for (const role of all) {
      const selectors = arr(rec(role.aggregationRule).clusterRoleSelectors);
      if (selectors.length === 0) continue;
      const rules: Record<string, unknown>[] = [];
      const seen = new Set<string>();
      for (const other of all) {
        if (other.metadata.name === role.metadata.name) continue;
        const labels = other.metadata.labels ?? {};
        if (!selectors.some((s) => selectorMatches(s, labels))) continue;
        for (const rule of arr(other.rules)) {
          const k = JSON.stringify(rule);
          if (!seen.has(k)) {
            seen.add(k);
            rules.push(rule);
          }
        }
      }
      if (JSON.stringify(arr(role.rules)) === JSON.stringify(rules)) continue;
      try {
        await this.#registry.serverUpdate(clusterroles, '', role.metadata.name!, (o) => ({ ...o, rules }));
      } catch (err: unknown) {
        this.#log.warn({ clusterrole: role.metadata.name, err: err instanceof Error ? err.message : String(err) }, 'cannot write the aggregated rules');
      }
    }
  }

  async #read(): Promise<Snapshot> {
    if (this.#snapshot) return this.#snapshot;
    const generation = this.#generation;
    const reg = this.#registry;
    const s: Snapshot = { clusterRoles: new Map(), roles: new Map(), clusterBindings: (await reg.list(clusterrolebindings, undefined)).items, bindingsByNamespace: new Map() };
    for (const r of (await reg.list(clusterroles, undefined)).items) s.clusterRoles.set(r.metadata.name!, r);
    for (const r of (await reg.list(roles, undefined)).items) s.roles.set(`${r.metadata.namespace}/${r.metadata.name}`, r);
    for (const b of (await reg.list(rolebindings, undefined)).items) {
      const ns = b.metadata.namespace ?? '';
      const list = s.bindingsByNamespace.get(ns) ?? [];
      list.push(b);
      s.bindingsByNamespace.set(ns, list);
    }
    if (generation === this.#generation) this.#snapshot = s;
    return s;
  }

  #roleRules(s: Snapshot, ref: Record<string, unknown>, namespace: string): PolicyRule[] {
    const role = ref.kind === 'ClusterRole' ? s.clusterRoles.get(String(ref.name)) : s.roles.get(`${namespace}/${String(ref.name)}`);
    return role ? toRules(role.rules) : [];
  }

  /**
   * The rules that apply to `user` in `namespace` (cluster-wide ones always; a namespace's RoleBindings
   * when one is given), as `SelfSubjectRulesReview` lists them.
   */
  async rulesFor(user: UserInfo, namespace: string | undefined): Promise<PolicyRule[]> {
    const s = await this.#read();
    const out: PolicyRule[] = [];
    for (const b of s.clusterBindings) if (arr(b.subjects).some((x) => subjectIs(x, user, ''))) out.push(...this.#roleRules(s, rec(b.roleRef), ''));
    if (namespace) {
      for (const b of s.bindingsByNamespace.get(namespace) ?? []) if (arr(b.subjects).some((x) => subjectIs(x, user, namespace))) out.push(...this.#roleRules(s, rec(b.roleRef), namespace));
    }
    return out;
  }

  /** Whether RBAC allows `a` to `user`. */
  async allows(user: UserInfo, a: Attributes): Promise<boolean> {
    const s = await this.#read();
    for (const b of s.clusterBindings) {
      if (!arr(b.subjects).some((x) => subjectIs(x, user, ''))) continue;
      if (this.#roleRules(s, rec(b.roleRef), '').some((r) => ruleAllows(r, a))) return true;
    }
    const ns = a.resource?.namespace;
    if (ns) {
      for (const b of s.bindingsByNamespace.get(ns) ?? []) {
        if (!arr(b.subjects).some((x) => subjectIs(x, user, ns))) continue;
        if (this.#roleRules(s, rec(b.roleRef), ns).some((r) => ruleAllows(r, a))) return true;
      }
    }
    return false;
  }
}
