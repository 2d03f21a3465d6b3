/**
 * Pure rules about pods and nodes that more than one component applies: whether a pod is active,
 * holds its node, is Ready; its migration policy and controller; its memory request; a node's
 * allocatable memory, readiness, speed. The scheduler, the disruption and workload controllers, the
 * API server's eviction and the kubelet's drain read pods through these.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { parseBytes, parseQuantity } from '../lib/index.ts';
import { ANNOTATIONS } from './names.ts';
import type { MigrationPolicy } from './types.ts';

/** Whether a pod counts for its owner: not terminal, not being deleted. */
export function isPodActive(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return phase !== 'Succeeded' && phase !== 'Failed' && !pod.metadata?.deletionTimestamp;
}

/**
 * Whether a pod bound to a node still takes its place there (memory, pod count, ports): until it is
 * Succeeded or Failed, or gone. A pod being deleted still runs, and holds its port, until its node
 * stops it: kube-scheduler, too, counts it until the deletion completes.
 */
export function podHoldsNode(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return phase !== 'Succeeded' && phase !== 'Failed';
}

/** Whether the pod's `Ready` condition is `True`. */
export function isPodReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Whether the pod is `Running` with every container running. */
export function isPodRunning(pod: V1Pod): boolean {
  if (pod.status?.phase !== 'Running') return false;
  const statuses = pod.status.containerStatuses ?? [];
  return statuses.length > 0 && statuses.every((s) => s.state?.running !== undefined);
}

/** The pod's `kube32.io/migration` policy; anything but `Never` and `Auto` is `OnDrain`. */
export function migrationPolicy(pod: V1Pod): MigrationPolicy {
  const v = pod.metadata?.annotations?.[ANNOTATIONS.migration];
  return v === 'Never' || v === 'Auto' ? v : 'OnDrain';
}

/** The pod's controller owner reference, if any. */
export function controllerOf(obj: { metadata?: { ownerReferences?: Array<{ controller?: boolean; kind: string; name: string; uid: string }> } }) {
  return obj.metadata?.ownerReferences?.find((r) => r.controller === true);
}

/** Whether a DaemonSet owns the pod. */
export function isDaemonSetPod(pod: V1Pod): boolean {
  return controllerOf(pod)?.kind === 'DaemonSet';
}

/**
 * The pod's memory request, bytes: the sum over containers (requests, else limits), plus its
 * `spec.overhead.memory` (its RuntimeClass's, set at create), as kube-scheduler counts it.
 */
export function podMemoryRequest(pod: V1Pod): number {
  let sum = 0;
  for (const c of pod.spec?.containers ?? []) {
    const q = c.resources?.requests?.memory ?? c.resources?.limits?.memory;
    if (q !== undefined) sum += safeBytes(q);
  }
  const overhead = pod.spec?.overhead?.memory;
  if (overhead !== undefined) sum += safeBytes(String(overhead));
  return sum;
}

/**
 * The pod's cpu request, millicores: the sum over containers (requests, else limits), plus its
 * `spec.overhead.cpu`. What the scheduler fits against a FeOS node's allocatable cpu (issue 18).
 */
export function podCpuRequest(pod: V1Pod): number {
  let sum = 0;
  for (const c of pod.spec?.containers ?? []) {
    const q = c.resources?.requests?.cpu ?? c.resources?.limits?.cpu;
    if (q !== undefined) sum += safeMillis(String(q));
  }
  const overhead = pod.spec?.overhead?.cpu;
  if (overhead !== undefined) sum += safeMillis(String(overhead));
  return sum;
}

function safeMillis(q: string): number {
  try {
    return Math.ceil(parseQuantity(q) * 1000);
  } catch {
    return 0;
  }
}

/** A node's allocatable cpu in millicores (or capacity), `Infinity` when it reports none. */
export function nodeAllocatableCpu(node: V1Node): number {
  const q = node.status?.allocatable?.cpu ?? node.status?.capacity?.cpu;
  return q === undefined ? Number.POSITIVE_INFINITY : safeMillis(q);
}

function safeBytes(q: string): number {
  try {
    return parseBytes(String(q));
  } catch {
    return 0;
  }
}

/** A node's allocatable memory in bytes (or capacity), `Infinity` when it reports none. */
export function nodeAllocatableMemory(node: V1Node): number {
  const q = node.status?.allocatable?.memory ?? node.status?.capacity?.memory;
  return q === undefined ? Number.POSITIVE_INFINITY : safeBytes(q);
}

/** The node's `Ready` condition status: `True`, `False`, `Unknown`, or undefined when it has none. */
export function nodeReadyStatus(node: V1Node): string | undefined {
  return node.status?.conditions?.find((c) => c.type === 'Ready')?.status;
}

/** Whether the node is Ready and not cordoned. */
export function isNodeSchedulable(node: V1Node): boolean {
  return nodeReadyStatus(node) === 'True' && node.spec?.unschedulable !== true;
}

/** The node's `kube32.io/interp-mops`, 0 when absent or not a number. */
export function nodeMops(node: V1Node | undefined): number {
  const v = Number(node?.metadata?.annotations?.[ANNOTATIONS.interpMops]);
  return Number.isFinite(v) && v > 0 ? v : 0;
}


/**
 * The ID of the FeOS pod that runs a Pod bound to a FeOS node (issue 18; seed 000 "A pod": a UUID is a valid
 * pod ID): the annotation `feos.kube32.io/pod-id` when it is set (a replacement restored from another
 * node's hibernation keeps the FeOS pod's ID), else the Pod's uid. Undefined for a Pod with neither.
 */
export function feosPodIdOf(pod: V1Pod): string | undefined {
  return pod.metadata?.annotations?.[ANNOTATIONS.feosPodId] ?? pod.metadata?.uid?.toLowerCase();
}
