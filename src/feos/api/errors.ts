/**
 * FeOS's errors and the one place that turns them into gRPC statuses (STYLE.md 5.8). Handlers throw
 * `FeosError` with the seed's code, or a layer's own error that says what went wrong in its terms (the
 * microVM layer's MicroVmError, src/feos/microvm/errors.ts), mapped here by its `kind`; anything else
 * becomes UNKNOWN with its message, and no stack trace crosses the wire.
 */
import { status as GrpcStatus, Metadata, type ServiceError } from '@grpc/grpc-js';
import { BinaryReader, BinaryWriter } from '@bufbuild/protobuf/wire';

/** The gRPC status codes FeOS uses, by name. */
export const Code = {
  OK: GrpcStatus.OK,
  CANCELLED: GrpcStatus.CANCELLED,
  UNKNOWN: GrpcStatus.UNKNOWN,
  INVALID_ARGUMENT: GrpcStatus.INVALID_ARGUMENT,
  DEADLINE_EXCEEDED: GrpcStatus.DEADLINE_EXCEEDED,
  NOT_FOUND: GrpcStatus.NOT_FOUND,
  ALREADY_EXISTS: GrpcStatus.ALREADY_EXISTS,
  RESOURCE_EXHAUSTED: GrpcStatus.RESOURCE_EXHAUSTED,
  FAILED_PRECONDITION: GrpcStatus.FAILED_PRECONDITION,
  ABORTED: GrpcStatus.ABORTED,
  DATA_LOSS: GrpcStatus.DATA_LOSS,
  UNIMPLEMENTED: GrpcStatus.UNIMPLEMENTED,
  INTERNAL: GrpcStatus.INTERNAL,
  UNAVAILABLE: GrpcStatus.UNAVAILABLE,
} as const;
export type CodeName = keyof typeof Code;

/** The type URL of the VmBusy marker (seed 000, "Lifecycle"). */
export const VM_BUSY_TYPE_URL = 'type.googleapis.com/feos.microvm.v1.VmBusy';

/**
 * An error with a gRPC code, a message that names the step, and an optional `busy` marker.
 * @example throw new FeosError('NOT_FOUND', `pod ${id} not found`)
 */
export class FeosError extends Error {
  readonly code: CodeName;
  /** Carries the VmBusy status detail: the VM is busy, the call changed nothing. */
  readonly busy: boolean;
  constructor(code: CodeName, message: string, options?: { cause?: unknown; busy?: boolean }) {
    super(message, { cause: options?.cause });
    this.name = 'FeosError';
    this.code = code;
    this.busy = options?.busy ?? false;
  }
}

/** UNAVAILABLE "the VM is busy: <why>" with the VmBusy detail. */
export function vmBusy(why: string): FeosError {
  return new FeosError('UNAVAILABLE', `the VM is busy: ${why}`, { busy: true });
}

/** The message of any caught value. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The gRPC codes of the microVM layer's errors, by their `kind` (src/feos/microvm/errors.ts); a busy
 * microVM's error carries the VmBusy detail besides.
 */
const MICROVM_KIND_CODES: Readonly<Record<string, CodeName>> = {
  'not-found': 'NOT_FOUND',
  'bad-state': 'FAILED_PRECONDITION',
  busy: 'UNAVAILABLE',
  invalid: 'INVALID_ARGUMENT',
  'vmm-failed': 'INTERNAL',
};

/**
 * An error as the API answers it: a FeosError as it is; the microVM layer's MicroVmError (marked by
 * `layer: "microvm"`; this layer does not import it) as a FeosError of its kind's code, its message and,
 * when busy, the VmBusy marker; anything else undefined (UNKNOWN on the wire).
 */
export function asFeosError(err: unknown): FeosError | undefined {
  if (err instanceof FeosError) return err;
  if (!(err instanceof Error)) return undefined;
  const e = err as Error & { layer?: unknown; kind?: unknown };
  const code = e.layer === 'microvm' && typeof e.kind === 'string' ? MICROVM_KIND_CODES[e.kind] : undefined;
  return code ? new FeosError(code, e.message, { cause: err, busy: e.kind === 'busy' }) : undefined;
}

/** Encodes a google.rpc.Status {code, message, details: [Any{type_url}]} by hand (no google/rpc proto here). */
function encodeRpcStatus(code: number, message: string, typeUrls: string[]): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, 0).int32(code);
  w.tag(2, 2).string(message);
  for (const url of typeUrls) {
    const any = new BinaryWriter();
    any.tag(1, 2).string(url);
    w.tag(3, 2).bytes(any.finish());
  }
  return w.finish();
}

/** The type URLs of a grpc-status-details-bin's details. */
export function detailTypeUrls(bin: Uint8Array): string[] {
  const urls: string[] = [];
  const r = new BinaryReader(bin);
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 3 && wire === 2) {
      const any = new BinaryReader(r.bytes());
      while (any.pos < any.len) {
        const [f, w] = any.tag();
        if (f === 1 && w === 2) urls.push(any.string());
        else any.skip(w);
      }
    } else r.skip(wire);
  }
  return urls;
}

/**
 * What a handler's error becomes on the wire: FeosError keeps its code and message (and the VmBusy
 * detail), a layer's own error gets its kind's code ({@link asFeosError}), anything else is UNKNOWN
 * with its message.
 */
export function toGrpcStatus(thrown: unknown): Partial<ServiceError> & { code: number; details: string } {
  const err = asFeosError(thrown);
  if (err) {
    const metadata = new Metadata();
    if (err.busy) {
      metadata.set('grpc-status-details-bin', Buffer.from(encodeRpcStatus(Code[err.code], err.message, [VM_BUSY_TYPE_URL])));
    }
    return { code: Code[err.code], details: err.message, metadata };
  }
  return { code: Code.UNKNOWN, details: errorMessage(thrown) };
}

/** Whether a client-side error carries the VmBusy marker. */
export function isVmBusy(err: unknown): boolean {
  const md = (err as { metadata?: Metadata }).metadata;
  const bin = md?.get('grpc-status-details-bin')[0];
  if (!bin || typeof bin === 'string') return false;
  try {
    return detailTypeUrls(bin).includes(VM_BUSY_TYPE_URL);
  } catch {
    return false;
  }
}

/** The name of a numeric gRPC code ("NOT_FOUND"), for messages and feosctl. */
export function codeName(code: number): string {
  for (const [name, value] of Object.entries(GrpcStatus)) if (value === code) return name;
  return `CODE_${code}`;
}
