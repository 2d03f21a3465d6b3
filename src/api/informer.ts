/**
 * The one informer of Kube32's components: a cache of one resource kept by @kubernetes/client-node's
 * `ListWatch` (list, then watch from the list's resourceVersion; no handler call for an object whose
 * resourceVersion has not changed, so a relist that finds it as it was says nothing; on 410 Gone it
 * lists again; objects missing from a relist are deleted from the cache and their handlers called:
 * the tombstones of deletes the watch missed). What client-node leaves to its caller is here once: a
 * watch or list that fails is started again after a {@link Backoff} (reset once a list succeeds or an
 * event arrives), and a handler that throws is logged without breaking the watch.
 */
import { type KubeConfig, type KubernetesObject, ListWatch, Watch } from '@kubernetes/client-node';
import { Backoff, type BackoffOptions } from '../lib/index.ts';
import { errorMessage } from './errors.ts';
import type { RestClient } from './rest.ts';

/** The log lines an informer writes (pino's signature). */
export interface InformerLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** A read-only cache of one resource. `list()` without a namespace lists every namespace. */
export interface Lister<T> {
  get(name: string, namespace?: string): T | undefined;
  list(namespace?: string): ReadonlyArray<T>;
}

/** An event handler. */
export type InformerHandler<T> = (verb: 'add' | 'update' | 'delete', obj: T) => void;

/** Options of an {@link Informer}. */
export interface InformerOptions {
  /** The client of the lists (plain JSON, so that cached objects have the shape watch events have). */
  rest: RestClient;
  /** The kubeconfig of the watches (client-node's `Watch`). @default `rest.kubeConfig` */
  kubeConfig?: KubeConfig;
  /** The collection's path, e.g. `/api/v1/pods` or `/apis/kube32.io/v1/checkpoints`. */
  path: string;
  fieldSelector?: string;
  labelSelector?: string;
  /** The name in log lines. @default the path */
  resource?: string;
  log: InformerLog;
  /** The back-off of a new start after a failure. @default 500 ms doubling to 30 s */
  backoff?: BackoffOptions;
  /** The log line of a failure that will be retried. @default `watch failed; listing again` */
  retryMessage?: string;
}

/** One resource's informer. */
export class Informer<T extends KubernetesObject = KubernetesObject> implements Lister<T> {
  readonly #o: InformerOptions;
  readonly #lw: ListWatch<T>;
  readonly #backoff: Backoff;
  readonly #handlers: InformerHandler<T>[] = [];
  #retry: NodeJS.Timeout | undefined;
  #stopped = false;
  #listed = false;
  #firstError: unknown;

  constructor(o: InformerOptions) {
    this.#o = o;
    this.#backoff = new Backoff(o.backoff);
    const query = o.fieldSelector || o.labelSelector ? { ...(o.fieldSelector ? { fieldSelector: o.fieldSelector } : {}), ...(o.labelSelector ? { labelSelector: o.labelSelector } : {}) } : undefined;
    const listFn = async () => {
      const list = await o.rest.json<{ metadata?: { resourceVersion?: string }; items?: T[] }>({ method: 'GET', path: o.path, ...(query ? { query } : {}) });
      this.#listed = true;
      this.#backoff.reset(); // the server answers again: the next failure starts the back-off afresh
      return { metadata: list.metadata ?? {}, items: list.items ?? [] };
    };
    this.#lw = new ListWatch<T>(o.path, new Watch(o.kubeConfig ?? o.rest.kubeConfig), listFn, false, o.labelSelector, o.fieldSelector);
    const dispatch = (verb: 'add' | 'update' | 'delete') => (obj: T) => {
      this.#backoff.reset();
      for (const h of this.#handlers) {
        try {
          h(verb, obj);
        } catch (err: unknown) {
          o.log.error({ resource: o.resource ?? o.path, err: errorMessage(err) }, 'event handler failed');
        }
      }
    };
    this.#lw.on('add', dispatch('add'));
    this.#lw.on('update', dispatch('update'));
    this.#lw.on('delete', dispatch('delete'));
    this.#lw.on('error', (err: unknown) => this.#failed(err));
  }

  #failed(err: unknown): void {
    if (this.#stopped) return;
    this.#firstError ??= err;
    const delay = this.#backoff.next();
    this.#o.log.warn({ resource: this.#o.resource ?? this.#o.path, err: errorMessage(err), retryMs: delay }, this.#o.retryMessage ?? 'watch failed; listing again');
    clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      if (!this.#stopped) void this.#lw.start().catch(() => {});
    }, delay);
    this.#retry.unref();
  }

  /** Subscribes `handler` to the adds, updates and deletes (before or after start). */
  on(handler: InformerHandler<T>): void {
    this.#handlers.push(handler);
  }

  /**
   * Lists and starts watching. Resolves once the first list is in (true), or once it failed (false: the
   * informer goes on trying with back-off; {@link firstError} says why).
   */
  async start(): Promise<boolean> {
    await this.#lw.start();
    return this.#listed;
  }

  /** Whether a list has succeeded (the cache is synced). */
  get synced(): boolean {
    return this.#listed;
  }

  /** The first failure, if any (an {@link ApiError} from the list, or the watch's error). */
  get firstError(): unknown {
    return this.#firstError;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.#lw.get(name, namespace);
  }

  list(namespace?: string): ReadonlyArray<T> {
    return this.#lw.list(namespace);
  }

  /** Stops the watch and any pending retry. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retry);
    await this.#lw.stop();
  }
}
