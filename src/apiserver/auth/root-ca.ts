/**
 * The `kube-root-ca.crt` ConfigMap of every namespace (`data["ca.crt"]`: the cluster CA's PEM), as
 * kube-controller-manager's root-ca-cert-publisher keeps it: made for each namespace, made again when
 * deleted, put back when changed. It runs in the API server because the server holds the CA.
 */
import type { Logger } from '../../lib/index.ts';
import { ApiError } from '../errors.ts';
import { configmaps } from '../registry/core/index.ts';
import { namespaces } from '../registry/nodes/index.ts';
import type { Registry } from '../registry/store.ts';
import { rec } from '../registry/util.ts';
import { storageKey } from '../registry/types.ts';
import { keepWatching, type StorageEvent, type WatchHandle } from '../storage/index.ts';

/** The ConfigMap's name, as in Kubernetes. */
export const ROOT_CA_CONFIGMAP = 'kube-root-ca.crt';

/** Keeps `kube-root-ca.crt` in every namespace. */
export class RootCaPublisher {
  readonly #registry: Registry;
  readonly #pem: string;
  readonly #log: Logger;
  readonly #watches: WatchHandle[] = [];
  readonly #pending = new Set<string>();
  #scheduled = false;
  #stopped = false;

  constructor(registry: Registry, caCertPem: string, log: Logger) {
    this.#registry = registry;
    this.#pem = caCertPem;
    this.#log = log;
  }

  /** Publishes into every namespace now and after each namespace or ConfigMap change that needs it. */
  async start(): Promise<void> {
    this.#stopped = false;
    const rv = this.#registry.storage.currentResourceVersion();
    this.#follow(storageKey(namespaces), rv, (e) => {
      if (e.type !== 'DELETED') this.#enqueue(e.object.metadata.name ?? '');
    });
    this.#follow(storageKey(configmaps), rv, (e) => {
      if (e.object.metadata.name === ROOT_CA_CONFIGMAP) this.#enqueue(e.object.metadata.namespace ?? '');
    });
    await this.#enqueueAll();
  }

  /**
   * Follows one kind. A watch the store ends (etcd compacted events it had not delivered) is watched again
   * from the store's position, and every namespace is published again: what changed meanwhile is unknown.
   */
  #follow(key: string, rv: number, listener: (e: StorageEvent) => void): void {
    this.#watches.push(
      keepWatching(this.#registry.storage, key, rv, listener, () => {
        this.#enqueueAll().catch((err: unknown) => this.#log.warn({ err: err instanceof Error ? err.message : String(err) }, 'cannot list the namespaces for kube-root-ca.crt'));
      }),
    );
  }

  async #enqueueAll(): Promise<void> {
    const items = (await this.#registry.list(namespaces, undefined)).items;
    if (this.#stopped) return;
    for (const ns of items) this.#enqueue(ns.metadata.name ?? '');
  }

  /** Stops the watches. */
  stop(): void {
    this.#stopped = true;
    for (const w of this.#watches.splice(0)) w.stop();
    this.#pending.clear();
  }

  #enqueue(ns: string): void {
    if (!ns) return;
    this.#pending.add(ns);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      const todo = [...this.#pending];
      this.#pending.clear();
      void (async () => {
        // #publish logs its own failures.
        for (const n of todo) await this.#publish(n);
      })();
    });
  }

  async #publish(ns: string): Promise<void> {
    const reg = this.#registry;
    try {
      const namespace = await reg.find(namespaces, '', ns);
      if (!namespace || namespace.metadata.deletionTimestamp || rec(namespace.status).phase === 'Terminating') return;
      const cm = await reg.find(configmaps, ns, ROOT_CA_CONFIGMAP);
      if (!cm) {
        await reg.create(configmaps, ns, { metadata: { name: ROOT_CA_CONFIGMAP, annotations: { 'kubernetes.io/description': 'Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.' } }, data: { 'ca.crt': this.#pem } });
      } else if (rec(cm.data)['ca.crt'] !== this.#pem && !cm.metadata.deletionTimestamp) {
        await reg.serverUpdate(configmaps, ns, ROOT_CA_CONFIGMAP, (o) => ({ ...o, data: { ...rec(o.data), 'ca.crt': this.#pem } }));
      }
    } catch (err: unknown) {
      if (err instanceof ApiError && (err.reason === 'AlreadyExists' || err.reason === 'NotFound' || err.reason === 'Forbidden')) return;
      this.#log.warn({ namespace: ns, err: err instanceof Error ? err.message : String(err) }, 'cannot publish kube-root-ca.crt');
    }
  }
}
