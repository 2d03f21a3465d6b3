/**
 * The pod runtime: runs a Kube32 pod's WebAssembly module on a node, to the ABI of
 * `../shared/design/pod-abi.md` and the seed's "What moves", "What keeps a pod from moving",
 * "Snapshot format" and "Kubelet endpoints".
 *
 * - {@link loadModule}: check, classify and instrument a module (keeps the image SHA-256 of the original bytes).
 * - {@link PodInstance}: one container, in its own worker thread (or a shared one: dense pods): calls,
 *   ticks, events, freeze, thaw, blockers, K32S snapshot and restore, logs, exit.
 * - {@link configurePodThreads}: how many request pods share a worker thread (1 by default);
 *   {@link warmWorkerPool}, {@link drainWorkerPool}, {@link podThreadCounts}: the threads.
 * - {@link serveHttp}: the HTTP adapter of `kube32-cli dev` and the kubelet.
 * - {@link measureInterpMops}: the node's `kube32.io/interp-mops`.
 *
 * A checkpoint, as the kubelet's `POST /checkpoint` does it:
 * ```ts
 * const b = pod.blockers(); if (b.length) -> 409 NotMovable
 * await pod.freeze(timeoutMs)            // PodStateError 'Timeout' -> 504 (the pod keeps running)
 * const snap = await pod.snapshot()      // PodStateError 'NotMovable' (open file...) -> 409, after pod.thaw()
 * stream snap.chunks; leave=running -> pod.thaw()
 * ```
 */
export { loadModule } from './module.ts';
export { PodInstance } from './instance.ts';
export { warmWorkerPool, drainWorkerPool, podThreadCounts } from './pod-thread.ts';
export { configurePodThreads, MAX_PODS_PER_THREAD, podThreadSettings, type PodThreadOptions } from './pod-threads-config.ts';
export { serveHttp, servePodRequest, readRequestBody, type PodRequestOutcome } from './http.ts';
export { parseHttpResponse, type HttpResponseParts } from './http-response.ts';
export { measureInterpMops, interpKernelPath } from './interp-mops.ts';
export { ModuleError, PodCallError, PodStateError, PodStartError } from './errors.ts';
export type { ModuleErrorCode, PodCallErrorCode, PodStateErrorCode } from './errors.ts';
export { VALUE_TYPE } from './types.ts';
export type {
  ExitReason,
  ExportInfo,
  GlobalValueType,
  ImportInfo,
  LoadOptions,
  LogEntry,
  LogReadOptions,
  ModuleShape,
  PodExit,
  PodKind,
  PodModule,
  PodSnapshot,
  PodStartOptions,
  PodUsageFigures,
  PreparedRestore,
  RunningCall,
  ShapeGlobal,
  ShapeTable,
} from './types.ts';
