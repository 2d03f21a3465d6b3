/** The node lifecycle controller's wiring: nodes and their Leases → the node's name. */
import type { Informers } from '../runtime/cache.ts';
import { Controller } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { reconcileNode } from './reconcile.ts';

/** Builds the node lifecycle controller and subscribes it. */
export function newNodeLifecycleController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('nodelifecycle', (k) => reconcileNode(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 1 });
  informers.on('nodes', (verb, node) => {
    if (verb !== 'delete') c.enqueue(node.metadata?.name ?? '');
    else ctx.state.leaseSeen.delete(node.metadata?.name ?? '');
  });
  informers.on('leases', (_verb, lease) => {
    if (lease.metadata?.namespace === 'kube-node-lease' && ctx.cache.nodes.get(lease.metadata?.name ?? '')) c.enqueue(lease.metadata?.name ?? '');
  });
  return c;
}
