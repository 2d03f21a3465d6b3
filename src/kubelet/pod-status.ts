/**
 * A pod's status as kubectl users expect it (`kubectl get pods`, `describe`, `wait`): phase, IPs,
 * the conditions `PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, container statuses with
 * `state`, `lastState`, `restartCount`, `ready`, `started`, and `startTime`. Pure: built from what the
 * pod worker knows; the worker writes it only when it differs from the last one written.
 */
import type { V1ContainerState, V1ContainerStatus, V1Pod, V1PodCondition, V1PodStatus } from '@kubernetes/client-node';

/** RFC 3339 to the second, as Kubernetes writes `Time`. */
export function toTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** One container's observed state, as the runner keeps it. */
export type ContainerPhase =
  | { kind: 'waiting'; reason: string; message?: string }
  | { kind: 'running'; startedAt: number }
  | { kind: 'terminated'; reason: string; message: string; exitCode: number; startedAt: number; finishedAt: number; containerID?: string };

/** What the pod worker knows of one container. */
export interface ContainerView {
  name: string;
  image: string;
  /** `sha256:<hex>` once the module is known. */
  imageID: string;
  containerID: string;
  state: ContainerPhase;
  lastState?: ContainerPhase & { kind: 'terminated' };
  restartCount: number;
  /** Frozen for a checkpoint: running but not ready. */
  frozen: boolean;
  /** One of its containerPorts cannot be listened on yet (taken on the node): running but not ready. */
  unserved?: boolean;
  /** No further restart will happen (restart policy, RestoreError). */
  final: boolean;
}

function containerState(s: ContainerPhase, containerID: string): V1ContainerState {
  switch (s.kind) {
    case 'waiting':
      return { waiting: { reason: s.reason, ...(s.message ? { message: s.message } : {}) } };
    case 'running':
      return { running: { startedAt: toTime(s.startedAt) as unknown as Date } };
    case 'terminated':
      return {
        terminated: {
          exitCode: s.exitCode, reason: s.reason, ...(s.message ? { message: s.message } : {}),
          startedAt: toTime(s.startedAt) as unknown as Date, finishedAt: toTime(s.finishedAt) as unknown as Date, containerID: s.containerID ?? containerID,
        },
      };
  }
}

/**
 * The phase of a pod from its containers, as the kubelet decides it: `Pending` until every
 * container has started once; `Running` while any runs or will restart; `Succeeded` when all ended
 * with 0 and none restarts; `Failed` when all ended, one with a failure, and none restarts.
 */
export function podPhase(containers: ContainerView[]): 'Pending' | 'Running' | 'Succeeded' | 'Failed' {
  if (containers.length === 0) return 'Pending';
  const ended = containers.every((c) => c.state.kind === 'terminated' && c.final);
  if (ended) return containers.every((c) => c.state.kind === 'terminated' && c.state.exitCode === 0) ? 'Succeeded' : 'Failed';
  const everStarted = containers.every((c) => c.state.kind !== 'waiting' || c.restartCount > 0 || c.lastState !== undefined);
  return everStarted ? 'Running' : 'Pending';
}

/**
 * Builds the pod's status.
 * @param pod the pod as last seen (its `PodScheduled` condition and `startTime` are kept)
 * @param containers the containers in spec order
 * @param address the node's address: `hostIP` and `podIP`
 * @param startTime when the node accepted the pod, ms
 */
export function buildPodStatus(pod: V1Pod, containers: ContainerView[], address: string, startTime: number): V1PodStatus {
  const phase = podPhase(containers);
  const prev = new Map((pod.status?.conditions ?? []).map((c) => [c.type, c]));
  const now = toTime(Date.now());
  const cond = (type: string, ok: boolean, reason?: string, message?: string): V1PodCondition => {
    const status = ok ? 'True' : 'False';
    const p = prev.get(type);
    const lastTransitionTime = p && p.status === status && p.lastTransitionTime ? p.lastTransitionTime : now;
    return { type, status, lastTransitionTime, ...(reason ? { reason } : {}), ...(message ? { message } : {}) } as unknown as V1PodCondition;
  };
  const unready = containers.filter((c) => !(c.state.kind === 'running' && !c.frozen && !c.unserved)).map((c) => c.name);
  const terminal = phase === 'Succeeded' || phase === 'Failed';
  const ready = unready.length === 0 && !terminal;
  const why = terminal ? 'PodCompleted' : 'ContainersNotReady';
  const msg = terminal ? undefined : `containers with unready status: [${unready.join(' ')}]`;
  const scheduled = prev.get('PodScheduled');
  const conditions: V1PodCondition[] = [
    cond('PodReadyToStartContainers', !terminal),
    cond('Initialized', true),
    ready ? cond('Ready', true) : cond('Ready', false, why, msg),
    ready ? cond('ContainersReady', true) : cond('ContainersReady', false, why, msg),
    scheduled && scheduled.status === 'True' ? scheduled : cond('PodScheduled', true),
  ];
  const containerStatuses: V1ContainerStatus[] = containers.map((c) => ({
    name: c.name,
    image: c.image,
    imageID: c.imageID,
    ...(c.state.kind !== 'waiting' || c.restartCount > 0 ? { containerID: c.containerID } : {}),
    ready: c.state.kind === 'running' && !c.frozen && !c.unserved,
    started: c.state.kind === 'running',
    restartCount: c.restartCount,
    state: containerState(c.state, c.containerID),
    lastState: c.lastState ? containerState(c.lastState, c.containerID) : {},
  }));
  const spec = pod.spec?.containers ?? [];
  const limited = spec.length > 0 && spec.every((c) => c.resources?.limits?.memory !== undefined && c.resources?.limits?.cpu !== undefined);
  const requested = spec.some((c) => c.resources?.requests !== undefined || c.resources?.limits !== undefined);
  return {
    phase,
    conditions,
    hostIP: address,
    hostIPs: [{ ip: address }],
    podIP: address,
    podIPs: [{ ip: address }],
    startTime: (pod.status?.startTime ?? toTime(startTime)) as unknown as Date,
    containerStatuses,
    qosClass: limited ? 'Guaranteed' : requested ? 'Burstable' : 'BestEffort',
  };
}

/** JSON with every object's keys sorted: one text for equal values whatever their keys' order. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x && typeof x === 'object' && !Array.isArray(x)
    ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    : x));
}

/**
 * The part of a pod's status the node owns, as one text to compare (the status manager's "does the API
 * server's copy differ from what I computed"): each field of `owned` (the status the node wrote: `phase`,
 * `podIP`, `containerStatuses`, ...) read from `status`, and of the conditions only the types `owned` has,
 * each by `status`, `reason` and `message` (not their times). Conditions of other types (another
 * component's) and fields the node does not write are left out, so that they never make a difference.
 * @param status the status to read, as the API server answers it (a watch event, a GET, a PATCH's answer)
 * @param owned the status the node wrote, which names the fields and condition types it owns
 */
export function ownedStatusText(status: V1PodStatus | undefined, owned: V1PodStatus): string {
  const s = (status ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(owned)) {
    if (k === 'conditions') {
      out.conditions = (owned.conditions ?? []).map((o) => {
        const c = status?.conditions?.find((x) => x.type === o.type);
        return c ? { type: c.type, status: c.status, reason: c.reason ?? '', message: c.message ?? '' } : { type: o.type, missing: true };
      });
    } else {
      out[k] = s[k] ?? null;
    }
  }
  return canonical(out);
}
