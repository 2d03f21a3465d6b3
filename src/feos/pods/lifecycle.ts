/**
 * Stop, delete, suspend and resume of a pod (seed 000, "A pod", "The suspend's budget"). Each runs
 * under the pod's lock; see docs/feos/feosd.md for their prerequisites and effects.
 */
import { rm } from 'node:fs/promises';
import { type PodInfo, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { FeosError, errorMessage, vmBusy } from '../api/index.ts';
import type { PodNetworkAttachment } from './network.ts';
import { snapshotTimeoutMs, suspendBudgetMs } from './budget.ts';
import { PUSH_MS, RESUME_PING_MS, SHUTDOWN_WAIT_MS } from './actions.ts';
import { podDiskPath } from './bring-up.ts';
import type { PodCore } from './core.ts';
import { dropCheckpoint, dropClaimedCheckpoints } from './hibernate.ts';

/**
 * Refuses to run a pod whose cut hibernation is not settled (its checkpoint may be whole in the store).
 * @throws FeosError FAILED_PRECONDITION naming the checkpoint and what to do
 */
export function refuseUnsettled(core: PodCore, id: string): void {
  const checkpoint = core.unsettled.get(id);
  if (checkpoint === undefined) return;
  throw new FeosError(
    'FAILED_PRECONDITION',
    `pod ${id}: its hibernation to checkpoint ${checkpoint} was cut by a kill of feosd and the object store did not answer at feosd's start, so whether the checkpoint is whole is unknown; restart feosd once the store answers (it then finishes or withdraws the hibernation)`,
  );
}

/** StopPod: ends a bring-up, shuts the microVM down (or kills it), discards a snapshot: STOPPED. */
export async function stopPod(core: PodCore, id: string): Promise<PodInfo> {
  const o = core.o;
  core.entries.get(id)?.bringUp?.abort(new Error('stopped'));
  return core.locked(id, async (pod) => {
    if (pod.state === PodState.HIBERNATED) {
      throw new FeosError('FAILED_PRECONDITION', `pod ${id} is HIBERNATED: restore it (RestorePod, ResumePod) or delete it`);
    }
    const vm = o.vms.get(id);
    if (vm?.state === MicroVmState.RUNNING) {
      const guest = o.vms.guest(id);
      const asked = await guest.call('Shutdown', {}, PUSH_MS).then(
        () => true,
        () => false,
      );
      if (!asked || !(await o.vms.waitForExit(id, SHUTDOWN_WAIT_MS))) {
        await o.vms.kill(id, 'stopped: the guest did not power off');
      }
    } else if (vm?.state === MicroVmState.SUSPENDED) {
      await o.vms.discardSnapshot(id);
    }
    await core.detach(pod);
    if (pod.state !== PodState.STOPPED) await core.setState(pod, PodState.STOPPED, 'stopped by StopPod');
    return o.records.get(id)!;
  });
}

/**
 * DeletePod: ends a bring-up, removes the microVM, the disk, the network and the record; a HIBERNATED
 * pod's checkpoint leaves the object store unless a restore took it.
 */
export async function deletePod(core: PodCore, id: string): Promise<void> {
  const o = core.o;
  core.entries.get(id)?.bringUp?.abort(new Error('deleted'));
  await core.locked(id, async (pod, entry) => {
    await o.vms.delete(id);
    await rm(podDiskPath(core, id), { force: true });
    if (pod.spec!.network && pod.state !== PodState.HIBERNATED) await o.network.tearDown(pod);
    if (pod.state === PodState.HIBERNATED) await dropCheckpoint(core, pod);
    else await dropClaimedCheckpoints(core, pod);
    await o.volumes?.release(id);
    if (core.entries.get(id) === entry) core.entries.delete(id);
    core.pullTokens.delete(id);
    await o.records.remove(id);
    core.emitDeleted(id);
    o.log.info({ id }, 'pod deleted');
  });
}

/**
 * Suspends a RUNNING pod under its lock (no budget: the caller's): the guest empties its memory, the
 * microVM's snapshot is written, its TAP device goes. SUSPENDED answers as it is.
 * @param how.deadline `Date.now()` ms by which the snapshot must be written (feosd's own stop)
 * @param how.reason the SUSPENDED pod's reason
 * @throws FeosError FAILED_PRECONDITION (not RUNNING), UNAVAILABLE busy (the snapshot was late: nothing changed)
 */
export async function suspendLocked(core: PodCore, pod: PodInfo, how: { deadline?: number; reason?: string } = {}): Promise<PodInfo> {
  const { deadline } = how;
  const o = core.o;
  const id = pod.id;
  if (pod.state === PodState.SUSPENDED) return pod;
  if (pod.state !== PodState.RUNNING) {
    throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: only a RUNNING pod suspends`);
  }
  const entry = core.entry(id);
  entry.suspending = true;
  try {
    const guest = o.vms.guest(id);
    await guest.call('EmptyMemory', {}, PUSH_MS).catch((err: unknown) => o.log.warn({ id, err: errorMessage(err) }, 'suspend: the guest did not empty its memory'));
    let timeout = snapshotTimeoutMs(pod.spec!.memoryBytes);
    if (deadline !== undefined) {
      const left = deadline - Date.now();
      if (left <= 0) throw vmBusy(`feosd stops: no time is left for the snapshot of pod ${id}`);
      timeout = Math.min(timeout, left);
    }
    await o.vms.suspend(id, timeout);
    await core.detach(pod);
    await core.setState(pod, PodState.SUSPENDED, how.reason ?? (deadline === undefined ? 'suspended by SuspendPod' : "suspended by feosd's stop"));
    return o.records.get(id)!;
  } finally {
    entry.suspending = false;
  }
}

/**
 * SuspendPod: `suspendLocked` in a task of its own holding the pod's lock, answered within the
 * suspend's budget (190 s + 5 s/GiB) or UNAVAILABLE busy; a late task runs on to its end.
 */
export async function suspendPod(core: PodCore, id: string, deadline?: number, reason?: string): Promise<PodInfo> {
  const pod0 = core.o.records.get(id);
  if (!pod0) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
  const budget = suspendBudgetMs(pod0.spec!.memoryBytes);
  const entry = core.entries.get(id);
  if (entry?.suspending) throw vmBusy(`pod ${id} is being suspended`);
  if (entry?.hibernation) throw vmBusy(`pod ${id} hibernates`);
  const task = core.locked(id, (pod) => suspendLocked(core, pod, { deadline, ...(reason ? { reason } : {}) }));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(vmBusy(`the suspend of pod ${id} did not end within its budget of ${budget / 1000} s`)), budget);
  });
  try {
    return await Promise.race([task, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Resumes a SUSPENDED pod under its lock: network set up, snapshot loaded, vCPUs run, guest pinged
 * (30 s) and pushed the time: RUNNING. RUNNING answers as it is. A failure before the vCPUs run (its
 * network, a QEMU that does not start, a snapshot that does not load) changed nothing: the microVM is
 * SUSPENDED with its snapshot (microvm/service.ts), and the pod stays SUSPENDED with the failure as its
 * reason, so that the next ResumePod resumes it once the cause is gone (seed 000, "A pod": Resume).
 * @param keepSuspendedOnFailure feosd's resumes after a stop: a guest that does not answer once its vCPUs
 *   run leaves the pod RUNNING, logged, instead of FAILED
 * @throws FeosError FAILED_PRECONDITION (not SUSPENDED; its network cannot be set up: it stays SUSPENDED),
 *   INTERNAL (the resume failed: the pod stays SUSPENDED with its snapshot when its vCPUs had not run,
 *   else it is FAILED)
 */
export async function resumeLocked(core: PodCore, pod: PodInfo, keepSuspendedOnFailure = false, reason = 'resumed by ResumePod'): Promise<PodInfo> {
  refuseUnsettled(core, pod.id);
  const o = core.o;
  const id = pod.id;
  if (pod.state === PodState.RUNNING) return pod;
  if (pod.state !== PodState.SUSPENDED) {
    throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: only a SUSPENDED pod resumes`);
  }
  let net: PodNetworkAttachment | undefined;
  try {
    if (pod.spec!.network) {
      net = await o.network.setUp(pod);
      if (pod.ipv6Address !== net.ipv6Address || pod.ipv4Address !== net.ipv4Address) {
        pod.ipv6Address = net.ipv6Address;
        pod.ipv4Address = net.ipv4Address;
        await core.save(pod);
      }
    }
    await o.vms.resume(id);
  } catch (err: unknown) {
    if (o.vms.get(id)?.state === MicroVmState.SUSPENDED) {
      await core.detach(pod);
      await core.setState(pod, PodState.SUSPENDED, `resume failed: ${errorMessage(err)}`);
      // A network that cannot be set up (its security groups or name tables not on the node: FeosError or NetworkError) is the caller's to mend.
      const code = (err as { code?: unknown }).code === 'FAILED_PRECONDITION' ? 'FAILED_PRECONDITION' : 'INTERNAL';
      throw new FeosError(code, `resume of pod ${id} failed; it stays SUSPENDED with its snapshot: ${errorMessage(err)}`, { cause: err });
    }
    return failResume(core, pod, err);
  }
  try {
    await core.pushAfterAttach(pod, RESUME_PING_MS, undefined, net);
  } catch (err: unknown) {
    if (!keepSuspendedOnFailure) return failResume(core, pod, err);
    o.log.warn({ id, err: errorMessage(err) }, 'resume: the guest did not answer; the pod runs on');
  }
  await core.setState(pod, PodState.RUNNING, reason);
  return o.records.get(id)!;
}

async function failResume(core: PodCore, pod: PodInfo, err: unknown): Promise<never> {
  const id = pod.id;
  await core.o.vms.kill(id, `resume failed: ${errorMessage(err)}`).catch(() => {});
  await core.o.vms.discardSnapshot(id).catch(() => {});
  await core.detach(pod);
  await core.setState(pod, PodState.FAILED, `resume: ${errorMessage(err)}`);
  throw new FeosError('INTERNAL', `resume of pod ${id} failed: ${errorMessage(err)}`, { cause: err });
}
