/**
 * {@link ClusterApi} against a real API server: the typed APIs of @kubernetes/client-node (CoreV1Api,
 * AppsV1Api, CustomObjectsApi) for the standard calls, and {@link KubeRest} for the pod replacement, the
 * node proxy and the Checkpoint data, which have no typed call.
 */
import type { Readable } from 'node:stream';
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type CoreV1Event,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1DaemonSet,
  type V1Deployment,
  type V1Endpoints,
  type V1Node,
  type V1Pod,
  type V1ReplicaSet,
} from '@kubernetes/client-node';
import type { ClusterApi, DeletePodOptions, MergePatch, SnapshotAnswer } from './api.ts';
import { toApiCallError } from './errors.ts';
import { errorFromAnswer, KubeRest, readText } from './rest.ts';
import { CHECKPOINT_PLURAL, type Checkpoint, KUBE32_GROUP, KUBE32_VERSION } from './types.ts';

const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const seg = encodeURIComponent;

async function call<T>(operation: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err: unknown) {
    throw toApiCallError(operation, err);
  }
}

/** The controllers' API client; one per control plane process. */
export class KubeClusterApi implements ClusterApi {
  readonly core: CoreV1Api;
  readonly apps: AppsV1Api;
  readonly custom: CustomObjectsApi;
  readonly rest: KubeRest;

  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.rest = new KubeRest(kc);
  }

  createPod(namespace: string, pod: V1Pod): Promise<V1Pod> {
    return call(`create pod ${namespace}/${pod.metadata?.name ?? pod.metadata?.generateName}`, () =>
      this.core.createNamespacedPod({ namespace, body: pod }),
    );
  }

  async bindPod(namespace: string, name: string, uid: string | undefined, nodeName: string): Promise<void> {
    await call(`bind pod ${namespace}/${name} to ${nodeName}`, () =>
      this.core.createNamespacedPodBinding({
        name,
        namespace,
        body: {
          apiVersion: 'v1',
          kind: 'Binding',
          metadata: { name, namespace, uid },
          target: { apiVersion: 'v1', kind: 'Node', name: nodeName },
        },
      }),
    );
  }

  patchPod(namespace: string, name: string, patch: MergePatch): Promise<V1Pod> {
    return call(`patch pod ${namespace}/${name}`, () => this.core.patchNamespacedPod({ name, namespace, body: patch }, MERGE));
  }

  patchPodStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Pod> {
    return call(`patch pod status ${namespace}/${name}`, () =>
      this.core.patchNamespacedPodStatus({ name, namespace, body: patch }, MERGE),
    );
  }

  async deletePod(namespace: string, name: string, options: DeletePodOptions = {}): Promise<void> {
    await call(`delete pod ${namespace}/${name}`, () =>
      this.core.deleteNamespacedPod({
        name,
        namespace,
        gracePeriodSeconds: options.gracePeriodSeconds,
        body: {
          gracePeriodSeconds: options.gracePeriodSeconds,
          preconditions: options.uid ? { uid: options.uid } : undefined,
        },
      }),
    );
  }

  replacePod(namespace: string, name: string, pod: V1Pod): Promise<V1Pod> {
    return this.rest.json<V1Pod>({
      method: 'POST',
      path: `/api/v1/namespaces/${seg(namespace)}/pods/${seg(name)}/replace`,
      body: pod,
    });
  }

  patchNode(name: string, patch: MergePatch): Promise<V1Node> {
    return call(`patch node ${name}`, () => this.core.patchNode({ name, body: patch }, MERGE));
  }

  patchNodeStatus(name: string, patch: MergePatch): Promise<V1Node> {
    return call(`patch node status ${name}`, () => this.core.patchNodeStatus({ name, body: patch }, MERGE));
  }

  async createEvent(namespace: string, event: CoreV1Event): Promise<void> {
    await call(`create event ${namespace}/${event.metadata?.name}`, () => this.core.createNamespacedEvent({ namespace, body: event }));
  }

  async patchEvent(namespace: string, name: string, patch: MergePatch): Promise<void> {
    await call(`patch event ${namespace}/${name}`, () => this.core.patchNamespacedEvent({ name, namespace, body: patch }, MERGE));
  }

  createReplicaSet(namespace: string, rs: V1ReplicaSet): Promise<V1ReplicaSet> {
    return call(`create replicaset ${namespace}/${rs.metadata?.name}`, () =>
      this.apps.createNamespacedReplicaSet({ namespace, body: rs }),
    );
  }

  patchReplicaSet(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet> {
    return call(`patch replicaset ${namespace}/${name}`, () =>
      this.apps.patchNamespacedReplicaSet({ name, namespace, body: patch }, MERGE),
    );
  }

  patchReplicaSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet> {
    return call(`patch replicaset status ${namespace}/${name}`, () =>
      this.apps.patchNamespacedReplicaSetStatus({ name, namespace, body: patch }, MERGE),
    );
  }

  async deleteReplicaSet(namespace: string, name: string): Promise<void> {
    await call(`delete replicaset ${namespace}/${name}`, () => this.apps.deleteNamespacedReplicaSet({ name, namespace }));
  }

  patchDeployment(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment> {
    return call(`patch deployment ${namespace}/${name}`, () =>
      this.apps.patchNamespacedDeployment({ name, namespace, body: patch }, MERGE),
    );
  }

  patchDeploymentStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment> {
    return call(`patch deployment status ${namespace}/${name}`, () =>
      this.apps.patchNamespacedDeploymentStatus({ name, namespace, body: patch }, MERGE),
    );
  }

  patchDaemonSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1DaemonSet> {
    return call(`patch daemonset status ${namespace}/${name}`, () =>
      this.apps.patchNamespacedDaemonSetStatus({ name, namespace, body: patch }, MERGE),
    );
  }

  createEndpoints(namespace: string, endpoints: V1Endpoints): Promise<V1Endpoints> {
    return call(`create endpoints ${namespace}/${endpoints.metadata?.name}`, () =>
      this.core.createNamespacedEndpoints({ namespace, body: endpoints }),
    );
  }

  replaceEndpoints(namespace: string, name: string, endpoints: V1Endpoints): Promise<V1Endpoints> {
    return call(`update endpoints ${namespace}/${name}`, () =>
      this.core.replaceNamespacedEndpoints({ name, namespace, body: endpoints }),
    );
  }

  createCheckpoint(namespace: string, checkpoint: Checkpoint): Promise<Checkpoint> {
    return call(`create checkpoint ${namespace}/${checkpoint.metadata?.name}`, () =>
      this.custom.createNamespacedCustomObject({
        group: KUBE32_GROUP,
        version: KUBE32_VERSION,
        namespace,
        plural: CHECKPOINT_PLURAL,
        body: { apiVersion: `${KUBE32_GROUP}/${KUBE32_VERSION}`, kind: 'Checkpoint', ...checkpoint },
      }),
    );
  }

  patchCheckpoint(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint> {
    return call(`patch checkpoint ${namespace}/${name}`, () =>
      this.custom.patchNamespacedCustomObject(
        { group: KUBE32_GROUP, version: KUBE32_VERSION, namespace, plural: CHECKPOINT_PLURAL, name, body: patch },
        MERGE,
      ),
    );
  }

  patchCheckpointStatus(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint> {
    return call(`patch checkpoint status ${namespace}/${name}`, () =>
      this.custom.patchNamespacedCustomObjectStatus(
        { group: KUBE32_GROUP, version: KUBE32_VERSION, namespace, plural: CHECKPOINT_PLURAL, name, body: patch },
        MERGE,
      ),
    );
  }

  async deleteCheckpoint(namespace: string, name: string): Promise<void> {
    await call(`delete checkpoint ${namespace}/${name}`, () =>
      this.custom.deleteNamespacedCustomObject({
        group: KUBE32_GROUP,
        version: KUBE32_VERSION,
        namespace,
        plural: CHECKPOINT_PLURAL,
        name,
      }),
    );
  }

  putCheckpointData(namespace: string, name: string, body: Readable, sizeBytes: number): Promise<Checkpoint> {
    return this.rest.json<Checkpoint>({
      method: 'PUT',
      path: `/apis/${KUBE32_GROUP}/${KUBE32_VERSION}/namespaces/${seg(namespace)}/${CHECKPOINT_PLURAL}/${seg(name)}/data`,
      body,
      contentType: 'application/octet-stream',
      contentLength: sizeBytes,
      timeoutMs: 120_000,
    });
  }

  async takeSnapshot(
    node: string,
    namespace: string,
    pod: string,
    container: string,
    leave: 'running' | 'frozen',
    timeoutMs: number,
  ): Promise<SnapshotAnswer> {
    const path =
      `/api/v1/nodes/${seg(node)}/proxy/checkpoint/${seg(namespace)}/${seg(pod)}/${seg(container)}` +
      `?leave=${leave}&timeoutMs=${timeoutMs}`;
    const res = await this.rest.request({ method: 'POST', path, timeoutMs: timeoutMs + 120_000 });
    if (res.status === 200) {
      const h = res.headers;
      return {
        kind: 'snapshot',
        body: res.body,
        sizeBytes: Number(h['content-length'] ?? Number.NaN),
        imageSha256: String(h['x-kube32-image-sha256'] ?? ''),
        snapshotSha256: String(h['x-kube32-snapshot-sha256'] ?? ''),
        podTimeMs: Number(h['x-kube32-pod-time-ms'] ?? 0),
      };
    }
    const text = await readText(res.body);
    const err = errorFromAnswer(`checkpoint ${namespace}/${pod} on ${node}`, res.status, text);
    const body = (typeof err.body === 'object' && err.body !== null ? err.body : {}) as { blockers?: unknown };
    const blockers = Array.isArray(body.blockers) ? body.blockers.map(String) : [];
    return { kind: 'refused', code: res.status, reason: err.reason, message: err.message, blockers };
  }

  async thaw(node: string, namespace: string, pod: string, container: string): Promise<boolean> {
    const path = `/api/v1/nodes/${seg(node)}/proxy/thaw/${seg(namespace)}/${seg(pod)}/${seg(container)}`;
    const res = await this.rest.request({ method: 'POST', path });
    const text = await readText(res.body);
    if (res.status === 200) return true;
    if (res.status === 404) return false;
    throw errorFromAnswer(`thaw ${namespace}/${pod} on ${node}`, res.status, text);
  }
}
