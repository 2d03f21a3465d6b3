/**
 * The DaemonSet sync, as far as drains need it (`kubectl drain --ignore-daemonsets` finds the DaemonSet of
 * each such pod): one pod per Ready node that matches the template's `nodeSelector`, bound directly to the
 * node (DaemonSet pods tolerate cordons), pods on nodes that no longer qualify removed, and the status.
 * No rolling update of DaemonSet pods: a changed template applies to new pods.
 */
import type { V1DaemonSet, V1Node, V1Pod } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { isConflict, isNotFound, matchesSelector, tolerates, isPodActive, isPodReady, nodeReadyStatus } from '../../api/index.ts';
import { podFromTemplate } from '../runtime/pods.ts';
import { type Expectations, ownedPods } from './replicaset.ts';

function eligible(ds: V1DaemonSet, node: V1Node): boolean {
  if (nodeReadyStatus(node) !== 'True') return false;
  const probe: V1Pod = { spec: ds.spec?.template.spec ?? { containers: [] } };
  if (!matchesSelector(probe, node)) return false;
  const tolerations = ds.spec?.template.spec?.tolerations ?? [];
  return (node.spec?.taints ?? []).every(
    (t) => t.effect === 'PreferNoSchedule' || t.key.startsWith('node.kubernetes.io/') || tolerations.some((x) => tolerates(x, t)),
  );
}

/** Reconciles the DaemonSet `namespace/name`. */
export async function reconcileDaemonSet(key: string, ctx: ControllerContext, exp: Expectations): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const ds = ctx.cache.daemonSets.get(name, namespace);
  if (!ds || ds.metadata?.deletionTimestamp) return undefined;
  const now = ctx.clock.now();
  const pods = ownedPods(ctx, namespace, ds.metadata?.uid).filter(isPodActive);
  const byNode = new Map<string, V1Pod[]>();
  for (const p of pods) byNode.set(p.spec?.nodeName ?? '', [...(byNode.get(p.spec?.nodeName ?? '') ?? []), p]);
  const nodes = ctx.cache.nodes.list().filter((n) => eligible(ds, n));
  const wanted = new Set(nodes.map((n) => n.metadata?.name ?? ''));
  for (const n of wanted) {
    exp.observe(`${key}@${n}`, byNode.get(n) ?? [], now);
    if ((byNode.get(n)?.length ?? 0) > 0 || exp.pendingCreates(`${key}@${n}`) > 0) continue;
    const pod = podFromTemplate(ds, { apiVersion: 'apps/v1', kind: 'DaemonSet' });
    pod.spec = { ...pod.spec!, nodeName: n };
    const created = await ctx.api.createPod(namespace, pod);
    exp.created(`${key}@${n}`, created.metadata?.uid ?? `unknown-${now}`, now);
  }
  for (const [n, list] of byNode) {
    const extra = wanted.has(n) ? list.slice(1) : list;
    for (const p of extra) {
      try {
        await ctx.api.deletePod(namespace, p.metadata?.name ?? '', { uid: p.metadata?.uid });
      } catch (err: unknown) {
        if (!isNotFound(err) && !isConflict(err)) throw err;
      }
    }
  }
  const scheduled = [...byNode.keys()].filter((n) => wanted.has(n)).length;
  const ready = pods.filter((p) => wanted.has(p.spec?.nodeName ?? '') && isPodReady(p)).length;
  const status = {
    desiredNumberScheduled: wanted.size,
    currentNumberScheduled: scheduled,
    numberMisscheduled: [...byNode.keys()].filter((n) => !wanted.has(n)).length,
    numberReady: ready,
    numberAvailable: ready,
    updatedNumberScheduled: scheduled,
    observedGeneration: ds.metadata?.generation ?? 1,
  };
  const cur = (ds.status ?? {}) as Record<string, unknown>;
  if (Object.entries(status).some(([k, v]) => (cur[k] ?? 0) !== v)) {
    try {
      await ctx.api.patchDaemonSetStatus(namespace, name, { status });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
  }
  return undefined;
}
