/**
 * One container of a pod on this node: pulls its module, starts it (or restores it from the pod's
 * Checkpoint, seed "Kubelet endpoints"), watches it end, and restarts it per the pod's
 * `restartPolicy` with Kubernetes' back-off (the first restart at once, then 10 s doubling to
 * 5 min; reset after 10 min of running). A `RestoreError` is never restarted.
 *
 * A restore is kept until it has run: a start from a Checkpoint that fails for any other reason (the
 * control plane out of reach or busy, `k32_restored` trapping or running past its deadline, the pod's
 * thread lost) is restarted as a restore again, with the same back-off. Only a restored pod that ran
 * and then ended starts afresh. Starting afresh after a failed restore would throw the pod's state
 * away without a word (a CI run on a loaded machine saw a pod restored from its periodic checkpoint
 * answer count 1); the seed's afresh start after a failed restore is the controllers', with its
 * `MoveFailed` event, and only for a `RestoreError`.
 */
import { join } from 'node:path';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { type Logger, pauseAt } from '../lib/index.ts';
import { ModuleError, PodInstance, PodStartError, type PodExit, type PodModule, type PodStartOptions, type PreparedRestore } from '../wasm/index.ts';
import { readText } from '../api/index.ts';
import { type ControlPlane, errorMessage } from './client.ts';
import { ImagePullError, type LoadedModules, resolveImageDigest } from './modules.ts';
import { ContainerConfigError, resolveContainerConfig, memoryLimitBytes } from './pod-spec.ts';
import type { ContainerPhase, ContainerView } from './pod-status.ts';
import type { StagedRestores } from './staged-restores.ts';

/** The first back-off after a crash that follows a restart: 10 s (the kubelet's). */
export const BACKOFF_INITIAL_MS = 10_000;
/** The longest back-off: 5 min (the kubelet's). */
export const BACKOFF_MAX_MS = 300_000;
/** A container that ran this long before it ended starts its back-off afresh: 10 min. */
export const BACKOFF_RESET_MS = 600_000;

/**
 * One step of the kubelet's crash back-off: the delay before this restart and the back-off the
 * next crash will use. The first restart is at once (`current` 0), then 10 s, 20 s, 40 s ... 5 min;
 * a container that ran {@link BACKOFF_RESET_MS} or more before it ended starts afresh at 0.
 * @param current the back-off kept from the last crash, ms (0 at first)
 * @param ranMs how long the container ran before it ended, ms
 * @returns `delay` to wait now and `next` to keep, both ms
 * @example crashBackoff(0, 5) // { delay: 0, next: 10000 }
 */
export function crashBackoff(current: number, ranMs: number): { delay: number; next: number } {
  const delay = ranMs >= BACKOFF_RESET_MS ? 0 : current;
  return { delay, next: delay === 0 ? BACKOFF_INITIAL_MS : Math.min(delay * 2, BACKOFF_MAX_MS) };
}

/** What a runner needs from its node. */
export interface RunnerContext {
  cp: ControlPlane;
  modules: LoadedModules;
  address: string;
  /** The pod's own directory on the node (`<data-dir>/pods/<uid>`). */
  podDir: string;
  log: Logger;
  /** Called whenever the container's view changes (the pod's status is then written). */
  onChange(): void;
  /** Called for each message the container sends on a channel. */
  onChannelSend(namespace: string, topic: string, payload: Uint8Array): void;
  /** Records an event about this container (see `events.ts`). */
  record(type: 'Normal' | 'Warning', reason: string, message: string): void;
  /** The node's staged snapshots (staged-restores.ts); none: every restore fetches its data. */
  staged?: StagedRestores | undefined;
}

/**
 * How long a frozen container waits before its freeze is reported in the pod's status (`Ready` False): 500 ms,
 * well within the seed's 2 s ("Kubelet endpoints"). A thaw or a replacement before then writes nothing.
 */
export const FROZEN_REPORT_DELAY_MS = 500;

/** Sleeps `ms`, or until the signal aborts; never rejects. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Runs one container until the pod stops; see the file's comment. */
export class ContainerRunner {
  readonly spec: V1Container;
  readonly #ctx: RunnerContext;
  #pod: V1Pod;
  readonly #restoreFrom: string | undefined;
  /**
   * Where the last restore's data came from: the copy pushed here while it was stored (`pushed`; `prepared`:
   * restored into a pod thread while it arrived, see prepared-restores.ts), or fetched.
   */
  #restoreData: 'prepared' | 'pushed' | 'fetched' = 'fetched';
  /** The node the last restore's snapshot was taken on, as the data GET answered it (`X-Kube32-Source-Node`). */
  #restoreSource: string | undefined;
  readonly #stop = new AbortController();
  /** The running instance, if any. */
  instance: PodInstance | undefined;
  /** The latest instance, running or ended (for `kubectl logs`). */
  current: PodInstance | undefined;
  /** The instance that ran before the latest one (for `kubectl logs --previous`). */
  previous: PodInstance | undefined;
  /** The module, once loaded. */
  module: PodModule | undefined;
  #state: ContainerPhase = { kind: 'waiting', reason: 'ContainerCreating' };
  #lastState: (ContainerPhase & { kind: 'terminated' }) | undefined;
  #restartCount = 0;
  #final = false;
  #imageID = '';
  #backoffMs = 0;
  #done: Promise<void> | undefined;
  /** Events held while a restore starts (see `#record`). */
  readonly #held: Array<[type: 'Normal' | 'Warning', reason: string, message: string]> = [];
  #holding = false;

  /**
   * @param restoreFrom the Checkpoint to restore the first start from (annotation `kube32.io/restore-from`)
   */
  constructor(pod: V1Pod, spec: V1Container, restoreFrom: string | undefined, ctx: RunnerContext) {
    this.#pod = pod;
    this.spec = spec;
    this.#restoreFrom = restoreFrom;
    this.#ctx = ctx;
  }

  /** The latest pod object (env and assets are read from it at each start). */
  set pod(pod: V1Pod) {
    this.#pod = pod;
  }

  /** The container's view for the pod's status. */
  view(): ContainerView {
    const uid = this.#pod.metadata?.uid ?? '';
    return {
      name: this.spec.name,
      image: this.spec.image ?? '',
      imageID: this.#imageID,
      containerID: `kube32://${uid.slice(0, 8)}-${this.spec.name}-${this.#restartCount}`,
      state: this.#state,
      ...(this.#lastState ? { lastState: this.#lastState } : {}),
      restartCount: this.#restartCount,
      frozen: this.instance?.frozen ?? false,
      final: this.#final,
    };
  }

  /**
   * What a request to the container meets now (src/kubelet/pod-ports.ts): the running instance; `'hold'`
   * while it is frozen, starting, restoring or restarting at once; undefined when it will not run soon
   * (ended for good, waiting after a crash or a failed pull: the request gets 503 at once).
   */
  serving(): PodInstance | 'hold' | undefined {
    const inst = this.instance;
    if (inst && !inst.exit) return inst.frozen ? 'hold' : inst;
    if (this.#final || this.#stop.signal.aborted) return undefined;
    const s = this.#state;
    if (s.kind === 'running' || (s.kind === 'waiting' && s.reason === 'ContainerCreating')) return 'hold';
    return undefined;
  }

  /** Bytes of linear memory the container may hold (its memory limit); 0 once it has ended for good. */
  heldBytes(): number {
    if (this.#final) return 0;
    try {
      return memoryLimitBytes(this.spec);
    } catch {
      return 0;
    }
  }

  /** Starts the run loop (once). */
  start(): void {
    this.#done ??= this.#run().catch((err: unknown) => {
      this.#ctx.log.error({ err: errorMessage(err), container: this.spec.name }, 'container runner failed');
    });
  }

  /** Stops the container (terminates a running instance) and waits for the loop to end. */
  async stop(): Promise<void> {
    this.#stop.abort();
    const inst = this.instance;
    if (inst) {
      this.#ctx.record('Normal', 'Killing', `Stopping container ${this.spec.name}`);
      await inst.terminate().catch(() => {});
    }
    await this.#done;
  }

  /**
   * Records an event, or holds it while a restore starts: `Pulled` then goes out with `Restored`
   * (or `Failed`), in the same order, after the status write that says the container runs, so that they do
   * not queue before the restore's data and that write at the API server (a move's critical path).
   */
  #record(type: 'Normal' | 'Warning', reason: string, message: string): void {
    if (this.#holding) this.#held.push([type, reason, message]);
    else this.#ctx.record(type, reason, message);
  }

  /** Records the held events, in order, and stops holding. */
  #release(): void {
    this.#holding = false;
    for (const [type, reason, message] of this.#held.splice(0)) this.#ctx.record(type, reason, message);
  }

  #set(state: ContainerPhase): void {
    this.#state = state;
    this.#ctx.onChange();
  }

  #nextBackoff(ranMs = 0): number {
    const { delay, next } = crashBackoff(this.#backoffMs, ranMs);
    this.#backoffMs = next;
    return delay;
  }

  async #prepare(): Promise<{ module: PodModule; config: Awaited<ReturnType<typeof resolveContainerConfig>> } | 'retry' | 'never'> {
    const signal = this.#stop.signal;
    try {
      const digest = await resolveImageDigest(this.#ctx.cp, this.#pod, this.spec.image ?? '');
      this.#imageID = `sha256:${digest}`;
      const limit = memoryLimitBytes(this.spec);
      const image = this.spec.image ?? '';
      const first = !this.module;
      // As the kubelet with an image already on the node: one Pulled event, "already present on machine".
      const present = this.#ctx.modules.has(digest, limit);
      const t0 = performance.now();
      if (first && !present) this.#record('Normal', 'Pulling', `Pulling image "${image}"`);
      const module = await this.#ctx.modules.get(digest, limit);
      if (first) {
        this.#record(
          'Normal',
          'Pulled',
          present ? `Container image "${image}" already present on machine` : `Successfully pulled image "${image}" (sha256:${digest}) in ${Math.round(performance.now() - t0)}ms`,
        );
      }
      const config = await resolveContainerConfig(this.#ctx.cp, this.#pod, this.spec, this.#ctx.address);
      return { module, config };
    } catch (err: unknown) {
      const message = errorMessage(err);
      this.#release();
      this.#ctx.log.warn({ container: this.spec.name, err: message }, 'container cannot be created');
      this.#ctx.record('Warning', 'Failed', `Error: ${message}`);
      if (err instanceof ImagePullError && err.reason === 'InvalidImageName') {
        this.#set({ kind: 'waiting', reason: 'InvalidImageName', message });
        return 'never';
      }
      if (err instanceof ModuleError) {
        this.#set({ kind: 'waiting', reason: 'CreateContainerError', message });
        return 'never';
      }
      const reason = err instanceof ImagePullError ? 'ErrImagePull' : err instanceof ContainerConfigError ? 'CreateContainerConfigError' : 'CreateContainerError';
      this.#set({ kind: 'waiting', reason, message });
      const delay = Math.max(this.#nextBackoff(), 1000);
      if (reason === 'ErrImagePull') {
        await pause(Math.min(delay, 2000), signal);
        if (!signal.aborted) {
          this.#set({ kind: 'waiting', reason: 'ImagePullBackOff', message: `Back-off pulling image "${this.spec.image}": ${message}` });
          this.#ctx.record('Normal', 'BackOff', `Back-off pulling image "${this.spec.image}"`);
        }
      }
      await pause(delay, signal);
      return 'retry';
    }
  }

  /**
   * Requests the Checkpoint's data and answers its body once the response has begun, or the restore
   * prepared from the copy pushed here when the control plane answers that its data is those bytes.
   * @param signal cancels the request (the runner's stop cancels it too)
   * @param fresh ask for the bytes whatever was pushed here (a prepared restore that could not be used)
   * @throws PodStartError `RestoreError` when the control plane answers that the data cannot be had
   *   (404: none; 403, 400 ...); `Error` when it cannot be reached or answers 429 or 5xx, which may pass
   *   (the container is then restarted as a restore, with the crash back-off)
   */
  async #restoreStream(name: string, signal: AbortSignal, fresh = false): Promise<AsyncIterable<Uint8Array> | PreparedRestore> {
    const ns = this.#pod.metadata?.namespace ?? 'default';
    const path = `/apis/kube32.io/v1/namespaces/${ns}/checkpoints/${encodeURIComponent(name)}/data`;
    if (!fresh) await pauseAt('kubelet-restore'); // test-only (src/lib/test-pause.ts)
    // A copy the API server pushed here while it stored the data (staged-restores.ts) is used only if the
    // control plane answers that its data is those bytes (304 to If-None-Match with their SHA-256).
    const staged = fresh ? undefined : await this.#ctx.staged?.take(ns, this.#pod.metadata?.name ?? '', this.spec.name, name);
    this.#ctx.log.debug({ container: this.spec.name, checkpoint: name, staged: staged !== undefined }, 'restore: requesting the data');
    const headers: Record<string, string> = staged ? { 'if-none-match': `"${staged.sha256}"` } : {};
    const res = await this.#ctx.cp.request('GET', path, { signal: AbortSignal.any([this.#stop.signal, signal]), headers }).catch((err: unknown) => {
      // Taken from the staged ones: a restore prepared from it ends here (the next try fetches the data).
      void staged?.prepared?.then((p) => p?.cancel());
      throw new PodStartError('Error', `cannot fetch the snapshot of Checkpoint ${name}: ${errorMessage(err)}`);
    });
    if (res.status !== 304) void staged?.prepared?.then((p) => p?.cancel());
    const source = res.headers['x-kube32-source-node'];
    this.#restoreSource = typeof source === 'string' && source ? source : undefined;
    if (res.status === 304 && staged) {
      res.body?.resume();
      const prepared = await staged.prepared;
      if (prepared) {
        this.#restoreData = 'prepared';
        this.#ctx.log.debug({ container: this.spec.name, checkpoint: name, bytes: staged.byteLength, staged: true, prepared: true }, 'restore: data answered');
        return prepared;
      }
      // Read by a restore prepared from them that then gave up: the bytes are asked for again.
      if (staged.consumed) return this.#restoreStream(name, signal, true);
      this.#restoreData = 'pushed';
      this.#ctx.log.debug({ container: this.spec.name, checkpoint: name, bytes: staged.byteLength, staged: true }, 'restore: data answered');
      return (async function* () {
        yield* staged.pieces;
      })();
    }
    if (res.status !== 200 || !res.body) {
      const text = await readText(res.body).catch(() => '');
      let detail = text.slice(0, 200);
      try {
        detail = (JSON.parse(text) as { message?: string }).message ?? detail;
      } catch {}
      const why = res.status === 404 ? `Checkpoint ${name} has no data` : `Checkpoint ${name}: the control plane answered ${res.status}: ${detail}`;
      if (res.status === 429 || res.status >= 500) throw new PodStartError('Error', `cannot fetch the snapshot: ${why}`);
      throw new PodStartError('RestoreError', `cannot restore the snapshot: ${why}`);
    }
    this.#restoreData = 'fetched';
    this.#ctx.log.debug({ container: this.spec.name, checkpoint: name, bytes: Number(res.headers['content-length']) }, 'restore: data answered');
    // The runtime gathers the body's 16 KiB pieces into 1 MiB messages to the pod's thread.
    return res.body as AsyncIterable<Uint8Array>;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    let restore = this.#restoreFrom;
    let count = false;
    const ns = this.#pod.metadata?.namespace ?? 'default';
    const podName = this.#pod.metadata?.name ?? '';
    while (!signal.aborted) {
      this.#holding = restore !== undefined;
      // A restore asks for the Checkpoint's data at once, while the module and the config are prepared:
      // the data's round trip to the control plane then overlaps theirs.
      const fetching = new AbortController();
      const data = restore ? this.#restoreStream(restore, fetching.signal) : undefined;
      data?.catch(() => {}); // awaited below, where a failure ends the start with RestoreError
      const prepared = await this.#prepare();
      if (signal.aborted || typeof prepared === 'string') fetching.abort();
      if (signal.aborted) {
        this.#release();
        return;
      }
      if (prepared === 'never') return;
      if (prepared === 'retry') continue;
      const { module, config } = prepared;
      this.module = module;
      if (count) this.#restartCount++;
      count = true;
      let startedAt = Date.now();
      let ran = false;
      let exit: PodExit;
      try {
        // A restored container is not a new one: no Created and Started, but Restored once it runs.
        if (!restore) this.#record('Normal', 'Created', `Created container ${this.spec.name}`);
        const restoreFrom = data ? await data : undefined;
        const opts: PodStartOptions = {
          module,
          namespace: ns,
          podName,
          containerName: this.spec.name,
          env: config.env,
          assets: config.assets,
          memoryLimitBytes: config.memoryLimitBytes,
          tickIntervalMs: config.tickIntervalMs,
          topics: config.topics,
          fsDir: join(this.#ctx.podDir, 'fs', this.spec.name),
          onChannelSend: (topic, payload) => this.#ctx.onChannelSend(ns, topic, payload),
        };
        let inst: PodInstance;
        if (restoreFrom && 'commit' in restoreFrom) {
          // Prepared while the snapshot was pushed here: run it, now that the control plane has confirmed
          // its data (a restore that does not fit this container, or failed, is done again from the data).
          inst = await restoreFrom.commit({ ...opts, signal }).catch(async (err: unknown) => {
            if (signal.aborted) throw err;
            this.#ctx.log.debug({ container: this.spec.name, checkpoint: restore, err: errorMessage(err) }, 'restore: the prepared restore was not used; fetching the data');
            const again = await this.#restoreStream(restore!, fetching.signal, true);
            if ('commit' in again) throw err;
            return PodInstance.start({ ...opts, restoreFrom: again });
          });
        } else {
          inst = await PodInstance.start({ ...opts, ...(restoreFrom ? { restoreFrom, restoreTransfer: this.#restoreData === 'pushed' } : {}) });
        }
        if (signal.aborted) {
          this.#release();
          await inst.terminate().catch(() => {});
          return;
        }
        startedAt = Date.now();
        if (restore) this.#ctx.log.info({ container: this.spec.name, checkpoint: restore, data: this.#restoreData }, 'container restored');
        this.previous = this.current;
        this.current = inst;
        this.instance = inst;
        // A freeze is reported after FROZEN_REPORT_DELAY_MS: a Save thaws and a move replaces the pod before
        // then, and neither needs a status write (the API server's writes are a move's critical path).
        inst.on('frozen', () => {
          setTimeout(() => {
            if (this.instance === inst && inst.frozen) this.#ctx.onChange();
          }, FROZEN_REPORT_DELAY_MS).unref();
        });
        inst.on('thawed', () => this.#ctx.onChange());
        this.#set({ kind: 'running', startedAt });
        ran = true;
        this.#release();
        if (restore) {
          const from = this.#restoreSource ? `, taken on node ${this.#restoreSource}` : '';
          this.#ctx.record('Normal', 'Restored', `Restored container ${this.spec.name} from Checkpoint ${restore}${from}`);
        } else {
          this.#ctx.record('Normal', 'Started', `Started container ${this.spec.name}`);
        }
        exit = await inst.exited;
        // Ended by the runtime with an error (a call past its deadline on a shared thread, the shared
        // thread stopped or failed under it): a Warning naming the cause, as for a failed start.
        if (exit.reason === 'Error' && !signal.aborted) this.#ctx.record('Warning', 'Failed', `Error: ${exit.message}`);
      } catch (err: unknown) {
        exit = err instanceof PodStartError
          ? { reason: err.reason, message: err.message, exitCode: 1, finishedAt: Date.now() }
          : { reason: 'Error', message: errorMessage(err), exitCode: 1, finishedAt: Date.now() };
        this.#release();
        if (!signal.aborted) this.#ctx.record('Warning', 'Failed', `Error: ${exit.message}`);
      }
      if (ran) restore = undefined; // a restore that never ran is tried again (see the file's comment)
      this.instance = undefined;
      if (signal.aborted) return;
      this.#ctx.log.info({ container: this.spec.name, reason: exit.reason, exitCode: exit.exitCode, message: exit.message }, 'container ended');
      const term = {
        kind: 'terminated' as const, reason: exit.reason, message: exit.message, exitCode: exit.exitCode, startedAt,
        finishedAt: exit.finishedAt, containerID: this.view().containerID,
      };
      const policy = this.#pod.spec?.restartPolicy ?? 'Always';
      const restart = exit.reason !== 'RestoreError' && (policy === 'Always' || (policy === 'OnFailure' && exit.exitCode !== 0));
      if (!restart) {
        this.#final = true;
        this.#set(term);
        return;
      }
      this.#lastState = term;
      const delay = this.#nextBackoff(exit.finishedAt - startedAt);
      if (delay > 0) {
        this.#ctx.record('Warning', 'BackOff', `Back-off restarting failed container ${this.spec.name} in pod ${podName}_${ns}(${this.#pod.metadata?.uid ?? ''})`);
        this.#set({
          kind: 'waiting', reason: 'CrashLoopBackOff',
          message: `back-off ${Math.round(delay / 1000)}s restarting failed container=${this.spec.name} pod=${podName}_${ns}(${this.#pod.metadata?.uid ?? ''})`,
        });
        await pause(delay, signal);
      }
    }
  }
}
