/**
 * Nodes (`v1`, cluster-scoped) and Namespaces (`v1`, cluster-scoped): validation, status
 * subresources and Table columns (nodes: NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP
 * OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME; namespaces: NAME STATUS AGE).
 */
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, rec, validateLabel, validateMetaMaps, validateSubdomain } from '../util.ts';

function nodeStatus(node: KubeObject): string {
  const ready = arr(rec(node.status).conditions).find((c) => c.type === 'Ready');
  let s = !ready ? 'Unknown' : ready.status === 'True' ? 'Ready' : 'NotReady';
  if (rec(node.spec).unschedulable === true) s += ',SchedulingDisabled';
  return s;
}

function nodeRoles(node: KubeObject): string {
  const roles = new Set<string>();
  for (const [k, v] of Object.entries(node.metadata.labels ?? {})) {
    if (k.startsWith('node-role.kubernetes.io/') && k.length > 24) roles.add(k.slice(24));
    else if (k === 'kubernetes.io/role' && v) roles.add(v);
  }
  return roles.size ? [...roles].sort().join(',') : '<none>';
}

function address(node: KubeObject, type: string): string {
  return (arr(rec(node.status).addresses).find((a) => a.type === type)?.address as string | undefined) ?? '<none>';
}

/** The nodes resource. */
export const nodes: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Node',
  listKind: 'NodeList',
  plural: 'nodes',
  singular: 'node',
  namespaced: false,
  shortNames: ['no'],
  subresources: ['status', 'proxy'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    obj.spec ??= {};
  },
  validate(obj) {
    return [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  },
  fieldSelectors: {
    'spec.unschedulable': (o) => String(rec(o.spec).unschedulable ?? false),
  },
  columns: [
    NAME_COLUMN,
    { name: 'Status', type: 'string', description: 'The status of the node' },
    { name: 'Roles', type: 'string', description: 'The roles of the node' },
    AGE_COLUMN,
    { name: 'Version', type: 'string', description: 'Kubelet Version reported by the node.' },
    { name: 'Internal-IP', type: 'string', priority: 1, description: 'List of addresses reachable to the node.' },
    { name: 'External-IP', type: 'string', priority: 1, description: 'List of addresses reachable to the node.' },
    { name: 'OS-Image', type: 'string', priority: 1, description: 'OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).' },
    { name: 'Kernel-Version', type: 'string', priority: 1, description: "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)." },
    { name: 'Container-Runtime', type: 'string', priority: 1, description: 'ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).' },
  ],
  cells(node, now) {
    const info = rec(rec(node.status).nodeInfo);
    const orUnknown = (v: unknown) => (typeof v === 'string' && v ? v : '<unknown>');
    return [
      node.metadata.name,
      nodeStatus(node),
      nodeRoles(node),
      age(node.metadata.creationTimestamp, now),
      (info.kubeletVersion as string | undefined) ?? '',
      address(node, 'InternalIP'),
      address(node, 'ExternalIP'),
      orUnknown(info.osImage),
      orUnknown(info.kernelVersion),
      orUnknown(info.containerRuntimeVersion),
    ];
  },
};

/** The namespaces resource; deletion is carried out by the namespace finalizer of the server. */
export const namespaces: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Namespace',
  listKind: 'NamespaceList',
  plural: 'namespaces',
  singular: 'namespace',
  namespaced: false,
  shortNames: ['ns'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    obj.spec = { finalizers: ['kubernetes'] };
    obj.status = { phase: 'Active' };
    obj.metadata.labels = { ...(obj.metadata.labels ?? {}), 'kubernetes.io/metadata.name': obj.metadata.name ?? '' };
  },
  prepareForUpdate(obj, old) {
    obj.spec = old.spec;
    obj.metadata.labels = { ...(obj.metadata.labels ?? {}), 'kubernetes.io/metadata.name': old.metadata.name ?? '' };
  },
  validate(obj) {
    return [...validateLabel(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  },
  fieldSelectors: {
    'status.phase': (o) => rec(o.status).phase as string | undefined,
  },
  columns: [NAME_COLUMN, { name: 'Status', type: 'string', description: 'The status of the namespace' }, AGE_COLUMN],
  cells(ns, now) {
    return [ns.metadata.name, rec(ns.status).phase ?? '', age(ns.metadata.creationTimestamp, now)];
  },
};
