/**
 * The endpoints controller: a Service with a selector gets an Endpoints object of the same name listing its
 * pods' addresses: ready pods under `addresses`, others (a frozen pod during a move is not Ready) under
 * `notReadyAddresses`, with the Service's ports resolved to the pods' container ports (by name or number);
 * and, with the same readiness, its `discovery.k8s.io/v1` EndpointSlices (slices.ts), which
 * `kubectl describe service` reads.
 */
import type { CoreV1EndpointPort as V1EndpointPort, V1EndpointAddress, V1EndpointSubset, V1Endpoints, V1Pod, V1Service, V1ServicePort } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { isAlreadyExists, isNotFound, isPodActive, isPodReady } from '../../api/index.ts';
import { reconcileSlices } from './slices.ts';

function selects(svc: V1Service, pod: V1Pod): boolean {
  const sel = svc.spec?.selector;
  if (!sel || Object.keys(sel).length === 0) return false;
  return Object.entries(sel).every(([k, v]) => pod.metadata?.labels?.[k] === v);
}

function resolvePort(sp: V1ServicePort, pod: V1Pod): number | undefined {
  const target = sp.targetPort ?? sp.port;
  if (typeof target === 'number') return target;
  if (/^\d+$/.test(String(target))) return Number(target);
  for (const c of pod.spec?.containers ?? []) for (const p of c.ports ?? []) if (p.name === target) return p.containerPort;
  return undefined;
}

/** The subsets for a Service's pods, grouped by identical resolved ports, in a stable order. */
export function endpointSubsets(svc: V1Service, pods: readonly V1Pod[]): V1EndpointSubset[] {
  const groups = new Map<string, V1EndpointSubset>();
  const sorted = [...pods].filter((p) => selects(svc, p) && isPodActive(p) && p.status?.podIP).sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  for (const pod of sorted) {
    const ports: V1EndpointPort[] = [];
    for (const sp of svc.spec?.ports ?? []) {
      const port = resolvePort(sp, pod);
      if (port !== undefined) ports.push({ name: sp.name, port, protocol: sp.protocol ?? 'TCP' });
    }
    const k = JSON.stringify(ports);
    const subset: V1EndpointSubset = groups.get(k) ?? { addresses: [] as V1EndpointAddress[], notReadyAddresses: [] as V1EndpointAddress[], ports };
    const address = {
      ip: pod.status!.podIP!,
      nodeName: pod.spec?.nodeName,
      targetRef: { kind: 'Pod', namespace: pod.metadata?.namespace, name: pod.metadata?.name, uid: pod.metadata?.uid },
    };
    if (isPodReady(pod)) subset.addresses!.push(address);
    else subset.notReadyAddresses!.push(address);
    groups.set(k, subset);
  }
  return [...groups.values()].map((s) => ({
    ...(s.addresses!.length ? { addresses: s.addresses } : {}),
    ...(s.notReadyAddresses!.length ? { notReadyAddresses: s.notReadyAddresses } : {}),
    ports: s.ports,
  }));
}

/**
 * Reconciles the Endpoints and the EndpointSlices of the Service `namespace/name`.
 * @param opts.slices whether to write EndpointSlices too (false against an API server without them) @default true
 * @throws ApiError for a write that failed (the worker retries with back-off)
 */
export async function reconcileEndpoints(key: string, ctx: ControllerContext, opts: { slices?: boolean } = {}): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const svc = ctx.cache.services.get(name, namespace);
  const requeueEndpoints = await reconcileEndpointsObject(ctx, namespace, name, svc);
  const { requeue } = opts.slices === false ? { requeue: false } : await reconcileSlices(ctx, namespace, name, svc);
  return requeueEndpoints || requeue ? { requeueAfterMs: 200 } : undefined;
}

/** The Endpoints object of the Service; answers whether to look again shortly. */
async function reconcileEndpointsObject(ctx: ControllerContext, namespace: string, name: string, svc: V1Service | undefined): Promise<boolean> {
  if (!svc?.spec?.selector || Object.keys(svc.spec.selector).length === 0) return false; // the GC removes owned endpoints
  const subsets = endpointSubsets(svc, ctx.cache.pods.list(namespace));
  const existing = ctx.cache.endpoints.get(name, namespace);
  const body: V1Endpoints = {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: { name, namespace, labels: svc.metadata?.labels, resourceVersion: existing?.metadata?.resourceVersion },
    subsets,
  };
  if (!existing) {
    try {
      await ctx.api.createEndpoints(namespace, body);
    } catch (err: unknown) {
      if (!isAlreadyExists(err)) throw err;
      return true;
    }
    return false;
  }
  if (JSON.stringify(existing.subsets ?? []) === JSON.stringify(subsets)) return false;
  try {
    await ctx.api.replaceEndpoints(namespace, name, body);
  } catch (err: unknown) {
    if (isNotFound(err)) return true;
    throw err;
  }
  return false;
}
