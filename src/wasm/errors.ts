/**
 * Errors of the pod runtime. Each carries a `code` that callers branch on (the kubelet maps them to
 * HTTP statuses and container states); the message names the cause in the user's terms.
 */

/** Why a module was refused (pod-abi.md: "refuse what cannot run with a message that names the cause"). */
export type ModuleErrorCode =
  | 'NotWasm' // not a WebAssembly binary (bad magic or version)
  | 'Malformed' // a WebAssembly binary that does not parse or does not validate
  | 'Unsupported' // valid, but uses what the runtime cannot run or snapshot (shared or 64-bit memory, several memories)
  | 'UnknownImport' // an import the node does not provide (`unknown import k32.foo`)
  | 'ImportType' // a k32 import with the wrong signature
  | 'ExportType' // an ABI export with the wrong signature
  | 'NoMemory' // no `memory` export where the ABI needs one
  | 'MissingExport' // k32_handle or k32_event without k32_alloc, or no ABI export at all
  | 'MemoryAboveLimit'; // the module's initial memory is above the pod's memory limit

/**
 * A module that cannot run as a pod.
 * @example
 * try { await loadModule(bytes) } catch (e) { if (e instanceof ModuleError && e.code === 'UnknownImport') ... }
 */
export class ModuleError extends Error {
  readonly code: ModuleErrorCode;
  constructor(code: ModuleErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ModuleError';
    this.code = code;
  }
}

/** Why a call into a pod did not give a result. */
export type PodCallErrorCode =
  | 'Frozen' // the pod is frozen: answer 503 with Retry-After: 1
  | 'NotRunning' // the pod has not started or has ended: 503
  | 'NoMemory' // k32_alloc returned 0: 503
  | 'Trap' // the call trapped: the container ended with reason Trap; answer 502
  | 'BadResponse' // k32_handle's response does not parse: 502
  | 'NotHandled' // the module does not export the function called (k32_handle for a request): 404/501
  | 'Aborted'; // the caller's signal aborted the wait; the call itself may still be running

/** A call into a pod that gave no result. */
export class PodCallError extends Error {
  readonly code: PodCallErrorCode;
  constructor(code: PodCallErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'PodCallError';
    this.code = code;
  }
}

/**
 * A freeze, snapshot or thaw that could not be done. `blockers` holds the seed's exact blocker
 * texts ("What keeps a pod from moving") when the cause is one.
 */
export type PodStateErrorCode =
  | 'NotMovable' // blockers found on the node: HTTP 409
  | 'Timeout' // the current call outlasted the freeze timeout: HTTP 504; the pod keeps running
  | 'NotFrozen' // snapshot or thaw of a pod that is not frozen: HTTP 404 for thaw
  | 'NotRunning'; // the pod has ended

/** A state change refused; see {@link PodStateErrorCode}. */
export class PodStateError extends Error {
  readonly code: PodStateErrorCode;
  readonly blockers: string[];
  constructor(code: PodStateErrorCode, message: string, blockers: string[] = [], options?: ErrorOptions) {
    super(message, options);
    this.name = 'PodStateError';
    this.code = code;
    this.blockers = blockers;
  }
}

/**
 * A pod that could not start: `reason` is the container's termination reason (`RestoreError` for a
 * snapshot that was refused, with the seed's message "cannot restore the snapshot: ...", `Trap`
 * when k32_init or k32_restored trapped, `Error` otherwise).
 */
export class PodStartError extends Error {
  readonly reason: 'RestoreError' | 'Trap' | 'Error';
  constructor(reason: 'RestoreError' | 'Trap' | 'Error', message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'PodStartError';
    this.reason = reason;
  }
}

/** The message of a caught value (`unknown`). */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
