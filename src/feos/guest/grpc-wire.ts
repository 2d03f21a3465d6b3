/**
 * The gRPC wire protocol over one Node `http2` session, unary calls only: the guest channel
 * (feos.guest.v1 over the virtio-serial port) is a single byte stream that grpc-js cannot be handed,
 * so the guest agent serves and feosd calls with this small implementation of the same protocol
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): length-prefixed messages,
 * `content-type: application/grpc+proto`, `grpc-status`/`grpc-message` trailers.
 *
 * Self-contained (no imports outside node:), as the guest's initramfs carries it.
 */
import http2 from 'node:http2';

/** gRPC status codes used on the guest channel. */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

/** An error with a gRPC status code, raised by handlers and by `unaryCall`. */
export class GrpcError extends Error {
  readonly code: number;
  constructor(code: number, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GrpcError';
    this.code = code;
  }
}

/** Frames one message: a zero compression flag, its length (big-endian uint32), its bytes. */
export function frameMessage(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * Takes the one message of a unary call's body.
 * @throws GrpcError INTERNAL when the body is not exactly one uncompressed frame
 */
export function unframeMessage(body: Buffer): Uint8Array {
  if (body.length < 5) throw new GrpcError(GrpcCode.INTERNAL, `message frame: ${body.length} bytes, want at least 5`);
  if (body[0] !== 0) throw new GrpcError(GrpcCode.UNIMPLEMENTED, 'message frame: compressed messages are not supported');
  const len = body.readUInt32BE(1);
  if (body.length !== 5 + len) throw new GrpcError(GrpcCode.INTERNAL, `message frame: ${body.length - 5} bytes, header says ${len}`);
  return body.subarray(5);
}

/** A unary handler: the request's bytes in, the response's bytes out, or a thrown GrpcError. */
export type UnaryHandler = (request: Uint8Array) => Promise<Uint8Array>;

/**
 * Serves unary calls on an HTTP/2 server session: `/<service>/<method>` looked up in `handlers`.
 * Unknown methods answer UNIMPLEMENTED; errors that are not GrpcError answer UNKNOWN with their message.
 */
export function serveUnary(session: http2.ServerHttp2Session, handlers: ReadonlyMap<string, UnaryHandler>): void {
  session.on('stream', (stream, headers) => {
    const path = String(headers[':path'] ?? '');
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', () => {});
    stream.on('end', () => {
      const handler = handlers.get(path);
      const run = handler
        ? (async () => handler(unframeMessage(Buffer.concat(chunks))))()
        : Promise.reject(new GrpcError(GrpcCode.UNIMPLEMENTED, `unknown method ${path}`));
      run.then(
        (reply) => {
          if (stream.destroyed) return;
          stream.respond({ ':status': 200, 'content-type': 'application/grpc+proto' }, { waitForTrailers: true });
          stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
          stream.end(frameMessage(reply));
        },
        (err: unknown) => {
          if (stream.destroyed) return;
          const code = err instanceof GrpcError ? err.code : GrpcCode.UNKNOWN;
          const message = err instanceof Error ? err.message : String(err);
          stream.respond(
            {
              ':status': 200,
              'content-type': 'application/grpc+proto',
              'grpc-status': String(code),
              'grpc-message': encodeURIComponent(message),
            },
            { endStream: true },
          );
        },
      );
    });
  });
}

/**
 * Makes one unary call on a client session.
 * @param path `/<package>.<Service>/<Method>`
 * @param timeoutMs the call's deadline, sent as `grpc-timeout` and enforced here
 * @returns the response message's bytes
 * @throws GrpcError with the server's status, DEADLINE_EXCEEDED past `timeoutMs`, UNAVAILABLE when the session fails
 */
export function unaryCall(
  session: http2.ClientHttp2Session,
  path: string,
  request: Uint8Array,
  timeoutMs: number,
): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request({
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/grpc+proto',
        te: 'trailers',
        'grpc-timeout': `${Math.max(1, Math.ceil(timeoutMs))}m`,
      });
    } catch (err: unknown) {
      reject(new GrpcError(GrpcCode.UNAVAILABLE, `${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err }));
      return;
    }
    let settled = false;
    const finish = (err: GrpcError | undefined, value?: Uint8Array): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
        reject(err);
      } else resolve(value!);
    };
    const timer = setTimeout(
      () => finish(new GrpcError(GrpcCode.DEADLINE_EXCEEDED, `${path}: no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const chunks: Buffer[] = [];
    let status: number | undefined;
    let message = '';
    const takeStatus = (h: http2.IncomingHttpHeaders): void => {
      if (h['grpc-status'] !== undefined) {
        status = Number(h['grpc-status']);
        message = decodeURIComponent(String(h['grpc-message'] ?? ''));
      }
    };
    stream.on('response', takeStatus);
    stream.on('trailers', takeStatus);
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', (err: Error) => finish(new GrpcError(GrpcCode.UNAVAILABLE, `${path}: ${err.message}`, { cause: err })));
    stream.on('close', () => {
      if (status === undefined) {
        finish(new GrpcError(GrpcCode.UNAVAILABLE, `${path}: the stream closed without a status`));
      } else if (status !== GrpcCode.OK) {
        finish(new GrpcError(status, message));
      } else {
        try {
          finish(undefined, unframeMessage(Buffer.concat(chunks)));
        } catch (err: unknown) {
          finish(err instanceof GrpcError ? err : new GrpcError(GrpcCode.INTERNAL, String(err)));
        }
      }
    });
    stream.end(frameMessage(request));
  });
}
