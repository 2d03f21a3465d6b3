/** The node lifecycle controller's wiring: nodes (deleted ones too), their Leases, and pods bound to a node with no Node object → the node's name. */
import type { Informers } from '../runtime/cache.ts';
import { Controller } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { LEASE_RENEW_INTERVAL_MS, reconcileNode } from './reconcile.ts';

/**
 * Builds the node lifecycle controller and subscribes it. A `nodeMonitorGracePeriodMs` at or below the
 * kubelet's Lease renew interval ({@link LEASE_RENEW_INTERVAL_MS}) is not refused (short values serve tests of
 * node loss) but logged as a warning at start: with it a healthy node turns Unknown between two renewals.
 */
export function newNodeLifecycleController(ctx: ControllerContext, informers: Informers): Controller {
  const grace = ctx.timings.nodeMonitorGracePeriodMs;
  if (grace <= LEASE_RENEW_INTERVAL_MS) {
    ctx.log.warn(
      { nodeMonitorGracePeriodMs: grace, leaseRenewIntervalMs: LEASE_RENEW_INTERVAL_MS },
      `--node-monitor-grace-period ${grace / 1000}s is not longer than the kubelet's Lease renew interval (${LEASE_RENEW_INTERVAL_MS / 1000}s): healthy nodes will flap to NotReady between renewals; use more than ${LEASE_RENEW_INTERVAL_MS / 1000}s (default 40s)`,
    );
  }
  const c = new Controller('nodelifecycle', (k) => reconcileNode(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 1 });
  informers.on('nodes', (verb, node) => {
    if (verb === 'delete') ctx.state.leaseSeen.delete(node.metadata?.name ?? '');
    // A deleted node too: the pods still bound to it go after the grace period (reconcileNode).
    c.enqueue(node.metadata?.name ?? '');
  });
  // A pod bound to a node that has no Node object (deleted, never registered): the node's key, likewise.
  informers.on('pods', (verb, pod) => {
    const node = pod.spec?.nodeName;
    if (verb !== 'delete' && node && !ctx.cache.nodes.get(node)) c.enqueue(node);
  });
  informers.on('leases', (_verb, lease) => {
    if (lease.metadata?.namespace === 'kube-node-lease' && ctx.cache.nodes.get(lease.metadata?.name ?? '')) c.enqueue(lease.metadata?.name ?? '');
  });
  return c;
}
