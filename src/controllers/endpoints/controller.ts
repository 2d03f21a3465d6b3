/**
 * The endpoints controller's wiring: Services → their key; pods → every Service in their namespace that selects
 * them; a deleted Endpoints, or a changed or deleted EndpointSlice this controller manages → its Service.
 */
import type { V1Pod, V1Service } from '@kubernetes/client-node';
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
  informers.on('endpointSlices', (verb, slice) => {
    const labels = slice.metadata?.labels;
    const service = labels?.[LABEL_SERVICE_NAME];
    if (verb === 'add' || !service || labels?.[LABEL_MANAGED_BY] !== CONTROLLER_NAME) return;
    c.enqueue(`${slice.metadata?.namespace ?? ''}/${service}`);
  });
  informers.on('pods', (_verb, pod: V1Pod) => {
    for (const svc of ctx.cache.services.list(pod.metadata?.namespace)) {
      const sel = svc.spec?.selector;
      if (sel && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => pod.metadata?.labels?.[k] === v)) c.enqueue(keyOf(svc));
    }
  });
  return c;
}
