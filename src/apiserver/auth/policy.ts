/**
 * The default RBAC policy, reconciled at every start as kube-apiserver's bootstrap policy
 * (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`): the user-facing roles `cluster-admin`, `admin`,
 * `edit` and `view` (the last three aggregated from `system:aggregate-to-*`, so a ClusterRole labelled
 * `rbac.authorization.k8s.io/aggregate-to-view: "true"` extends them), the roles every authenticated
 * user has (`system:basic-user`, `system:discovery`, `system:public-info-viewer`), and the control
 * plane's (`system:kube-controller-manager`, `system:kube-scheduler`, `system:kube-apiserver`), with their
 * bindings. A missing object is created; an existing one with the annotation
 * `rbac.authorization.kubernetes.io/autoupdate: "true"` (or none) gets the rules and subjects it lacks;
 * `"false"` leaves it as the operator changed it.
 */
import type { Logger } from '../../lib/index.ts';
import { ApiError } from '../errors.ts';
import type { Registry } from '../registry/store.ts';
import { arr } from '../registry/util.ts';
import type { KubeObject } from '../storage/index.ts';
import { clusterrolebindings, clusterroles } from './resources.ts';

/** One RBAC PolicyRule. */
export interface PolicyRule {
  verbs: string[];
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

const READ = ['get', 'list', 'watch'];
const WRITE = ['create', 'delete', 'deletecollection', 'patch', 'update'];
const AUTOUPDATE = 'rbac.authorization.kubernetes.io/autoupdate';
const BOOTSTRAP_LABEL = { 'kubernetes.io/bootstrapping': 'rbac-defaults' };

const r = (apiGroups: string[], resources: string[], verbs: string[]): PolicyRule => ({ apiGroups, resources, verbs });

/** What `view` may read: everything a namespace holds but Secrets and Checkpoint data (seed: a snapshot is a Secret). */
const VIEW_RULES: PolicyRule[] = [
  r([''], ['configmaps', 'endpoints', 'persistentvolumeclaims', 'persistentvolumeclaims/status', 'pods', 'replicationcontrollers', 'replicationcontrollers/scale', 'serviceaccounts', 'services', 'services/status'], READ),
  r([''], ['bindings', 'events', 'limitranges', 'namespaces/status', 'pods/log', 'pods/status', 'replicationcontrollers/status', 'resourcequotas', 'resourcequotas/status'], READ),
  r([''], ['namespaces'], READ),
  r(['discovery.k8s.io'], ['endpointslices'], READ),
  r(['apps'], ['controllerrevisions', 'daemonsets', 'daemonsets/status', 'deployments', 'deployments/scale', 'deployments/status', 'replicasets', 'replicasets/scale', 'replicasets/status', 'statefulsets', 'statefulsets/scale', 'statefulsets/status'], READ),
  r(['autoscaling'], ['horizontalpodautoscalers', 'horizontalpodautoscalers/status'], READ),
  r(['batch'], ['cronjobs', 'cronjobs/status', 'jobs', 'jobs/status'], READ),
  r(['policy'], ['poddisruptionbudgets', 'poddisruptionbudgets/status'], READ),
  r(['events.k8s.io'], ['events'], READ),
  r(['coordination.k8s.io'], ['leases'], READ),
  r(['kube32.io'], ['checkpoints', 'checkpoints/status', 'modules', 'modules/data'], READ),
];

/** What `edit` adds: writes of the namespace's workloads and config, Secrets and Checkpoint data included. */
const EDIT_RULES: PolicyRule[] = [
  r([''], ['pods/attach', 'pods/exec', 'pods/portforward', 'pods/proxy', 'secrets', 'services/proxy'], READ),
  r([''], ['serviceaccounts'], ['impersonate']),
  r([''], ['pods', 'pods/attach', 'pods/exec', 'pods/portforward', 'pods/proxy'], WRITE),
  r([''], ['pods/eviction'], ['create']),
  r([''], ['configmaps', 'events', 'persistentvolumeclaims', 'replicationcontrollers', 'replicationcontrollers/scale', 'secrets', 'serviceaccounts', 'services', 'services/proxy'], WRITE),
  r([''], ['serviceaccounts/token'], ['create']),
  r(['apps'], ['daemonsets', 'deployments', 'deployments/rollback', 'deployments/scale', 'replicasets', 'replicasets/scale', 'statefulsets', 'statefulsets/scale'], WRITE),
  r(['autoscaling'], ['horizontalpodautoscalers'], WRITE),
  r(['batch'], ['cronjobs', 'jobs'], WRITE),
  r(['policy'], ['poddisruptionbudgets'], WRITE),
  r(['discovery.k8s.io'], ['endpointslices'], WRITE),
  r(['events.k8s.io'], ['events'], WRITE),
  r(['coordination.k8s.io'], ['leases'], WRITE),
  r(['kube32.io'], ['checkpoints', 'checkpoints/data'], WRITE),
  r(['kube32.io'], ['checkpoints/data'], READ),
];

/** What `admin` adds: the namespace's roles and bindings, and access reviews in it. */
const ADMIN_RULES: PolicyRule[] = [
  r(['authorization.k8s.io'], ['localsubjectaccessreviews'], ['create']),
  r(['rbac.authorization.k8s.io'], ['rolebindings', 'roles'], [...WRITE, ...READ]),
];

const ALL: PolicyRule[] = [
  { apiGroups: ['*'], resources: ['*'], verbs: ['*'] },
  { nonResourceURLs: ['*'], verbs: ['*'] },
];

const aggregateLabel = (to: string) => `rbac.authorization.k8s.io/aggregate-to-${to}`;

interface DefaultRole {
  name: string;
  rules: PolicyRule[];
  labels?: Record<string, string>;
  aggregateFrom?: string;
}

/** The default ClusterRoles. */
export const DEFAULT_CLUSTER_ROLES: readonly DefaultRole[] = [
  { name: 'cluster-admin', rules: ALL },
  { name: 'admin', rules: [], aggregateFrom: 'admin' },
  { name: 'edit', rules: [], aggregateFrom: 'edit', labels: { [aggregateLabel('admin')]: 'true' } },
  { name: 'view', rules: [], aggregateFrom: 'view', labels: { [aggregateLabel('admin')]: 'true', [aggregateLabel('edit')]: 'true' } },
  { name: 'system:aggregate-to-admin', rules: ADMIN_RULES, labels: { [aggregateLabel('admin')]: 'true' } },
  { name: 'system:aggregate-to-edit', rules: EDIT_RULES, labels: { [aggregateLabel('admin')]: 'true', [aggregateLabel('edit')]: 'true' } },
  // Kubernetes' metrics-server ships this role: whoever may view a namespace may read its metrics (kubectl top).
  {
    name: 'system:aggregated-metrics-reader',
    rules: [r(['metrics.k8s.io'], ['pods', 'nodes'], READ)],
    labels: { [aggregateLabel('admin')]: 'true', [aggregateLabel('edit')]: 'true', [aggregateLabel('view')]: 'true' },
  },
  { name: 'system:aggregate-to-view', rules: VIEW_RULES, labels: { [aggregateLabel('admin')]: 'true', [aggregateLabel('edit')]: 'true', [aggregateLabel('view')]: 'true' } },
  {
    name: 'system:basic-user',
    rules: [r(['authorization.k8s.io'], ['selfsubjectaccessreviews', 'selfsubjectrulesreviews'], ['create']), r(['authentication.k8s.io'], ['selfsubjectreviews'], ['create'])],
  },
  { name: 'system:discovery', rules: [{ nonResourceURLs: ['/api', '/api/*', '/apis', '/apis/*', '/healthz', '/livez', '/openapi', '/openapi/*', '/readyz', '/version', '/version/'], verbs: ['get'] }] },
  { name: 'system:public-info-viewer', rules: [{ nonResourceURLs: ['/healthz', '/livez', '/readyz', '/version', '/version/'], verbs: ['get'] }] },
  // The control plane's own components: Kube32's controllers and scheduler run as the admin (system:masters) today;
  // these are their Kubernetes identities, cluster-admin-equivalent so that a component moved to one keeps working.
  { name: 'system:kube-controller-manager', rules: ALL },
  { name: 'system:kube-scheduler', rules: ALL },
  { name: 'system:kube-apiserver', rules: ALL },
  { name: 'system:auth-delegator', rules: [r(['authentication.k8s.io'], ['tokenreviews'], ['create']), r(['authorization.k8s.io'], ['subjectaccessreviews'], ['create'])] },
];

const group = (name: string) => ({ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name });
const user = (name: string) => ({ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name });

/** The default ClusterRoleBindings: name, role, subjects. */
export const DEFAULT_CLUSTER_ROLE_BINDINGS: readonly { name: string; role: string; subjects: Record<string, string>[] }[] = [
  { name: 'cluster-admin', role: 'cluster-admin', subjects: [group('system:masters')] },
  { name: 'system:basic-user', role: 'system:basic-user', subjects: [group('system:authenticated')] },
  { name: 'system:discovery', role: 'system:discovery', subjects: [group('system:authenticated')] },
  { name: 'system:public-info-viewer', role: 'system:public-info-viewer', subjects: [group('system:authenticated'), group('system:unauthenticated')] },
  { name: 'system:kube-controller-manager', role: 'system:kube-controller-manager', subjects: [user('system:kube-controller-manager')] },
  { name: 'system:kube-scheduler', role: 'system:kube-scheduler', subjects: [user('system:kube-scheduler')] },
  { name: 'system:kube-apiserver', role: 'system:kube-apiserver', subjects: [user('system:kube-apiserver')] },
];

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

async function createOrGet(registry: Registry, def: typeof clusterroles, body: KubeObject): Promise<KubeObject | undefined> {
  const found = await registry.find(def, '', body.metadata.name!);
  if (found) return found;
  try {
    await registry.create(def, '', body);
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err; // another API server made it first
  }
  return undefined;
}

/**
 * Creates the default ClusterRoles and ClusterRoleBindings, and adds what an auto-updated one lacks
 * (rules, aggregation rule, labels, subjects). Idempotent; several API servers may run it at once.
 */
export async function reconcileBootstrapPolicy(registry: Registry, log: Logger): Promise<void> {
  for (const d of DEFAULT_CLUSTER_ROLES) {
    const body: KubeObject = {
      metadata: { name: d.name, labels: { ...BOOTSTRAP_LABEL, ...d.labels }, annotations: { [AUTOUPDATE]: 'true' } },
      rules: d.rules,
    };
    if (d.aggregateFrom) body.aggregationRule = { clusterRoleSelectors: [{ matchLabels: { [aggregateLabel(d.aggregateFrom)]: 'true' } }] };
    const existing = await createOrGet(registry, clusterroles, body);
    if (!existing || existing.metadata.annotations?.[AUTOUPDATE] === 'false') continue;
    const rules = arr(existing.rules);
    const missing = d.aggregateFrom ? [] : d.rules.filter((want) => !rules.some((have) => same(have, want)));
    const labels = { ...existing.metadata.labels, ...body.metadata.labels };
    const aggregation = d.aggregateFrom && !same(existing.aggregationRule, body.aggregationRule);
    if (missing.length === 0 && !aggregation && same(labels, existing.metadata.labels)) continue;
    await registry.serverUpdate(clusterroles, '', d.name, (o) => ({ ...o, metadata: { ...o.metadata, labels }, rules: [...arr(o.rules), ...missing], ...(aggregation ? { aggregationRule: body.aggregationRule } : {}) }));
    log.info({ clusterrole: d.name, rulesAdded: missing.length }, 'reconciled default ClusterRole');
  }
  for (const b of DEFAULT_CLUSTER_ROLE_BINDINGS) {
    const body: KubeObject = {
      metadata: { name: b.name, labels: { ...BOOTSTRAP_LABEL }, annotations: { [AUTOUPDATE]: 'true' } },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: b.role },
      subjects: b.subjects,
    };
    const existing = await createOrGet(registry, clusterrolebindings, body);
    if (!existing || existing.metadata.annotations?.[AUTOUPDATE] === 'false') continue;
    const subjects = arr(existing.subjects);
    const missing = b.subjects.filter((want) => !subjects.some((have) => have.kind === want.kind && have.name === want.name));
    if (missing.length === 0) continue;
    await registry.serverUpdate(clusterrolebindings, '', b.name, (o) => ({ ...o, subjects: [...arr(o.subjects), ...missing] }));
    log.info({ clusterrolebinding: b.name, subjectsAdded: missing.length }, 'reconciled default ClusterRoleBinding');
  }
}
