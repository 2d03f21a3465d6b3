/**
 * The microVM branch of a Move (issue 18, "Moving them"; docs/checkpoints.md "Moving a microVM pod"): a pod
 * bound to a FeOS node (label `kube32.io/runtime=feos`) is not snapshotted through a kubelet's HTTP
 * endpoint. Its snapshot is a hibernation: the FeOS kubelet of the control plane (src/fleet/kubelet/move.ts)
 * sees the Checkpoint `Saving` on a FeOS node, calls HibernatePod over the node connection (memory and disk
 * into the object store the FeOS nodes share) and writes `status.snapshotKind: microvm` with
 * `status.snapshotName` (the FeOS checkpoint) and `status.takenAt` (the freeze). This controller then writes
 * the replacement as for a Wasm pod, with `feos.kube32.io/pod-id` set to the FeOS pod's ID, so that the
 * target's FeOS kubelet calls RestorePod of that pod from that checkpoint instead of CreatePod.
 *
 * The components meet through the API (the Checkpoint's status), as the seed has them.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { ReconcileResult } from '../runtime/controller.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { ANNOTATIONS, type Checkpoint, feosPodIdOf, nodeRuntime } from '../../api/index.ts';
import { actionOf, ckKey, failCheckpoint, writeStatus } from './status.ts';

/**
 * A microVM move's replacement that does not run within this rolls back, ms: 5 min. A VM's restore copies
 * its memory and disk from the object store, checks them and has QEMU load the memory stream before the
 * guest resumes: 16 to 20 s for a 256 MiB pod on this 2-core machine (docs/feos/object-store.md, "Figures"),
 * minutes for a pod of several GiB over S3. A Wasm pod's 60 s (`--move-timeout`, the larger of the two is
 * taken) would roll back restores that are on their way.
 */
export const MICROVM_MOVE_TIMEOUT_MS = 300_000;

/**
 * How long the hibernation may take before the move fails (the pod is resumed where it is), ms, counted
 * from the Checkpoint's creation: feosd's suspend budget (190 s + 5 s/GiB) and the upload of the memory
 * and disk.
 */
export const MICROVM_HIBERNATE_TIMEOUT_MS = 600_000;

/** Whether `nodeName` is a FeOS node (its pods are microVMs) as the controllers' cache shows it. */
export function isFeosNode(ctx: ControllerContext, nodeName: string | undefined): boolean {
  const node = nodeName ? ctx.cache.nodes.get(nodeName) : undefined;
  return node !== undefined && nodeRuntime(node) === 'microvm';
}

/** The deadline of a move's replacement, ms: {@link MICROVM_MOVE_TIMEOUT_MS} for a microVM snapshot. */
export function moveDeadlineMs(ctx: ControllerContext, ck: Checkpoint): number {
  const base = ctx.timings.moveTimeoutMs;
  return ck.status?.snapshotKind === 'microvm' ? Math.max(base, MICROVM_MOVE_TIMEOUT_MS) : base;
}

/**
 * Phase `Saving` of a Checkpoint whose pod is on a FeOS node: waits for the FeOS kubelet's hibernation;
 * once it is in, the caller writes the replacement (`replaceForMove`) with what this answers.
 *
 * A `Save` (periodic ones too) waits the same way for the kubelet's HibernatePod with `keep_running` (the pod
 * runs on where it is), then is `Saved` with a `Checkpointed` event; one that failed is `Failed`. A hibernation that
 * failed (`snapshotKind: microvm` without `snapshotName`), or that did not answer within
 * {@link MICROVM_HIBERNATE_TIMEOUT_MS}, fails the move before the replacement: the FeOS kubelet resumes the
 * pod on its node (RestorePod of its own checkpoint), and an eviction's pod is deleted as for a Wasm pod.
 * @returns `wait`: a requeue while the hibernation runs (the kubelet's status write brings the key back
 *   sooner), or undefined when the Checkpoint was failed; `ready`: the pod to replace (with its FeOS pod's
 *   ID), the target and the freeze time (ms)
 */
export async function microvmSaving(
  ctx: ControllerContext,
  ck: Checkpoint,
  pod: V1Pod,
): Promise<{ wait: ReconcileResult | undefined } | { ready: { pod: V1Pod; target: string; frozenAt: number } }> {
  const isSave = actionOf(ck) !== 'Move';
  const st = ck.status ?? {};
  if (st.snapshotKind !== 'microvm') {
    const created = Date.parse(String(ck.metadata?.creationTimestamp ?? ''));
    const left = (Number.isFinite(created) ? created : ctx.clock.now()) + MICROVM_HIBERNATE_TIMEOUT_MS - ctx.clock.now();
    if (left <= 0) {
      await failCheckpoint(ctx, ck, {
        message: `the FeOS node ${st.nodeName} did not hibernate the pod within ${MICROVM_HIBERNATE_TIMEOUT_MS / 1000} s`,
        pod,
        beforeReplacement: true,
      });
      return { wait: undefined };
    }
    return { wait: { requeueAfterMs: Math.min(left, 5000) } };
  }
  if (!st.snapshotName) {
    await failCheckpoint(ctx, ck, { message: st.message ?? 'the hibernation failed', pod, ...(isSave ? {} : { beforeReplacement: true }) });
    return { wait: undefined };
  }
  if (isSave) {
    // A Save (periodic ones too): the FeOS kubelet's HibernatePod kept the pod running (keep_running).
    await writeStatus(ctx, ck, { phase: 'Saved' });
    ctx.log.info({ checkpoint: ckKey(ck), feosCheckpoint: st.snapshotName }, 'microVM checkpoint saved');
    await recordPodEvent(ctx, pod, 'Normal', 'Checkpointed', `${ck.metadata?.name}: saved the microVM (FeOS checkpoint ${st.snapshotName}) on ${st.nodeName}; the pod runs on`);
    return { wait: undefined };
  }
  const target = st.targetNode;
  if (!target) {
    await failCheckpoint(ctx, ck, { message: 'no target node recorded', pod, beforeReplacement: true });
    return { wait: undefined };
  }
  const taken = Date.parse(st.takenAt ?? '');
  return { ready: { pod: withFeosPodId(pod), target, frozenAt: Number.isFinite(taken) ? taken : ctx.clock.now() } };
}

/**
 * The pod with `feos.kube32.io/pod-id` naming its FeOS pod: a replacement has a new uid, and the FeOS pod's
 * ID goes with it so that the node that restores it restores that pod (a move's, a node loss's).
 */
export function withFeosPodId(pod: V1Pod): V1Pod {
  const id = feosPodIdOf(pod) ?? '';
  return { ...pod, metadata: { ...(pod.metadata ?? {}), annotations: { ...(pod.metadata?.annotations ?? {}), [ANNOTATIONS.feosPodId]: id } } };
}
