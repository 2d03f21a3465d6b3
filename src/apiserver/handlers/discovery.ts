/**
 * Discovery: `/version`, legacy (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`) and aggregated
 * (`apidiscovery.k8s.io/v2`, answered with its exact Content-Type, kubectl-wire §1.4) documents,
 * built from the registry's resource definitions.
 */
import type { IncomingMessage } from 'node:http';
import { RESOURCES, groupVersions } from '../registry/catalog.ts';
import { STANDARD_VERBS, type ResourceDef, type Subresource } from '../registry/types.ts';

/** The server's version: kubectl's dispatcher picks the kubectl binary from major/minor (wire §1.1). */
export const VERSION_INFO = {
  major: '1',
  minor: '32',
  gitVersion: 'v1.32.0-kube32',
  gitCommit: '0000000000000000000000000000000000000000',
  gitTreeState: 'clean',
  buildDate: '2026-01-01T00:00:00Z',
  goVersion: 'node24',
  compiler: 'kube32',
  platform: 'linux/amd64',
} as const;

/** The aggregated discovery content type, which must be exact. */
export const AGGREGATED_CONTENT_TYPE = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList';

interface SubInfo {
  group: string;
  version: string;
  kind: string;
  verbs: string[];
}

/** What each subresource answers and allows. */
function subresourceInfo(def: ResourceDef, sub: Subresource): SubInfo {
  switch (sub) {
    case 'status':
      return { group: def.group, version: def.version, kind: def.kind, verbs: ['get', 'patch', 'update'] };
    case 'scale':
      return { group: 'autoscaling', version: 'v1', kind: 'Scale', verbs: ['get', 'patch', 'update'] };
    case 'eviction':
      return { group: 'policy', version: 'v1', kind: 'Eviction', verbs: ['create'] };
    case 'log':
      return { group: '', version: 'v1', kind: 'Pod', verbs: ['get'] };
    case 'binding':
      return { group: '', version: 'v1', kind: 'Binding', verbs: ['create'] };
    case 'proxy':
      return { group: '', version: 'v1', kind: def.kind === 'Node' ? 'NodeProxyOptions' : def.kind === 'Service' ? 'ServiceProxyOptions' : 'PodProxyOptions', verbs: ['create', 'delete', 'get', 'patch', 'update'] };
    case 'replace':
      return { group: def.group, version: def.version, kind: def.kind, verbs: ['create'] };
    case 'data':
      // A Checkpoint's data is also created from the pod's node (POST, see data.ts).
      return { group: def.group, version: def.version, kind: def.kind, verbs: def.kind === 'Checkpoint' ? ['create', 'get', 'update'] : ['get', 'update'] };
  }
}

/** Resources served without storage. */
const VIRTUAL: { group: string; version: string; plural: string; singular: string; kind: string; verbs: string[]; namespaced?: boolean }[] = [
  // POST /api/v1/namespaces/<ns>/bindings binds the pod the Binding names, as pods/<name>/binding does.
  { group: '', version: 'v1', plural: 'bindings', singular: 'binding', kind: 'Binding', verbs: ['create'], namespaced: true },
  { group: 'authentication.k8s.io', version: 'v1', plural: 'tokenreviews', singular: 'tokenreview', kind: 'TokenReview', verbs: ['create'] },
  { group: 'authentication.k8s.io', version: 'v1', plural: 'selfsubjectreviews', singular: 'selfsubjectreview', kind: 'SelfSubjectReview', verbs: ['create'] },
  { group: 'authorization.k8s.io', version: 'v1', plural: 'selfsubjectaccessreviews', singular: 'selfsubjectaccessreview', kind: 'SelfSubjectAccessReview', verbs: ['create'] },
  // The resource metrics API (resource-metrics.ts), read from the kubelets' summaries: `kubectl top`.
  { group: 'metrics.k8s.io', version: 'v1beta1', plural: 'nodes', singular: '', kind: 'NodeMetrics', verbs: ['get', 'list'] },
  { group: 'metrics.k8s.io', version: 'v1beta1', plural: 'pods', singular: '', kind: 'PodMetrics', verbs: ['get', 'list'], namespaced: true },
];

function aggregatedResource(def: ResourceDef): Record<string, unknown> {
  const r: Record<string, unknown> = {
    resource: def.plural,
    responseKind: { group: def.group, version: def.version, kind: def.kind },
    scope: def.namespaced ? 'Namespaced' : 'Cluster',
    singularResource: def.singular,
    verbs: [...STANDARD_VERBS],
  };
  if (def.shortNames) r.shortNames = def.shortNames;
  if (def.categories) r.categories = def.categories;
  if (def.subresources.length) {
    r.subresources = def.subresources.map((s) => {
      const i = subresourceInfo(def, s);
      return { subresource: s, responseKind: { group: i.group, version: i.version, kind: i.kind }, verbs: i.verbs };
    });
  }
  return r;
}

function groupsWithVirtual(): { group: string; version: string }[] {
  const gvs = groupVersions();
  for (const v of VIRTUAL) if (!gvs.some((g) => g.group === v.group && g.version === v.version)) gvs.push({ group: v.group, version: v.version });
  return gvs;
}

/**
 * The served group-versions by group, in discovery order: a group served at several versions
 * (autoscaling v2 and v1) is one entry, its first version the preferred one.
 */
function servedGroups(): { group: string; versions: string[] }[] {
  const out: { group: string; versions: string[] }[] = [];
  for (const gv of groupsWithVirtual()) {
    const g = out.find((x) => x.group === gv.group);
    if (g) g.versions.push(gv.version);
    else out.push({ group: gv.group, versions: [gv.version] });
  }
  return out;
}

/** The aggregated document of `/api` (core) or `/apis` (groups). */
export function aggregatedDiscovery(core: boolean): Record<string, unknown> {
  const items = servedGroups()
    .filter((g) => (g.group === '') === core)
    .map((g) => {
      const versions = g.versions.map((version) => {
        const resources: Record<string, unknown>[] = RESOURCES.filter((r) => r.group === g.group && r.version === version).map(aggregatedResource);
        for (const v of VIRTUAL.filter((x) => x.group === g.group && x.version === version)) {
          resources.push({ resource: v.plural, responseKind: { group: v.group, version: v.version, kind: v.kind }, scope: v.namespaced ? 'Namespaced' : 'Cluster', singularResource: v.singular, verbs: v.verbs });
        }
        return { version, freshness: 'Current', resources };
      });
      return { metadata: core ? { creationTimestamp: null } : { name: g.group, creationTimestamp: null }, versions };
    });
  return { kind: 'APIGroupDiscoveryList', apiVersion: 'apidiscovery.k8s.io/v2', metadata: {}, items };
}

/** Legacy `/api`. */
export function legacyApiVersions(req: IncomingMessage): Record<string, unknown> {
  return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: req.socket.localAddress ? `${req.socket.localAddress}:${req.socket.localPort}` : '' }] };
}

/** Legacy `/apis`. */
export function legacyGroupList(): Record<string, unknown> {
  return { kind: 'APIGroupList', apiVersion: 'v1', groups: servedGroups().filter((g) => g.group !== '').map(apiGroup) };
}

function apiGroup(g: { group: string; versions: string[] }): Record<string, unknown> {
  const versions = g.versions.map((version) => ({ groupVersion: `${g.group}/${version}`, version }));
  return { name: g.group, versions, preferredVersion: versions[0] };
}

/** Legacy `/apis/<group>` (APIGroup), or undefined when not served. */
export function legacyGroup(group: string): Record<string, unknown> | undefined {
  const g = servedGroups().find((x) => x.group === group);
  if (!g) return undefined;
  return { kind: 'APIGroup', apiVersion: 'v1', ...apiGroup(g) };
}

/** Legacy `APIResourceList` of `/api/v1` or `/apis/<g>/<v>`, or undefined when not served. */
export function legacyResourceList(group: string, version: string): Record<string, unknown> | undefined {
  if (!groupsWithVirtual().some((g) => g.group === group && g.version === version)) return undefined;
  const resources: Record<string, unknown>[] = [];
  for (const def of RESOURCES.filter((r) => r.group === group && r.version === version)) {
    const r: Record<string, unknown> = { name: def.plural, singularName: def.singular, namespaced: def.namespaced, kind: def.kind, verbs: [...STANDARD_VERBS] };
    if (def.shortNames) r.shortNames = def.shortNames;
    if (def.categories) r.categories = def.categories;
    resources.push(r);
    for (const s of def.subresources) {
      const i = subresourceInfo(def, s);
      const e: Record<string, unknown> = { name: `${def.plural}/${s}`, singularName: '', namespaced: def.namespaced, kind: i.kind, verbs: i.verbs };
      if (i.group !== def.group || i.version !== def.version) {
        e.group = i.group;
        e.version = i.version;
      }
      resources.push(e);
    }
  }
  for (const v of VIRTUAL.filter((x) => x.group === group && x.version === version)) {
    resources.push({ name: v.plural, singularName: v.singular, namespaced: v.namespaced === true, kind: v.kind, verbs: v.verbs });
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group ? `${group}/${version}` : version, resources };
}
