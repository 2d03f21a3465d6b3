/**
 * The checkpoint controller's sync for one Checkpoint (seed "Moves", "What keeps a pod from moving",
 * "Checkpoint objects and data"). The phase decides the step; every step can run again after a crash:
 *
 * - `Pending` → checks (the pod, its container, the blockers of its spec, a target for a Move) → `Saving`,
 *   or `Failed` with every blocker and the `MoveFailed`/`CheckpointFailed` event, the pod left running.
 * - `Saving` → snapshot and data ({@link snapshotAndStore}) → `Saved` (Save) or the replacement (Move,
 *   {@link replaceForMove}) → `Moving`. A failure before the replacement thaws the pod. A pod already
 *   replaced for this Checkpoint (a crash after the replacement) goes straight to `Moving`.
 * - `Moving` → {@link watchMove}: `Completed` or a rollback.
 * - `Saved`, `Completed`, `Failed` → retention ({@link retain}).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, errorMessage, isConflict, isNotFound, pickNode, isPodRunning, podSpecBlockers } from '../../api/index.ts';
import { resolveContainer } from '../runtime/pods.ts';
import { replaceForMove, thawQuietly, watchMove } from './move.ts';
import { retain } from './retention.ts';
import { snapshotAndStore } from './save.ts';
import { actionOf, ckKey, failCheckpoint, withResourceVersion, writeStatus } from './status.ts';
import { logStep, passStep } from './timeline.ts';
import { isFeosNode, microvmSaving } from './microvm.ts';

/** Reconciles the Checkpoint `namespace/name`. */
export async function reconcileCheckpoint(key: string, ctx: ControllerContext): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const ck = ctx.cache.checkpoints.get(name, namespace);
  if (!ck || ck.metadata?.deletionTimestamp) {
    ctx.state.frozenAt.delete(key);
    ctx.state.replacedAt.delete(key);
    return undefined;
  }
  try {
    switch (ck.status?.phase ?? 'Pending') {
      case 'Pending':
        return await start(ctx, ck);
      case 'Saving':
        return await saving(ctx, ck);
      case 'Moving':
        return await watchMove(ctx, ck);
      default:
        return await retain(ctx, ck);
    }
  } catch (err: unknown) {
    if (isNotFound(err) && !ctx.cache.checkpoints.get(name, namespace)) return undefined; // deleted meanwhile
    if (isConflict(err)) {
      // A conditional status write met a newer Checkpoint than the cache holds (often this controller's own
      // last write): the decision was made already, or must be made again on the newer object, whose watch
      // event brings the key back.
      ctx.log.debug({ checkpoint: key, err: errorMessage(err) }, 'stale checkpoint in the cache; waiting for the watch');
      return undefined;
    }
    throw err;
  }
}

/** Why a pod does not count as running: its phase, or its first container that is not running. */
function notRunningWhy(pod: V1Pod): string {
  if (!pod.spec?.nodeName) return 'not bound to a node';
  const phase = pod.status?.phase ?? 'Pending';
  if (phase !== 'Running') return `phase ${phase}`;
  for (const c of pod.status?.containerStatuses ?? []) {
    if (c.state?.running) continue;
    const w = c.state?.waiting;
    const term = c.state?.terminated;
    return `container ${c.name} ${w ? `waiting: ${w.reason ?? 'Waiting'}` : term ? `terminated: ${term.reason ?? term.exitCode}` : 'not started'}`;
  }
  return 'no container status yet';
}

/** Another Checkpoint of the same pod that is Saving or Moving now. */
function busyWith(ctx: ControllerContext, ck: Checkpoint): Checkpoint | undefined {
  return ctx.cache.checkpoints
    .list(ck.metadata?.namespace)
    .find(
      (o) =>
        o.metadata?.name !== ck.metadata?.name &&
        o.spec?.podName === ck.spec.podName &&
        (o.status?.phase === 'Saving' || o.status?.phase === 'Moving'),
    );
}

/** The move's target: `spec.target.nodeName`, or the scheduler's pick with the target's selector added. */
export function chooseTarget(ctx: ControllerContext, ck: Checkpoint, pod: V1Pod): { node: string } | { error: string } {
  const source = pod.spec?.nodeName ?? '';
  const placement = pickNode(pod, ctx.cache.nodes.list(), ctx.cache.pods.list(), {
    exclude: new Map([[source, "node(s) were the pod's own node"]]),
    nodeName: ck.spec.target?.nodeName,
    extraSelector: ck.spec.target?.nodeSelector,
  });
  if (placement.nodeName !== undefined) return { node: placement.nodeName };
  return { error: `no target node: ${placement.message}` };
}

async function start(ctx: ControllerContext, ck: Checkpoint): Promise<ReconcileResult | undefined> {
  const ns = ck.metadata?.namespace ?? 'default';
  const action = actionOf(ck);
  logStep(ctx, ck, 'seen');
  if (action !== 'Save' && action !== 'Move') {
    await failCheckpoint(ctx, ck, { message: `spec.action must be Save or Move, not ${JSON.stringify(action)}` });
    return undefined;
  }
  if (!ck.spec?.podName) {
    await failCheckpoint(ctx, ck, { message: 'spec.podName is required' });
    return undefined;
  }
  const pod = ctx.cache.pods.get(ck.spec.podName, ns);
  if (!pod || pod.metadata?.deletionTimestamp) {
    await failCheckpoint(ctx, ck, { message: `pod ${ns}/${ck.spec.podName} not found` });
    return undefined;
  }
  const container = resolveContainer(pod, ck.spec.containerName);
  if (typeof container !== 'string') {
    await failCheckpoint(ctx, ck, { message: container.error, pod, beforeReplacement: true });
    return undefined;
  }
  const blockers = podSpecBlockers(pod);
  if (blockers.length > 0) {
    await failCheckpoint(ctx, ck, {
      message: `the pod cannot ${action === 'Move' ? 'move' : 'be checkpointed'}: ${blockers.join('; ')}`,
      blockers,
      pod,
      beforeReplacement: true,
    });
    return undefined;
  }
  if (!pod.spec?.nodeName || !isPodRunning(pod)) {
    await failCheckpoint(ctx, ck, {
      message: `the pod is not running (${notRunningWhy(pod)})`,
      pod,
      beforeReplacement: true,
    });
    return undefined;
  }
  const busy = busyWith(ctx, ck);
  if (busy) {
    ctx.log.debug({ checkpoint: ckKey(ck), waitingFor: busy.metadata?.name }, 'another checkpoint of the pod is in progress');
    return { requeueAfterMs: 500 };
  }
  let targetNode: string | undefined;
  if (action === 'Move') {
    const target = chooseTarget(ctx, ck, pod);
    if ('error' in target) {
      await failCheckpoint(ctx, ck, { message: target.error, pod, beforeReplacement: true });
      return undefined;
    }
    targetNode = target.node;
  }
  const next = await writeStatus(ctx, ck, { phase: 'Saving', nodeName: pod.spec.nodeName, targetNode });
  await passStep(ctx, ck, 'saving');
  return saving(ctx, next, pod);
}

async function saving(ctx: ControllerContext, ck: Checkpoint, fresh?: V1Pod): Promise<ReconcileResult | undefined> {
  const ns = ck.metadata?.namespace ?? 'default';
  const pod = fresh ?? ctx.cache.pods.get(ck.spec.podName, ns);
  const source = ck.status?.nodeName;
  const isMove = actionOf(ck) === 'Move';
  if (ctx.state.replacements.has(`${ns}/${ck.spec.podName}`)) {
    // The pod is being replaced (this move's replacement whose `Moving` write met a conflict, or another
    // Checkpoint's rollback) and the pods' watch has not shown the new pod yet: the cache's pod is the old
    // one, which must not be snapshotted again.
    return { requeueAfterMs: 100 };
  }
  if (!pod) {
    await failCheckpoint(ctx, ck, { message: `pod ${ns}/${ck.spec.podName} was deleted while saving` });
    return undefined;
  }
  if (isMove && pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] === ck.metadata?.name && pod.spec?.nodeName !== source) {
    // Replaced before a restart of the control plane (or a failed status write): the status had not caught up.
    // This write changes the phase, so the Moving event goes with it.
    await writeStatus(ctx, ck, { phase: 'Moving', targetNode: pod.spec?.nodeName, newPodName: pod.metadata?.name });
    await recordPodEvent(ctx, pod, 'Normal', 'Moving', `${ck.metadata?.name}: the replacement is bound to ${pod.spec?.nodeName}`);
    return { requeueAfterMs: 0 };
  }
  if (!source || pod.spec?.nodeName !== source) {
    await failCheckpoint(ctx, ck, { message: `the pod left node ${source} while saving`, pod });
    return undefined;
  }
  if (isFeosNode(ctx, source)) {
    // A microVM: the FeOS kubelet hibernates it (./microvm.ts).
    const vm = await microvmSaving(ctx, ck, pod);
    if ('wait' in vm) return vm.wait;
    return replaceForMove(ctx, ck, vm.ready.pod, vm.ready.target, vm.ready.frozenAt);
  }
  const container = resolveContainer(pod, ck.spec.containerName);
  if (typeof container !== 'string') {
    await failCheckpoint(ctx, ck, { message: container.error, pod, beforeReplacement: true });
    return undefined;
  }
  const result = await snapshotAndStore(ctx, ck, pod, container, source, isMove ? 'frozen' : 'running', isMove && ctx.pushSnapshotsToTarget ? ck.status?.targetNode : undefined);
  if (!result.ok) {
    if (isMove && result.mayBeFrozen) await thawQuietly(ctx, ck, pod);
    await failCheckpoint(ctx, ck, { message: result.message, blockers: result.blockers, pod, beforeReplacement: true });
    return undefined;
  }
  // The data PUT changed the Checkpoint: the next conditional write starts from the version it answered.
  const stored = withResourceVersion(ck, result.resourceVersion);
  if (!isMove) {
    await writeStatus(ctx, stored, { ...result.facts, phase: 'Saved' });
    ctx.log.info({ checkpoint: ckKey(ck), sizeBytes: result.facts.sizeBytes }, 'checkpoint saved');
    await recordPodEvent(ctx, pod, 'Normal', 'Checkpointed', `${ck.metadata?.name}: saved ${result.facts.sizeBytes} bytes on ${source}`);
    return undefined;
  }
  // The facts go with the `Moving` write: one write less between the freeze and the replacement.
  const target = stored.status?.targetNode;
  if (!target) {
    await thawQuietly(ctx, stored, pod);
    await failCheckpoint(ctx, stored, { message: 'no target node recorded', pod, beforeReplacement: true });
    return undefined;
  }
  return replaceForMove(ctx, stored, pod, target, result.frozenAt, result.facts);
}
