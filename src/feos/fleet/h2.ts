/**
 * gRPC unary calls over an HTTP/2 session on a socket feosd dialed and checked itself (tls.ts): the
 * uplink's and the join's client. grpc-js's client dials its own sockets, on which the join's pin
 * cannot be checked before the token goes out; so the few unary calls of the uplink are made here, with
 * the gRPC wire format (length-prefixed messages, `grpc-status` trailers) and pings of their own.
 */
import http2 from 'node:http2';
import type { TLSSocket } from 'node:tls';
import { create, fromBinary, toBinary, type DescMessage, type DescService, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';

/** A call's failure: its gRPC status code (grpc-js's `status` numbers) and message. */
export class GrpcCallError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/** gRPC codes used here. */
export const Code = { CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, ALREADY_EXISTS: 6, PERMISSION_DENIED: 7, UNAVAILABLE: 14, UNAUTHENTICATED: 16 } as const;

/** How often a session pings, and how long an answer may take before the session is dropped (ms). */
export const PING_EVERY_MS = 10_000;
export const PING_TIMEOUT_MS = 10_000;

/**
 * An HTTP/2 client session on a checked TLS socket, pinging every 10 s and destroyed when a ping
 * stays unanswered for 10 s (the user timeout's stand-in, tls.ts).
 */
export function clientSession(socket: TLSSocket, authority: string): http2.ClientHttp2Session {
  const session = http2.connect(`https://${authority}`, { createConnection: () => socket });
  session.on('error', () => {});
  const pinger = setInterval(() => {
    if (session.destroyed || session.closed) return;
    const timer = setTimeout(() => session.destroy(new Error('the control plane did not answer a ping within 10 s')), PING_TIMEOUT_MS);
    try {
      session.ping(() => clearTimeout(timer));
    } catch {
      clearTimeout(timer);
    }
  }, PING_EVERY_MS);
  pinger.unref();
  session.once('close', () => clearInterval(pinger));
  return session;
}

/**
 * One unary call of `service`'s method `name` on `session`.
 * @throws GrpcCallError with the server's status, UNAVAILABLE when the session or stream broke,
 *   DEADLINE_EXCEEDED after `timeoutMs`
 */
export function unaryCall<I extends DescMessage, O extends DescMessage>(
  session: http2.ClientHttp2Session,
  service: DescService,
  name: string,
  input: I,
  output: O,
  req: MessageInitShape<I>,
  timeoutMs: number,
): Promise<MessageShape<O>> {
  return new Promise((resolve, reject) => {
    const body = Buffer.from(toBinary(input, create(input, req)));
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    body.copy(frame, 5);
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request({
        ':method': 'POST',
        ':path': `/${service.typeName}/${name}`,
        'content-type': 'application/grpc',
        te: 'trailers',
        'grpc-timeout': `${Math.max(1, Math.ceil(timeoutMs))}m`,
      });
    } catch (err: unknown) {
      reject(new GrpcCallError(Code.UNAVAILABLE, `the connection is gone: ${(err as Error).message}`));
      return;
    }
    const chunks: Buffer[] = [];
    let status: string | undefined;
    let message = '';
    let done = false;
    const finish = (err?: GrpcCallError, value?: MessageShape<O>) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(value!);
    };
    const timer = setTimeout(() => {
      stream.close(http2.constants.NGHTTP2_CANCEL);
      finish(new GrpcCallError(Code.DEADLINE_EXCEEDED, `${name}: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const takeStatus = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) {
        status = String(h['grpc-status']);
        message = decodeURIComponent(String(h['grpc-message'] ?? ''));
      }
    };
    stream.on('response', (h) => {
      if (h[':status'] !== 200) {
        status ??= String(Code.UNKNOWN);
        message ||= `HTTP status ${h[':status']}`;
      }
      takeStatus(h);
    });
    stream.on('trailers', takeStatus);
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', (err) => finish(new GrpcCallError(Code.UNAVAILABLE, `${name}: ${err.message}`)));
    stream.on('close', () => {
      if (status === undefined) return finish(new GrpcCallError(Code.UNAVAILABLE, `${name}: the stream ended without a status`));
      if (status !== '0') return finish(new GrpcCallError(Number(status), message));
      const data = Buffer.concat(chunks);
      if (data.length < 5 || data.length < 5 + data.readUInt32BE(1)) return finish(new GrpcCallError(Code.UNKNOWN, `${name}: the answer holds no message`));
      try {
        finish(undefined, fromBinary(output, data.subarray(5, 5 + data.readUInt32BE(1))));
      } catch (err: unknown) {
        finish(new GrpcCallError(Code.UNKNOWN, `${name}: the answer does not parse: ${(err as Error).message}`));
      }
    });
    stream.end(frame);
  });
}
