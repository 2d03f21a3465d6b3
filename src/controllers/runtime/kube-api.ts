/**
 * {@link ClusterApi} against a real API server, every call through {@link RestClient}: plain JSON over one
 * pool of keep-alive connections. (The typed APIs of @kubernetes/client-node open a new TLS connection per
 * call, since their agent does not keep connections alive: at a thousand pods a minute the handshakes, on
 * both ends of the loopback, cost more than the calls; see docs/control-plane-performance.md.) Answers are
 * plain JSON, as the informers' objects are. Errors are {@link ApiError}s naming the operation, with the
 * answer's `metav1.Status` reason and body.
 */
import type { Readable } from 'node:stream';
import type {
  CoreV1Event,
  KubeConfig,
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
  V1Scale,
  V2HorizontalPodAutoscaler,
} from '@kubernetes/client-node';
import { ApiError, CHECKPOINT_PLURAL, type Checkpoint, errorFromAnswer, errorMessage, isNotFound, KUBE32_GROUP, KUBE32_VERSION, RestClient, type RestRequest, readText } from '../../api/index.ts';
import type { CaptureAnswer, ClusterApi, DeletePodOptions, MergePatch, PodMetrics, SnapshotAnswer } from './api.ts';

const MERGE = 'application/merge-patch+json';
const seg = encodeURIComponent;
/** Header (lower case, as Node reads it) marking an answer of the checkpoint data POST as the kubelet's own. */
const NODE_STATUS_HEADER = 'x-kube32-node-status';
const CORE = '/api/v1';
const APPS = '/apis/apps/v1';
const DISCOVERY = '/apis/discovery.k8s.io/v1';
const AUTOSCALING = '/apis/autoscaling/v2';
const METRICS = '/apis/metrics.k8s.io/v1beta1';
const CHECKPOINTS = `/apis/${KUBE32_GROUP}/${KUBE32_VERSION}`;

/** The controllers' API client; one per control plane process. */
export class KubeClusterApi implements ClusterApi {
  readonly rest: RestClient;

  /** @param options.maxSockets connections kept to the API server at most @default src/api's `MAX_SOCKETS` */
  constructor(kc: KubeConfig, options: { maxSockets?: number } = {}) {
    this.rest = new RestClient(kc, options.maxSockets === undefined ? {} : { maxSockets: options.maxSockets });
  }

  /**
   * One JSON call: the answer's body, or an {@link ApiError} named `operation` (code 0 when the
   * request got no answer).
   */
  async #call<T>(operation: string, req: RestRequest): Promise<T> {
    let status: number;
    let text: string;
    try {
      const res = await this.rest.request(req);
      status = res.status;
      text = await readText(res.body);
    } catch (err: unknown) {
      const cause = err instanceof ApiError && err.cause !== undefined ? err.cause : err;
      throw new ApiError(operation, 0, '', errorMessage(cause), undefined, { cause });
    }
    if (status >= 300) throw errorFromAnswer(operation, status, text);
    return (text ? JSON.parse(text) : {}) as T;
  }

  #ns(namespace: string, plural: string, name?: string, sub?: string, base = CORE): string {
    return `${base}/namespaces/${seg(namespace)}/${plural}${name === undefined ? '' : `/${seg(name)}`}${sub ? `/${sub}` : ''}`;
  }

  #merge<T>(operation: string, path: string, patch: MergePatch): Promise<T> {
    return this.#call<T>(operation, { method: 'PATCH', path, body: patch, contentType: MERGE });
  }

  createPod(namespace: string, pod: V1Pod): Promise<V1Pod> {
    return this.#call(`create pod ${namespace}/${pod.metadata?.name ?? pod.metadata?.generateName}`, {
      method: 'POST',
      path: this.#ns(namespace, 'pods'),
      body: pod,
    });
  }

  async bindPod(namespace: string, name: string, uid: string | undefined, nodeName: string): Promise<void> {
    await this.#call(`bind pod ${namespace}/${name} to ${nodeName}`, {
      method: 'POST',
      path: this.#ns(namespace, 'pods', name, 'binding'),
      body: {
        apiVersion: 'v1',
        kind: 'Binding',
        metadata: { name, namespace, uid },
        target: { apiVersion: 'v1', kind: 'Node', name: nodeName },
      },
    });
  }

  patchPod(namespace: string, name: string, patch: MergePatch): Promise<V1Pod> {
    return this.#merge(`patch pod ${namespace}/${name}`, this.#ns(namespace, 'pods', name), patch);
  }

  patchPodStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Pod> {
    return this.#merge(`patch pod status ${namespace}/${name}`, this.#ns(namespace, 'pods', name, 'status'), patch);
  }

  async deletePod(namespace: string, name: string, options: DeletePodOptions = {}): Promise<void> {
    const grace = options.gracePeriodSeconds;
    await this.#call(`delete pod ${namespace}/${name}`, {
      method: 'DELETE',
      path: `${this.#ns(namespace, 'pods', name)}${grace === undefined ? '' : `?gracePeriodSeconds=${grace}`}`,
      body: {
        apiVersion: 'v1',
        kind: 'DeleteOptions',
        ...(grace === undefined ? {} : { gracePeriodSeconds: grace }),
        ...(options.uid ? { preconditions: { uid: options.uid } } : {}),
      },
    });
  }

  replacePod(namespace: string, name: string, pod: V1Pod): Promise<V1Pod> {
    return this.rest.json<V1Pod>({
      method: 'POST',
      path: this.#ns(namespace, 'pods', name, 'replace'),
      body: pod,
    });
  }

  patchNode(name: string, patch: MergePatch): Promise<V1Node> {
    return this.#merge(`patch node ${name}`, `${CORE}/nodes/${seg(name)}`, patch);
  }

  patchNodeStatus(name: string, patch: MergePatch): Promise<V1Node> {
    return this.#merge(`patch node status ${name}`, `${CORE}/nodes/${seg(name)}/status`, patch);
  }

  createServiceAccount(namespace: string, account: V1ServiceAccount): Promise<V1ServiceAccount> {
    return this.#call(`create serviceaccount ${namespace}/${account.metadata?.name}`, { method: 'POST', path: this.#ns(namespace, 'serviceaccounts'), body: account });
  }

  async createEvent(namespace: string, event: CoreV1Event): Promise<void> {
    await this.#call(`create event ${namespace}/${event.metadata?.name}`, { method: 'POST', path: this.#ns(namespace, 'events'), body: event });
  }

  async patchEvent(namespace: string, name: string, patch: MergePatch): Promise<void> {
    await this.#merge(`patch event ${namespace}/${name}`, this.#ns(namespace, 'events', name), patch);
  }

  createReplicaSet(namespace: string, rs: V1ReplicaSet): Promise<V1ReplicaSet> {
    return this.#call(`create replicaset ${namespace}/${rs.metadata?.name}`, {
      method: 'POST',
      path: this.#ns(namespace, 'replicasets', undefined, undefined, APPS),
      body: { apiVersion: 'apps/v1', kind: 'ReplicaSet', ...rs },
    });
  }

  patchReplicaSet(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet> {
    return this.#merge(`patch replicaset ${namespace}/${name}`, this.#ns(namespace, 'replicasets', name, undefined, APPS), patch);
  }

  patchReplicaSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1ReplicaSet> {
    return this.#merge(`patch replicaset status ${namespace}/${name}`, this.#ns(namespace, 'replicasets', name, 'status', APPS), patch);
  }

  async deleteReplicaSet(namespace: string, name: string): Promise<void> {
    await this.#call(`delete replicaset ${namespace}/${name}`, { method: 'DELETE', path: this.#ns(namespace, 'replicasets', name, undefined, APPS) });
  }

  patchDeployment(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment> {
    return this.#merge(`patch deployment ${namespace}/${name}`, this.#ns(namespace, 'deployments', name, undefined, APPS), patch);
  }

  patchDeploymentStatus(namespace: string, name: string, patch: MergePatch): Promise<V1Deployment> {
    return this.#merge(`patch deployment status ${namespace}/${name}`, this.#ns(namespace, 'deployments', name, 'status', APPS), patch);
  }

  patchDaemonSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1DaemonSet> {
    return this.#merge(`patch daemonset status ${namespace}/${name}`, this.#ns(namespace, 'daemonsets', name, 'status', APPS), patch);
  }

  patchStatefulSetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1StatefulSet> {
    return this.#merge(`patch statefulset status ${namespace}/${name}`, this.#ns(namespace, 'statefulsets', name, 'status', APPS), patch);
  }

  createControllerRevision(namespace: string, revision: V1ControllerRevision): Promise<V1ControllerRevision> {
    return this.#call(`create controllerrevision ${namespace}/${revision.metadata?.name}`, {
      method: 'POST',
      path: this.#ns(namespace, 'controllerrevisions', undefined, undefined, APPS),
      body: { apiVersion: 'apps/v1', kind: 'ControllerRevision', ...revision },
    });
  }

  patchControllerRevision(namespace: string, name: string, patch: MergePatch): Promise<V1ControllerRevision> {
    return this.#merge(`patch controllerrevision ${namespace}/${name}`, this.#ns(namespace, 'controllerrevisions', name, undefined, APPS), patch);
  }

  async deleteControllerRevision(namespace: string, name: string): Promise<void> {
    await this.#call(`delete controllerrevision ${namespace}/${name}`, { method: 'DELETE', path: this.#ns(namespace, 'controllerrevisions', name, undefined, APPS) });
  }

  patchResourceQuotaStatus(namespace: string, name: string, patch: MergePatch): Promise<V1ResourceQuota> {
    return this.#merge(`patch resourcequota status ${namespace}/${name}`, this.#ns(namespace, 'resourcequotas', name, 'status'), patch);
  }

  getScale(namespace: string, resource: string, name: string): Promise<V1Scale> {
    return this.#call(`get ${resource}/scale ${namespace}/${name}`, { method: 'GET', path: this.#ns(namespace, resource, name, 'scale', APPS) });
  }

  updateScale(namespace: string, resource: string, name: string, scale: V1Scale): Promise<V1Scale> {
    return this.#call(`update ${resource}/scale ${namespace}/${name}`, { method: 'PUT', path: this.#ns(namespace, resource, name, 'scale', APPS), body: scale });
  }

  patchHorizontalPodAutoscalerStatus(namespace: string, name: string, patch: MergePatch): Promise<V2HorizontalPodAutoscaler> {
    return this.#merge(`patch horizontalpodautoscaler status ${namespace}/${name}`, this.#ns(namespace, 'horizontalpodautoscalers', name, 'status', AUTOSCALING), patch);
  }

  async listPodMetrics(namespace: string, labelSelector: string): Promise<PodMetrics[]> {
    const q = labelSelector ? `?labelSelector=${seg(labelSelector)}` : '';
    const list = await this.#call<{ items?: PodMetrics[] }>(`list pod metrics in ${namespace}`, { method: 'GET', path: `${this.#ns(namespace, 'pods', undefined, undefined, METRICS)}${q}` });
    return list.items ?? [];
  }

  readonly #preferred = new Map<string, string>();

  async listNamespaced(namespace: string, key: string): Promise<KubernetesObject[]> {
    const dot = key.indexOf('.');
    const plural = dot < 0 ? key : key.slice(0, dot);
    const group = dot < 0 ? '' : key.slice(dot + 1);
    try {
      let base = CORE;
      if (group) {
        let gv = this.#preferred.get(group);
        if (!gv) {
          const g = await this.#call<{ preferredVersion?: { groupVersion?: string } }>(`discover group ${group}`, { method: 'GET', path: `/apis/${seg(group)}` });
          gv = g.preferredVersion?.groupVersion ?? `${group}/v1`;
          this.#preferred.set(group, gv);
        }
        base = `/apis/${gv}`;
      }
      const list = await this.#call<{ items?: KubernetesObject[] }>(`list ${key} in ${namespace}`, { method: 'GET', path: this.#ns(namespace, seg(plural), undefined, undefined, base) });
      return list.items ?? [];
    } catch (err: unknown) {
      if (isNotFound(err)) return [];
      throw err;
    }
  }

  patchPodDisruptionBudgetStatus(namespace: string, name: string, patch: MergePatch): Promise<V1PodDisruptionBudget> {
    return this.#merge(`patch poddisruptionbudget status ${namespace}/${name}`, this.#ns(namespace, 'poddisruptionbudgets', name, 'status', '/apis/policy/v1'), patch);
  }

  createEndpoints(namespace: string, endpoints: V1Endpoints): Promise<V1Endpoints> {
    return this.#call(`create endpoints ${namespace}/${endpoints.metadata?.name}`, {
      method: 'POST',
      path: this.#ns(namespace, 'endpoints'),
      body: { apiVersion: 'v1', kind: 'Endpoints', ...endpoints },
    });
  }

  replaceEndpoints(namespace: string, name: string, endpoints: V1Endpoints): Promise<V1Endpoints> {
    return this.#call(`update endpoints ${namespace}/${name}`, {
      method: 'PUT',
      path: this.#ns(namespace, 'endpoints', name),
      body: { apiVersion: 'v1', kind: 'Endpoints', ...endpoints },
    });
  }

  createEndpointSlice(namespace: string, slice: V1EndpointSlice): Promise<V1EndpointSlice> {
    return this.#call(`create endpointslice ${namespace}/${slice.metadata?.name ?? slice.metadata?.generateName}`, {
      method: 'POST',
      path: this.#ns(namespace, 'endpointslices', undefined, undefined, DISCOVERY),
      body: { ...slice, apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice' },
    });
  }

  replaceEndpointSlice(namespace: string, name: string, slice: V1EndpointSlice): Promise<V1EndpointSlice> {
    return this.#call(`update endpointslice ${namespace}/${name}`, {
      method: 'PUT',
      path: this.#ns(namespace, 'endpointslices', name, undefined, DISCOVERY),
      body: { ...slice, apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice' },
    });
  }

  async deleteEndpointSlice(namespace: string, name: string): Promise<void> {
    await this.#call(`delete endpointslice ${namespace}/${name}`, { method: 'DELETE', path: this.#ns(namespace, 'endpointslices', name, undefined, DISCOVERY) });
  }

  createCheckpoint(namespace: string, checkpoint: Checkpoint): Promise<Checkpoint> {
    return this.#call(`create checkpoint ${namespace}/${checkpoint.metadata?.name}`, {
      method: 'POST',
      path: this.#ns(namespace, CHECKPOINT_PLURAL, undefined, undefined, CHECKPOINTS),
      body: { apiVersion: `${KUBE32_GROUP}/${KUBE32_VERSION}`, kind: 'Checkpoint', ...checkpoint },
    });
  }

  patchCheckpoint(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint> {
    return this.#merge(`patch checkpoint ${namespace}/${name}`, this.#ns(namespace, CHECKPOINT_PLURAL, name, undefined, CHECKPOINTS), patch);
  }

  patchCheckpointStatus(namespace: string, name: string, patch: MergePatch): Promise<Checkpoint> {
    return this.#merge(`patch checkpoint status ${namespace}/${name}`, this.#ns(namespace, CHECKPOINT_PLURAL, name, 'status', CHECKPOINTS), patch);
  }

  async deleteCheckpoint(namespace: string, name: string): Promise<void> {
    await this.#call(`delete checkpoint ${namespace}/${name}`, { method: 'DELETE', path: this.#ns(namespace, CHECKPOINT_PLURAL, name, undefined, CHECKPOINTS) });
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

  async captureCheckpointData(
    namespace: string,
    name: string,
    node: string,
    container: string,
    leave: 'running' | 'frozen',
    timeoutMs: number,
    target?: string,
  ): Promise<CaptureAnswer> {
    const q = new URLSearchParams({ node, container, leave, timeoutMs: String(timeoutMs), ...(target ? { target } : {}) });
    const path = `/apis/${KUBE32_GROUP}/${KUBE32_VERSION}/namespaces/${seg(namespace)}/${CHECKPOINT_PLURAL}/${seg(name)}/data?${q}`;
    const res = await this.rest.request({ method: 'POST', path, timeoutMs: timeoutMs + 120_000 });
    const text = await readText(res.body);
    if (res.status === 200) return { kind: 'stored', checkpoint: JSON.parse(text) as Checkpoint };
    const err = errorFromAnswer(`checkpoint ${namespace}/${name} from node ${node}`, res.status, text);
    if (res.headers[NODE_STATUS_HEADER] === undefined) throw err;
    const body = (typeof err.body === 'object' && err.body !== null ? err.body : {}) as { blockers?: unknown };
    const blockers = Array.isArray(body.blockers) ? body.blockers.map(String) : [];
    return { kind: 'refused', code: res.status, reason: err.reason, message: err.message, blockers };
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
