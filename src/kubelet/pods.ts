/**
 * The pod sync loop: an informer on the pods bound to this node (`spec.nodeName=<node>`), one
 * {@link PodWorker} per pod uid. A pod is keyed by uid, not by name: a move replaces a pod with one
 * of the same name and a new uid (the old one is DELETED for its node), and a rollback brings it back.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { Informer } from '../api/index.ts';
import type { Logger } from '../lib/index.ts';
import { ApiError, type ControlPlane, errorMessage, isApiError } from './client.ts';
import type { EventRecorder } from './events.ts';
import type { LoadedModules } from './modules.ts';
import type { PodPorts } from './pod-ports.ts';
import { PodWorker, podKey } from './pod-worker.ts';
import { prepareHook } from './prepared-restores.ts';
import { StagedRestores } from './staged-restores.ts';

/** What the pod manager needs from its node. */
export interface PodManagerOptions {
  cp: ControlPlane;
  nodeName: string;
  address: string;
  dataDir: string;
  modules: LoadedModules;
  log: Logger;
  /** The node's pod ports (shared by the pods that hold a port in turn). */
  ports: PodPorts;
  onChannelSend(namespace: string, topic: string, payload: Uint8Array): void;
  onResourcesChanged(): void;
  events: EventRecorder;
}

/**
 * How often the node compares the status of each of its pods on the API server (its informer's copy)
 * with the one it computed, and writes it again where someone else changed it: 10 s, the kubelet status
 * manager's sync period. A watch event compares at once (PodWorker.resync).
 */
export const POD_STATUS_RESYNC_MS = 10_000;

function terminal(pod: V1Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

/** Runs the pods bound to the node. */
export class PodManager {
  readonly #o: PodManagerOptions;
  readonly #workers = new Map<string, PodWorker>();
  #informer: Informer<V1Pod> | undefined;
  #resyncTimer: NodeJS.Timeout | undefined;
  #stopped = false;
  /**
   * True while the node has fenced its pods (fence.ts): the kubelet endpoint then refuses to checkpoint
   * or thaw them, so that nothing runs a fenced pod before the control plane has been heard again.
   */
  fenced = false;
  /** Moves' snapshots pushed here ahead of their replacements (staged-restores.ts), their restores prepared as they arrive (prepared-restores.ts). */
  readonly staged: StagedRestores;

  constructor(opts: PodManagerOptions) {
    this.#o = opts;
    this.staged = new StagedRestores(prepareHook({ cp: opts.cp, modules: opts.modules, nodeName: opts.nodeName, address: opts.address, log: opts.log }));
  }

  /** The pods running here, by uid. */
  get workers(): ReadonlyMap<string, PodWorker> {
    return this.#workers;
  }

  /** The worker of the pod `namespace/name` on this node (the newest, when a replacement is starting). */
  find(namespace: string, name: string): PodWorker | undefined {
    let found: PodWorker | undefined;
    for (const w of this.#workers.values()) if (podKey(w.pod) === `${namespace}/${name}`) found = w;
    return found;
  }

  /** The pods as the informer last listed them (what is bound to the node). */
  boundPods(): V1Pod[] {
    return [...(this.#informer?.list() ?? [])];
  }

  /** Bytes of linear memory the node's pods may hold. */
  heldBytes(): number {
    let n = 0;
    for (const w of this.#workers.values()) n += w.heldBytes();
    return n;
  }

  /**
   * Lists and watches the node's pods; resolves once the first list is in and its pods started.
   * @throws ApiError when the first list fails
   */
  async start(): Promise<void> {
    const { cp, nodeName } = this.#o;
    // The back-off (0.5 s doubling to 10 s) ends once a list succeeds (src/api's Informer).
    const informer = new Informer<V1Pod>({
      rest: cp.rest,
      path: '/api/v1/pods',
      fieldSelector: `spec.nodeName=${nodeName}`,
      resource: 'pods',
      log: this.#o.log,
      backoff: { initialMs: 500, maxMs: 10_000 },
      retryMessage: 'pod watch failed; listing again',
    });
    this.#informer = informer;
    informer.on((verb, pod) => (verb === 'delete' ? this.#gone(pod) : this.#sync(pod)));
    const listed = await informer.start();
    if (!listed || informer.firstError !== undefined) {
      const firstError = informer.firstError;
      await informer.stop();
      this.#informer = undefined;
      if (firstError instanceof ApiError) throw firstError;
      const code = Number((firstError as { statusCode?: number }).statusCode ?? 0);
      throw new ApiError("watching the node's pods", code, '', errorMessage(firstError), undefined, { cause: firstError });
    }
    await this.#removeOrphans();
    this.#resyncTimer = setInterval(() => {
      for (const w of this.#workers.values()) w.resync();
    }, POD_STATUS_RESYNC_MS);
    this.#resyncTimer.unref();
  }

  /** Stops the informer and every pod (files kept: a restart of the node finds them). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#resyncTimer);
    await this.#informer?.stop();
    await Promise.all([...this.#workers.values()].map((w) => w.stop()));
    await this.staged.clear();
    this.#workers.clear();
  }

  #sync(pod: V1Pod): void {
    if (this.#stopped) return;
    const uid = pod.metadata?.uid ?? '';
    const worker = this.#workers.get(uid);
    if (worker) {
      worker.update(pod);
      return;
    }
    if (pod.spec?.nodeName !== this.#o.nodeName) return;
    // A pod of the same name with another uid was replaced: stop the old one (its ports hand its
    // requests to the new one).
    for (const w of this.#workers.values()) if (podKey(w.pod) === podKey(pod)) this.#drop(w, true, true);
    if (pod.metadata?.deletionTimestamp) {
      void this.#finalDelete(pod);
      return;
    }
    if (terminal(pod)) return;
    const w = new PodWorker(pod, {
      cp: this.#o.cp, modules: this.#o.modules, address: this.#o.address, dataDir: this.#o.dataDir,
      log: this.#o.log, ports: this.#o.ports, onChannelSend: this.#o.onChannelSend, onResourcesChanged: this.#o.onResourcesChanged, events: this.#o.events,
      staged: this.staged,
    });
    this.#workers.set(uid, w);
    this.#o.log.info({ pod: podKey(pod), uid }, 'pod bound to the node: starting it');
    w.start().catch((err: unknown) => this.#o.log.error({ pod: podKey(pod), err: errorMessage(err) }, 'pod failed to start'));
  }

  #gone(pod: V1Pod): void {
    const w = this.#workers.get(pod.metadata?.uid ?? '');
    if (w) {
      // Replaced (a move: the same name, another uid and node) or deleted: its ports forward to where it
      // runs now for a while (a deleted pod is found nowhere: they answer 503 at once).
      this.#o.log.info({ pod: podKey(pod), uid: w.uid }, 'pod no longer bound to the node: stopping it');
      this.#drop(w, true, true);
    }
  }

  /**
   * Stops a pod the fence could not freeze (fence.ts); its files stay. Once the pod watch lists it
   * again, still bound here, it starts afresh.
   */
  fenceStop(uid: string): void {
    const w = this.#workers.get(uid);
    if (w) this.#drop(w, false);
  }

  #drop(w: PodWorker, removeFiles: boolean, forward = false): void {
    this.#workers.delete(w.uid);
    w.stop({ removeFiles, forward }).catch((err: unknown) => this.#o.log.warn({ err: errorMessage(err) }, 'pod stop failed'));
  }

  async #finalDelete(pod: V1Pod): Promise<void> {
    const { name, namespace, uid } = pod.metadata ?? {};
    await rm(join(this.#o.dataDir, 'pods', uid ?? ''), { recursive: true, force: true }).catch(() => {});
    try {
      await this.#o.cp.json('DELETE', `/api/v1/namespaces/${namespace}/pods/${encodeURIComponent(name ?? '')}`, {
        body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid } },
      });
    } catch (err: unknown) {
      if (!isApiError(err, 404, 409)) this.#o.log.warn({ err: errorMessage(err) }, 'final delete of the pod failed');
    }
  }

  /** Removes the directories of pods that are no longer bound to the node (a former run's). */
  async #removeOrphans(): Promise<void> {
    const bound = new Set(this.boundPods().map((p) => p.metadata?.uid));
    const dir = join(this.#o.dataDir, 'pods');
    const entries = await readdir(dir).catch(() => [] as string[]);
    for (const uid of entries) if (!bound.has(uid)) await rm(join(dir, uid), { recursive: true, force: true }).catch(() => {});
  }
}
