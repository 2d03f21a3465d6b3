/**
 * Every write (and the few direct reads) the controllers make, as one small interface: the seam that unit
 * tests replace with a recorder (`testing/fake-api.ts`), and that `kube-api.ts` implements with
 * @kubernetes/client-node against a real API server. Reads of the cluster's state come from the informer
 * caches instead (`cache.ts`).
 *
 * Every method throws an {@link ApiError} for an error answer (use `isNotFound`, `isConflict`, ...).
 */
import type { Readable } from 'node:stream';
import type {
  V1Scale,
  V2HorizontalPodAutoscaler,
  CoreV1Event,
  KubernetesObject,
  V1ControllerRevision,
  V1DaemonSet,
  V1Deployment,
  V1EndpointSlice,
  V1Endpoints,
  V1Node,
  V1Pod,
  V1PodDisruptionBudget,
  V1ReplicaSet,
  V1ResourceQuota,
  V1ServiceAccount,
  V1StatefulSet,
} from '@kubernetes/client-node';
import type { Checkpoint } from '../../api/index.ts';

/** A JSON merge patch (RFC 7386): `null` removes a field. */
export type MergePatch = Record<string, unknown>;

/** A `metrics.k8s.io/v1beta1` PodMetrics (client-node has no model of it). */
export interface PodMetrics {
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  /** RFC 3339: when the figures were taken. */
  timestamp: string;
  /** The window they cover, as `15s`. */
  window: string;
  containers: { name: string; usage: Record<string, string> }[];
}

/** The answer of the kubelet's `POST /checkpoint/...` through the node proxy (seed "Kubelet endpoints"). */
export type SnapshotAnswer =
  | {
      kind: 'snapshot';
      /** The K32S bytes; the caller must consume or destroy it. */
      body: Readable;
      /** `Content-Length`, bytes. */
      sizeBytes: number;
      imageSha256: string;
      snapshotSha256: string;
      podTimeMs: number;
    }
  | {
      /** 404 (no such pod or container), 409 `NotMovable`, 504 `Timeout`, or another error answer. */
      kind: 'refused';
      code: number;
      reason: string;
      message: string;
      blockers: string[];
    };

/**
 * The answer of `POST .../checkpoints/<name>/data?node=...` (the API server takes the snapshot from the
 * node's kubelet into the Checkpoint's data): the Checkpoint with its data facts, or the kubelet's refusal.
 */
export type CaptureAnswer =
  | {
      kind: 'stored';
      /** The Checkpoint as the API server wrote it: `status.sizeBytes`, `snapshotSha256`, `imageSha256`, `podTimeMs`. */
      checkpoint: Checkpoint;
    }
  | {
      /** The kubelet's own answer: 404 (no such pod or container), 409 `NotMovable`, 504 `Timeout`, ... */
      kind: 'refused';
      code: number;
      reason: string;
      message: string;
      blockers: string[];
    };

/** Options of a pod deletion. */
export interface DeletePodOptions {
  /** Precondition: delete only this uid (409 otherwise). */
  uid?: string;
  /** Grace period, seconds; 0 deletes at once. */
  gracePeriodSeconds?: number;
}

/** The cluster API the controllers use. */
export interface ClusterApi {
  // Pods
  createPod(namespace: string, pod: V1Pod): Promise<V1Pod>;
  /** `POST .../pods/<name>/binding`. */
  bindPod(namespace: string, name: string, uid: string | undefined, nodeName: string): Promise<void>;
  patchPod(namespace: string, name: string, patch: MergePatch): Promise<V1Pod>;
  patchPodStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Pod>;
  deletePod(namespace: string, name: string, options?: DeletePodOptions): Promise<void>;
  /**
   * The one-write replacement of a move: `POST .../pods/<name>/replace` with `pod.metadata.uid` the CURRENT
   * uid as a precondition. Answers the new pod (new uid). 409 when the uid differs, 404 when gone.
   */
  replacePod(namespace: string, name: string, pod: V1Pod): Promise<V1Pod>;
  // Nodes
  patchNode(name: string, patch: MergePatch): Promise<V1Node>;
  patchNodeStatus(name: string, patch: MergePatch): Promise<V1Node>;
  // ServiceAccounts
  createServiceAccount(namespace: string, account: V1ServiceAccount): Promise<V1ServiceAccount>;
  // Events
  createEvent(namespace: string, event: CoreV1Event): Promise<void>;
  /** A JSON merge patch of an Event (a repeat raises `count` and `lastTimestamp`). */
  patchEvent(namespace: string, name: string, patch: MergePatch): Promise<void>;
  // Workloads
  createReplicaSet(namespace: string, rs: V1ReplicaSet): Promise<V1ReplicaSet>;
  patchReplicaSet(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet>;
  patchReplicaSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet>;
  deleteReplicaSet(namespace: string, name: string): Promise<void>;
  patchDeployment(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment>;
  patchDeploymentStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment>;
  patchDaemonSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1DaemonSet>;
  patchStatefulSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1StatefulSet>;
  /** Creates a StatefulSet's ControllerRevision (409 AlreadyExists when one of that name is there). */
  createControllerRevision(namespace: string, revision: V1ControllerRevision): Promise<V1ControllerRevision>;
  /** Merge-patches a ControllerRevision (its `revision` raised when a rollback reuses it). */
  patchControllerRevision(namespace: string, name: string, patch: MergePatch): Promise<V1ControllerRevision>;
  deleteControllerRevision(namespace: string, name: string): Promise<void>;
  // ResourceQuotas
  patchResourceQuotaStatus(namespace: string, name: string, patch: MergePatch): Promise<V1ResourceQuota>;
  /**
   * Lists the objects of a namespace by storage key (`configmaps`, `deployments.apps`), at the group's
   * preferred version; none when the server does not serve it (404).
   */
  listNamespaced(namespace: string, key: string): Promise<KubernetesObject[]>;
  // HorizontalPodAutoscalers (src/controllers/autoscaling)
  /** The `autoscaling/v1` Scale of a workload (`apps/v1` `deployments`, `replicasets`, `statefulsets`). */
  getScale(namespace: string, resource: string, name: string): Promise<V1Scale>;
  /** Writes a workload's Scale (PUT, the Scale's resourceVersion as a precondition). */
  updateScale(namespace: string, resource: string, name: string, scale: V1Scale): Promise<V1Scale>;
  /** Merge-patches an `autoscaling/v2` HorizontalPodAutoscaler's status. */
  patchHorizontalPodAutoscalerStatus(namespace: string, name: string, patch: MergePatch): Promise<V2HorizontalPodAutoscaler>;
  /** The `metrics.k8s.io/v1beta1` PodMetrics of a namespace's pods that `labelSelector` picks. */
  listPodMetrics(namespace: string, labelSelector: string): Promise<PodMetrics[]>;
  /** Merge-patches a PodDisruptionBudget's status (`policy/v1`, the status subresource). */
  patchPodDisruptionBudgetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1PodDisruptionBudget>;
  // Endpoints
  createEndpoints(namespace: string, endpoints: V1Endpoints): Promise<V1Endpoints>;
  replaceEndpoints(namespace: string, name: string, endpoints: V1Endpoints): Promise<V1Endpoints>;
  // EndpointSlices (discovery.k8s.io/v1)
  createEndpointSlice(namespace: string, slice: V1EndpointSlice): Promise<V1EndpointSlice>;
  replaceEndpointSlice(namespace: string, name: string, slice: V1EndpointSlice): Promise<V1EndpointSlice>;
  deleteEndpointSlice(namespace: string, name: string): Promise<void>;
  // Checkpoints
  createCheckpoint(namespace: string, checkpoint: Checkpoint): Promise<Checkpoint>;
  patchCheckpoint(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint>;
  patchCheckpointStatus(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint>;
  deleteCheckpoint(namespace: string, name: string): Promise<void>;
  /** `PUT .../checkpoints/<name>/data` with the snapshot; answers the Checkpoint with its data facts. */
  putCheckpointData(namespace: string, name: string, body: Readable, sizeBytes: number): Promise<Checkpoint>;
  /**
   * `POST .../checkpoints/<name>/data?node=<node>&container=<c>&leave=...&timeoutMs=...`: the API server takes
   * the snapshot of the Checkpoint's pod from the node's kubelet and stores it as the data, in one hop.
   * @throws ApiError for the API server's own errors (405 from an API server without it, 413, 422, 503 ...)
   */
  captureCheckpointData(
    namespace: string,
    name: string,
    node: string,
    container: string,
    leave: 'running' | 'frozen',
    timeoutMs: number,
  ): Promise<CaptureAnswer>;
  // The kubelet, through the node proxy
  /** `POST /api/v1/nodes/<node>/proxy/checkpoint/<ns>/<pod>/<container>?leave=...&timeoutMs=...`. */
  takeSnapshot(
    node: string,
    namespace: string,
    pod: string,
    container: string,
    leave: 'running' | 'frozen',
    timeoutMs: number,
  ): Promise<SnapshotAnswer>;
  /** `POST /api/v1/nodes/<node>/proxy/thaw/...`: true when thawed, false when it was not frozen (404). */
  thaw(node: string, namespace: string, pod: string, container: string): Promise<boolean>;
}
