/**
 * One pod on this node: its containers (see `container.ts`), its HTTP ports on each `containerPort` at
 * the node's address (the node's {@link PodPorts}: a request to a frozen, starting or restoring container
 * is held until it runs, and after a move the ports forward to where the pod runs now), its files under `<data-dir>/pods/<uid>`, and its status, written to the API
 * server whenever it changes (a freeze turns `Ready` False after 500 ms unless thawed or replaced by then,
 * well within the seed's 2 s: see `FROZEN_REPORT_DELAY_MS` in container.ts).
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Pod, V1PodStatus } from '@kubernetes/client-node';
import type { Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage, isApiError } from './client.ts';
import { ContainerRunner } from './container.ts';
import type { EventRecorder } from './events.ts';
import type { LoadedModules } from './modules.ts';
import type { PodPorts, PortHolder } from './pod-ports.ts';
import { buildPodStatus, ownedStatusText } from './pod-status.ts';
import { RESTORE_FROM_ANNOTATION, podTopics } from './pod-spec.ts';
import type { StagedRestores } from './staged-restores.ts';

/** What a pod worker needs from its node. */
export interface PodWorkerContext {
  cp: ControlPlane;
  modules: LoadedModules;
  address: string;
  dataDir: string;
  log: Logger;
  /** The node's pod ports. */
  ports: PodPorts;
  onChannelSend(namespace: string, topic: string, payload: Uint8Array): void;
  /** Called when the memory the pod holds may have changed (start, end). */
  onResourcesChanged(): void;
  events: EventRecorder;
  /** The node's staged snapshots (a restore uses one the control plane confirms). */
  staged?: StagedRestores;
}

/** The pod's `namespace/name`. */
export function podKey(pod: V1Pod): string {
  return `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name ?? ''}`;
}

/** Runs one pod (by uid) until it is deleted, replaced or the node stops. */
export class PodWorker {
  readonly uid: string;
  readonly dir: string;
  readonly runners: ContainerRunner[];
  readonly #ctx: PodWorkerContext;
  readonly #log: Logger;
  #pod: V1Pod;
  /** The ports claimed, with their holder. */
  readonly #claims: Array<{ port: number; holder: PortHolder }> = [];
  /** `container/port` of containerPorts not listened on yet. */
  readonly #unserved = new Set<string>();
  readonly #acceptedAt = Date.now();
  #lastWritten = '';
  /**
   * The status last written, and its owned part as the API server answered the write
   * ({@link ownedStatusText}): what a copy of the pod read later must show, or someone else overwrote it.
   */
  #written: { status: V1PodStatus; text: string } | undefined;
  /** A GET is checking whether the API server's copy differs (one at a time). */
  #checking = false;
  #writing = false;
  #dirty = false;
  #stopped = false;
  #deleting: Promise<void> | undefined;
  #topics: string[];

  constructor(pod: V1Pod, ctx: PodWorkerContext) {
    this.#pod = pod;
    this.uid = pod.metadata?.uid ?? '';
    this.#ctx = ctx;
    this.#log = ctx.log.child({ pod: podKey(pod), uid: this.uid });
    this.dir = join(ctx.dataDir, 'pods', this.uid);
    this.#topics = podTopics(pod);
    const restoreFrom = pod.metadata?.annotations?.[RESTORE_FROM_ANNOTATION] || undefined;
    this.runners = (pod.spec?.containers ?? []).map(
      (c) => new ContainerRunner(pod, c, restoreFrom, {
        cp: ctx.cp, modules: ctx.modules, address: ctx.address, podDir: this.dir, log: this.#log, staged: ctx.staged,
        onChange: () => {
          this.requestStatus();
          ctx.ports.kick(this.uid);
          ctx.onResourcesChanged();
        },
        onChannelSend: ctx.onChannelSend,
        record: (type, reason, message) => ctx.events.record(
          { apiVersion: 'v1', kind: 'Pod', name: pod.metadata?.name, namespace: pod.metadata?.namespace, uid: this.uid, fieldPath: `spec.containers{${c.name}}` },
          type, reason, message,
        ),
      }),
    );
  }

  /** The pod as last seen. */
  get pod(): V1Pod {
    return this.#pod;
  }

  /** The topics the pod subscribes to. */
  get topics(): string[] {
    return this.#topics;
  }

  /** The runner of a container by name. */
  container(name: string): ContainerRunner | undefined {
    return this.runners.find((r) => r.spec.name === name);
  }

  /** Bytes of linear memory the pod's containers may hold. */
  heldBytes(): number {
    return this.runners.reduce((n, r) => n + r.heldBytes(), 0);
  }

  /** Starts the pod: its directory, its listeners, its containers. */
  async start(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    for (const runner of this.runners) {
      for (const port of runner.spec.ports ?? []) {
        if ((port.protocol ?? 'TCP') !== 'TCP') continue;
        const holder: PortHolder = { uid: this.uid, key: podKey(this.#pod), serving: () => runner.serving() };
        this.#claims.push({ port: port.containerPort, holder });
        // A port held on the node by a pod still stopping is taken once it lets it go; one another process
        // holds is tried again every 2 s; meanwhile the container is not Ready, so no Service sends it requests.
        const key = `${runner.spec.name}/${port.containerPort}`;
        let told = false;
        await new Promise<void>((resolve) => {
          this.#unserved.add(key);
          const now = this.#ctx.ports.claim(port.containerPort, holder, {
            listening: () => {
              if (this.#unserved.delete(key) && told) {
                this.#log.info({ port: port.containerPort }, 'serving the pod on its containerPort at last');
                this.requestStatus();
              }
              resolve();
            },
            error: (err) => {
              if (!told) {
                told = true;
                this.#log.error({ port: port.containerPort, err: errorMessage(err) }, 'cannot serve the pod on its containerPort; trying again every 2 s');
                this.#ctx.events.record(
                  { apiVersion: 'v1', kind: 'Pod', name: this.#pod.metadata?.name, namespace: this.#pod.metadata?.namespace, uid: this.uid, fieldPath: `spec.containers{${runner.spec.name}}` },
                  'Warning', 'FailedToServe', `cannot serve containerPort ${port.containerPort} on ${this.#ctx.address}: ${errorMessage(err)}; trying again every 2 s, not Ready until then`,
                );
              }
              this.requestStatus();
              resolve();
            },
          });
          if (now === 'waiting') {
            told = true; // "at last" once the pod holding it lets it go
            resolve();
          }
        });
      }
      runner.start();
    }
    this.requestStatus();
  }

  /** Takes a newer version of the pod; a deletionTimestamp starts the graceful deletion. */
  update(pod: V1Pod): void {
    if (this.#stopped) return;
    this.#pod = pod;
    for (const r of this.runners) r.pod = pod;
    this.#topics = podTopics(pod);
    if (pod.metadata?.deletionTimestamp) {
      void this.delete();
      return;
    }
    this.resync(pod.status);
  }

  /**
   * The status manager's re-sync (as the kubelet's): when a copy of the pod (a watch event; by default the
   * one last seen, as the node's periodic sweep asks) shows a status whose owned part
   * ({@link ownedStatusText}) differs from what this node last wrote, someone else overwrote it (`kubectl
   * patch --subresource=status`, say): the pod is read again, and if the API server's copy still differs
   * the node's status is written again. An equal copy costs nothing; a stale watch event (one of this
   * node's own earlier writes) costs one GET and no write. Not while a write is in flight, nor for a
   * frozen pod (a move or a Save: its freeze is reported by the container itself, or not at all).
   */
  resync(status: V1PodStatus | undefined = this.#pod.status): void {
    const written = this.#written;
    if (!written || this.#stopped || this.#deleting || this.#writing || this.#checking) return;
    if (ownedStatusText(status, written.status) === written.text) return;
    if (this.runners.some((r) => r.view().frozen)) return;
    this.#checking = true;
    const { name, namespace } = this.#pod.metadata ?? {};
    void this.#ctx.cp.json<V1Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${encodeURIComponent(name ?? '')}`)
      .then((pod) => {
        if (this.#stopped || pod.metadata?.uid !== this.uid || this.#written !== written) return;
        // The fresh copy replaces a stale one (so that the periodic sweep does not read it again and again).
        this.#pod = { ...this.#pod, status: pod.status };
        if (ownedStatusText(pod.status, written.status) === written.text) return;
        this.#log.info({ phase: pod.status?.phase, written: written.status.phase }, 'the pod\'s status on the API server is not the one this node computed: writing it again');
        this.#lastWritten = '';
        this.requestStatus();
      })
      .catch((err: unknown) => {
        if (!isApiError(err, 404)) this.#log.debug({ err: errorMessage(err) }, 'cannot read the pod to compare its status');
      })
      .finally(() => {
        this.#checking = false;
      });
  }

  /**
   * The graceful deletion the API server asked for: stops the containers, removes the pod's files,
   * then deletes the pod with grace 0 (uid as precondition). Runs once.
   */
  delete(): Promise<void> {
    this.#deleting ??= (async () => {
      await this.stop({ removeFiles: true });
      const { name, namespace } = this.#pod.metadata ?? {};
      try {
        await this.#ctx.cp.json('DELETE', `/api/v1/namespaces/${namespace}/pods/${encodeURIComponent(name ?? '')}`, {
          body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid: this.uid } },
        });
        this.#log.info('pod deleted');
      } catch (err: unknown) {
        if (!isApiError(err, 404, 409)) this.#log.warn({ err: errorMessage(err) }, 'final delete of the pod failed');
      }
    })();
    return this.#deleting;
  }

  /**
   * Stops the containers and lets the ports go; no status is written after this.
   * @param opts.removeFiles also remove `<data-dir>/pods/<uid>`
   * @param opts.forward the pod was replaced (moved): its ports forward its requests to where it runs now
   *   for a while (see pod-ports.ts); else they close
   */
  async stop(opts: { removeFiles?: boolean; forward?: boolean } = {}): Promise<void> {
    this.#stopped = true;
    for (const c of this.#claims.splice(0)) this.#ctx.ports.release(c.port, c.holder, { forward: opts.forward ?? false });
    await Promise.all(this.runners.map((r) => r.stop()));
    if (opts.removeFiles) await rm(this.dir, { recursive: true, force: true }).catch(() => {});
    this.#ctx.onResourcesChanged();
  }

  /** Asks for the status to be written (coalesced; only a changed status is written). */
  requestStatus(): void {
    this.#dirty = true;
    if (!this.#writing) void this.#writeLoop();
  }

  async #writeLoop(): Promise<void> {
    this.#writing = true;
    try {
      while (this.#dirty && !this.#stopped) {
        this.#dirty = false;
        const views = this.runners.map((r) => {
          const v = r.view();
          return [...this.#unserved].some((k) => k.startsWith(`${v.name}/`)) ? { ...v, unserved: true } : v;
        });
        // Built on what this node wrote last (its start time, its conditions' transition times), not on the
        // API server's copy, which someone else may have overwritten (see resync).
        const written = this.#written?.status;
        const base = written ? { ...this.#pod, status: { ...this.#pod.status, startTime: written.startTime, conditions: written.conditions } } : this.#pod;
        const status = buildPodStatus(base, views, this.#ctx.address, this.#acceptedAt);
        const text = JSON.stringify(status, (k, v) => (k === 'lastTransitionTime' ? undefined : v));
        if (text === this.#lastWritten) continue;
        const { name, namespace } = this.#pod.metadata ?? {};
        try {
          const pod = await this.#ctx.cp.json<V1Pod>('PATCH', `/api/v1/namespaces/${namespace}/pods/${encodeURIComponent(name ?? '')}/status`, {
            body: { metadata: { uid: this.uid }, status },
            contentType: 'application/merge-patch+json',
          });
          if (pod?.metadata?.uid === this.uid && !this.#stopped) this.#pod = { ...this.#pod, status: pod.status };
          this.#lastWritten = text;
          this.#written = { status, text: ownedStatusText(pod?.status, status) };
          this.#log.debug({ phase: status.phase }, 'pod status written');
        } catch (err: unknown) {
          if (isApiError(err, 404, 409)) return; // gone or replaced: the informer will tell
          this.#log.warn({ err: errorMessage(err) }, 'pod status update failed; retrying');
          this.#dirty = true;
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    } finally {
      this.#writing = false;
    }
  }
}
