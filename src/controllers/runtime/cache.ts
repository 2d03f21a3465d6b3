/**
 * The controllers' view of the cluster: one informer per resource (list, then watch; @kubernetes/client-node's
 * `ListWatch`), each a read-only cache. Reconcilers read only these caches; event handlers subscribe to them.
 */
import {
  type KubeConfig,
  type KubernetesObject,
  ListWatch,
  type ObjectCache,
  type V1DaemonSet,
  type V1Deployment,
  type V1Endpoints,
  type V1EndpointSlice,
  type V1Lease,
  type V1Namespace,
  type V1Node,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1ReplicaSet,
  type V1Service,
  type V1ServiceAccount,
  Watch,
} from '@kubernetes/client-node';
import type { ControllerLog } from './controller.ts';
import { errorMessage } from './errors.ts';
import type { KubeRest } from './rest.ts';
import type { Checkpoint } from './types.ts';

/** A read-only cache of one resource. `list()` without a namespace lists every namespace. */
export type Lister<T> = ObjectCache<T>;

/** Every cache the controllers read. */
export interface Caches {
  pods: Lister<V1Pod>;
  nodes: Lister<V1Node>;
  leases: Lister<V1Lease>;
  checkpoints: Lister<Checkpoint>;
  replicaSets: Lister<V1ReplicaSet>;
  deployments: Lister<V1Deployment>;
  daemonSets: Lister<V1DaemonSet>;
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
  services: { path: '/api/v1/services', optional: true },
  endpoints: { path: '/api/v1/endpoints', optional: true },
  endpointSlices: { path: '/apis/discovery.k8s.io/v1/endpointslices', optional: true },
  modules: { path: '/apis/kube32.io/v1/modules', optional: true },
  podDisruptionBudgets: { path: '/apis/policy/v1/poddisruptionbudgets', optional: true },
  namespaces: { path: '/api/v1/namespaces', optional: true },
  serviceAccounts: { path: '/api/v1/serviceaccounts', optional: true },
} as const;

export type ResourceName = keyof typeof RESOURCES;

/** An event handler: `old` is the previous object of an update, when known. */
export type Handler<T> = (verb: 'add' | 'update' | 'delete', obj: T) => void;

const EMPTY: Lister<never> = { get: () => undefined, list: () => [] };

/** The informers of one control plane process. */
export class Informers {
  readonly #kc: KubeConfig;
  readonly #rest: KubeRest;
  readonly #log: ControllerLog;
  readonly #watches = new Map<ResourceName, ListWatch<KubernetesObject>>();
  readonly #unavailable = new Set<ResourceName>();
  readonly #handlers = new Map<ResourceName, Handler<KubernetesObject>[]>();
  readonly #retry = new Map<ResourceName, NodeJS.Timeout>();
  #stopped = false;
  readonly caches: Caches;

  constructor(kc: KubeConfig, rest: KubeRest, log: ControllerLog) {
    this.#kc = kc;
    this.#rest = rest;
    this.#log = log;
    const lister = (name: ResourceName): Lister<KubernetesObject> => ({
      get: (n, ns) => this.#watches.get(name)?.get(n, ns),
      list: (ns) => this.#watches.get(name)?.list(ns) ?? [],
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
   * @throws ApiCallError when a required resource cannot be listed
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
    let listed = false;
    let delay = 500;
    const listFn = async () => {
      const list = await this.#rest.json<{ metadata?: { resourceVersion?: string }; items?: KubernetesObject[] }>({
        method: 'GET',
        path,
      });
      listed = true;
      delay = 500; // the server answers again: the next failure starts the back-off afresh
      return { metadata: list.metadata ?? {}, items: list.items ?? [] };
    };
    const lw = new ListWatch<KubernetesObject>(path, new Watch(this.#kc), listFn, false);
    this.#watches.set(name, lw);
    const dispatch = (verb: 'add' | 'update' | 'delete') => (obj: KubernetesObject) => {
      delay = 500;
      for (const h of this.#handlers.get(name) ?? []) {
        try {
          h(verb, obj);
        } catch (err: unknown) {
          this.#log.error({ resource: name, err: errorMessage(err) }, 'event handler failed');
        }
      }
    };
    lw.on('add', dispatch('add'));
    lw.on('update', dispatch('update'));
    lw.on('delete', dispatch('delete'));
    lw.on('error', (err) => {
      if (this.#stopped) return;
      this.#log.warn({ resource: name, err: errorMessage(err), retryInMs: delay }, 'watch failed; listing again');
      const t = setTimeout(() => {
        this.#retry.delete(name);
        if (!this.#stopped) void lw.start();
      }, delay);
      t.unref();
      this.#retry.set(name, t);
      delay = Math.min(delay * 2, 30_000);
    });
    await lw.start();
    if (!listed) {
      // The first list failed (the error handler retries); a required cache must sync before workers run.
      if (!optional) throw new Error(`informer ${name}: the first list of ${path} failed`);
    }
  }

  /** Stops every watch. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const t of this.#retry.values()) clearTimeout(t);
    await Promise.all([...this.#watches.values()].map((w) => w.stop()));
  }
}

/** A cache that is always empty (for a resource the server does not serve). */
export function emptyLister<T>(): Lister<T> {
  return EMPTY as Lister<T>;
}
