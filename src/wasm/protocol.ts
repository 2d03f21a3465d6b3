/**
 * The messages between a `PodInstance` (main thread) and its worker thread. Internal to src/wasm.
 * The main thread sends one call at a time and waits for its reply; control messages (freeze,
 * snapshot, chunk pulls) only go while no call runs.
 */
import type { ModuleShape as K32sModuleShape } from '../k32s/index.ts';
import type { WasmModule } from './wasm-api.ts';

/** The first message to a pod worker: what it runs. */
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
}

/** An open `k32_fs` descriptor. */
export interface OpenFile {
  fd: number;
  path: string;
}

export type CallKind = 'handle' | 'tick' | 'event';

/** Main → worker. */
export type ToWorker =
  | { op: 'init'; init: WorkerInit }
  | { op: 'call'; id: number; kind: 'handle'; request: Uint8Array }
  | { op: 'call'; id: number; kind: 'tick' }
  | { op: 'call'; id: number; kind: 'event'; topic: string; payload: Uint8Array }
  | { op: 'restoreChunk'; chunk: Uint8Array }
  | { op: 'restoreEnd' }
  | { op: 'restoreAbort'; message: string }
  | { op: 'freeze'; id: number }
  | { op: 'thaw'; id: number }
  | { op: 'snapshot'; id: number; events: Array<{ topic: string; payload: Uint8Array }>; digest: boolean; chunkBytes: number }
  | { op: 'snapshotNext'; id: number; credit: number }
  | { op: 'snapshotCancel'; id: number };

/** Worker → main. */
export type FromWorker =
  | { op: 'booted' }
  /** A bounded step of the start begins (the start function, k32_init, k32_restored), or ends (no name). */
  | { op: 'startCall'; name?: 'start' | 'k32_init' | 'k32_restored' }
  | { op: 'ready'; podTimeMs: number; events: Array<{ topic: string; payload: Uint8Array }> }
  | { op: 'startFailed'; reason: 'RestoreError' | 'Trap' | 'Error'; message: string }
  | { op: 'restoreAck' }
  | { op: 'result'; id: number; response?: Uint8Array; error?: { code: 'NoMemory' | 'Trap' | 'BadResponse' | 'NotHandled'; message: string }; openFiles: OpenFile[] }
  | { op: 'done'; id: number; podTimeMs?: number }
  | { op: 'snapshotInfo'; id: number; byteLength: number; podTimeMs: number; snapshotSha256?: string; error?: string }
  | { op: 'snapshotChunk'; id: number; chunk?: Uint8Array; end?: boolean; error?: string }
  | { op: 'log'; line: string }
  | { op: 'send'; topic: string; payload: Uint8Array }
  | { op: 'exit'; reason: 'Completed' | 'Trap' | 'Error'; message: string };
