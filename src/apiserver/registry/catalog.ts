/**
 * Every resource the server serves, and lookups by URL parts. Order here is discovery order.
 */
import { horizontalpodautoscalers, horizontalpodautoscalersV1 } from './autoscaling/index.ts';
import { deployments, replicasets, daemonsets, statefulsets, controllerrevisions } from './apps/index.ts';
import { cronjobs } from './batch/cronjobs.ts';
import { jobs } from './batch/index.ts';
import { checkpoints } from './checkpoints/index.ts';
import { configmaps, endpoints, events, leases, replicationcontrollers, secrets, serviceaccounts, services } from './core/index.ts';
import { endpointslices } from './discovery/index.ts';
import { eventsV1 } from './events/index.ts';
import { modules } from './modules/index.ts';
import { namespaces, nodes } from './nodes/index.ts';
import { pods } from './pods/index.ts';
import { poddisruptionbudgets } from './policy/index.ts';
import { runtimeclasses } from './runtimeclasses/index.ts';
import { limitranges, resourcequotas } from './quota/index.ts';
import { type ResourceDef, storageKey } from './types.ts';
import { RBAC_RESOURCES } from '../auth/resources.ts';

/** All resource definitions. */
export const RESOURCES: readonly ResourceDef[] = [
  pods,
  nodes,
  namespaces,
  events,
  services,
  endpoints,
  configmaps,
  secrets,
  serviceaccounts,
  deployments,
  replicasets,
  daemonsets,
  jobs,
  cronjobs,
  leases,
  poddisruptionbudgets,
  checkpoints,
  modules,
  eventsV1,
  endpointslices,
  replicationcontrollers,
  ...RBAC_RESOURCES,
  runtimeclasses,
  statefulsets,
  controllerrevisions,
  resourcequotas,
  limitranges,
  // v2 first: the stored and preferred version.
  horizontalpodautoscalers,
  horizontalpodautoscalersV1,
];

const byPath = new Map<string, ResourceDef>();
const byKey = new Map<string, ResourceDef>();
const byKind = new Map<string, ResourceDef>();
for (const r of RESOURCES) {
  byPath.set(`${r.group}/${r.version}/${r.plural}`, r);
  if (!byKey.has(storageKey(r))) byKey.set(storageKey(r), r);
  if (!byKind.has(`${r.group}/${r.kind}`)) byKind.set(`${r.group}/${r.kind}`, r);
}

/** The definition at `/api[s]/<group>/<version>/<plural>`, if served. */
export function findResource(group: string, version: string, plural: string): ResourceDef | undefined {
  return byPath.get(`${group}/${version}/${plural}`);
}

/** The definition by storage key (`pods`, `deployments.apps`). */
export function resourceByKey(key: string): ResourceDef | undefined {
  return byKey.get(key);
}

/** The definition by group and kind (for owner references). */
export function resourceByKind(group: string, kind: string): ResourceDef | undefined {
  return byKind.get(`${group}/${kind}`);
}

/** The group-versions served, in discovery order (`''` is the core group). */
export function groupVersions(): { group: string; version: string }[] {
  const seen = new Set<string>();
  const out: { group: string; version: string }[] = [];
  for (const r of RESOURCES) {
    const k = `${r.group}/${r.version}`;
    if (!seen.has(k)) {
      seen.add(k);
      out.push({ group: r.group, version: r.version });
    }
  }
  return out;
}
