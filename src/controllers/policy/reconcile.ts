/**
 * The `Auto` policy (seed "Policies"): an Auto pod also moves on its own, at most once per 10 minutes
 * (cooldowns in memory: a control plane restart clears them, seed "Limits"):
 *
 * - Memory pressure: on a node reporting `MemoryPressure=True`, the Auto pod that requests the most memory
 *   moves, at most one pod per node per minute. Checkpoint labelled `kube32.io/trigger: memory-pressure`.
 * - A faster node, for a pod with `kube32.io/placement: fastest`: it moves to the fastest Ready node that
 *   takes it when that node is at least twice as fast (`kube32.io/interp-mops`) as its current one.
 *   Checkpoint labelled `kube32.io/trigger: placement`, with that node as its target.
 *
 * Keys: `node:<name>` for memory pressure, `pod:<namespace>/<name>` for placement.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, type CheckpointTrigger, isAlreadyExists, LABELS, pickNode, isPodRunning, migrationPolicy, nodeMops, podMemoryRequest, podSpecBlockers } from '../../api/index.ts';
import { shortUid } from '../runtime/pods.ts';

/** Whether the pod may move on its own now; else the ms until it may (0: never, by policy or spec). */
function autoMovable(ctx: ControllerContext, pod: V1Pod): { ok: true } | { ok: false; waitMs: number } {
  if (migrationPolicy(pod) !== 'Auto' || !isPodRunning(pod) || podSpecBlockers(pod).length > 0 || pod.metadata?.deletionTimestamp) {
    return { ok: false, waitMs: 0 };
  }
  const ns = pod.metadata?.namespace ?? 'default';
  const busy = ctx.cache.checkpoints
    .list(ns)
    .some((c) => c.spec?.podName === pod.metadata?.name && c.spec?.action === 'Move' && !['Completed', 'Failed'].includes(c.status?.phase ?? 'Pending'));
  if (busy || pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom]) return { ok: false, waitMs: 0 };
  const last = ctx.state.autoMovedAt.get(`${ns}/${pod.metadata?.name}`);
  const wait = last === undefined ? 0 : last + ctx.timings.autoMoveCooldownMs - ctx.clock.now();
  return wait > 0 ? { ok: false, waitMs: wait } : { ok: true };
}

async function createMove(ctx: ControllerContext, pod: V1Pod, trigger: CheckpointTrigger, targetNode?: string): Promise<string> {
  const ns = pod.metadata?.namespace ?? 'default';
  const podName = pod.metadata?.name ?? '';
  const name = `${podName.slice(0, 200)}-${trigger}-${shortUid(pod.metadata?.uid)}`;
  const ck: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name, namespace: ns, labels: { [LABELS.trigger]: trigger, [LABELS.pod]: podName.slice(0, 63) } },
    spec: { podName, action: 'Move', ...(targetNode ? { target: { nodeName: targetNode } } : {}) },
  };
  try {
    await ctx.api.createCheckpoint(ns, ck);
  } catch (err: unknown) {
    if (!isAlreadyExists(err)) throw err;
  }
  ctx.state.autoMovedAt.set(`${ns}/${podName}`, ctx.clock.now());
  ctx.log.info({ pod: `${ns}/${podName}`, trigger, target: targetNode }, 'Auto policy: moving the pod');
  return name;
}

/** Reconciles a policy key (`node:<name>` or `pod:<ns>/<name>`). */
export async function reconcilePolicy(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  if (key.startsWith('node:')) return memoryPressure(ctx, key.slice(5));
  if (key.startsWith('pod:')) return fasterNode(ctx, key.slice(4));
  return undefined;
}

async function memoryPressure(ctx: ControllerContext, nodeName: string): Promise<ReconcileResult | undefined> {
  const node = ctx.cache.nodes.get(nodeName);
  const pressure = node?.status?.conditions?.some((c) => c.type === 'MemoryPressure' && c.status === 'True');
  if (!node || !pressure) return undefined;
  const now = ctx.clock.now();
  const last = ctx.state.pressureMoveAt.get(nodeName);
  if (last !== undefined && now - last < ctx.timings.memoryPressureNodeCooldownMs) {
    return { requeueAfterMs: last + ctx.timings.memoryPressureNodeCooldownMs - now };
  }
  let soonest = Number.POSITIVE_INFINITY;
  const candidates: V1Pod[] = [];
  for (const p of ctx.cache.pods.list()) {
    if (p.spec?.nodeName !== nodeName) continue;
    const m = autoMovable(ctx, p);
    if (m.ok) candidates.push(p);
    else if (m.waitMs > 0) soonest = Math.min(soonest, m.waitMs);
  }
  candidates.sort((a, b) => podMemoryRequest(b) - podMemoryRequest(a) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  for (const pod of candidates) {
    const placement = pickNode(pod, ctx.cache.nodes.list(), ctx.cache.pods.list(), { exclude: new Map([[nodeName, 'own node']]) });
    if (placement.nodeName === undefined) continue; // this one fits nowhere: try the next biggest
    await createMove(ctx, pod, 'memory-pressure');
    ctx.state.pressureMoveAt.set(nodeName, now);
    return { requeueAfterMs: ctx.timings.memoryPressureNodeCooldownMs };
  }
  if (Number.isFinite(soonest)) return { requeueAfterMs: soonest };
  return candidates.length > 0 ? { requeueAfterMs: ctx.timings.memoryPressureNodeCooldownMs } : undefined;
}

async function fasterNode(ctx: ControllerContext, podKey: string): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(podKey);
  const pod = ctx.cache.pods.get(name, namespace);
  if (pod?.metadata?.annotations?.[ANNOTATIONS.placement] !== 'fastest') return undefined;
  const m = autoMovable(ctx, pod);
  if (!m.ok) return m.waitMs > 0 ? { requeueAfterMs: m.waitMs } : undefined;
  const current = pod.spec?.nodeName ?? '';
  const here = nodeMops(ctx.cache.nodes.get(current));
  const placement = pickNode(pod, ctx.cache.nodes.list(), ctx.cache.pods.list(), {
    exclude: new Map([[current, 'own node']]),
    fastest: true,
  });
  if (placement.nodeName === undefined) return undefined;
  const there = nodeMops(ctx.cache.nodes.get(placement.nodeName));
  if (here > 0 && there >= 2 * here) await createMove(ctx, pod, 'placement', placement.nodeName);
  return undefined;
}
