/**
 * An informer of one resource that a controller runs on its own, outside the shared {@link Informers}
 * (batch/v1 Jobs and CronJobs: their controllers start them with their workers and idle when the server
 * does not serve them). Lists, then watches; a failed watch lists again with back-off (0.5 s doubling to
 * 30 s, reset once a list succeeds), as the shared informers do.
 */
import { type KubeConfig, type KubernetesObject, ListWatch, Watch } from '@kubernetes/client-node';
import type { Lister } from './cache.ts';
import type { ControllerContext } from './context.ts';
import { errorMessage } from './errors.ts';
import type { KubeRest } from './rest.ts';

/** One resource's informer, listed and watched again with back-off after a failure. */
export class ResourceInformer {
  /** The list-watch: subscribe to its `add`, `update` and `delete`; `start()` lists and watches. */
  readonly watch: ListWatch<KubernetesObject>;
  #retry: NodeJS.Timeout | undefined;
  #delay = 500;
  #stopped = false;

  /**
   * @param path the list path of every object, e.g. `/apis/batch/v1/jobs`
   * @param resource the name a failed watch's warning gives (the path when absent)
   */
  constructor(rest: KubeRest, kubeConfig: KubeConfig, path: string, log: ControllerContext['log'], resource = path) {
    const listFn = async () => {
      const list = await rest.json<{ metadata?: { resourceVersion?: string }; items?: KubernetesObject[] }>({ method: 'GET', path });
      this.#delay = 500;
      return { metadata: list.metadata ?? {}, items: list.items ?? [] };
    };
    this.watch = new ListWatch<KubernetesObject>(path, new Watch(kubeConfig), listFn, false);
    this.watch.on('error', (err) => {
      if (this.#stopped) return;
      log.warn({ resource, err: errorMessage(err), retryInMs: this.#delay }, 'watch failed; listing again');
      this.#retry = setTimeout(() => {
        if (!this.#stopped) void this.watch.start();
      }, this.#delay);
      this.#retry.unref();
      this.#delay = Math.min(this.#delay * 2, 30_000);
    });
  }

  /** A read view of the cache. */
  lister<T>(): Lister<T> {
    return { get: (n, ns) => this.watch.get(n, ns) as T | undefined, list: (ns) => this.watch.list(ns) as T[] };
  }

  /** Stops the watch and any pending retry. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retry) clearTimeout(this.#retry);
    await this.watch.stop();
  }
}
