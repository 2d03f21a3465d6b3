/**
 * One pod's container, running in its own worker thread (pod-abi.md; seed "What moves", "What
 * keeps a pod from moving", "Kubelet endpoints"). The main thread keeps the call queue (one call
 * at a time, in order), the tick timer, the freeze state and held events, the log ring and the exit
 * report; the worker keeps the module and its memory.
 */
import { EventEmitter } from 'node:events';
import type { Worker } from 'node:worker_threads';
import { DEFAULT_FREEZE_TIMEOUT_MS, MAX_HELD_EVENTS, entryPointBlocker, externrefTableBlocker, globalTypeBlocker, openFileBlocker, runningCallBlocker } from './abi.ts';
import { valueTypeName } from './binary.ts';
import { PodCallError, PodStartError, PodStateError, errorMessage } from './errors.ts';
import { LogRing } from './log-ring.ts';
import { loadModule } from './module.ts';
import { replenishWorkerPool, takeWorker } from './worker-pool.ts';
import type { CallKind, FromWorker, OpenFile, ToWorker, WorkerInit } from './protocol.ts';
import type { ExitReason, LogEntry, LogReadOptions, PodExit, PodModule, PodSnapshot, PodStartOptions, RunningCall } from './types.ts';
import type { ValType } from '../k32s/index.ts';

/** Chunks of a restore in flight to the worker at once. */
const RESTORE_WINDOW = 4;
/** Bytes of linear memory in one snapshot chunk. */
const SNAPSHOT_CHUNK_BYTES = 1 << 20;
/** Snapshot chunks the worker sends ahead of the consumer (so at most 4 MiB in flight). */
const SNAPSHOT_WINDOW = 4;
/** Events queued (not frozen) beyond which new ones are dropped. */
const MAX_QUEUED_EVENTS = 1024;
/** Requests waiting for their turn beyond which new ones are refused (503). */
const MAX_QUEUED_REQUESTS = 1024;

interface QueuedCall {
  kind: CallKind;
  request?: Uint8Array;
  topic?: string;
  payload?: Uint8Array;
  resolve: (r: Uint8Array | undefined) => void;
  reject: (e: Error) => void;
}

type RunningEntry = QueuedCall & { startedAt: number; overdue?: NodeJS.Timeout };

interface Held {
  topic: string;
  payload: Uint8Array;
}

/** Modules instrumented again for another memory limit, by the module they came from and the limit. */
const byLimit = new WeakMap<PodModule, Map<number, Promise<PodModule>>>();

/** `module` instrumented for `memoryLimitBytes` (cached: pods of one spec share it). */
function forLimit(module: PodModule, memoryLimitBytes: number): Promise<PodModule> {
  let m = byLimit.get(module);
  if (!m) {
    m = new Map();
    byLimit.set(module, m);
  }
  let p = m.get(memoryLimitBytes);
  if (!p) {
    p = loadModule(module.bytes, { memoryLimitBytes });
    m.set(memoryLimitBytes, p);
    p.catch(() => m.delete(memoryLimitBytes));
  }
  return p;
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
  readonly #opts: PodStartOptions;
  readonly #worker: Worker;
  readonly #logs: LogRing;
  readonly #queue: QueuedCall[] = [];
  #running: RunningEntry | undefined;
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
  #cachedDigest: string | undefined;
  /** The freeze in progress (waiting for the current call), shared by concurrent callers. */
  #freezing: Promise<void> | undefined;
  #activeSnapshots = new Set<number>();
  #podTimeMs = 0;

  private constructor(opts: PodStartOptions, module: PodModule, worker: Worker) {
    super();
    this.#opts = opts;
    this.module = module;
    this.namespace = opts.namespace;
    this.podName = opts.podName;
    this.containerName = opts.containerName;
    this.#worker = worker;
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
    for (const k of ['namespace', 'podName', 'containerName'] as const) {
      if (typeof opts[k] !== 'string' || opts[k].length === 0) throw new RangeError(`${k} must be a non-empty string: current value is ${JSON.stringify(opts[k])}`);
    }
    if (opts.fsLimitBytes !== undefined && (!Number.isFinite(opts.fsLimitBytes) || opts.fsLimitBytes < 0)) {
      throw new RangeError(`fsLimitBytes must be a non-negative number of bytes: current value is ${opts.fsLimitBytes}`);
    }
    if (opts.tickIntervalMs !== undefined && (!Number.isFinite(opts.tickIntervalMs) || opts.tickIntervalMs < 0)) {
      throw new RangeError(`tickIntervalMs must be a non-negative number of ms: current value is ${opts.tickIntervalMs}`);
    }
    let module = opts.module;
    if (opts.memoryLimitBytes !== undefined && opts.memoryLimitBytes !== module.memoryLimitBytes) {
      module = await forLimit(module, opts.memoryLimitBytes);
    }
    const shape = module.shape;
    const init: WorkerInit = {
      compiled: module.compiled,
      kind: module.kind,
      ...(module.entryPoint ? { entryPoint: module.entryPoint } : {}),
      exportNames: module.exports.filter((e) => e.kind === 'function').map((e) => e.name),
      imageSha256: module.imageSha256Bytes,
      k32sShape: {
        globals: new Map(shape.globals.map((g) => [g.index, g.type as ValType])),
        tables: new Map(shape.tables.map((t) => [t.index, { min: t.min, ...(t.max !== undefined ? { max: t.max } : {}) }])),
        functionCount: shape.functionCount,
      },
      globalTypes: shape.globals.map((g) => [g.index, g.type]),
      tableIndices: shape.tables.map((t) => t.index),
      functionCount: shape.functionCount,
      hasMemory: shape.memory !== null,
      memoryLimitBytes: module.memoryLimitBytes,
      memoryPagesLimit: module.memoryPagesLimit,
      subPageLimit: module.subPageLimit,
      env: { ...(opts.env ?? {}) },
      assets: { ...(opts.assets ?? {}) },
      ...(opts.fsDir ? { fsDir: opts.fsDir } : {}),
      ...(opts.fsLimitBytes !== undefined ? { fsLimitBytes: opts.fsLimitBytes } : {}),
      restore: opts.restoreFrom !== undefined,
    };
    const worker = takeWorker();
    worker.postMessage({ op: 'init', init } satisfies ToWorker);
    const pod = new PodInstance(opts, module, worker);
    return pod.#boot();
  }

  async #boot(): Promise<PodInstance> {
    const worker = this.#worker;
    const ready = Promise.withResolvers<Extract<FromWorker, { op: 'ready' }>>();
    let acked = 0;
    let ackWaiter: (() => void) | undefined;
    let booted = false;
    let startTimer: NodeJS.Timeout | undefined;
    worker.on('message', (m: FromWorker) => {
      switch (m.op) {
        case 'startCall': {
          clearTimeout(startTimer);
          const name = m.name;
          if (!name) break;
          const ms = this.#opts.callDeadlineMs ?? DEFAULT_FREEZE_TIMEOUT_MS;
          const what = name === 'start' ? `instantiating the module (its start function included) still running after ${ms} ms` : runningCallBlocker(name, ms);
          startTimer = setTimeout(() => ready.reject(new PodStartError('Error', what)), ms);
          break;
        }
        case 'ready': booted = true; ready.resolve(m); break;
        case 'startFailed': ready.reject(new PodStartError(m.reason, m.message)); break;
        case 'restoreAck': acked++; ackWaiter?.(); break;
        default: this.#onMessage(m);
      }
    });
    worker.on('error', (err) => {
      if (!booted) ready.reject(new PodStartError('Error', `the pod's worker failed: ${errorMessage(err)}`));
      this.#end('Error', `the pod's worker failed: ${errorMessage(err)}`);
    });
    worker.on('exit', (code) => {
      if (!booted) ready.reject(new PodStartError('Error', `the pod's worker exited with code ${code} before the pod started`));
      this.#end('Error', `the pod's worker exited with code ${code}`);
    });
    if (this.#opts.restoreFrom) {
      // Stream the snapshot in, a few chunks ahead of the worker's acknowledgements. When the pod
      // ends (a refused snapshot), the loop stops and the source is closed (for-await calls return()).
      void this.exited.then(() => ackWaiter?.());
      void (async () => {
        let sent = 0;
        try {
          for await (const chunk of this.#opts.restoreFrom!) {
            if (this.#exit) return;
            while (sent - acked >= RESTORE_WINDOW && !this.#exit) await new Promise<void>((r) => { ackWaiter = r; });
            const own = new Uint8Array(chunk); // a copy of exactly these bytes (Buffer#slice would be a view)
            worker.postMessage({ op: 'restoreChunk', chunk: own } satisfies ToWorker, [own.buffer]);
            sent++;
          }
          worker.postMessage({ op: 'restoreEnd' } satisfies ToWorker);
        } catch (err: unknown) {
          worker.postMessage({ op: 'restoreAbort', message: `reading the snapshot failed: ${errorMessage(err)}` } satisfies ToWorker);
        }
      })();
    }
    const signal = this.#opts.signal;
    const onAbort = (): void => ready.reject(new PodStartError('Error', 'the start was cancelled'));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    let r: Extract<FromWorker, { op: 'ready' }>;
    try {
      r = await ready.promise.finally(() => {
        clearTimeout(startTimer);
        signal?.removeEventListener('abort', onAbort);
        replenishWorkerPool();
      });
    } catch (err: unknown) {
      const e = err instanceof PodStartError ? err : new PodStartError('Error', errorMessage(err));
      this.#end(e.reason, e.message);
      throw e;
    }
    this.#podTimeMs = r.podTimeMs;
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
      case 'exit': this.#end(m.reason, m.message); break;
      default: {
        const id = (m as { id?: number }).id;
        if (id !== undefined) this.#pending.get(id)?.(m);
      }
    }
  }

  #onResult(m: Extract<FromWorker, { op: 'result' }>): void {
    const c = this.#running;
    this.#running = undefined;
    if (c?.overdue) clearTimeout(c.overdue);
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
      c?.resolve(m.response);
    }
    for (const w of this.#idle) w();
    this.#idle.clear();
    this.#pump();
  }

  #pump(): void {
    if (this.#running || this.#frozen || this.#exit) return;
    const c = this.#queue.shift();
    if (!c) return;
    const id = this.#nextId++;
    const deadline = this.#opts.callDeadlineMs ?? DEFAULT_FREEZE_TIMEOUT_MS;
    const running: RunningEntry = { ...c, startedAt: performance.now() };
    running.overdue = setTimeout(() => {
      const name = EXPORT_OF[c.kind];
      this.#logs.append(`kube32: ${runningCallBlocker(name, deadline)}`);
      this.emit('overdue', { name, ms: deadline });
    }, deadline);
    running.overdue.unref();
    this.#running = running;
    let msg: ToWorker;
    const transfer: ArrayBuffer[] = [];
    if (c.kind === 'handle') {
      msg = { op: 'call', id, kind: 'handle', request: c.request! };
      transfer.push(c.request!.buffer as ArrayBuffer);
    } else if (c.kind === 'event') {
      msg = { op: 'call', id, kind: 'event', topic: c.topic!, payload: c.payload! };
    } else {
      msg = { op: 'call', id, kind: 'tick' };
    }
    this.#worker.postMessage(msg, transfer);
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
    if (this.#tick) clearInterval(this.#tick);
    if (this.#running?.overdue) clearTimeout(this.#running.overdue);
    const gone = new PodCallError('NotRunning', `the pod has ended (${reason}: ${message})`);
    if (this.#running) this.#running.reject(gone);
    this.#running = undefined;
    for (const c of this.#queue.splice(0)) c.reject(gone);
    for (const p of this.#pending.values()) p({ op: 'snapshotChunk', id: -1, error: `the pod has ended (${reason})` });
    this.#pending.clear();
    for (const w of this.#idle) w();
    this.#idle.clear();
    if (reason === 'Trap') this.#logs.append(`kube32: trap: ${message}`);
    this.#logs.close();
    void this.#worker.terminate();
    this.emit('exit', exit);
    this.#resolveExit(exit);
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
      this.#worker.postMessage(msg);
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
    if (this.#exit) return Promise.reject(new PodCallError('NotRunning', `the pod has ended (${this.#exit.reason})`));
    if (this.module.kind === 'app') return Promise.reject(new PodCallError('NotHandled', `an app pod takes no requests: its entry point ${this.module.entryPoint} runs on its own thread`));
    if (this.#frozen) return Promise.reject(new PodCallError('Frozen', 'the pod is frozen'));
    if (signal?.aborted) return Promise.reject(new PodCallError('Aborted', 'the request was aborted'));
    if (this.#queue.length >= MAX_QUEUED_REQUESTS) return Promise.reject(new PodCallError('NotRunning', `${MAX_QUEUED_REQUESTS} requests are waiting for the pod`));
    return new Promise<Uint8Array>((resolve, reject) => {
      const call: QueuedCall = {
        kind: 'handle',
        request: new Uint8Array(request),
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
        else if (this.#running && this.#running.resolve === call.resolve) {
          // Started: it runs on, its result is dropped.
          this.#running.resolve = () => {};
          this.#running.reject = () => {};
        }
        reject(new PodCallError('Aborted', 'the request was aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
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
    this.#tickQueued = Boolean(this.#running && this.#running.kind === 'tick');
    if (this.#running) {
      const running = this.#running;
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
        const blocker = runningCallBlocker(EXPORT_OF[running.kind], timeoutMs);
        throw new PodStateError('Timeout', blocker, [blocker]);
      }
    }
    const r = await this.#request<Extract<FromWorker, { op: 'done' }>>({ op: 'freeze', id: this.#nextId++ });
    this.#podTimeMs = r.podTimeMs ?? this.#podTimeMs;
    this.#cachedDigest = undefined;
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
      this.#worker.postMessage({ op: 'snapshotCancel', id } satisfies ToWorker);
      this.#pending.get(id)?.({ op: 'snapshotChunk', id, error: 'the pod was thawed during the snapshot' });
    }
    this.#activeSnapshots.clear();
    await this.#request({ op: 'thaw', id: this.#nextId++ });
    this.#frozen = false;
    this.#cachedDigest = undefined;
    this.#requeueHeld();
    this.emit('thawed');
    this.#pump();
  }

  /** True while the pod is frozen. */
  get frozen(): boolean {
    return this.#frozen;
  }

  /** The exit report once the container has ended, else undefined. */
  get exit(): PodExit | undefined {
    return this.#exit;
  }

  /** The call running now, if any. */
  get runningCall(): RunningCall | undefined {
    const r = this.#running;
    return r ? { name: EXPORT_OF[r.kind], startedAt: r.startedAt } : undefined;
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
    const r = this.#running;
    if (r && performance.now() - r.startedAt > timeoutMs) out.push(runningCallBlocker(EXPORT_OF[r.kind], timeoutMs));
    return out;
  }

  /**
   * A K32S v1 snapshot of the frozen pod (seed, "Snapshot format"): linear memory, every mutable
   * global, every table, the clock at the freeze, the channels and the held events. The memory is
   * streamed out of the worker in chunks of at most 1 MiB, never copied whole. The same frozen pod
   * gives the same bytes every time.
   *
   * @param opts.digest compute the trailer first, so that `snapshotSha256` is known before the
   *   bytes (one more read of the memory); it is also known without this once a stream of the same
   *   freeze has completed
   * @throws PodStateError `NotFrozen` (freeze first), `NotMovable` with the blockers, `NotRunning`
   */
  async snapshot(opts: { digest?: boolean } = {}): Promise<PodSnapshot> {
    await this.#freezing;
    if (this.#exit) throw new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`);
    if (!this.#frozen) throw new PodStateError('NotFrozen', 'snapshot of a pod that is not frozen: freeze it first');
    const blockers = this.blockers();
    if (blockers.length > 0) throw new PodStateError('NotMovable', `the pod cannot move: ${blockers.join('; ')}`, blockers);
    const id = this.#nextId++;
    const info = await this.#request<Extract<FromWorker, { op: 'snapshotInfo' }>>({
      op: 'snapshot',
      id,
      events: this.#held.map((h) => ({ topic: h.topic, payload: h.payload })),
      digest: Boolean(opts.digest) && this.#cachedDigest === undefined,
      chunkBytes: SNAPSHOT_CHUNK_BYTES,
    });
    if (info.error) throw new PodStateError('NotMovable', `the pod's state cannot be written: ${info.error}`, [info.error]);
    if (info.snapshotSha256) this.#cachedDigest = info.snapshotSha256;
    this.#activeSnapshots.add(id);
    const chunks = this.#chunks(id);
    return {
      byteLength: info.byteLength,
      imageSha256: this.module.imageSha256,
      ...(this.#cachedDigest ? { snapshotSha256: this.#cachedDigest } : {}),
      podTimeMs: info.podTimeMs,
      chunks,
    };
  }

  async *#chunks(id: number): AsyncGenerator<Uint8Array, void, undefined> {
    // The worker sends up to SNAPSHOT_WINDOW chunks ahead; each one consumed grants one more.
    const inbox: Array<Extract<FromWorker, { op: 'snapshotChunk' }>> = [];
    let wake: (() => void) | undefined;
    this.#pending.set(id, (m) => {
      inbox.push(m as Extract<FromWorker, { op: 'snapshotChunk' }>);
      wake?.();
    });
    const grant = (credit: number): void => {
      if (!this.#exit) this.#worker.postMessage({ op: 'snapshotNext', id, credit } satisfies ToWorker);
    };
    let last: Uint8Array | undefined;
    try {
      if (this.#exit) throw new PodStateError('NotRunning', `the pod has ended (${this.#exit.reason})`);
      grant(SNAPSHOT_WINDOW);
      for (;;) {
        while (inbox.length === 0) await new Promise<void>((r) => { wake = r; });
        const m = inbox.shift()!;
        if (m.error) throw new PodStateError(this.#exit ? 'NotRunning' : 'NotFrozen', `snapshot stream: ${m.error}`);
        if (m.end) break;
        last = m.chunk!;
        yield m.chunk!;
        grant(1);
      }
      if (last && last.length >= 32 && this.#frozen) this.#cachedDigest = Buffer.from(last.subarray(last.length - 32)).toString('hex');
    } finally {
      this.#pending.delete(id);
      if (this.#activeSnapshots.delete(id) && !this.#exit) this.#worker.postMessage({ op: 'snapshotCancel', id } satisfies ToWorker);
    }
  }

  /**
   * Ends the container: the worker is stopped at once (a call in progress is cut). The exit reason
   * is `Completed` ("stopped by the node") unless the container had already ended.
   * @returns the exit report
   */
  async terminate(): Promise<PodExit> {
    this.#end('Completed', 'stopped by the node');
    await this.#worker.terminate();
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
