/**
 * Helpers about pods that several controllers need: the pod of a template, a restore's failure, the
 * container a Checkpoint names. The rules other components apply too (activity, readiness, policies, the
 * spec's blockers, memory) are src/api's, which the controllers import from there.
 */
import type { V1ObjectMeta, V1Pod, V1PodTemplateSpec } from '@kubernetes/client-node';

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

/** The termination reason that makes a restore failed: the pod `Failed`, or a container ended `RestoreError`. */
export function restoreFailure(pod: V1Pod): string | undefined {
  for (const s of pod.status?.containerStatuses ?? []) {
    const t = s.state?.terminated ?? s.lastState?.terminated;
    if (t?.reason === 'RestoreError') return t.message ? `RestoreError: ${t.message}` : 'RestoreError';
  }
  if (pod.status?.phase === 'Failed') return pod.status.message ?? pod.status.reason ?? 'the pod failed';
  return undefined;
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
