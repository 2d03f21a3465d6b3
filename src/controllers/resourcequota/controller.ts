/**
 * The ResourceQuota controller (Kubernetes' `resourcequota-controller`): each quota's `status.hard` is its
 * `spec.hard` and `status.used` the namespace's usage of those resources (src/api/quota.ts counts it, as the
 * API server's quota admission does), so `kubectl describe quota` and `kubectl get quota` show it. Pods and
 * Services come from the caches; other counted kinds (`configmaps`, `count/deployments.apps`, ...) are listed
 * through the API at each sync. A quota is synced when it changes, when a pod of its namespace comes, goes or
 * ends, and every {@link RESYNC_MS} (what no event brings: a ConfigMap made).
 */
import type { KubernetesObject, V1Pod, V1ResourceQuota } from '@kubernetes/client-node';
import { formatQuantity, isNotFound, namespaceUsage, quotaSources } from '../../api/index.ts';
import type { Informers } from '../runtime/cache.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { Controller, keyOf, type ReconcileResult, splitKey } from '../runtime/controller.ts';

/** How often a quota is counted again without an event, ms. */
export const RESYNC_MS = 15_000;

/** Syncs the ResourceQuota `namespace/name`. */
export async function reconcileResourceQuota(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const q = ctx.cache.resourceQuotas.get(name, namespace);
  if (!q || q.metadata?.deletionTimestamp) return undefined;
  const hard = (q.spec?.hard ?? {}) as Record<string, string>;
  const tracked = Object.keys(hard);
  const lists = new Map<string, readonly KubernetesObject[]>();
  for (const k of quotaSources(tracked)) {
    if (k === 'pods') lists.set(k, ctx.cache.pods.list(namespace));
    else if (k === 'services') lists.set(k, ctx.cache.services.list(namespace));
    else lists.set(k, await ctx.api.listNamespaced(namespace, k));
  }
  const usage = namespaceUsage(tracked, (k) => lists.get(k) ?? [], q.spec?.scopes ?? []);
  const used = Object.fromEntries(Object.entries(usage).map(([k, a]) => [k, formatQuantity(a)]));
  const cur = q.status ?? {};
  const same = (a: Record<string, string> | undefined, b: Record<string, string>) =>
    Object.keys(a ?? {}).length === Object.keys(b).length && Object.entries(b).every(([k, v]) => a?.[k] === v);
  if (!same(cur.hard as Record<string, string>, hard) || !same(cur.used as Record<string, string>, used)) {
    // A merge patch merges maps: resources no longer tracked are removed with null.
    const drop = (m: Record<string, unknown> | undefined, keep: Record<string, string>) => Object.fromEntries(Object.keys(m ?? {}).filter((k) => !(k in keep)).map((k) => [k, null]));
    try {
      await ctx.api.patchResourceQuotaStatus(namespace, name, {
        status: { hard: { ...drop(cur.hard, hard), ...hard }, used: { ...drop(cur.used, used), ...used } },
      });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
  }
  return { requeueAfterMs: RESYNC_MS };
}

/** Builds the ResourceQuota controller: quotas → themselves; a pod added, deleted, ended or being deleted → its namespace's quotas. */
export function newResourceQuotaController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('resourcequota', (k) => reconcileResourceQuota(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 1 });
  informers.on('resourceQuotas', (verb, q: V1ResourceQuota) => {
    if (verb !== 'delete') c.enqueue(keyOf(q));
  });
  const counts = new Map<string, boolean>();
  const touch = (ns: string) => {
    for (const q of ctx.cache.resourceQuotas.list(ns)) c.enqueue(keyOf(q));
  };
  informers.on('pods', (verb, pod: V1Pod) => {
    const ns = pod.metadata?.namespace ?? 'default';
    const key = `${ns}/${pod.metadata?.name}`;
    const now = verb !== 'delete' && pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed' && !pod.metadata?.deletionTimestamp;
    const was = counts.get(key);
    if (verb === 'delete') counts.delete(key);
    else counts.set(key, now);
    if (verb !== 'update' || was !== now) touch(ns);
  });
  informers.on('services', (verb, svc) => {
    if (verb !== 'update') touch(svc.metadata?.namespace ?? 'default');
  });
  return c;
}
