/**
 * A FeOS pod's PodInfo as its Pod's status (issue 18; docs/feos/cluster-pods.md): phase, the PodScheduled,
 * Initialized, ContainersReady and Ready conditions, containerStatuses (state, ready, restartCount, image,
 * imageID), podIP/podIPs from the FeOS pod's addresses and hostIP from its node. Pure.
 *
 * PENDING: Pending, containers waiting (ContainerCreating, or the kubelet's own reason: ErrImagePull,
 * ImagePullBackOff, CrashLoopBackOff). RUNNING: Running; a container the guest reports `running` (or one it
 * does not report) is running since the pod's start, one `exited` is terminated with its code. STOPPED,
 * FAILED: Running while the kubelet brings it up again (its waiting reason says why), else Failed (restart
 * policy Never), or Succeeded when every container exited 0. SUSPENDED, HIBERNATED: Running, not Ready.
 */
import type { V1ContainerStatus, V1Pod, V1PodCondition, V1PodStatus } from '@kubernetes/client-node';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { type PodInfo, PodState } from '../../feos/gen/feos/pod/v1/pod_pb.js';

/** What the kubelet adds to a PodInfo: why the containers wait, how often the pod was brought up again. */
export interface LocalState {
  /** A waiting reason and message for every container (ErrImagePull, ImagePullBackOff, CrashLoopBackOff, InvalidImageName, CreateContainerConfigError, CreateContainerError). */
  waiting?: { reason: string; message: string };
  /** How many times the FeOS pod was started again after it stopped or failed. */
  restartCount: number;
  /** The node's InternalIP. */
  hostIP?: string;
}

const iso = (d: Date | undefined): string | undefined => d?.toISOString();

/** The status of `pod` given its FeOS pod (`info`, undefined before its create answered) and the kubelet's state. */
export function podStatusOf(pod: V1Pod, info: PodInfo | undefined, local: LocalState, now: Date): V1PodStatus {
  const containers = pod.spec?.containers ?? [];
  const startedAt = info?.startedAt ? timestampDate(info.startedAt) : undefined;
  const previous = new Map((pod.status?.containerStatuses ?? []).map((c) => [c.name, c]));
  const state = info?.state ?? PodState.PENDING;
  const reported = new Map((info?.containers ?? []).map((c) => [c.name, c]));
  const restartPolicy = pod.spec?.restartPolicy ?? 'Always';
  let phase: string;
  const statuses: V1ContainerStatus[] = containers.map((c) => {
    const base = { name: c.name, image: c.image ?? '', imageID: '', restartCount: local.restartCount, started: false, ready: false };
    if (local.waiting) return { ...base, state: { waiting: { ...local.waiting } } };
    if (state === PodState.RUNNING) {
      const r = reported.get(c.name);
      // FeOS reports no image digest: imageID names the reference the guest pulled.
      const ran = { ...base, imageID: c.image ?? '' };
      if (r && r.state === 'exited') {
        return { ...ran, state: { terminated: { exitCode: r.exitCode, reason: r.exitCode === 0 ? 'Completed' : 'Error', startedAt: iso(startedAt) as unknown as Date, finishedAt: (iso(info?.stateChangedAt ? timestampDate(info.stateChangedAt) : now) as unknown) as Date } } };
      }
      if (r && r.state !== 'running') return { ...ran, state: { waiting: { reason: 'ContainerCreating', message: `the guest reports the container ${r.state}` } } };
      return { ...ran, started: true, ready: true, state: { running: { startedAt: (iso(startedAt ?? now) as unknown) as Date } } };
    }
    if (state === PodState.FAILED || state === PodState.STOPPED) {
      const was = previous.get(c.name)?.state?.terminated;
      return { ...base, state: { terminated: { exitCode: was?.exitCode ?? (state === PodState.FAILED ? 1 : 0), reason: state === PodState.FAILED ? 'Error' : (was?.reason ?? 'Completed'), message: info?.reason ?? '', finishedAt: (iso(info?.stateChangedAt ? timestampDate(info.stateChangedAt) : now) as unknown) as Date } } };
    }
    if (state === PodState.SUSPENDED || state === PodState.HIBERNATED) {
      return { ...base, imageID: c.image ?? '', state: { waiting: { reason: state === PodState.SUSPENDED ? 'Suspended' : 'Hibernated', message: info?.reason ?? '' } } };
    }
    return { ...base, state: { waiting: { reason: 'ContainerCreating' } } };
  });
  if (state === PodState.PENDING && !local.waiting) phase = 'Pending';
  else if (local.waiting) phase = pod.status?.phase === 'Running' ? 'Running' : 'Pending';
  else if (state === PodState.FAILED || state === PodState.STOPPED) {
    const allZero = state === PodState.STOPPED && statuses.every((s) => s.state?.terminated?.exitCode === 0);
    phase = restartPolicy === 'Always' || (restartPolicy === 'OnFailure' && !allZero) ? 'Running' : allZero ? 'Succeeded' : 'Failed';
  } else if (state === PodState.RUNNING && statuses.length > 0 && statuses.every((s) => s.state?.terminated) && restartPolicy !== 'Always') {
    phase = statuses.every((s) => s.state?.terminated?.exitCode === 0) ? 'Succeeded' : 'Failed';
  } else phase = 'Running';
  const ready = state === PodState.RUNNING && !local.waiting && statuses.length > 0 && statuses.every((s) => s.ready);
  const old = new Map((pod.status?.conditions ?? []).map((c) => [c.type, c]));
  const cond = (type: string, status: boolean, reason?: string): V1PodCondition => {
    const s = status ? 'True' : 'False';
    const was = old.get(type);
    return { type, status: s, lastProbeTime: null as unknown as undefined, lastTransitionTime: was?.status === s && was.lastTransitionTime ? was.lastTransitionTime : ((iso(now) as unknown) as Date), ...(reason && !status ? { reason } : {}) };
  };
  const notReady = ready ? undefined : 'ContainersNotReady';
  // The pod's address on its network (IPv6) first, then its IPv4 address for leaving the node.
  const ips = [info?.ipv6Address, info?.ipv4Address].filter((a): a is string => !!a);
  const status: V1PodStatus = {
    phase,
    conditions: [cond('PodReadyToStartContainers', !!info && state !== PodState.PENDING), cond('Initialized', true), cond('Ready', ready, notReady), cond('ContainersReady', ready, notReady), cond('PodScheduled', true)],
    containerStatuses: statuses,
    qosClass: pod.status?.qosClass,
    ...(local.hostIP ? { hostIP: local.hostIP, hostIPs: [{ ip: local.hostIP }] } : {}),
    ...(ips.length && (state === PodState.RUNNING || state === PodState.SUSPENDED) ? { podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } : {}),
    startTime: pod.status?.startTime ?? ((iso(info?.createdAt ? timestampDate(info.createdAt) : now) as unknown) as Date),
  };
  return status;
}
