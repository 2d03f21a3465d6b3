/**
 * One pod's container on the main thread (pod-abi.md; seed "What moves", "What keeps a pod from
 * moving", "Kubelet endpoints"): the call queue (one call at a time, in order), the tick timer, the
 * freeze state and held events, the log ring and the exit report. The pod's thread (its own, or a
 * shared one: see pod-thread.ts) keeps the module and its memory; the start sequence is in
 * pod-start.ts, the snapshot stream in snapshot-stream.ts.
 */
import { EventEmitter } from 'node:events';
import { DEFAULT_FREEZE_TIMEOUT_MS, MAX_HELD_EVENTS, entryPointBlocker, externrefTableBlocker, globalTypeBlocker, openFileBlocker, runningCallBlocker } from './abi.ts';
import { valueTypeName } from './binary.ts';
import { PodCallError, PodStartError, PodStateError, errorMessage } from './errors.ts';
import { LogRing } from './log-ring.ts';
import { checkStartOptions, moduleForLimit, StartSequence, workerInit } from './pod-start.ts';
import { attachPod, replenishWorkerPool, type PodLink } from './pod-thread.ts';
import type { SplitResponse } from './http-response.ts';
import { CALLS_AHEAD, type CallKind, type CallResult, type FromWorker, type OpenFile, type ToWorker } from './protocol.ts';
import { ChunkInbox, SNAPSHOT_CHUNK_BYTES, SNAPSHOT_WINDOW, snapshotChunks, type ChunkMessage } from './snapshot-stream.ts';
import type { ExitReason, LogEntry, LogReadOptions, PodExit, PodModule, PodSnapshot, PodStartOptions, PodUsageFigures, PreparedRestore, RunningCall } from './types.ts';

/**
 * How the caller of {@link PodInstance.handleSplit} stops waiting for its answer: the call sets
 * `cancel`, the caller calls it (an `AbortSignal` a request, and its listener, cost more than the
 * rest of the request path).
 */
export interface CallCancel {
  cancel?: () => void;
}

/** Events queued (not frozen) beyond which new ones are dropped. */
const MAX_QUEUED_EVENTS = 1024;
/** Requests waiting for their turn beyond which new ones are refused (503). */
const MAX_QUEUED_REQUESTS = 1024;

interface QueuedCall {
  kind: CallKind;
  request?: Uint8Array;
  /** A `handle` call whose response the pod thread splits (see {@link PodInstance.handleSplit}). */
  split?: boolean;
  topic?: string;
  payload?: Uint8Array;
  resolve: (r: Uint8Array | SplitResponse | undefined) => void;
  reject: (e: Error) => void;
}

/**
 * A call sent to the thread. `startedAt` (`performance.now()`) is when it became the first call in
 * flight (the one the thread runs now or next: the calls behind it wait for it on the thread).
 */
type RunningEntry = QueuedCall & { startedAt: number; overdue?: NodeJS.Timeout };

interface Held {
  topic: string;
  payload: Uint8Array;
}

/** The export a call kind runs. */
const EXPORT_OF: Record<CallKind, string> = { handle: 'k32_handle', tick: 'k32_tick', event: 'k32_event' };

/**
 * A running container of a Kube32 pod.
 *
 * Events (EventEmitter): `exit` (PodExit) once; `overdue` ({ name, ms }) when a call outlasts
 * `callDeadlineMs`; `frozen`, `thawed`.
 *
 * @example
 * const pod = await PodInstance.start({ module, namespace: 'default', podName: 'echo', containerName: 'echo' });
 * const res = await pod.handle(new TextEncoder().encode('GET / HTTP/1.1\r\nhost: x\r\n\r\n'));
 * await pod.terminate();
 */
export class PodInstance extends EventEmitter {
  readonly module: PodModule;
  readonly namespace: string;
  readonly podName: string;
  readonly containerName: string;
  /** Resolves with the exit report when the container ends. */
  readonly exited: Promise<PodExit>;
  /** The start's options (a prepared restore's are replaced by its commit's, see {@link prepareRestore}). */
  #opts: PodStartOptions;
  #link!: PodLink;
  /** Resolves once the pod's thread has let it go (its own thread terminated). */
  #detached: Promise<void> = Promise.resolve();
  /** The start in progress (its messages go to it until it settles). */
  #starting: StartSequence | undefined;
  readonly #logs: LogRing;
  readonly #queue: QueuedCall[] = [];
  /** The calls sent to the thread and not yet answered, in order (at most {@link CALLS_AHEAD}); the first runs now. */
  readonly #inflight: RunningEntry[] = [];
  /** Calls queued for the thread in this turn of the event loop, sent together by {@link #flushCalls}. */
  readonly #outgoing: Array<Extract<ToWorker, { op: 'call' }>> = [];
  readonly #outgoingTransfer: ArrayBuffer[] = [];
  #frozen = false;
  #held: Held[] = [];
  #dropped = 0;
  #exit: PodExit | undefined;
  #resolveExit!: (e: PodExit) => void;
  #openFiles: OpenFile[] = [];
  #tick: NodeJS.Timeout | undefined;
  #tickQueued = false;
  #nextId = 1;
  readonly #pending = new Map<number, (m: FromWorker) => void>();
  readonly #idle = new Set<() => void>();
  /** The freeze in progress (waiting for the current call), shared by concurrent callers. */
  #freezing: Promise<void> | undefined;
  #activeSnapshots = new Set<number>();
  #podTimeMs = 0;
  #startCpuNs: Promise<number> = Promise.resolve(0);

  private constructor(opts: PodStartOptions, module: PodModule) {
    super();
    this.#opts = opts;
    this.module = module;
    this.namespace = opts.namespace;
    this.podName = opts.podName;
    this.containerName = opts.containerName;
    this.#logs = new LogRing(opts.logRingBytes ?? 1 << 20);
    this.exited = new Promise((resolve) => {
      this.#resolveExit = resolve;
    });
  }

  /**
   * Starts a container: afresh (instantiate, `k32_init`) or from a K32S snapshot (instantiate,
   * write memory, globals and tables back, set the clock, reopen the channels under their handles,
   * `k32_restored`, then deliver the held events), as the seed's "Kubelet endpoints" says.
   *
   * @returns the running pod, once `k32_init` or `k32_restored` has returned
   * @throws PodStartError with reason `RestoreError` ("cannot restore the snapshot: <cause>") for a
   *   snapshot the K32S reader refuses or that does not fit the module, `Trap` when the start
   *   section, `k32_init` or `k32_restored` trapped, `Error` otherwise (among them: the start
   *   function, `k32_init` or `k32_restored` still running after `callDeadlineMs`, "call k32_init
   *   still running after 10000 ms"; `signal` aborted, "the start was cancelled")
   * @throws RangeError for a bad option (names empty, a negative tick interval)
   */
  static async start(opts: PodStartOptions): Promise<PodInstance> {
    checkStartOptions(opts);
    const module = await moduleForLimit(opts);
    const pod = new PodInstance(opts, module);
    return pod.#boot();
  }

  /**
   * Prepares a restore ahead of its pod (issue 26, "Faster moves"): a pod thread instantiates the
   * module and writes `opts.restoreFrom` into it as the chunks come, then waits; nothing of the pod
   * runs (no `k32_restored`, no call, no tick) until {@link PreparedRestore.commit}. A node prepares
   * a move's restore from the snapshot pushed to it while the control plane stores it, and commits
   * it once the control plane confirms that the stored data is those bytes and binds the pod to it.
   *
   * `opts.fsDir` is not used (the pod's directory is known at the commit). A module with a start
   * function (which would run at the instantiation) is refused.
   * @throws PodStartError `Error` for a module with a start function; RangeError for bad options
   */
  static async prepareRestore(opts: PodStartOptions & { restoreFrom: AsyncIterable<Uint8Array> }): Promise<PreparedRestore> {
    checkStartOptions(opts);
    if (opts.module.hasStartFunction) throw new PodStartError('Error', 'the module has a start function, which would run before the commit: its restore is not prepared');
    const { fsDir: _unused, ...rest } = opts;
    const module = await moduleForLimit(rest);
    const pod = new PodInstance(rest, module);
    const booting = pod.#boot(true);
    booting.catch(() => {});
    const starting = pod.#starting!;
    // Ended before its commit (a cancel, the thread's end): the start fails, for a commit waiting on it too.
    void pod.exited.then(() => starting.fail(new PodStartError('Error', 'the prepared restore was cancelled')));
    // Once committed the pod is the container's (a cancel then ends nothing); once cancelled it commits no more.
    let state: 'prepared' | 'committed' | 'cancelled' = 'prepared';
    return {
      restored: starting.restored.promise,
      commit: async (final: PodStartOptions): Promise<PodInstance> => {
        if (state === 'committed') throw new PodStartError('Error', 'the prepared restore was committed already');
        if (state === 'cancelled') throw new PodStartError('Error', 'the prepared restore was cancelled');
        state = 'committed';
        const differs = await preparedDiffers(rest, module, final);
        if (differs) {
          void pod.terminate();
          throw new PodStartError('Error', `the prepared restore does not fit the container: ${differs}`);
        }
        await starting.restored.promise;
        // From now on the pod is the container's: its callbacks, tick interval and deadlines.
        pod.#opts = { ...final, restoreFrom: opts.restoreFrom };
        const signal = final.signal;
        const onAbort = (): void => starting.fail(new PodStartError('Error', 'the start was cancelled'));
        if (signal?.aborted) onAbort();
        else signal?.addEventListener('abort', onAbort, { once: true });
        try {
          pod.#link.post({ op: 'commit', ...(final.fsDir ? { fsDir: final.fsDir } : {}) } satisfies ToWorker);
          return await booting;
        } finally {
          signal?.removeEventListener('abort', onAbort);
        }
      },
      cancel: async (): Promise<void> => {
        if (state === 'committed') return;
        state = 'cancelled';
        await pod.terminate();
      },
    };
  }

  async #boot(gated = false): Promise<PodInstance> {
    const starting = new StartSequence(this.#opts);
    this.#starting = starting;
    // A prepared restore's thread is taken for good once its snapshot is written: boot the next spare then.
    if (gated) starting.restored.promise.then(() => replenishWorkerPool(), () => {});
    this.#link = attachPod(workerInit(this.#opts, this.module, gated), this, {
      onMessage: (m) => {
        if (!starting.settled && starting.onMessage(m)) return;
        this.#onMessage(m);
      },
      onThreadEnd: (end) => {
        if (!starting.settled) starting.fail(new PodStartError('Error', end.beforeStart));
        this.#end('Error', end.message);
      },
    });
    let r: Awaited<ReturnType<StartSequence['run']>>;
    try {
      r = await starting.run(this.#link, this.exited).finally(() => replenishWorkerPool());
    } catch (err: unknown) {
      const e = err instanceof PodStartError ? err : new PodStartError('Error', errorMessage(err));
      this.#end(e.reason, e.message);
      throw e;
    } finally {
      this.#starting = undefined;
    }
    this.#podTimeMs = r.podTimeMs;
    // The counter as the start returned: what came before (compile, instantiate, start steps) was its start.
    this.#startCpuNs = this.#link.usage().then((u) => u.cpuNs, () => 0);
    // Held events from the snapshot are delivered after k32_restored, before anything else.
    for (const e of r.events) this.#queue.push(this.#eventCall(e.topic, e.payload));
    const every = this.#opts.tickIntervalMs ?? 0;
    if (every > 0 && this.module.kind === 'request') {
      this.#tick = setInterval(() => this.#onTick(), Math.max(1, every));
      this.#tick.unref();
    }
    this.#pump();
    return this;
  }

  #onMessage(m: FromWorker): void {
    switch (m.op) {
      case 'log': {
        const entry = this.#logs.append(m.line);
        try {
          this.#opts.onLog?.(entry);
        } catch {
          // A failing log sink must not take the pod down; the line is in the ring.
        }
        break;
      }
      case 'send':
        try {
          this.#opts.onChannelSend?.(m.topic, m.payload);
        } catch (err: unknown) {
          this.#logs.append(`kube32: channel send on ${m.topic} failed: ${errorMessage(err)}`);
        }
        break;
      case 'result': this.#onResult(m); break;
      case 'results':
        for (const r of m.results) {
          if (this.#exit) break;
          this.#onResult(r);
        }
        break;
      case 'exit': this.#end(m.reason, m.message); break;
      default: {
        const id = (m as { id?: number }).id;
        if (id !== undefined) this.#pending.get(id)?.(m);
      }
    }
  }

  #onResult(m: CallResult): void {
    const c = this.#inflight.shift();
    if (c?.overdue) clearTimeout(c.overdue);
    this.#startHead();
    this.#openFiles = m.openFiles;
    if (c?.kind === 'tick') this.#tickQueued = false;
    if (m.error) {
      const err = new PodCallError(m.error.code, m.error.message);
      if (m.error.code === 'Trap') {
        c?.reject(err);
        this.#end('Trap', m.error.message);
        return;
      }
      if (c?.kind !== 'handle' || m.error.code === 'NoMemory') this.#logs.append(`kube32: ${m.error.message}`);
      c?.reject(err);
    } else {
      c?.resolve(m.split ?? m.response);
    }
    if (this.#inflight.length === 0) {
      for (const w of this.#idle) w();
      this.#idle.clear();
    }
    this.#pump();
  }

  /** The first call in flight begins its turn on the thread now: its deadline counts from here. */
  #startHead(): void {
    const head = this.#inflight[0];
    if (!head || this.#exit) return;
    head.startedAt = performance.now();
    this.#watchDeadline(head, this.#opts.callDeadlineMs ?? DEFAULT_FREEZE_TIMEOUT_MS);
  }

  /**
   * Sends queued calls to the thread while fewer than {@link CALLS_AHEAD} are in flight: the thread
   * runs the next as soon as one returns, without a round trip to the main thread in between.
   */
  #pump(): void {
    while (this.#inflight.length < CALLS_AHEAD && !this.#frozen && !this.#exit) {
      const c = this.#queue.shift();
      if (!c) return;
      this.#send(c);
    }
  }

  #send(c: QueuedCall): void {
    const id = this.#nextId++;
    const running: RunningEntry = { ...c, startedAt: performance.now() };
    this.#inflight.push(running);
    if (this.#inflight.length === 1) this.#startHead();
    let msg: ToWorker;
    const transfer: ArrayBuffer[] = [];
    if (c.kind === 'handle') {
      msg = { op: 'call', id, kind: 'handle', request: c.request!, ...(c.split ? { split: true } : {}) };
      transfer.push(c.request!.buffer as ArrayBuffer);
    } else if (c.kind === 'event') {
      msg = { op: 'call', id, kind: 'event', topic: c.topic!, payload: c.payload! };
    } else {
      msg = { op: 'call', id, kind: 'tick' };
    }
    if (this.#outgoing.length === 0) setImmediate(() => this.#flushCalls());
    this.#outgoing.push(msg as Extract<ToWorker, { op: 'call' }>);
    for (const b of transfer) this.#outgoingTransfer.push(b);
  }

  /**
   * Sends the calls queued in this turn of the event loop in one message (requests from many
   * connections arrive in one turn: one message, one wake-up of the pod's thread, not one each).
   */
  #flushCalls(): void {
    if (this.#outgoing.length === 0) return;
    const calls = this.#outgoing.splice(0);
    const transfer = this.#outgoingTransfer.splice(0);
    if (this.#exit) return;
    if (calls.length === 1) this.#link.post(calls[0]!, transfer);
    else this.#link.post({ op: 'calls', calls }, transfer);
  }

  /** Posts a control message, after the calls not yet sent (the order of messages is kept). */
  #post(m: ToWorker): void {
    this.#flushCalls();
    this.#link.post(m);
  }

  /**
   * Bounds a call by `deadline` ms. On a thread of its own the pod keeps running past it (a log line
   * and `overdue`). On a shared thread the time counts from when the pod's own code began to run (a
   * call queued behind co-tenants' is not late), and a call past it ends the pod, reason `Error`,
   * and stops the thread: its code never gives the thread back to the other pods otherwise.
   */
  #watchDeadline(running: RunningEntry, deadline: number): void {
    const name = EXPORT_OF[running.kind];
    const arm = (ms: number): void => {
      running.overdue = setTimeout(check, ms);
      running.overdue.unref();
    };
    const check = (): void => {
      if (this.#inflight[0] !== running || this.#exit) return;
      if (this.#link.shared) {
        const since = this.#link.runningSince();
        // Not begun yet (a co-tenant runs), or returned with its result on the way: look again.
        if (since === undefined) {
          arm(Math.max(1, Math.ceil(deadline / 4)));
          return;
        }
        const ran = performance.now() - since;
        if (ran < deadline) {
          arm(Math.max(1, Math.ceil(deadline - ran)));
          return;
        }
      }
      const blocker = runningCallBlocker(name, deadline);
      this.#logs.append(`kube32: ${blocker}`);
      this.emit('overdue', { name, ms: deadline });
      if (this.#link.shared) this.#end('Error', `${blocker}: a pod on a shared thread cannot run past its call deadline, so its thread was stopped`);
    };
    arm(deadline);
  }

  #onTick(): void {
    if (this.#frozen || this.#exit || this.#tickQueued) return;
    this.#tickQueued = true;
    this.#queue.push({ kind: 'tick', resolve: () => {}, reject: () => {} });
    this.#pump();
  }

  #eventCall(topic: string, payload: Uint8Array): QueuedCall {
    return { kind: 'event', topic, payload, resolve: () => {}, reject: () => {} };
  }

  #end(reason: ExitReason, message: string): void {
    if (this.#exit) return;
    const exit: PodExit = { reason, message, exitCode: reason === 'Completed' ? 0 : 1, finishedAt: Date.now() };
    this.#exit = exit;
    const running = this.#inflight[0]?.kind;
    if (this.#tick) clearInterval(this.#tick);
    const gone = new PodCallError('NotRunning', `the pod has ended (${reason}: ${message})`);
    for (const c of this.#inflight.splice(0)) {
      if (c.overdue) clearTimeout(c.overdue);
      c.reject(gone);
    }
    for (const c of this.#queue.splice(0)) c.reject(gone);
    for (const p of this.#pending.values()) p({ op: 'snapshotChunk', id: -1, error: `the pod has ended (${reason})` });
    this.#pending.clear();
    for (const w of this.#idle) w();
    this.#idle.clear();
    if (reason === 'Trap') this.#logs.append(`kube32: trap: ${message}`);
    this.#logs.close();
    this.#detach(running);
    this.emit('exit', exit);
    this.#resolveExit(exit);
  }

  /**
   * Frees the pod's context on its thread. What still runs of its code (a call, a start step) is
   * given until its deadline; on a shared thread the thread is stopped if it has not returned then.
   */
  #detach(running: CallKind | undefined): void {
    const ms = this.#opts.callDeadlineMs ?? DEFAULT_FREEZE_TIMEOUT_MS;
    const step = this.#starting?.step ?? (running ? runningCallBlocker(EXPORT_OF[running], ms) : `its code still running after ${ms} ms`);
    this.#detached = this.#link?.detach(ms, `ran past its call deadline (${step})`) ?? Promise.resolve();
  }

  #request<T extends FromWorker>(msg: ToWorker & { id: number }): Promise<T> {
    return new Promise((resolve, reject) => {
      if (this.#exit) {
        reject(new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`));
        return;
      }
      this.#pending.set(msg.id, (m) => {
        this.#pending.delete(msg.id);
        if (m.op === 'snapshotChunk' && m.id === -1) reject(new PodStateError('NotRunning', m.error ?? 'the pod has ended'));
        else resolve(m as T);
      });
      this.#post(msg);
    });
  }

  /**
   * Sends one HTTP/1.1 request message (pod-abi.md, "The request and the response": lower-case
   * header names, whole body with `content-length`) to `k32_handle`, after the calls before it.
   *
   * @param request the raw request bytes (copied)
   * @param signal stops waiting: the promise rejects with `Aborted`, a call already started runs on
   * @returns the raw response message as `k32_handle` returned it (check it with `parseHttpResponse`)
   * @throws PodCallError `Frozen` or `NotRunning` (answer 503, `Retry-After: 1`), `NoMemory` (503),
   *   `Trap` (502; the container has ended with reason Trap), `BadResponse` (502), `NotHandled`, `Aborted`
   */
  handle(request: Uint8Array, signal?: AbortSignal): Promise<Uint8Array> {
    return this.#handle(new Uint8Array(request), false, signal) as Promise<Uint8Array>;
  }

  /**
   * As {@link handle}, but the pod's thread parses the response (as `parseHttpResponse` does) and
   * answers it ready for Node's `res.writeHead(status, reason, headers)` (hop-by-hop headers dropped,
   * `content-length` recomputed), so that the main thread does not parse it again: the HTTP adapter's path.
   *
   * @param request the raw request bytes: transferred to the pod's thread, not copied, when the view
   *   covers its whole `ArrayBuffer` (which is then detached: pass a copy to keep the bytes), else copied
   * @param cancel given its `cancel` function, which stops waiting as an aborted signal does (`Aborted`)
   * @throws PodCallError as {@link handle}; `BadResponse` with "k32_handle's response does not parse: <cause>"
   */
  handleSplit(request: Uint8Array, cancel?: CallCancel): Promise<SplitResponse> {
    const whole = request.byteOffset === 0 && request.byteLength === request.buffer.byteLength && request.buffer instanceof ArrayBuffer;
    return this.#handle(whole ? request : new Uint8Array(request), true, undefined, cancel) as Promise<SplitResponse>;
  }

  #handle(request: Uint8Array, split: boolean, signal: AbortSignal | undefined, cancel?: CallCancel): Promise<Uint8Array | SplitResponse> {
    if (this.#exit) return Promise.reject(new PodCallError('NotRunning', `the pod has ended (${this.#exit.reason})`));
    if (this.module.kind === 'app') return Promise.reject(new PodCallError('NotHandled', `an app pod takes no requests: its entry point ${this.module.entryPoint} runs on its own thread`));
    if (this.#frozen) return Promise.reject(new PodCallError('Frozen', 'the pod is frozen'));
    if (signal?.aborted) return Promise.reject(new PodCallError('Aborted', 'the request was aborted'));
    if (this.#queue.length >= MAX_QUEUED_REQUESTS) return Promise.reject(new PodCallError('NotRunning', `${MAX_QUEUED_REQUESTS} requests are waiting for the pod`));
    return new Promise<Uint8Array | SplitResponse>((resolve, reject) => {
      const call: QueuedCall = {
        kind: 'handle',
        request,
        split,
        resolve: (r) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(r!);
        },
        reject: (e) => {
          signal?.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      const onAbort = (): void => {
        const at = this.#queue.indexOf(call);
        if (at >= 0) this.#queue.splice(at, 1);
        else {
          // Sent to the thread: it runs on, its result is dropped.
          const sent = this.#inflight.find((c) => c.resolve === call.resolve);
          if (sent) {
            sent.resolve = () => {};
            sent.reject = () => {};
          }
        }
        reject(new PodCallError('Aborted', 'the request was aborted'));
      };
      if (signal) signal.addEventListener('abort', onAbort, { once: true });
      if (cancel) cancel.cancel = onAbort;
      this.#queue.push(call);
      this.#pump();
    });
  }

  /**
   * Delivers an event on a topic to `k32_event` (an event the pod subscribes to, or a message sent
   * on such a topic's channel). While the pod is frozen it is held, at most 8; later ones are
   * dropped and counted ({@link droppedEvents}). Ignored once the pod has ended.
   */
  event(topic: string, payload: Uint8Array): void {
    if (this.#exit || this.module.kind === 'app') return;
    if (this.#frozen) {
      if (this.#held.length >= MAX_HELD_EVENTS) this.#dropped++;
      else this.#held.push({ topic, payload: new Uint8Array(payload) });
      return;
    }
    if (this.#queue.filter((c) => c.kind === 'event').length >= MAX_QUEUED_EVENTS) {
      this.#dropped++;
      return;
    }
    this.#queue.push(this.#eventCall(topic, new Uint8Array(payload)));
    this.#pump();
  }

  /**
   * Freezes the pod once its current call returns: no calls start, ticks stop, requests get
   * `Frozen`, events are held. Requests waiting for their turn are answered `Frozen`; events waiting
   * are held (at most 8). Freezing a frozen pod does nothing.
   *
   * @param timeoutMs how long the current call may take to return (seed: `timeoutMs`, 1 to 60000, default 10000)
   * @throws PodStateError `Timeout` with the blocker `call k32_handle still running after <ms> ms`
   *   when the call outlasts it; the pod is then left running. `NotMovable` for an app pod (its
   *   entry point never returns between calls). `NotRunning` for a pod that has ended.
   * @throws RangeError for a timeout outside 1 to 60000 ms
   */
  async freeze(timeoutMs = DEFAULT_FREEZE_TIMEOUT_MS): Promise<void> {
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 60_000) throw new RangeError(`timeoutMs must be 1 to 60000: current value is ${timeoutMs}`);
    if (this.#exit) throw new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`);
    if (this.module.kind === 'app') {
      const blocker = entryPointBlocker(this.module.entryPoint!);
      throw new PodStateError('NotMovable', `the pod cannot be frozen: ${blocker}`, [blocker]);
    }
    if (this.#freezing) return this.#freezing;
    if (this.#frozen) return;
    this.#freezing = this.#freeze(timeoutMs).finally(() => {
      this.#freezing = undefined;
    });
    return this.#freezing;
  }

  async #freeze(timeoutMs: number): Promise<void> {
    this.#frozen = true;
    for (const c of this.#queue.splice(0)) {
      if (c.kind === 'handle') c.reject(new PodCallError('Frozen', 'the pod is frozen'));
      else if (c.kind === 'event') this.#hold(c.topic!, c.payload!);
    }
    this.#tickQueued = this.#inflight.some((c) => c.kind === 'tick');
    // The calls already sent to the thread run (the freeze waits for them all); none is sent after.
    if (this.#inflight.length > 0) {
      const returned = await new Promise<boolean>((resolve) => {
        const t = setTimeout(() => {
          this.#idle.delete(done);
          resolve(false);
        }, timeoutMs);
        const done = (): void => {
          clearTimeout(t);
          resolve(true);
        };
        this.#idle.add(done);
      });
      const ended = this.#exit as PodExit | undefined;
      if (ended) throw new PodStateError('NotRunning', `the pod has ended (${ended.reason}: ${ended.message})`);
      if (!returned) {
        this.#frozen = false;
        this.#requeueHeld();
        this.#pump();
        const blocker = runningCallBlocker(EXPORT_OF[this.#inflight[0]?.kind ?? 'handle'], timeoutMs);
        throw new PodStateError('Timeout', blocker, [blocker]);
      }
    }
    const r = await this.#request<Extract<FromWorker, { op: 'done' }>>({ op: 'freeze', id: this.#nextId++ });
    this.#podTimeMs = r.podTimeMs ?? this.#podTimeMs;
    this.emit('frozen');
  }

  #hold(topic: string, payload: Uint8Array): void {
    if (this.#held.length >= MAX_HELD_EVENTS) this.#dropped++;
    else this.#held.push({ topic, payload });
  }

  #requeueHeld(): void {
    const held = this.#held.splice(0);
    this.#queue.unshift(...held.map((h) => this.#eventCall(h.topic, h.payload)));
  }

  /**
   * Resumes a frozen pod: the held events are delivered first, then requests, ticks and events go
   * on. An unfinished snapshot stream of this freeze ends with an error.
   * @throws PodStateError `NotFrozen` when the pod is not frozen (the kubelet answers 404), `NotRunning` when it has ended
   */
  async thaw(): Promise<void> {
    await this.#freezing?.catch(() => {});
    if (this.#exit) throw new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`);
    if (!this.#frozen) throw new PodStateError('NotFrozen', 'the pod is not frozen');
    for (const id of this.#activeSnapshots) {
      this.#post({ op: 'snapshotCancel', id } satisfies ToWorker);
      this.#pending.get(id)?.({ op: 'snapshotChunk', id, error: 'the pod was thawed during the snapshot' });
      this.#pending.delete(id);
    }
    this.#activeSnapshots.clear();
    await this.#request({ op: 'thaw', id: this.#nextId++ });
    this.#frozen = false;
    this.#requeueHeld();
    this.emit('thawed');
    this.#pump();
  }

  /** True while the pod is frozen. */
  get frozen(): boolean {
    return this.#frozen;
  }

  /**
   * When the running call began, `performance.now()` ms: on its own thread when it was sent; on a
   * shared thread when its code began to run (undefined while it waits behind co-tenants' calls).
   */
  #callStartedAt(r: RunningEntry): number | undefined {
    return this.#link.shared ? this.#link.runningSince() : r.startedAt;
  }

  /** The exit report once the container has ended, else undefined. */
  get exit(): PodExit | undefined {
    return this.#exit;
  }

  /** The call running now, if any. */
  get runningCall(): RunningCall | undefined {
    const r = this.#inflight[0];
    if (!r) return undefined;
    return { name: EXPORT_OF[r.kind], startedAt: this.#callStartedAt(r) ?? r.startedAt };
  }

  /** Events dropped: beyond 8 held while frozen, or beyond the queue while busy. */
  get droppedEvents(): number {
    return this.#dropped;
  }

  /** Events held now (while frozen). */
  get heldEvents(): number {
    return this.#held.length;
  }

  /** The `k32_fs` descriptors the pod holds open between calls. */
  get openFiles(): readonly OpenFile[] {
    return this.#openFiles;
  }

  /**
   * What the container has used since it started, for the kubelet's `/stats/summary`: `cpuNs`, the
   * CPU time of its thread (a thread of its own) or the time its own code ran (a shared thread), in
   * ns; `memoryBytes`, its linear memory plus its instance (the instrumented module's code), in bytes.
   * Resolves with the last figures once the container has ended.
   */
  async usage(): Promise<PodUsageFigures> {
    const u = await this.#link.usage();
    return { cpuNs: u.cpuNs, memoryBytes: u.memoryBytes + this.module.instrumentedBytes.byteLength };
  }

  /**
   * The `cpuNs` of {@link usage} as the start returned (the module's instantiation and the start steps
   * on its thread: `k32_init` or `k32_restored`), so that a rate since the start leaves the start out.
   */
  startCpuNs(): Promise<number> {
    return this.#startCpuNs;
  }

  /** The pod's clock as of its last freeze (or start), in ms. */
  get podTimeMs(): number {
    return this.#podTimeMs;
  }

  /**
   * The reasons found on the node why this pod cannot move now, each the seed's exact text ("What
   * keeps a pod from moving"): `entry point _start runs on its own thread`, `open file <path>
   * (descriptor <n>)`, `call k32_handle still running after <ms> ms` (a call running longer than
   * `timeoutMs`), and a table that is not of functions (`table <i> holds externref, not
   * functions`) or a global a snapshot cannot carry. Empty when it can move.
   * @param timeoutMs the freeze timeout a running call is measured against (seed: `timeoutMs`)
   * @default 10000
   */
  blockers(timeoutMs = DEFAULT_FREEZE_TIMEOUT_MS): string[] {
    const out: string[] = [];
    if (this.module.kind === 'app') out.push(entryPointBlocker(this.module.entryPoint!));
    for (const t of this.module.shape.tables) if (t.elementType !== 0x70) out.push(externrefTableBlocker(t.index));
    for (const g of this.module.shape.globals) if (![0x7f, 0x7e, 0x7d, 0x7c, 0x70].includes(g.type)) out.push(globalTypeBlocker(g.index, valueTypeName(g.type)));
    for (const f of this.#openFiles) out.push(openFileBlocker(f.path, f.fd));
    const r = this.#inflight[0];
    const since = r ? this.#callStartedAt(r) : undefined;
    if (r && since !== undefined && performance.now() - since > timeoutMs) out.push(runningCallBlocker(EXPORT_OF[r.kind], timeoutMs));
    return out;
  }

  /**
   * A K32S v1 snapshot of the frozen pod (seed, "Snapshot format"): linear memory, every mutable
   * global, every table, the clock at the freeze, the channels and the held events. The memory is
   * streamed out of the pod's thread in chunks of at most 1 MiB, never copied whole; the thread sends
   * the first 4 with the answer, the rest as the consumer reads (at most 4 MiB wait for a consumer
   * that does not read, until the pod is thawed or ends). The same frozen pod gives the same bytes
   * every time.
   *
   * @param opts.digest compute the trailer first, so that `snapshotSha256` is known before the
   *   bytes: one hashing pass over memory, after which the bytes are streamed without hashing them
   *   again. It is known without this, and costs nothing, once a snapshot of the same freeze (with the
   *   same held events) has been hashed or read to its end.
   * @throws PodStateError `NotFrozen` (freeze first), `NotMovable` with the blockers, `NotRunning`
   */
  async snapshot(opts: { digest?: boolean } = {}): Promise<PodSnapshot> {
    await this.#freezing;
    if (this.#exit) throw new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`);
    if (!this.#frozen) throw new PodStateError('NotFrozen', 'snapshot of a pod that is not frozen: freeze it first');
    const blockers = this.blockers();
    if (blockers.length > 0) throw new PodStateError('NotMovable', `the pod cannot move: ${blockers.join('; ')}`, blockers);
    const id = this.#nextId++;
    const inbox = new ChunkInbox();
    const info = await new Promise<Extract<FromWorker, { op: 'snapshotInfo' }>>((resolve, reject) => {
      // The answer first; the chunks sent right behind it wait in the inbox for the consumer.
      this.#pending.set(id, (m) => {
        if (m.op === 'snapshotInfo') resolve(m);
        else if (m.op === 'snapshotChunk' && m.id === -1) reject(new PodStateError('NotRunning', m.error ?? 'the pod has ended'));
        else if (m.op === 'snapshotChunk') inbox.push(m);
      });
      this.#post({
        op: 'snapshot',
        id,
        events: this.#held.map((h) => ({ topic: h.topic, payload: h.payload })),
        digest: Boolean(opts.digest),
        chunkBytes: SNAPSHOT_CHUNK_BYTES,
        credit: SNAPSHOT_WINDOW,
      } satisfies ToWorker);
    });
    if (info.error) {
      this.#pending.delete(id);
      throw new PodStateError('NotMovable', `the pod's state cannot be written: ${info.error}`, [info.error]);
    }
    this.#pending.set(id, (m) => inbox.push(m as ChunkMessage));
    this.#activeSnapshots.add(id);
    return {
      byteLength: info.byteLength,
      imageSha256: this.module.imageSha256,
      ...(info.snapshotSha256 ? { snapshotSha256: info.snapshotSha256 } : {}),
      podTimeMs: info.podTimeMs,
      chunks: snapshotChunks(id, inbox, {
        post: (m) => this.#post(m),
        ended: () => this.#exit?.reason,
        release: (sid) => {
          this.#pending.delete(sid);
          return this.#activeSnapshots.delete(sid);
        },
      }),
    };
  }

  /**
   * Ends the container. On a thread of its own the thread is stopped at once (a call in progress is
   * cut). On a shared thread its context is freed once its running call, if any, returns; a call
   * that has not returned by its deadline (`callDeadlineMs` from its start) stops the thread, and the
   * thread's other pods end (see docs/wasm-runtime.md, "Dense pods"). The exit reason is `Completed`
   * ("stopped by the node") unless the container had already ended.
   * @returns the exit report
   */
  async terminate(): Promise<PodExit> {
    this.#end('Completed', 'stopped by the node');
    await this.#detached;
    return this.#exit!;
  }

  /**
   * Reads the container's log ring (`kubectl logs` with `--tail`, `--since-time`, `-f`).
   * @throws RangeError for a negative tail
   */
  logs(opts: LogReadOptions = {}): AsyncIterable<LogEntry> {
    return this.#logs.read(opts);
  }
}

/**
 * Why a prepared restore (made with `prepared`, for `module`) cannot serve a container started with
 * `final`: another image or memory limit, environment, assets or fs limit (each is fixed when the
 * pod's thread makes its imports); undefined when it can.
 */
async function preparedDiffers(prepared: PodStartOptions, module: PodModule, final: PodStartOptions): Promise<string | undefined> {
  const finalModule = await moduleForLimit(final);
  if (finalModule.imageSha256 !== module.imageSha256) return `image sha256:${finalModule.imageSha256}, prepared for sha256:${module.imageSha256}`;
  if (finalModule.memoryLimitBytes !== module.memoryLimitBytes) return `memory limit ${finalModule.memoryLimitBytes} bytes, prepared for ${module.memoryLimitBytes}`;
  if ((final.fsLimitBytes ?? -1) !== (prepared.fsLimitBytes ?? -1)) return 'another ephemeral-storage limit';
  const env = (o: PodStartOptions): string => JSON.stringify(Object.entries(o.env ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  if (env(final) !== env(prepared)) return 'another environment';
  const a = final.assets ?? {};
  const b = prepared.assets ?? {};
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length || keys.some((k) => !b[k] || Buffer.compare(a[k]!, b[k]!) !== 0)) return 'other assets';
  return undefined;
}
