/**
 * The start of a pod's container, on the main thread (seed, "Kubelet endpoints"): the options
 * checked, the module instrumented for the pod's memory limit, what the thread is sent, and the
 * start sequence: each bounded step (the start function, `k32_init`/`k32_restored`) timed from when
 * the thread begins it, the restore's snapshot streamed in ahead of what the thread has read (told
 * every few MiB, not once a MiB), cancellation by `signal`.
 */
import { DEFAULT_FREEZE_TIMEOUT_MS, runningCallBlocker } from './abi.ts';
import { PodStartError, errorMessage } from './errors.ts';
import { loadModule } from './module.ts';
import type { PodLink } from './pod-thread.ts';
import { type FromWorker, RESTORE_ACK_EVERY, type ToWorker, type WorkerInit } from './protocol.ts';
import type { PodModule, PodStartOptions } from './types.ts';
import type { ValType } from '../k32s/index.ts';

/** Restore chunks sent ahead of what the thread has read (at most 8 MiB in flight; it says how far it is every {@link RESTORE_ACK_EVERY}). */
const RESTORE_AHEAD = 2 * RESTORE_ACK_EVERY;
/** Bytes a restore gathers into one message from a source's smaller chunks (a larger chunk goes as it is). */
const RESTORE_CHUNK_BYTES = 1 << 20;

/** The `ready` message: the pod's clock and the held events of its snapshot. */
export type ReadyMessage = Extract<FromWorker, { op: 'ready' }>;

/**
 * Checks a start's options up front.
 * @throws RangeError naming the option and the value: names empty, a negative fs limit or tick interval
 */
export function checkStartOptions(opts: PodStartOptions): void {
  for (const k of ['namespace', 'podName', 'containerName'] as const) {
    if (typeof opts[k] !== 'string' || opts[k].length === 0) throw new RangeError(`${k} must be a non-empty string: current value is ${JSON.stringify(opts[k])}`);
  }
  if (opts.fsLimitBytes !== undefined && (!Number.isFinite(opts.fsLimitBytes) || opts.fsLimitBytes < 0)) {
    throw new RangeError(`fsLimitBytes must be a non-negative number of bytes: current value is ${opts.fsLimitBytes}`);
  }
  if (opts.tickIntervalMs !== undefined && (!Number.isFinite(opts.tickIntervalMs) || opts.tickIntervalMs < 0)) {
    throw new RangeError(`tickIntervalMs must be a non-negative number of ms: current value is ${opts.tickIntervalMs}`);
  }
}

/** Modules instrumented again for another memory limit, by the module they came from and the limit. */
const byLimit = new WeakMap<PodModule, Map<number, Promise<PodModule>>>();

/** The module for the pod's memory limit: `opts.module` itself, or it instrumented again (cached: pods of one spec share it). */
export function moduleForLimit(opts: PodStartOptions): Promise<PodModule> {
  const module = opts.module;
  const limit = opts.memoryLimitBytes;
  if (limit === undefined || limit === module.memoryLimitBytes) return Promise.resolve(module);
  let m = byLimit.get(module);
  if (!m) {
    m = new Map();
    byLimit.set(module, m);
  }
  let p = m.get(limit);
  if (!p) {
    p = loadModule(module.bytes, { memoryLimitBytes: limit });
    m.set(limit, p);
    p.catch(() => m.delete(limit));
  }
  return p;
}

/** What the thread is sent for the pod (its `attach`). */
export function workerInit(opts: PodStartOptions, module: PodModule, gated = false): WorkerInit {
  const shape = module.shape;
  return {
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
    ...(gated ? { gated: true } : {}),
  };
}

/**
 * The start sequence of one pod. Feed it the pod's messages ({@link onMessage}) and the thread's end
 * ({@link fail}) until {@link run} settles.
 */
export class StartSequence {
  readonly #opts: PodStartOptions;
  readonly #ready = Promise.withResolvers<ReadyMessage>();
  /** A prepared restore's snapshot written back (`restoredGated`); rejects as the start does. */
  readonly restored = Promise.withResolvers<void>();
  #timer: NodeJS.Timeout | undefined;
  /** The restore's chunks the thread has read (its last `restoreRead`). */
  #read = 0;
  #readWaiter: (() => void) | undefined;
  /** The bounded step the thread runs now, as a blocker text; undefined between steps. */
  step: string | undefined;
  /** True once the pod is ready (or the start has failed): its messages are the running pod's. */
  settled = false;

  constructor(opts: PodStartOptions) {
    this.#opts = opts;
    this.#ready.promise.then(
      () => { this.settled = true; },
      (err: unknown) => {
        this.settled = true;
        this.restored.reject(err);
      },
    );
    this.restored.promise.catch(() => {});
  }

  /** Handles a message of the start; false for one the running pod handles. */
  onMessage(m: FromWorker): boolean {
    switch (m.op) {
      case 'startCall': {
        clearTimeout(this.#timer);
        this.step = undefined;
        const name = m.name;
        if (!name) return true;
        const ms = this.#opts.callDeadlineMs ?? DEFAULT_FREEZE_TIMEOUT_MS;
        const what = name === 'start' ? `instantiating the module (its start function included) still running after ${ms} ms` : runningCallBlocker(name, ms);
        this.step = what;
        // Timed from the thread's message, sent as the step begins: time queued behind other pods on a shared thread does not count.
        this.#timer = setTimeout(() => this.fail(new PodStartError('Error', what)), ms);
        return true;
      }
      case 'ready': this.#ready.resolve(m); return true;
      case 'restoredGated': this.restored.resolve(); return true;
      case 'restoreRead':
        this.#read = m.count;
        this.#readWaiter?.();
        return true;
      case 'startFailed': this.step = undefined; this.#ready.reject(new PodStartError(m.reason, m.message)); return true;
      default: return false;
    }
  }

  /** The start fails (the thread ended, a step ran past its deadline, a cancel). */
  fail(err: PodStartError): void {
    this.#ready.reject(err);
  }

  /**
   * Runs the start: streams `restoreFrom` to the thread (when given) and waits for `ready`.
   * @param ended resolves when the pod ends (the restore's source is then closed)
   * @throws PodStartError as {@link PodInstance.start} documents
   */
  async run(link: PodLink, ended: Promise<unknown>): Promise<ReadyMessage> {
    const source = this.#opts.restoreFrom;
    let over = false;
    if (source) {
      void ended.then(() => {
        over = true;
        this.#readWaiter?.();
      });
      void this.#streamRestore(link, source, () => over);
    }
    const signal = this.#opts.signal;
    const onAbort = (): void => this.fail(new PodStartError('Error', 'the start was cancelled'));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await this.#ready.promise;
    } finally {
      clearTimeout(this.#timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Streams the snapshot in as it comes. The source's bytes are copied (the source keeps its
   * buffers; with `restoreTransfer`, a chunk of 1 MiB or more that owns its buffer goes as it is) into messages of {@link RESTORE_CHUNK_BYTES} (an HTTP body comes in pieces of 16 to
   * 64 KiB: the thread is woken once a MiB, not once a piece), each transferred. The first waits
   * for the thread to read it (the header is checked: a refused snapshot's source is not read on);
   * then up to {@link RESTORE_AHEAD} go ahead of what the thread has read, which it tells every
   * {@link RESTORE_ACK_EVERY} chunks (issue 26: an acknowledgement a MiB, with 4 in flight, held
   * the stream back). When the pod ends (a refused snapshot), the loop stops and the source is
   * closed (for-await calls return()).
   */
  async #streamRestore(link: PodLink, source: AsyncIterable<Uint8Array>, over: () => boolean): Promise<void> {
    let gather: Uint8Array | undefined;
    let filled = 0;
    let sent = 0;
    const send = async (own: Uint8Array): Promise<boolean> => {
      // One chunk until the thread has checked the header (a refused snapshot is not read on), then
      // up to RESTORE_AHEAD; the thread says how far it has read every RESTORE_ACK_EVERY chunks.
      while (sent - this.#read >= (this.#read === 0 ? 1 : RESTORE_AHEAD) && !over()) await new Promise<void>((r) => { this.#readWaiter = r; });
      if (over()) return false;
      link.post({ op: 'restoreChunk', chunk: own } satisfies ToWorker, [own.buffer as ArrayBuffer]);
      sent++;
      return true;
    };
    const transfer = this.#opts.restoreTransfer === true;
    try {
      for await (const chunk of source) {
        if (over()) return;
        if (transfer && filled === 0 && chunk.byteLength >= RESTORE_CHUNK_BYTES && chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength && chunk.buffer instanceof ArrayBuffer) {
          // The caller's own buffer (restoreTransfer): sent as it is, no copy.
          if (!(await send(chunk))) return;
          continue;
        }
        for (let at = 0; at < chunk.length;) {
          gather ??= new Uint8Array(RESTORE_CHUNK_BYTES);
          const n = Math.min(RESTORE_CHUNK_BYTES - filled, chunk.length - at);
          gather.set(chunk.subarray(at, at + n), filled);
          filled += n;
          at += n;
          if (filled === RESTORE_CHUNK_BYTES) {
            const full = gather;
            gather = undefined;
            filled = 0;
            if (!(await send(full))) return;
          }
        }
      }
      if (filled > 0 && !(await send(gather!.subarray(0, filled)))) return;
      link.post({ op: 'restoreEnd' } satisfies ToWorker);
    } catch (err: unknown) {
      link.post({ op: 'restoreAbort', message: `reading the snapshot failed: ${errorMessage(err)}` } satisfies ToWorker);
    }
  }
}
