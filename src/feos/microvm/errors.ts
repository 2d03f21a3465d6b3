/**
 * The microVM layer's errors (seed 000, "A pod's microVM", "Lifecycle"). They say what went wrong in
 * the layer's terms; the API maps them to gRPC statuses once, by their `kind` (src/feos/api/errors.ts,
 * `asFeosError`): not-found → NOT_FOUND, bad-state → FAILED_PRECONDITION, busy → UNAVAILABLE with the
 * VmBusy detail, invalid → INVALID_ARGUMENT, vmm-failed → INTERNAL.
 */

/** What kind of failure a MicroVmError is. */
export type MicroVmErrorKind = 'not-found' | 'bad-state' | 'busy' | 'invalid' | 'vmm-failed';

/** A failure of the microVM layer: `kind` says which, `vmId` names the microVM, the message the step. */
export class MicroVmError extends Error {
  /** Marks the layer's errors for the API's mapping (which does not import this layer). */
  readonly layer = 'microvm';
  readonly kind: MicroVmErrorKind;
  readonly vmId: string;
  constructor(kind: MicroVmErrorKind, vmId: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MicroVmError';
    this.kind = kind;
    this.vmId = vmId;
  }
}

/** No microVM of this ID on the node: "microVM ID not found". */
export class MicroVmNotFoundError extends MicroVmError {
  constructor(vmId: string) {
    super('not-found', vmId, `microVM ${vmId} not found`);
    this.name = 'MicroVmNotFoundError';
  }
}

/** The call does not fit the microVM's state (resume one that is not suspended, start a suspended one, ...). */
export class MicroVmStateError extends MicroVmError {
  constructor(vmId: string, message: string) {
    super('bad-state', vmId, message);
    this.name = 'MicroVmStateError';
  }
}

/**
 * The microVM is busy: the call changed nothing and may be tried again (a snapshot not written in time,
 * the microVM runs on). The message is "the VM is busy: WHY"; the API adds the VmBusy status detail.
 */
export class MicroVmBusyError extends MicroVmError {
  constructor(vmId: string, why: string) {
    super('busy', vmId, `the VM is busy: ${why}`);
    this.name = 'MicroVmBusyError';
  }
}

/** A microVM that cannot be made as asked (a state dir too long for its unix sockets). */
export class MicroVmInvalidError extends MicroVmError {
  constructor(vmId: string, message: string) {
    super('invalid', vmId, message);
    this.name = 'MicroVmInvalidError';
  }
}

/** The VMM failed: it did not come up, a snapshot was not written or did not load, a record is missing. */
export class VmmError extends MicroVmError {
  constructor(vmId: string, message: string, options?: { cause?: unknown }) {
    super('vmm-failed', vmId, message, options);
    this.name = 'VmmError';
  }
}
