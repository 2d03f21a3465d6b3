/**
 * The EndpointSlices of a Service, as kube-controller-manager's EndpointSlice controller writes them
 * (k8s.io/endpointslice: reconciler.go, utils.go): for each address family of the Service (IPv4 unless
 * `spec.ipFamilies` says otherwise) and each distinct set of resolved ports, slices of at most
 * {@link MAX_ENDPOINTS_PER_SLICE} endpoints, each endpoint one pod: its address, `conditions` (`serving` =
 * the pod is Ready, `terminating` = it is being deleted, `ready` = serving and not terminating, or always
 * with `publishNotReadyAddresses`), `nodeName`, `zone`, `hostname` (when the pod's subdomain is the
 * Service), and `targetRef` to the pod. A Service with no endpoints keeps one empty placeholder slice, as
 * Kubernetes does. Slices are labelled `kubernetes.io/service-name` and
 * `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io` (plus the Service's own labels),
 * and controlled by the Service (the garbage collector deletes them with it).
 *
 * Names are `<service>-<5 characters>` like a generateName's, but derived from the slice's address type,
 * port set and index, so a reconcile that runs twice (a crash, a cache that has not seen its create yet)
 * writes the same slice instead of a second one. The pods' readiness is the one the Endpoints use.
 */
import { createHash } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import type { DiscoveryV1EndpointPort, V1Endpoint, V1EndpointSlice, V1Node, V1Pod, V1Service, V1ServicePort } from '@kubernetes/client-node';
import type { ControllerContext } from '../runtime/context.ts';
import { isAlreadyExists, isNotFound, isPodReady } from '../../api/index.ts';

/** `kubernetes.io/service-name`: the Service a slice belongs to. */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
/** `endpointslice.kubernetes.io/managed-by`: who writes a slice. */
export const LABEL_MANAGED_BY = 'endpointslice.kubernetes.io/managed-by';
/** `service.kubernetes.io/headless`: set (empty) on the slices of a Service without a cluster IP. */
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';
/** The value of {@link LABEL_MANAGED_BY} on the slices this controller writes (kube-controller-manager's). */
export const CONTROLLER_NAME = 'endpointslice-controller.k8s.io';
/** Endpoints per slice at most: kube-controller-manager's `--max-endpoints-per-slice` default. */
export const MAX_ENDPOINTS_PER_SLICE = 100;

/** The address types this controller writes (FQDN slices are written by hand only). */
type IpAddressType = 'IPv4' | 'IPv6';

const NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789'; // apimachinery's rand.String alphabet (no vowels, no 0/1/3)

/** A deterministic 5-character suffix from `seed`, in the alphabet of generated names. */
function suffix(seed: string): string {
  const digest = createHash('sha256').update(seed).digest();
  let out = '';
  for (let i = 0; i < 5; i++) out += NAME_ALPHABET[digest[i]! % NAME_ALPHABET.length];
  return out;
}

/** JSON with object keys sorted, so that equal slices compare equal whatever order the server kept. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).filter(([, x]) => x !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function selects(svc: V1Service, pod: V1Pod): boolean {
  const sel = svc.spec?.selector;
  if (!sel || Object.keys(sel).length === 0) return false;
  return Object.entries(sel).every(([k, v]) => pod.metadata?.labels?.[k] === v);
}

/** Kubernetes' FindPort: a named target port matches a container port of that name and protocol; a number is itself. */
function findPort(pod: V1Pod, sp: V1ServicePort): number | undefined {
  const target = (sp.targetPort ?? sp.port) as number | string;
  if (typeof target === 'number') return target;
  if (/^\d+$/.test(target)) return Number(target);
  const protocol = sp.protocol ?? 'TCP';
  for (const c of pod.spec?.containers ?? []) for (const p of c.ports ?? []) if (p.name === target && (p.protocol ?? 'TCP') === protocol) return p.containerPort;
  for (const c of pod.spec?.initContainers ?? []) {
    if (c.restartPolicy !== 'Always') continue;
    for (const p of c.ports ?? []) if (p.name === target && (p.protocol ?? 'TCP') === protocol) return p.containerPort;
  }
  return undefined;
}

/** The ports of a pod's endpoint for the Service (those that resolve), in the Service's order. */
function endpointPorts(svc: V1Service, pod: V1Pod): DiscoveryV1EndpointPort[] {
  const out: DiscoveryV1EndpointPort[] = [];
  for (const sp of svc.spec?.ports ?? []) {
    const port = findPort(pod, sp);
    if (port === undefined) continue;
    const p: DiscoveryV1EndpointPort = { name: sp.name ?? '', port, protocol: sp.protocol ?? 'TCP' };
    if (sp.appProtocol !== undefined) p.appProtocol = sp.appProtocol;
    out.push(p);
  }
  return out;
}

/** The address types the Service's slices carry: its `ipFamilies`, else the family of its cluster IP, else IPv4. */
function addressTypes(svc: V1Service): IpAddressType[] {
  const fams = (svc.spec?.ipFamilies ?? []).filter((f): f is IpAddressType => f === 'IPv4' || f === 'IPv6');
  if (fams.length > 0) return fams;
  const ip = svc.spec?.clusterIP;
  return ip && ip !== 'None' && isIPv6(ip) ? ['IPv6'] : ['IPv4'];
}

/** The pod's addresses of one family (`status.podIPs`, else `status.podIP`). */
function podAddresses(pod: V1Pod, type: IpAddressType): string[] {
  const ips = pod.status?.podIPs?.map((p) => p.ip) ?? (pod.status?.podIP ? [pod.status.podIP] : []);
  return ips.filter((ip) => (type === 'IPv4' ? isIPv4(ip) : isIPv6(ip)));
}

/** Kubernetes' podToEndpoint. */
function podToEndpoint(pod: V1Pod, svc: V1Service, addresses: string[], nodes: { get(name: string): V1Node | undefined }): V1Endpoint {
  const serving = isPodReady(pod);
  const terminating = pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null;
  const ready = svc.spec?.publishNotReadyAddresses === true || (serving && !terminating);
  const ep: V1Endpoint = {
    addresses,
    conditions: { ready, serving, terminating },
    targetRef: { kind: 'Pod', namespace: pod.metadata?.namespace, name: pod.metadata?.name, uid: pod.metadata?.uid },
  };
  const nodeName = pod.spec?.nodeName;
  if (nodeName) {
    ep.nodeName = nodeName;
    const zone = nodes.get(nodeName)?.metadata?.labels?.['topology.kubernetes.io/zone'];
    if (zone) ep.zone = zone;
  }
  if (pod.spec?.hostname && pod.spec.subdomain === svc.metadata?.name) ep.hostname = pod.spec.hostname;
  return ep;
}

/** The labels of a Service's slices: its own (but the reserved ones), the headless mark, the service name and manager. */
function sliceLabels(svc: V1Service): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const [k, v] of Object.entries(svc.metadata?.labels ?? {})) if (k !== LABEL_SERVICE_NAME && k !== LABEL_MANAGED_BY && k !== LABEL_HEADLESS) labels[k] = v;
  const ip = svc.spec?.clusterIP;
  if (!ip || ip === 'None') labels[LABEL_HEADLESS] = '';
  labels[LABEL_SERVICE_NAME] = svc.metadata?.name ?? '';
  labels[LABEL_MANAGED_BY] = CONTROLLER_NAME;
  return labels;
}

/**
 * The slices a Service should have, by name: each with `metadata` (name, namespace, labels, the Service as
 * controlling owner), `addressType`, `endpoints` sorted by pod name, and `ports` (none on the placeholder).
 * Pods that are terminal (Succeeded, Failed) or have no address of the slice's family are left out;
 * terminating pods stay, marked `terminating`.
 * @param svc the Service (with a selector)
 * @param pods the pods of its namespace (those it selects are used)
 * @param nodes the nodes, for each endpoint's zone
 */
export function desiredSlices(svc: V1Service, pods: readonly V1Pod[], nodes: { get(name: string): V1Node | undefined } = { get: () => undefined }): V1EndpointSlice[] {
  const name = svc.metadata?.name ?? '';
  const namespace = svc.metadata?.namespace ?? 'default';
  const selected = pods
    .filter((p) => selects(svc, p) && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed')
    .sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  const groups = new Map<string, { type: IpAddressType; ports: DiscoveryV1EndpointPort[]; endpoints: V1Endpoint[] }>();
  for (const type of addressTypes(svc)) {
    for (const pod of selected) {
      const addresses = podAddresses(pod, type);
      if (addresses.length === 0) continue;
      const ports = endpointPorts(svc, pod);
      const key = `${type}/${canonical(ports)}`;
      const group = groups.get(key) ?? { type, ports, endpoints: [] };
      group.endpoints.push(podToEndpoint(pod, svc, addresses, nodes));
      groups.set(key, group);
    }
  }
  const meta = (sliceName: string) => ({
    name: sliceName,
    namespace,
    labels: sliceLabels(svc),
    ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name, uid: svc.metadata?.uid ?? '', controller: true, blockOwnerDeletion: true }],
  });
  const out: V1EndpointSlice[] = [];
  for (const [key, g] of groups) {
    for (let i = 0; i * MAX_ENDPOINTS_PER_SLICE < g.endpoints.length; i++) {
      const sliceName = `${name}-${suffix(i === 0 ? key : `${key}/${i}`)}`;
      out.push({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: meta(sliceName), addressType: g.type, endpoints: g.endpoints.slice(i * MAX_ENDPOINTS_PER_SLICE, (i + 1) * MAX_ENDPOINTS_PER_SLICE), ports: g.ports });
    }
  }
  if (out.length === 0) {
    const type = addressTypes(svc)[0]!;
    out.push({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: meta(`${name}-${suffix(`${type}/placeholder`)}`), addressType: type, endpoints: [] });
  }
  return out;
}

/** Whether `existing` already says what `want` says (labels, owner, address type, endpoints, ports). */
function sameSlice(existing: V1EndpointSlice, want: V1EndpointSlice): boolean {
  const view = (s: V1EndpointSlice) =>
    canonical([
      s.metadata?.labels ?? {},
      (s.metadata?.ownerReferences ?? []).map((o) => [o.apiVersion, o.kind, o.name, o.uid, o.controller ?? false]),
      s.addressType,
      (s.endpoints ?? []).map((e) => ({ ...e, targetRef: e.targetRef ? { ...e.targetRef, resourceVersion: undefined } : undefined })),
      s.ports ?? [],
    ]);
  return view(existing) === view(want);
}

/** The slices of `namespace/service` this controller manages, from the cache. */
export function managedSlices(ctx: ControllerContext, namespace: string, service: string): V1EndpointSlice[] {
  return ctx.cache.endpointSlices
    .list(namespace)
    .filter((s) => s.metadata?.labels?.[LABEL_SERVICE_NAME] === service && s.metadata?.labels?.[LABEL_MANAGED_BY] === CONTROLLER_NAME);
}

/**
 * Brings the Service's slices to {@link desiredSlices}: creates the missing ones, replaces those that differ
 * (with the cached `resourceVersion`: a concurrent change is a 409, retried by the worker), deletes the
 * others this controller manages for the Service. With `svc` undefined or without a selector, only deletes.
 * @returns whether to look again shortly (a create met a slice the cache has not seen yet)
 * @throws ApiError for a write that failed otherwise (the worker retries with back-off)
 */
export async function reconcileSlices(ctx: ControllerContext, namespace: string, service: string, svc: V1Service | undefined): Promise<{ requeue: boolean }> {
  const existing = managedSlices(ctx, namespace, service);
  const hasSelector = svc?.spec?.selector !== undefined && Object.keys(svc.spec.selector).length > 0;
  const want = svc && hasSelector ? desiredSlices(svc, ctx.cache.pods.list(namespace), ctx.cache.nodes) : [];
  const wanted = new Set(want.map((s) => s.metadata?.name));
  let requeue = false;
  for (const slice of want) {
    const name = slice.metadata!.name!;
    const cur = existing.find((s) => s.metadata?.name === name);
    if (!cur) {
      try {
        await ctx.api.createEndpointSlice(namespace, slice);
      } catch (err: unknown) {
        if (!isAlreadyExists(err)) throw err;
        requeue = true;
      }
      continue;
    }
    if (cur.addressType !== slice.addressType) {
      // addressType is immutable: delete now, create on the next pass.
      await deleteSlice(ctx, namespace, name);
      requeue = true;
      continue;
    }
    if (sameSlice(cur, slice)) continue;
    try {
      await ctx.api.replaceEndpointSlice(namespace, name, { ...slice, metadata: { ...slice.metadata, resourceVersion: cur.metadata?.resourceVersion } });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
      requeue = true;
    }
  }
  for (const s of existing) if (!wanted.has(s.metadata?.name)) await deleteSlice(ctx, namespace, s.metadata?.name ?? '');
  return { requeue };
}

async function deleteSlice(ctx: ControllerContext, namespace: string, name: string): Promise<void> {
  try {
    await ctx.api.deleteEndpointSlice(namespace, name);
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
}
