/**
 * The network layer's one error class. Its `code` is the gRPC status the seed names for the
 * failure; feosd's API maps it with {@link networkErrorToGrpc} (or its own `toGrpcStatus`, by `code`).
 */
import { errorMessage } from '../api/index.ts';
import { status as GrpcStatus } from '@grpc/grpc-js';

/** The gRPC status codes the network layer raises, by name. */
export type NetworkErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'FAILED_PRECONDITION'
  | 'RESOURCE_EXHAUSTED'
  | 'UNAVAILABLE'
  | 'INTERNAL';

/**
 * A failure of the network layer with the gRPC code it maps to; `message` is for the user and
 * names the step ("pod-ab12cd34ef5: ip link set up failed: ..."), `cause` keeps the original.
 */
export class NetworkError extends Error {
  override readonly name = 'NetworkError';
  readonly code: NetworkErrorCode;
  constructor(code: NetworkErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** The message of any caught value: FeOS's one (src/feos/api). */
export { errorMessage };

/**
 * What a caught value becomes on the wire: a NetworkError its code and message, a RangeError
 * INVALID_ARGUMENT, anything else UNKNOWN with its message (never a stack).
 */
export function networkErrorToGrpc(err: unknown): { code: GrpcStatus; details: string } {
  if (err instanceof NetworkError) return { code: GrpcStatus[err.code], details: err.message };
  if (err instanceof RangeError) return { code: GrpcStatus.INVALID_ARGUMENT, details: err.message };
  return { code: GrpcStatus.UNKNOWN, details: errorMessage(err) };
}
