/**
 * The public types of the pod runtime (`src/wasm`): what a loaded module looks like, how a pod is
 * started, what a snapshot and an exit report carry. The ABI is `../shared/design/pod-abi.md`; the
 * state that moves is the seed's "What moves" and "Snapshot format".
 */
import type { WasmModule } from './wasm-api.ts';
import type { PodInstance } from './instance.ts';

/** A WebAssembly value type that a snapshot-able mutable global may have (K32S GLOBALS value type byte). */
export type GlobalValueType = 0x7f | 0x7e | 0x7d | 0x7c | 0x70;

/** The K32S value type bytes by name (seed, "Snapshot format", section GLOBALS). */
export const VALUE_TYPE = { i32: 0x7f, i64: 0x7e, f32: 0x7d, f64: 0x7c, funcref: 0x70, externref: 0x6f, v128: 0x7b } as const;

/** One mutable global of a module, by its index in the module's own global index space (imports first). */
export interface ShapeGlobal {
  /** Index in the original module's global index space. */
  index: number;
  /** Value type byte as the binary encodes it (0x7F i32, 0x7E i64, 0x7D f32, 0x7C f64, 0x70 funcref, 0x6F externref, 0x7B v128). */
  type: number;
  /** True for an imported global. */
  imported: boolean;
}

/** One table of a module, by its index in the module's own table index space. */
export interface ShapeTable {
  /** Index in the original module's table index space. */
  index: number;
  /** Element type byte: 0x70 funcref (snapshot-able) or 0x6F externref (a blocker). */
  elementType: number;
  /** Initial size, in entries. */
  min: number;
  /** Maximum size in entries, when the module declares one. */
  max?: number;
}

/**
 * What a snapshot of a module must match (seed, "Snapshot format": "a global or a table does not
 * match the module"). Given to the K32S decoder as `module`.
 */
export interface ModuleShape {
  /** Every mutable global, in index order (immutable ones are not state and are not listed). */
  globals: ShapeGlobal[];
  /** Every table, in index order. */
  tables: ShapeTable[];
  /** Number of functions in the function index space (imported + defined); a table entry or funcref global is below it. */
  functionCount: number;
  /** The linear memory's declared limits in 64 KiB pages, or null for a module without memory. */
  memory: { minPages: number; maxPages?: number } | null;
}

/** An import of a module. */
export interface ImportInfo {
  module: string;
  name: string;
  kind: 'function' | 'table' | 'memory' | 'global' | 'tag';
  /** For functions: the signature, as `(i32, i32) -> i64`. */
  signature?: string;
}

/** An export of the original module (the runtime's own instrumentation exports are not listed). */
export interface ExportInfo {
  name: string;
  kind: 'function' | 'table' | 'memory' | 'global' | 'tag';
  /** Index in the module's index space of that kind. */
  index: number;
  /** For functions: the signature, as `(i32, i32) -> i64`. */
  signature?: string;
}

/** Kinds of pod module (pod-abi.md, "Kinds of module"). */
export type PodKind = 'request' | 'app';

/**
 * A checked, instrumented module, ready to start pods from. Made by {@link loadModule}; immutable;
 * may be shared by many pods whose memory limit is the one it was loaded for.
 */
export interface PodModule {
  /** SHA-256 of the original module bytes, 64 lower-case hex digits (the pod's image digest). */
  readonly imageSha256: string;
  /** The same digest, 32 bytes (K32S header field). */
  readonly imageSha256Bytes: Uint8Array;
  /** `request` or `app` (pod-abi.md). */
  readonly kind: PodKind;
  /** The export name of an app pod's entry point (`_start`, `app_main` or `main`). */
  readonly entryPoint?: string;
  readonly imports: readonly ImportInfo[];
  readonly exports: readonly ExportInfo[];
  /** What a snapshot of this module holds and must match. */
  readonly shape: ModuleShape;
  /** The original bytes, as given. */
  readonly bytes: Uint8Array;
  /** The bytes after instrumentation (exports added, memory maximum capped at the limit). */
  readonly instrumentedBytes: Uint8Array;
  /** The compiled instrumented module (structured-cloneable to workers). */
  readonly compiled: WasmModule;
  /** The memory limit this module was instrumented for, in bytes. */
  readonly memoryLimitBytes: number;
  /** Linear memory the pod may have, in 64 KiB pages (at least 1 when the module has memory). */
  readonly memoryPagesLimit: number;
  /** True when the limit is below one 64 KiB page: the pod has one page of which only the limit is backed, and a snapshot holds `memoryLimitBytes` bytes of memory (seed, "Snapshot format"). */
  readonly subPageLimit: boolean;
  /**
   * True when the module has a start function (which runs at every instantiation, a restore's
   * included): such a pod's restore is never prepared ahead ({@link PodInstance.prepareRestore}),
   * since the function is the pod's own code.
   */
  readonly hasStartFunction: boolean;
}

/** Options of {@link loadModule}. */
export interface LoadOptions {
  /**
   * The pod's `resources.limits.memory`, in bytes: the module's memory can never grow past it, and
   * a module whose initial memory is above it is refused. Below 64 KiB the pod has one page with
   * only the limit backed (pod-abi.md, "Pod spec").
   * @default 4 GiB (no limit beyond WebAssembly's own)
   */
  memoryLimitBytes?: number;
}

/**
 * Why a container ended (Kubernetes `containerStatuses[].state.terminated.reason`): `Completed`
 * (an app pod's entry point returned, or the node stopped the container with `terminate()`),
 * `Trap` (a crash), `Error` (the worker failed), `RestoreError` (a snapshot was refused at start).
 */
export type ExitReason = 'Completed' | 'Trap' | 'Error' | 'RestoreError';

/** The report of a container's end. */
export interface PodExit {
  reason: ExitReason;
  /** Human-readable cause: the trap's message, the restore error, ... */
  message: string;
  /** Exit code as kubectl shows it: 0 for Completed, 1 otherwise. */
  exitCode: number;
  /** Unix time in ms of the end. */
  finishedAt: number;
}

/** One line of a container's log. */
export interface LogEntry {
  /** Unix time in ms when the line was written. */
  time: number;
  /** The line, without a trailing newline (invalid UTF-8 replaced). */
  line: string;
  /** Sequence number, from 1, increasing by one per line written (dropped lines keep their numbers). */
  seq: number;
}

/** Options of reading a container's log (as `kubectl logs` asks). */
export interface LogReadOptions {
  /** Only the last N lines held. */
  tail?: number;
  /** Only lines written at or after this Unix time in ms. */
  sinceTime?: number;
  /** Keep streaming new lines until the signal aborts or the container ends. */
  follow?: boolean;
  /** Ends a follow. */
  signal?: AbortSignal;
}

/** Options of {@link PodInstance.start}. */
export interface PodStartOptions {
  /** The loaded module (see {@link loadModule}). */
  module: PodModule;
  namespace: string;
  podName: string;
  containerName: string;
  /** The container's environment, for `k32_env`. */
  env?: Record<string, string>;
  /** The pod's assets (ConfigMap volume keys), for `k32_asset`. */
  assets?: Record<string, Uint8Array>;
  /**
   * The pod's memory limit in bytes. Must be the one the module was loaded for; when it differs,
   * the runtime instruments the module again for this limit.
   * @default the module's `memoryLimitBytes`
   */
  memoryLimitBytes?: number;
  /** Interval between `k32_tick` calls, in ms (annotation `kube32.io/tick-interval`); none when absent or 0. */
  tickIntervalMs?: number;
  /** Topics the pod subscribes to (annotation `kube32.io/topics`); informational, the caller routes events. */
  topics?: string[];
  /** The pod's own storage directory for `k32_fs` (created when missing). Without it, `k32_fs_open` answers -ENOSYS. */
  fsDir?: string;
  /**
   * Most bytes the pod's files in `fsDir` may hold together (what was there at the start counts):
   * a `k32_fs_write` that would go past it writes nothing and answers -ENOSPC (-28). The kubelet
   * maps `resources.limits.ephemeral-storage` to it. Unlimited when absent.
   */
  fsLimitBytes?: number;
  /** Called for each `k32_channel_send`, on the main thread, in order. */
  onChannelSend?: (topic: string, payload: Uint8Array) => void;
  /** Called for each log line, on the main thread, after it is in the ring. */
  onLog?: (entry: LogEntry) => void;
  /** A K32S snapshot to restore from instead of a fresh start (seed, "Kubelet endpoints"). */
  restoreFrom?: AsyncIterable<Uint8Array>;
  /**
   * The chunks of {@link restoreFrom} are given up by the caller: one of at least 1 MiB that spans its whole
   * `ArrayBuffer` is transferred to the pod's thread as it is instead of copied (its buffer is detached
   * afterwards). The kubelet gathers a snapshot pushed to it into such chunks while it arrives (issue 26),
   * so that the restore copies nothing more. Default false: every chunk is copied.
   */
  restoreTransfer?: boolean;
  /**
   * A call that runs longer than this is reported (a log line and the `overdue` event); the pod keeps running
   * on a thread of its own. On a shared thread (dense pods, {@link configurePodThreads}) the time counts from
   * when the pod's own code began to run, and a call past it ends the pod (reason `Error`) and stops the
   * thread, ending its co-tenants (docs/wasm-runtime.md, "Dense pods").
   * `k32_init` and `k32_restored` get the same time, then the start fails (the pod never ran):
   * `PodStartError('Error', 'k32_init still running after <ms> ms')`, the worker terminated.
   * @default 10000
   */
  callDeadlineMs?: number;
  /**
   * Cancels a start in progress (the pod was deleted meanwhile): the worker is terminated and
   * `start` rejects with `PodStartError('Error', 'the start was cancelled')`. No effect once started.
   */
  signal?: AbortSignal;
  /**
   * Capacity of the log ring, in bytes.
   * @default 1 MiB
   */
  logRingBytes?: number;
}

/** What `PodInstance.snapshot()` gives: a K32S v1 snapshot of a frozen pod, streamed from its worker. */
export interface PodSnapshot {
  /** Total length in bytes (header, sections, trailer): the HTTP `Content-Length`. */
  byteLength: number;
  /** `X-Kube32-Image-Sha256`. */
  imageSha256: string;
  /** `X-Kube32-Snapshot-Sha256`, the trailer: known up front when asked for (`digest: true`) or once streamed before. */
  snapshotSha256?: string;
  /** `X-Kube32-Pod-Time-Ms`: the pod's clock when it froze. */
  podTimeMs: number;
  /** The bytes, in bounded chunks (each a fresh buffer the consumer owns); iterate once. */
  chunks: AsyncIterable<Uint8Array>;
}

/** A call the pod is running (for blockers and reports). */
export interface RunningCall {
  /** The export called: `k32_handle`, `k32_tick`, `k32_event`, `k32_init`, ... */
  name: string;
  /** When it started, ms on `performance.now()`'s clock. */
  startedAt: number;
}

/** What a container has used since it started ({@link PodInstance.usage}). */
export interface PodUsageFigures {
  /** Nanoseconds of CPU on its thread (a shared thread: the time its own code ran). */
  cpuNs: number;
  /** Bytes: its linear memory plus its instance (the instrumented module's code). */
  memoryBytes: number;
}

/**
 * A restore prepared ahead of its pod ({@link PodInstance.prepareRestore}): its pod thread holds the
 * instance with the snapshot written back, and runs nothing of it until {@link commit}.
 */
export interface PreparedRestore {
  /**
   * Resolves once the whole snapshot is written into the instance; rejects as a start does
   * (PodStartError `RestoreError` for a snapshot the reader refuses, `Error` when it was cancelled).
   */
  readonly restored: Promise<void>;
  /**
   * Runs the pod as the container started with `final` (its callbacks, tick interval, `fsDir` and
   * `signal` are used from now on): `k32_restored`, then the held events, as {@link PodInstance.start}.
   * Once only.
   * @returns the running pod
   * @throws PodStartError `Error` when `final` needs another module, memory limit, environment, assets
   *   or fs limit than it was prepared with (it is then ended: start the container afresh), when it was
   *   committed already or cancelled, or as {@link PodInstance.start} throws
   */
  commit(final: PodStartOptions): Promise<PodInstance>;
  /**
   * Ends it: its thread's context is freed; nothing of the pod ran. After a {@link commit} (begun or
   * done) it does nothing: the pod is the container's then, ended by its own `terminate()`.
   */
  cancel(): Promise<void>;
}
