/**
 * The `rbac.authorization.k8s.io/v1` kinds as stored resources: Role, ClusterRole (with
 * `aggregationRule`), RoleBinding and ClusterRoleBinding, validated as kube-apiserver validates them
 * (every rule names verbs; a resource rule names apiGroups and resources, a non-resource rule only
 * verbs and nonResourceURLs and only in a ClusterRole; a binding's roleRef is immutable and names a
 * Role or ClusterRole; subjects are User, Group or ServiceAccount).
 */
import type { StatusCause } from '../errors.ts';
import type { KubeObject } from '../storage/index.ts';
import type { ResourceDef } from '../registry/types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, rec, required, validateMetaMaps } from '../registry/util.ts';

const GROUP = 'rbac.authorization.k8s.io';

/** A path segment name (`ValidatePathSegmentName`): RBAC names may hold `:` (`system:node`), not `/` or `%`. */
function validateRbacName(name: string | undefined): StatusCause[] {
  if (!name) return [required('metadata.name')];
  if (name === '.' || name === '..' || /[/%]/.test(name)) return [invalidValue('metadata.name', name, 'may not contain "/" or "%", nor be "." or ".."')];
  return [];
}

function stringList(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function validateRules(obj: KubeObject, clusterScoped: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  const rules = obj.rules;
  if (rules !== undefined && rules !== null && !Array.isArray(rules)) return [invalidValue('rules', rules, 'must be a list')];
  arr(rules).forEach((r, i) => {
    const f = `rules[${i}]`;
    if (stringList(r.verbs).length === 0) out.push(required(`${f}.verbs`));
    const nonResource = stringList(r.nonResourceURLs);
    if (nonResource.length > 0) {
      if (!clusterScoped) out.push(invalidValue(`${f}.nonResourceURLs`, nonResource, 'namespaced rules cannot apply to non-resource URLs'));
      if (stringList(r.apiGroups).length > 0 || stringList(r.resources).length > 0 || stringList(r.resourceNames).length > 0) {
        out.push(invalidValue(`${f}.nonResourceURLs`, nonResource, 'rules cannot apply to both regular resources and non-resource URLs'));
      }
      return;
    }
    if (r.apiGroups === undefined || !Array.isArray(r.apiGroups)) out.push(required(`${f}.apiGroups`));
    if (stringList(r.resources).length === 0) out.push(required(`${f}.resources`));
  });
  return out;
}

function validateRoleRef(obj: KubeObject, old: KubeObject | undefined, namespaced: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  const ref = rec(obj.roleRef);
  if (ref.apiGroup !== GROUP) out.push(invalidValue('roleRef.apiGroup', ref.apiGroup ?? '', `supported values: "${GROUP}"`));
  const kinds = namespaced ? ['Role', 'ClusterRole'] : ['ClusterRole'];
  if (!kinds.includes(String(ref.kind))) out.push(invalidValue('roleRef.kind', ref.kind ?? '', `supported values: ${kinds.map((k) => `"${k}"`).join(', ')}`));
  if (typeof ref.name !== 'string' || !ref.name) out.push(required('roleRef.name'));
  if (old && JSON.stringify(rec(old.roleRef)) !== JSON.stringify(ref)) out.push({ ...immutable('roleRef'), message: 'cannot change roleRef' });
  arr(obj.subjects).forEach((s, i) => {
    const f = `subjects[${i}]`;
    if (!['User', 'Group', 'ServiceAccount'].includes(String(s.kind))) out.push(invalidValue(`${f}.kind`, s.kind ?? '', 'supported values: "ServiceAccount", "User", "Group"'));
    if (typeof s.name !== 'string' || !s.name) out.push(required(`${f}.name`));
    if (s.kind === 'ServiceAccount') {
      if (s.apiGroup) out.push(invalidValue(`${f}.apiGroup`, s.apiGroup, 'supported values: ""'));
      if (!namespaced && !s.namespace) out.push(required(`${f}.namespace`));
    } else if (s.kind === 'User' || s.kind === 'Group') {
      if (s.apiGroup !== undefined && s.apiGroup !== GROUP) out.push(invalidValue(`${f}.apiGroup`, s.apiGroup, `supported values: "${GROUP}"`));
    }
  });
  return out;
}

/** Subjects of a binding get `apiGroup` as kube-apiserver defaults it (rbac.authorization.k8s.io for User and Group). */
function defaultSubjects(obj: KubeObject): void {
  for (const s of arr(obj.subjects)) if ((s.kind === 'User' || s.kind === 'Group') && s.apiGroup === undefined) s.apiGroup = GROUP;
}

function subjectsCell(o: KubeObject, kind: string): string {
  const names = arr(o.subjects)
    .filter((s) => s.kind === kind)
    .map((s) => (kind === 'ServiceAccount' ? `${String(s.namespace ?? o.metadata.namespace ?? '')}/${String(s.name)}` : String(s.name)));
  return names.join(', ');
}

const roleBase = {
  group: GROUP,
  version: 'v1',
  subresources: [],
  hasStatus: false,
  columns: [NAME_COLUMN, { name: 'Created At', type: 'string', format: 'date', description: 'Time at which the object was created.' }],
  cells: (o: KubeObject) => [o.metadata.name, o.metadata.creationTimestamp],
} as const;

/** `roles.rbac.authorization.k8s.io`. */
export const roles: ResourceDef = {
  ...roleBase,
  subresources: [],
  columns: [...roleBase.columns],
  kind: 'Role',
  listKind: 'RoleList',
  plural: 'roles',
  singular: 'role',
  namespaced: true,
  fields: ['rules'],
  validate: (obj) => [...validateRbacName(obj.metadata.name), ...validateMetaMaps(obj), ...validateRules(obj, false)],
};

/** `clusterroles.rbac.authorization.k8s.io`; an aggregated one's rules are written by the aggregation (aggregation.ts). */
export const clusterroles: ResourceDef = {
  ...roleBase,
  subresources: [],
  columns: [...roleBase.columns],
  kind: 'ClusterRole',
  listKind: 'ClusterRoleList',
  plural: 'clusterroles',
  singular: 'clusterrole',
  namespaced: false,
  fields: ['rules', 'aggregationRule'],
  validate(obj) {
    const out = [...validateRbacName(obj.metadata.name), ...validateMetaMaps(obj), ...validateRules(obj, true)];
    if (obj.aggregationRule !== undefined && obj.aggregationRule !== null) {
      const sels = rec(obj.aggregationRule).clusterRoleSelectors;
      if (!Array.isArray(sels) || sels.length === 0) out.push(required('aggregationRule.clusterRoleSelectors'));
    }
    return out;
  },
};

const bindingColumns = (namespaced: boolean) => [
  NAME_COLUMN,
  { name: 'Role', type: 'string', description: 'The role the binding grants.' } as const,
  AGE_COLUMN,
  { name: 'Users', type: 'string', priority: 1, description: 'The users the binding grants it to.' } as const,
  { name: 'Groups', type: 'string', priority: 1, description: 'The groups the binding grants it to.' } as const,
  { name: 'ServiceAccounts', type: 'string', priority: 1, description: `The service accounts the binding grants it to${namespaced ? '' : ' (namespace/name)'}.` } as const,
];

function bindingCells(o: KubeObject, now: Date): unknown[] {
  const ref = rec(o.roleRef);
  return [o.metadata.name, `${String(ref.kind)}/${String(ref.name)}`, age(o.metadata.creationTimestamp, now), subjectsCell(o, 'User'), subjectsCell(o, 'Group'), subjectsCell(o, 'ServiceAccount')];
}

/** `rolebindings.rbac.authorization.k8s.io`. */
export const rolebindings: ResourceDef = {
  group: GROUP,
  version: 'v1',
  kind: 'RoleBinding',
  listKind: 'RoleBindingList',
  plural: 'rolebindings',
  singular: 'rolebinding',
  namespaced: true,
  subresources: [],
  hasStatus: false,
  fields: ['roleRef', 'subjects'],
  prepareForCreate: defaultSubjects,
  prepareForUpdate: defaultSubjects,
  validate: (obj, old) => [...validateRbacName(obj.metadata.name), ...validateMetaMaps(obj), ...validateRoleRef(obj, old, true)],
  columns: bindingColumns(true),
  cells: bindingCells,
};

/** `clusterrolebindings.rbac.authorization.k8s.io`. */
export const clusterrolebindings: ResourceDef = {
  group: GROUP,
  version: 'v1',
  kind: 'ClusterRoleBinding',
  listKind: 'ClusterRoleBindingList',
  plural: 'clusterrolebindings',
  singular: 'clusterrolebinding',
  namespaced: false,
  subresources: [],
  hasStatus: false,
  fields: ['roleRef', 'subjects'],
  prepareForCreate: defaultSubjects,
  prepareForUpdate: defaultSubjects,
  validate: (obj, old) => [...validateRbacName(obj.metadata.name), ...validateMetaMaps(obj), ...validateRoleRef(obj, old, false)],
  columns: bindingColumns(false),
  cells: bindingCells,
};

/** The four RBAC resources, in discovery order. */
export const RBAC_RESOURCES: readonly ResourceDef[] = [clusterrolebindings, clusterroles, rolebindings, roles];
