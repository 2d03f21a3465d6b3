/**
 * The controllers' view of the cluster: one informer per resource (src/api's `Informer`: list, then watch,
 * with back-off), each a read-only cache. Reconcilers read only these caches; event handlers subscribe to them.
 */
import type {
  KubeConfig,
  KubernetesObject,
  V1DaemonSet,
  V1Deployment,
  V1Endpoints,
  V1EndpointSlice,
  V1Lease,
  V1Namespace,
  V1Node,
  V1Pod,
  V1PodDisruptionBudget,
  V1ReplicaSet,
  V1Service,
  V1ServiceAccount,
  V1StatefulSet,
  V1ControllerRevision,
  V1ResourceQuota,
  V2HorizontalPodAutoscaler,
} from '@kubernetes/client-node';
import type { ControllerLog } from './controller.ts';
import { type Checkpoint, Informer, type Lister, type RestClient } from '../../api/index.ts';

/** A read-only cache of one resource (src/api's). `list()` without a namespace lists every namespace. */
export type { Lister } from '../../api/index.ts';

/** Every cache the controllers read. */
export interface Caches {
  pods: Lister<V1Pod>;
  nodes: Lister<V1Node>;
  leases: Lister<V1Lease>;
  checkpoints: Lister<Checkpoint>;
  replicaSets: Lister<V1ReplicaSet>;
  deployments: Lister<V1Deployment>;
  daemonSets: Lister<V1DaemonSet>;
  statefulSets: Lister<V1StatefulSet>;
  /** `apps/v1` ControllerRevisions (the StatefulSets' template history). */
  controllerRevisions: Lister<V1ControllerRevision>;
  /** `v1` ResourceQuotas (the quota controller writes their status). */
  resourceQuotas: Lister<V1ResourceQuota>;
  services: Lister<V1Service>;
  endpoints: Lister<V1Endpoints>;
  /** `discovery.k8s.io/v1` EndpointSlices (the endpoints controller's own, and others'). */
  endpointSlices: Lister<V1EndpointSlice>;
  /** `kube32.io/v1` Modules (cluster-scoped): a push brings back the ReplicaSets that could not create pods. */
  modules: Lister<KubernetesObject>;
  /** `policy/v1` PodDisruptionBudgets (the disruption controller writes their status). */
  podDisruptionBudgets: Lister<V1PodDisruptionBudget>;
  /** Namespaces (the ServiceAccount controller gives each its `default` account). */
  namespaces: Lister<V1Namespace>;
  serviceAccounts: Lister<V1ServiceAccount>;
  /** `autoscaling/v2` HorizontalPodAutoscalers (the HPA controller writes their status). */
  horizontalPodAutoscalers: Lister<V2HorizontalPodAutoscaler>;
}

/** The resources, their list paths, and whether the controllers can run without them. */
export const RESOURCES = {
  pods: { path: '/api/v1/pods', optional: false },
  nodes: { path: '/api/v1/nodes', optional: false },
  leases: { path: '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', optional: true },
  checkpoints: { path: '/apis/kube32.io/v1/checkpoints', optional: false },
  replicaSets: { path: '/apis/apps/v1/replicasets', optional: true },
  deployments: { path: '/apis/apps/v1/deployments', optional: true },
  daemonSets: { path: '/apis/apps/v1/daemonsets', optional: true },
  statefulSets: { path: '/apis/apps/v1/statefulsets', optional: true },
  controllerRevisions: { path: '/apis/apps/v1/controllerrevisions', optional: true },
  resourceQuotas: { path: '/api/v1/resourcequotas', optional: true },
  services: { path: '/api/v1/services', optional: true },
  endpoints: { path: '/api/v1/endpoints', optional: true },
  endpointSlices: { path: '/apis/discovery.k8s.io/v1/endpointslices', optional: true },
  modules: { path: '/apis/kube32.io/v1/modules', optional: true },
  podDisruptionBudgets: { path: '/apis/policy/v1/poddisruptionbudgets', optional: true },
  namespaces: { path: '/api/v1/namespaces', optional: true },
  serviceAccounts: { path: '/api/v1/serviceaccounts', optional: true },
  horizontalPodAutoscalers: { path: '/apis/autoscaling/v2/horizontalpodautoscalers', optional: true },
} as const;

export type ResourceName = keyof typeof RESOURCES;

/** An event handler: `old` is the previous object of an update, when known. */
export type Handler<T> = (verb: 'add' | 'update' | 'delete', obj: T) => void;

const EMPTY: Lister<never> = { get: () => undefined, list: () => [] };

/** The informers of one control plane process. */
export class Informers {
  readonly #kc: KubeConfig;
  readonly #rest: RestClient;
  readonly #log: ControllerLog;
  readonly #informers = new Map<ResourceName, Informer>();
  readonly #unavailable = new Set<ResourceName>();
  readonly #handlers = new Map<ResourceName, Handler<KubernetesObject>[]>();
  readonly caches: Caches;

  constructor(kc: KubeConfig, rest: RestClient, log: ControllerLog) {
    this.#kc = kc;
    this.#rest = rest;
    this.#log = log;
    const lister = (name: ResourceName): Lister<KubernetesObject> => ({
      get: (n, ns) => this.#informers.get(name)?.get(n, ns),
      list: (ns) => this.#informers.get(name)?.list(ns) ?? [],
    });
    this.caches = Object.fromEntries(
      (Object.keys(RESOURCES) as ResourceName[]).map((n) => [n, lister(n)]),
    ) as unknown as Caches;
  }

  /** Subscribes `handler` to a resource's adds, updates and deletes (before or after start). */
  on<K extends ResourceName>(resource: K, handler: Handler<ReturnType<Caches[K]['list']>[number]>): void {
    const list = this.#handlers.get(resource) ?? [];
    list.push(handler as Handler<KubernetesObject>);
    this.#handlers.set(resource, list);
  }

  /** Whether the API server does not serve an optional resource (its controller then idles). */
  unavailable(resource: ResourceName): boolean {
    return this.#unavailable.has(resource);
  }

  /**
   * Lists and starts watching every resource; resolves when every cache has synced. An optional resource
   * the server does not serve (404) is marked unavailable and left empty.
   * @throws ApiError when a required resource cannot be listed
   */
  async start(): Promise<void> {
    await Promise.all((Object.keys(RESOURCES) as ResourceName[]).map((n) => this.#startOne(n)));
  }

  async #startOne(name: ResourceName): Promise<void> {
    const { path, optional } = RESOURCES[name];
    // Probe first so that a missing resource is a clear error (or, optional, an empty cache).
    try {
      await this.#rest.json({ method: 'GET', path: `${path}?limit=1` });
    } catch (err: unknown) {
      if (optional && (err as { code?: number }).code === 404) {
        this.#unavailable.add(name);
        this.#log.warn({ resource: name }, 'the API server does not serve this resource; its controller idles');
        return;
      }
      throw err;
    }
    // src/api's informer: list then watch, listed again with back-off (0.5 s doubling to 30 s) after a failure.
    const informer = new Informer({ rest: this.#rest, kubeConfig: this.#kc, path, resource: name, log: this.#log });
    this.#informers.set(name, informer);
    informer.on((verb, obj) => {
      for (const h of this.#handlers.get(name) ?? []) h(verb, obj);
    });
    const listed = await informer.start();
    // The first list failed (the informer retries); a required cache must sync before workers run.
    if (!listed && !optional) throw new Error(`informer ${name}: the first list of ${path} failed`);
  }

  /** Stops every watch. */
  async stop(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((w) => w.stop()));
  }
}

/** A cache that is always empty (for a resource the server does not serve). */
export function emptyLister<T>(): Lister<T> {
  return EMPTY as Lister<T>;
}
