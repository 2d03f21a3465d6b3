/**
 * RBAC's escalation check (kube-apiserver's `rbac/validation.ConfirmNoEscalation`, run by the policy-based
 * storage of roles and bindings): a user may write a Role or ClusterRole only with rules it holds itself,
 * and bind a role only when it holds that role's rules, unless RBAC grants it the `escalate` verb on the
 * role (for roles) or `bind` on the role it binds (for bindings). A ClusterRole with an aggregationRule
 * needs the authority of cluster-admin, as its rules are whatever it aggregates. `system:masters` is never
 * checked. What the user holds is what RBAC grants it in the object's namespace (a Role, a RoleBinding) or
 * cluster-wide (a ClusterRole, a ClusterRoleBinding).
 */
import { ApiError, notFound } from '../errors.ts';
import type { UserInfo } from '../handlers/context.ts';
import type { Registry } from '../registry/store.ts';
import type { ResourceDef } from '../registry/types.ts';
import { rec } from '../registry/util.ts';
import type { KubeObject } from '../storage/index.ts';
import { authorizerOf } from '../handlers/auth.ts';
import type { PolicyRule } from './policy.ts';
import { type Attributes, toRules } from './rbac.ts';
import { clusterroles, roles } from './resources.ts';

const RBAC_GROUP = 'rbac.authorization.k8s.io';

/** The single requests a rule stands for: each verb with each group, resource and name, or each URL. */
function atoms(rule: PolicyRule, namespace: string | undefined): Attributes[] {
  const out: Attributes[] = [];
  for (const verb of rule.verbs ?? []) {
    for (const path of rule.nonResourceURLs ?? []) out.push({ verb, path });
    for (const group of rule.apiGroups ?? []) {
      for (const combined of rule.resources ?? []) {
        const slash = combined.indexOf('/');
        const resource = slash < 0 ? combined : combined.slice(0, slash);
        const subresource = slash < 0 ? undefined : combined.slice(slash + 1);
        const names = (rule.resourceNames ?? []).length > 0 ? rule.resourceNames! : [undefined];
        for (const name of names) out.push({ verb, resource: { group, resource, subresource, namespace, name } });
      }
    }
  }
  return out;
}

/** A rule as kube-apiserver prints the ones not held: `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`. */
function describe(a: Attributes): string {
  const q = (xs: string[]) => `[${xs.map((x) => JSON.stringify(x)).join(' ')}]`;
  if (a.path !== undefined) return `{NonResourceURLs:${q([a.path])}, Verbs:${q([a.verb])}}`;
  const r = a.resource!;
  const res = r.subresource ? `${r.resource}/${r.subresource}` : r.resource;
  return `{APIGroups:${q([r.group])}, Resources:${q([res])}${r.name ? `, ResourceNames:${q([r.name])}` : ''}, Verbs:${q([a.verb])}}`;
}

/** Everything: what an aggregated ClusterRole may come to hold. */
const FULL_AUTHORITY: PolicyRule[] = [
  { verbs: ['*'], apiGroups: ['*'], resources: ['*'] },
  { verbs: ['*'], nonResourceURLs: ['*'] },
];

/**
 * The admission of one write of an RBAC kind by `user`, or undefined for other kinds and for
 * `system:masters`: a function the registry calls with the object to be stored (and the stored one on
 * update), inside the write.
 * @throws ApiError Forbidden naming the rules the user does not hold, in kube-apiserver's words; NotFound for a
 *   binding of a role that does not exist (its rules cannot be checked), as kube-apiserver answers it
 */
export function escalationAdmission(reg: Registry, user: UserInfo, def: ResourceDef): ((obj: KubeObject, old?: KubeObject) => Promise<void>) | undefined {
  if (def.group !== RBAC_GROUP || user.groups.includes('system:masters')) return undefined;
  const authorizer = authorizerOf(reg);
  const may = async (verb: string, plural: string, namespace: string, name: string | undefined) =>
    (await authorizer.decide(user, verb, { group: RBAC_GROUP, plural, namespace, name, subresource: undefined, subpath: '' })).allowed;
  const confirm = async (obj: KubeObject, rules: PolicyRule[], namespace: string | undefined) => {
    const atomsOf = rules.flatMap((r) => atoms(r, namespace));
    const held = await Promise.all(atomsOf.map(async (a) => await authorizer.rbac.allows(user, a)));
    const missing = atomsOf.filter((_, i) => !held[i]);
    if (missing.length === 0) return;
    const groups = user.groups.map((g) => JSON.stringify(g)).join(' ');
    const shown = [...new Set(missing.map(describe))];
    throw new ApiError(
      'Forbidden',
      `${def.plural}.${RBAC_GROUP} "${obj.metadata.name ?? ''}" is forbidden: user "${user.name}" (groups=[${groups}]) is attempting to grant RBAC permissions not currently held:\n${shown.join('\n')}`,
    );
  };
  switch (def.plural) {
    case 'roles':
    case 'clusterroles':
      return async (obj) => {
        const namespace = def.plural === 'roles' ? (obj.metadata.namespace ?? '') : '';
        if (await may('escalate', def.plural, namespace, obj.metadata.name)) return;
        const aggregated = def.plural === 'clusterroles' && obj.aggregationRule !== undefined && obj.aggregationRule !== null;
        await confirm(obj, aggregated ? FULL_AUTHORITY : toRules(obj.rules), namespace || undefined);
      };
    case 'rolebindings':
    case 'clusterrolebindings':
      return async (obj) => {
        const namespace = def.plural === 'rolebindings' ? (obj.metadata.namespace ?? '') : '';
        const ref = rec(obj.roleRef);
        const kind = ref.kind === 'Role' ? 'roles' : 'clusterroles';
        const name = typeof ref.name === 'string' ? ref.name : '';
        // bind is asked in the binding's namespace, for a ClusterRole too (a RoleBinding may grant it there).
        if (await may('bind', kind, namespace, name)) return;
        const role = await reg.find(kind === 'roles' ? roles : clusterroles, kind === 'roles' ? namespace : '', name);
        if (!role) throw notFound(kind, RBAC_GROUP, name);
        await confirm(obj, toRules(role.rules), namespace || undefined);
      };
    default:
      return undefined;
  }
}
