/**
 * The endpoints controller's wiring: Services → their key; pods → every Service in their namespace that selects
 * them; a deleted Endpoints, or a changed or deleted EndpointSlice this controller manages → its Service.
 */
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { reconcileEndpoints } from './reconcile.ts';
import { CONTROLLER_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME } from './slices.ts';

/** Builds the endpoints controller and subscribes it. */
export function newEndpointsController(ctx: ControllerContext, informers: Informers): Controller {
  // An API server without discovery.k8s.io/v1 (the informer found it unavailable) gets Endpoints only.
  const c = new Controller('endpoints', (k) => reconcileEndpoints(k, ctx, { slices: !informers.unavailable('endpointSlices') }), { clock: ctx.clock, log: ctx.log, workers: 2 });
  informers.on('services', (verb, svc: V1Service) => {
    if (verb !== 'delete') c.enqueue(keyOf(svc));
  });
  informers.on('endpoints', (verb, ep) => {
    if (verb === 'delete' && ctx.cache.services.get(ep.metadata?.name ?? '', ep.metadata?.namespace)) c.enqueue(keyOf(ep));
  });
  const listed = new PodsInSlices();
  informers.on('endpointSlices', (verb, slice) => {
    const labels = slice.metadata?.labels;
    const service = labels?.[LABEL_SERVICE_NAME];
    if (!service || labels?.[LABEL_MANAGED_BY] !== CONTROLLER_NAME) return;
    listed.set(slice, verb === 'delete');
    if (verb !== 'add') c.enqueue(`${slice.metadata?.namespace ?? ''}/${service}`);
  });
  informers.on('pods', (_verb, pod: V1Pod) => {
    const ns = pod.metadata?.namespace;
    for (const svc of ctx.cache.services.list(ns)) {
      const sel = svc.spec?.selector;
      if (sel && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => pod.metadata?.labels?.[k] === v)) c.enqueue(keyOf(svc));
    }
    // A pod whose labels no longer match a Service is not found above: the slices listing it name that Service.
    for (const service of listed.servicesOf(ns ?? '', pod.metadata?.name ?? '')) c.enqueue(`${ns}/${service}`);
  });
  return c;
}

/**
 * Which Services' managed slices list each pod (`namespace/pod` → slice name → Service), kept from the slice
 * informer's events: a pod relabelled out of a Service's selector leads back to that Service.
 */
export class PodsInSlices {
  readonly #bySlice = new Map<string, { service: string; pods: string[] }>();
  readonly #byPod = new Map<string, Map<string, string>>();

  /** Records `slice` (or forgets it, `gone`). */
  set(slice: V1EndpointSlice, gone: boolean): void {
    const ns = slice.metadata?.namespace ?? '';
    const sliceKey = `${ns}/${slice.metadata?.name ?? ''}`;
    for (const pod of this.#bySlice.get(sliceKey)?.pods ?? []) {
      const m = this.#byPod.get(pod);
      m?.delete(sliceKey);
      if (m?.size === 0) this.#byPod.delete(pod);
    }
    this.#bySlice.delete(sliceKey);
    if (gone) return;
    const service = slice.metadata?.labels?.[LABEL_SERVICE_NAME] ?? '';
    const pods = (slice.endpoints ?? []).filter((e) => e.targetRef?.kind === 'Pod' && e.targetRef.name).map((e) => `${ns}/${e.targetRef!.name}`);
    this.#bySlice.set(sliceKey, { service, pods });
    for (const pod of pods) {
      const m = this.#byPod.get(pod) ?? new Map<string, string>();
      m.set(sliceKey, service);
      this.#byPod.set(pod, m);
    }
  }

  /** The Services whose slices list `namespace/name`. */
  servicesOf(namespace: string, name: string): Set<string> {
    return new Set(this.#byPod.get(`${namespace}/${name}`)?.values() ?? []);
  }
}
