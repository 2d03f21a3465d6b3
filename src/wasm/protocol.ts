/**
 * The messages between the main thread and the pod threads. Internal to src/wasm.
 *
 * Two levels: a thread's own port carries {@link ToThread} (attach a pod, detach it) and
 * {@link FromThread}; each pod has a `MessageChannel` of its own, whose far end is transferred to
 * the thread in `attach`, and that carries the pod protocol ({@link ToWorker}, {@link FromWorker}),
 * whether the thread runs one pod or many. On a pod's port the main thread keeps up to
 * {@link CALLS_AHEAD} calls sent ahead (the thread runs them in order, one at a time, so that a pod
 * never waits for a round trip between calls), and the thread answers them in batches (`results`:
 * the calls it ran in one turn of its event loop); control messages (freeze, snapshot, chunk pulls)
 * only go while no call is in flight.
 */
import type { MessagePort } from 'node:worker_threads';
import type { ModuleShape as K32sModuleShape } from '../k32s/index.ts';
import type { SplitResponse } from './http-response.ts';
import type { WasmModule } from './wasm-api.ts';

/** What a pod runs, sent with its `attach`. */
export interface WorkerInit {
  compiled: WasmModule;
  kind: 'request' | 'app';
  entryPoint?: string;
  exportNames: string[];
  imageSha256: Uint8Array;
  k32sShape: K32sModuleShape;
  /** Globals and tables by index with their types, for writing state back. */
  globalTypes: Array<[number, number]>;
  tableIndices: number[];
  functionCount: number;
  hasMemory: boolean;
  memoryLimitBytes: number;
  memoryPagesLimit: number;
  subPageLimit: boolean;
  env: Record<string, string>;
  assets: Record<string, Uint8Array>;
  fsDir?: string;
  fsLimitBytes?: number;
  restore: boolean;
  /**
   * A prepared restore (issue 26): the context writes the snapshot back, says `restoredGated`, and runs
   * nothing more (no `k32_restored`, no call) until `commit`; `fsDir` is then given with the commit.
   */
  gated?: boolean;
}

/** An open `k32_fs` descriptor. */
export interface OpenFile {
  fd: number;
  path: string;
}

export type CallKind = 'handle' | 'tick' | 'event';

/** A pod's context tells the main thread how far a restore has read once every this many chunks (see `restoreRead`). */
export const RESTORE_ACK_EVERY = 4;

/** Calls the main thread keeps sent ahead to a pod's context (issue 26, "a faster request path"). */
export const CALLS_AHEAD = 8;

/** Main → a pod thread, on the thread's own port. */
export type ToThread =
  /**
   * A pod joins the thread: its context listens on `port` (transferred) and starts at once. `gone`
   * (an Int32Array's buffer of one element) is set to 1 by the main thread when the pod ends: the
   * context checks it before each run of the pod's code, so that nothing of a pod the main thread
   * has let go starts to run (see PodContext's #enter). `usage` is the buffer of the pod's
   * `PodUsage` (pod-usage.ts), which the context writes after each run of the pod's code.
   */
  | { op: 'attach'; slot: number; port: MessagePort; init: WorkerInit; gone: SharedArrayBuffer; usage: SharedArrayBuffer }
  /** A pod leaves: its context is freed (instance and memory unreferenced, port closed). */
  | { op: 'detach'; slot: number };

/** A pod thread → main, on the thread's own port. */
/** `booted` once the thread is ready for pods; `warmUpError` when its warm-up failed (it serves pods all the same). */
export type FromThread = { op: 'booted'; warmUpError?: string };

/** A call's result: `response` (raw), `split` (a `handle` call with `split`), or `error`. */
export interface CallResult {
  op: 'result';
  id: number;
  response?: Uint8Array;
  split?: SplitResponse;
  error?: { code: 'NoMemory' | 'Trap' | 'BadResponse' | 'NotHandled'; message: string };
  openFiles: OpenFile[];
}

/** Main → a pod's context, on the pod's port. */
export type ToWorker =
  /**
   * `request` is transferred. With `split`, the context parses the response itself and answers it as
   * a {@link SplitResponse} (or the error `BadResponse`, "the response does not parse: ..."), so that
   * the main thread writes it to the client without parsing it again.
   */
  | { op: 'call'; id: number; kind: 'handle'; request: Uint8Array; split?: boolean }
  | { op: 'call'; id: number; kind: 'tick' }
  /** Several calls at once, run in order (the calls the main thread queued in one turn of its event loop). */
  | { op: 'calls'; calls: Array<Extract<ToWorker, { op: 'call' }>> }
  | { op: 'call'; id: number; kind: 'event'; topic: string; payload: Uint8Array }
  | { op: 'restoreChunk'; chunk: Uint8Array }
  | { op: 'restoreEnd' }
  | { op: 'restoreAbort'; message: string }
  /** A prepared restore runs on: `k32_restored`, then `ready` (`fsDir`: the pod's own directory, known only now). */
  | { op: 'commit'; fsDir?: string }
  | { op: 'freeze'; id: number }
  | { op: 'thaw'; id: number }
  /** Begins a snapshot stream: `snapshotInfo`, then up to `credit` chunks at once (more as `snapshotNext` grants). */
  | { op: 'snapshot'; id: number; events: Array<{ topic: string; payload: Uint8Array }>; digest: boolean; chunkBytes: number; credit: number }
  | { op: 'snapshotNext'; id: number; credit: number }
  | { op: 'snapshotCancel'; id: number };

/** A pod's context → main, on the pod's port. */
export type FromWorker =
  /** A bounded step of the start begins (the start function, k32_init, k32_restored), or ends (no name). */
  | { op: 'startCall'; name?: 'start' | 'k32_init' | 'k32_restored' }
  | { op: 'ready'; podTimeMs: number; events: Array<{ topic: string; payload: Uint8Array }> }
  | { op: 'startFailed'; reason: 'RestoreError' | 'Trap' | 'Error'; message: string }
  /** A prepared restore's snapshot is written back; the context waits for `commit`. */
  | { op: 'restoredGated' }
  /**
   * A restore's chunks read so far (`count`): sent after the first (its header checked) and then
   * after every {@link RESTORE_ACK_EVERY}th, not once a chunk.
   */
  | { op: 'restoreRead'; count: number }
  | CallResult
  /** Several calls' results at once, in the order of the calls (the calls the context ran in one turn). */
  | { op: 'results'; results: CallResult[] }
  | { op: 'done'; id: number; podTimeMs?: number }
  | { op: 'snapshotInfo'; id: number; byteLength: number; podTimeMs: number; snapshotSha256?: string; error?: string }
  | { op: 'snapshotChunk'; id: number; chunk?: Uint8Array; end?: boolean; error?: string }
  | { op: 'log'; line: string }
  | { op: 'send'; topic: string; payload: Uint8Array }
  | { op: 'exit'; reason: 'Completed' | 'Trap' | 'Error'; message: string };
