/**
 * The ServiceAccount controller (Kubernetes' `serviceaccount-controller`): every namespace that is
 * not being deleted has a ServiceAccount `default`. It watches namespaces and ServiceAccounts; a
 * namespace made by anyone gets its `default` account, and a deleted `default` is made again.
 * (It ran inside the API server until issue 25; the API server still makes the system namespaces'
 * accounts at its bootstrap.)
 */
import type { V1Namespace, V1ServiceAccount } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { isAlreadyExists } from '../../api/index.ts';

/** The account every namespace gets. */
export const DEFAULT_SERVICE_ACCOUNT = 'default';

/**
 * Makes the `default` ServiceAccount of namespace `name` unless the cache has it, the namespace is
 * gone or being deleted. An `AlreadyExists` answer is success.
 * @throws ApiError for another error answer (the work queue retries)
 */
export async function reconcileServiceAccount(name: string, ctx: ControllerContext): Promise<undefined> {
  const ns = ctx.cache.namespaces.get(name) as V1Namespace | undefined;
  if (!ns || ns.metadata?.deletionTimestamp || ns.status?.phase === 'Terminating') return undefined;
  if (ctx.cache.serviceAccounts.get(DEFAULT_SERVICE_ACCOUNT, name)) return undefined;
  try {
    await ctx.api.createServiceAccount(name, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: DEFAULT_SERVICE_ACCOUNT, namespace: name } });
  } catch (err: unknown) {
    if (!isAlreadyExists(err)) throw err;
  }
  return undefined;
}

/** Builds the ServiceAccount controller and subscribes it: namespaces → their name; a `default` account deleted → its namespace. */
export function newServiceAccountController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('serviceaccount', (k) => reconcileServiceAccount(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 1 });
  informers.on('namespaces', (verb, ns: V1Namespace) => {
    if (verb !== 'delete') c.enqueue(ns.metadata?.name ?? '');
  });
  informers.on('serviceAccounts', (verb, sa: V1ServiceAccount) => {
    if (verb === 'delete' && sa.metadata?.name === DEFAULT_SERVICE_ACCOUNT) c.enqueue(sa.metadata?.namespace ?? '');
  });
  return c;
}
