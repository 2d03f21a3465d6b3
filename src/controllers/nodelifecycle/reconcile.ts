/**
 * The node lifecycle controller (seed "Periodic checkpoints and node loss"; Kubernetes' nodelifecycle):
 *
 * - A node whose Lease (`kube-node-lease/<node>`) is not renewed for `nodeMonitorGracePeriodMs`, judged by
 *   this controller's own clock (the time it saw the renewal change, not the node's timestamps), turns
 *   `Ready=Unknown` (reason `NodeStatusUnknown`) and gets the `node.kubernetes.io/unreachable` taints
 *   (`NoSchedule`, `NoExecute`). A node reporting `Ready=False` gets `node.kubernetes.io/not-ready:NoSchedule`.
 * - `nodeLossRestoreDelayMs` (5 s) after it turned Unknown, a pod with a Saved periodic checkpoint (and a
 *   policy other than `Never`) is replaced, unbound, with `kube32.io/restore-from` naming the latest one
 *   (owners or not), so the node the scheduler picks restores it (issue 26: the fast path; a kube32-sim
 *   worker that cannot renew its Lease for the grace period has fenced its pods by then, so the pod never
 *   runs twice: src/kubelet/fence.ts). `podEvictionTimeoutMs` (5 min) after it turned Unknown, any other pod
 *   is deleted (its owner makes a new one).
 *   DaemonSet pods stay. Evictions stop while more than 55 % of at least 3 nodes look unhealthy (a partition
 *   of the control plane rather than node losses).
 * - A node that renews its Lease again loses the controller's taints.
 * - A node that is gone (its Node deleted, `kubectl delete node`, or never registered) while pods are still
 *   bound to it (Kubernetes' PodGC of orphaned pods): `nodeMonitorGracePeriodMs` after this controller first
 *   saw it so, its pods with a Saved periodic checkpoint restore elsewhere, and every other pod bound to it
 *   (DaemonSet, terminating and finished ones included) is deleted at once, so owners make new ones and
 *   Services stop routing to it. A kube32-sim that still runs registers its Node again within a Lease
 *   renewal, and one that cannot reach the API server has fenced its pods by then.
 */
import type { V1Node, V1NodeCondition, V1Taint } from '@kubernetes/client-node';
import { latestPeriodic } from '../checkpoint/retention.ts';
import { replacePod } from '../checkpoint/move.ts';
import { withFeosPodId } from '../checkpoint/microvm.ts';
import type { ReconcileResult } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { isConflict, isNotFound, isDaemonSetPod, isPodActive, migrationPolicy, nodeReadyStatus } from '../../api/index.ts';

export const UNREACHABLE = 'node.kubernetes.io/unreachable';
export const NOT_READY = 'node.kubernetes.io/not-ready';

/**
 * How often a kube32-sim kubelet renews its node Lease, in ms (10 s, as Kubernetes' kubelet). A
 * `nodeMonitorGracePeriodMs` must be larger than this, or healthy nodes turn Unknown between renewals.
 */
export const LEASE_RENEW_INTERVAL_MS = 10_000;

/**
 * The node's liveness signal: its Lease's renew time together with its Ready condition's heartbeat.
 * Either one changing counts as a probe (as Kubernetes' node lifecycle controller takes the later of the
 * Lease's `renewTime` and Ready's `lastHeartbeatTime`): a node that comes back and posts Ready=True is alive
 * even while its Lease still holds the renewal from before it was lost.
 */
function signal(ctx: ControllerContext, node: V1Node): string | undefined {
  const name = node.metadata?.name ?? '';
  const lease = ctx.cache.leases.get(name, 'kube-node-lease');
  const renew = lease?.spec?.renewTime;
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  const heartbeat = ready?.lastHeartbeatTime !== undefined ? String(ready.lastHeartbeatTime) : undefined;
  if (renew === undefined && heartbeat === undefined) return undefined;
  return `${renew === undefined ? '' : `${String(renew)}|${lease?.metadata?.resourceVersion ?? ''}`}#${heartbeat ?? ''}`;
}

/** How long the node has been silent, by this controller's clock. */
export function silentForMs(ctx: ControllerContext, node: V1Node): number {
  const name = node.metadata?.name ?? '';
  const now = ctx.clock.now();
  const sig = signal(ctx, node) ?? '';
  const seen = ctx.state.leaseSeen.get(name);
  if (!seen || seen.renew !== sig) {
    ctx.state.leaseSeen.set(name, { renew: sig, at: now });
    return 0;
  }
  return now - seen.at;
}

function withTaints(node: V1Node, wanted: V1Taint[], managed: string[]): V1Taint[] | undefined {
  const current = node.spec?.taints ?? [];
  const keep = current.filter((t) => !managed.includes(t.key));
  const next = [...keep, ...wanted.map((w) => current.find((t) => t.key === w.key && t.effect === w.effect) ?? w)];
  const same = next.length === current.length && next.every((t) => current.some((c) => c.key === t.key && c.effect === t.effect));
  return same ? undefined : next;
}

function unhealthy(ctx: ControllerContext, node: V1Node): boolean {
  return nodeReadyStatus(node) !== 'True' || silentForMs(ctx, node) >= ctx.timings.nodeMonitorGracePeriodMs;
}

/** Reconciles the node `name`. */
export async function reconcileNode(name: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const node = ctx.cache.nodes.get(name);
  if (!node) {
    ctx.state.leaseSeen.delete(name);
    return reconcileGoneNode(name, ctx);
  }
  ctx.state.nodeGoneSince.delete(name);
  const now = ctx.clock.now();
  const grace = ctx.timings.nodeMonitorGracePeriodMs;
  const silent = silentForMs(ctx, node);
  const nowIso = new Date(now).toISOString();

  if (silent < grace) {
    // Alive: the kubelet reports its own conditions; keep only the not-ready taint in step with them.
    const ready = nodeReadyStatus(node);
    const wanted: V1Taint[] = ready === 'False' ? [{ key: NOT_READY, effect: 'NoSchedule', timeAdded: nowIso as unknown as Date }] : [];
    const taints = ready === 'Unknown' ? undefined : withTaints(node, wanted, [UNREACHABLE, NOT_READY]);
    if (taints) await ctx.api.patchNode(name, { spec: { taints } });
    return { requeueAfterMs: grace - silent };
  }

  // Silent for the grace period: Unknown and tainted.
  const conditions = node.status?.conditions ?? [];
  if (nodeReadyStatus(node) !== 'Unknown') {
    const next: V1NodeCondition[] = conditions.map((c) =>
      ['Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure'].includes(c.type)
        ? { ...c, status: 'Unknown', reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.', lastTransitionTime: nowIso as unknown as Date }
        : c,
    );
    if (!next.some((c) => c.type === 'Ready')) {
      next.push({ type: 'Ready', status: 'Unknown', reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.', lastTransitionTime: nowIso as unknown as Date });
    }
    await ctx.api.patchNodeStatus(name, { status: { conditions: next } });
    ctx.log.warn({ node: name, silentMs: silent }, 'node stopped renewing its lease: Ready=Unknown');
  }
  const taints = withTaints(
    node,
    [
      { key: UNREACHABLE, effect: 'NoSchedule', timeAdded: nowIso as unknown as Date },
      { key: UNREACHABLE, effect: 'NoExecute', timeAdded: nowIso as unknown as Date },
    ],
    [UNREACHABLE, NOT_READY],
  );
  if (taints) await ctx.api.patchNode(name, { spec: { taints } });

  const readyCond = conditions.find((c) => c.type === 'Ready');
  const since =
    readyCond?.status === 'Unknown' && Number.isFinite(Date.parse(String(readyCond.lastTransitionTime ?? '')))
      ? Math.min(Date.parse(String(readyCond.lastTransitionTime)), now)
      : now;
  // Count eviction time from when *this* controller saw the node go silent past the grace, at the latest.
  const seenAt = (ctx.state.leaseSeen.get(name)?.at ?? now) + grace;
  const unknownAt = Math.max(since, seenAt);
  const restoreAt = unknownAt + Math.min(ctx.timings.nodeLossRestoreDelayMs, ctx.timings.podEvictionTimeoutMs);
  const evictAt = unknownAt + ctx.timings.podEvictionTimeoutMs;
  if (now < restoreAt) return { requeueAfterMs: restoreAt - now };

  const nodes = ctx.cache.nodes.list();
  const sick = nodes.filter((n) => unhealthy(ctx, n)).length;
  if (nodes.length >= 3 && sick / nodes.length > 0.55) {
    ctx.log.warn({ node: name, unhealthy: sick, nodes: nodes.length }, 'most nodes look unhealthy: not evicting');
    return { requeueAfterMs: grace };
  }
  await evictPods(ctx, name, { checkpointedOnly: now < evictAt });
  return { requeueAfterMs: now < evictAt ? evictAt - now : grace };
}

/**
 * The pods still bound to a node that has no Node object (Kubernetes' PodGC "orphaned pods"): nothing until
 * it has been gone for `nodeMonitorGracePeriodMs` (its worker, if it runs, registers again or fences), then
 * {@link evictPods} with every pod bound to it. Pods bound to a deleted node stayed Running, counted as
 * available by their Deployment and routed to by their Service, forever.
 */
async function reconcileGoneNode(name: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  if (!ctx.cache.pods.list().some((p) => p.spec?.nodeName === name)) {
    ctx.state.nodeGoneSince.delete(name);
    return undefined;
  }
  const now = ctx.clock.now();
  const since = ctx.state.nodeGoneSince.get(name) ?? now;
  ctx.state.nodeGoneSince.set(name, since);
  const due = since + ctx.timings.nodeMonitorGracePeriodMs;
  if (now < due) return { requeueAfterMs: due - now };
  ctx.log.warn({ node: name, goneMs: now - since }, 'node is gone (no Node object): deleting the pods still bound to it, restoring the checkpointed ones');
  await evictPods(ctx, name, { orphaned: true });
  ctx.state.nodeGoneSince.delete(name);
  return undefined;
}

/**
 * Evicts the pods of a lost node for rescheduling; restores from the latest Saved periodic checkpoint where one exists.
 * @param opts.checkpointedOnly only the pods that restore from a checkpoint (the others wait for the eviction timeout)
 * @param opts.orphaned the node is gone: DaemonSet pods, terminating and finished pods are deleted too (none restores)
 */
export async function evictPods(ctx: ControllerContext, nodeName: string, opts: { checkpointedOnly?: boolean; orphaned?: boolean } = {}): Promise<void> {
  for (const pod of ctx.cache.pods.list()) {
    if (pod.spec?.nodeName !== nodeName) continue;
    const active = isPodActive(pod);
    if (!opts.orphaned && (!active || isDaemonSetPod(pod))) continue;
    const ns = pod.metadata?.namespace ?? 'default';
    const name = pod.metadata?.name ?? '';
    const restorable = active && !isDaemonSetPod(pod) && migrationPolicy(pod) !== 'Never';
    const latest = restorable ? latestPeriodic(ctx, ns, name) : undefined;
    if (latest) {
      // A microVM's checkpoint restores its FeOS pod: the replacement names it (a new uid).
      const replaced = await replacePod(ctx, latest.status?.snapshotKind === 'microvm' ? withFeosPodId(pod) : pod, undefined, latest.metadata?.name);
      ctx.log.info({ pod: `${ns}/${name}`, node: nodeName, checkpoint: latest.metadata?.name, replaced: replaced !== undefined }, 'node lost: the pod restores elsewhere from its periodic checkpoint');
      continue;
    }
    if (opts.checkpointedOnly) continue;
    try {
      await ctx.api.deletePod(ns, name, { uid: pod.metadata?.uid, gracePeriodSeconds: 0 });
      ctx.log.info({ pod: `${ns}/${name}`, node: nodeName, orphaned: opts.orphaned === true }, 'node lost: pod deleted for rescheduling');
    } catch (err: unknown) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }
}
