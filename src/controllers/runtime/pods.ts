/**
 * Pure helpers about pods and nodes that several controllers need: activity, readiness, policies, the
 * blockers the control plane finds in a pod's spec (seed "What keeps a pod from moving"), memory requests.
 */
import type { V1Node, V1ObjectMeta, V1Pod, V1PodTemplateSpec } from '@kubernetes/client-node';
import { podSpecBlockers as kubeletSpecBlockers } from '../../kubelet/index.ts';
import { parseBytes } from '../../lib/index.ts';
import { ANNOTATIONS, type MigrationPolicy } from './types.ts';

/**
 * The pod a workload creates from its template (Kubernetes' `GetPodFromTemplate`): `generateName:
 * <owner>-`, the template's labels, annotations and spec (copied), and a controller `ownerReference` to
 * the owner (so the garbage collector deletes the pod with it). Used by the ReplicaSet, DaemonSet and
 * Job controllers.
 */
export function podFromTemplate(owner: { metadata?: V1ObjectMeta; spec?: { template?: V1PodTemplateSpec } }, ref: { apiVersion: string; kind: string }): V1Pod {
  const t = owner.spec?.template;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: `${owner.metadata?.name}-`,
      namespace: owner.metadata?.namespace,
      labels: { ...(t?.metadata?.labels ?? {}) },
      annotations: { ...(t?.metadata?.annotations ?? {}) },
      ownerReferences: [{ ...ref, name: owner.metadata!.name!, uid: owner.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
    },
    spec: structuredClone(t?.spec ?? { containers: [] }),
  };
}

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

/** The termination reason that makes a restore failed: the pod `Failed`, or a container ended `RestoreError`. */
export function restoreFailure(pod: V1Pod): string | undefined {
  for (const s of pod.status?.containerStatuses ?? []) {
    const t = s.state?.terminated ?? s.lastState?.terminated;
    if (t?.reason === 'RestoreError') return t.message ? `RestoreError: ${t.message}` : 'RestoreError';
  }
  if (pod.status?.phase === 'Failed') return pod.status.message ?? pod.status.reason ?? 'the pod failed';
  return undefined;
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
 * The blockers the control plane finds in a pod's spec, every one, with the seed's exact texts (seed "What
 * keeps a pod from moving"). One implementation, the kubelet's: the node checks the same rows.
 */
export const podSpecBlockers: (pod: V1Pod) => string[] = (pod) => kubeletSpecBlockers(pod);

/** The pod's memory request, bytes: the sum over containers (requests, else limits). */
export function podMemoryRequest(pod: V1Pod): number {
  let sum = 0;
  for (const c of pod.spec?.containers ?? []) {
    const q = c.resources?.requests?.memory ?? c.resources?.limits?.memory;
    if (q !== undefined) sum += safeBytes(q);
  }
  return sum;
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

/** The name of the container a Checkpoint names, or the only container. */
export function resolveContainer(pod: V1Pod, name: string | undefined): string | { error: string } {
  const containers = pod.spec?.containers ?? [];
  if (name) return containers.some((c) => c.name === name) ? name : { error: `the pod has no container ${name}` };
  if (containers.length === 1) return containers[0]!.name;
  return { error: `the pod has ${containers.length} containers: spec.containerName must name one` };
}

/** A short random-free suffix from a uid: its first 5 hex digits. */
export function shortUid(uid: string | undefined): string {
  return (uid ?? '').replace(/-/g, '').slice(0, 5) || '00000';
}
