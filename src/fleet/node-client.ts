/**
 * The control plane's gRPC client of a node's API over a node connection (docs/feos/fleet.md, "Node
 * connections"): the node dialed the connection (ALPN `feos-node/1`) and is the HTTP/2 server on it, so
 * the control plane is an HTTP/2 client over a socket it *accepted*. grpc-js clients cannot take a
 * socket (they dial their own), and @connectrpc/connect-node is not among our dependencies, so this is
 * a small gRPC caller over Node's `http2` with protobuf-es messages: unary and server-streaming calls,
 * length-prefixed messages, the status from the trailers (or a trailers-only answer), `grpc-timeout`
 * from the deadline, and an RST_STREAM(CANCEL) for a call given up. No compression is offered.
 */
import http2 from 'node:http2';
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';

/** The gRPC status codes this file names. */
export const GrpcCode = { OK: 0, CANCELLED: 1, UNKNOWN: 2, DEADLINE_EXCEEDED: 4, INTERNAL: 13, UNAVAILABLE: 14 } as const;

/** A call that ended with a status other than OK: `code` is the gRPC status code, `details` its message. */
export class GrpcCallError extends Error {
  readonly code: number;
  readonly details: string;
  constructor(code: number, details: string) {
    super(`${code}: ${details}`);
    this.name = 'GrpcCallError';
    this.code = code;
    this.details = details;
  }
}

/** Options of a call. */
export interface CallOptions {
  /** The call's deadline, ms from now; sent as `grpc-timeout`. @default none */
  timeoutMs?: number;
  /** Aborts the call (RST_STREAM CANCEL); the call then fails with CANCELLED. */
  signal?: AbortSignal;
}

/** A method of a protobuf-es service (`PodService.method.listPods`) with its message types. */
type Method<I extends DescMessage, O extends DescMessage> = DescMethod & { input: I; output: O };

function frame(bytes: Uint8Array): Buffer {
  const b = Buffer.alloc(5 + bytes.length);
  b.writeUInt32BE(bytes.length, 1);
  b.set(bytes, 5);
  return b;
}

/**
 * One call on `session`: writes `request`, hands every answered message to `onMessage`, and resolves
 * once the status is OK.
 * @throws GrpcCallError with the call's status: the node's, UNAVAILABLE when the connection or the
 *   stream broke, DEADLINE_EXCEEDED past `timeoutMs`, CANCELLED when aborted, INTERNAL for a framing error
 */
function call(session: http2.ClientHttp2Session, method: DescMethod, request: Uint8Array, onMessage: (bytes: Uint8Array) => void, opts: CallOptions): Promise<void> {
  return open(session, method, onMessage, opts, (stream) => stream.end(frame(request)));
}

/**
 * Opens a call of `method` on `session`: `send` gets the request stream (to write length-prefixed
 * messages and end it), every answered message goes to `onMessage`; resolves once the status is OK.
 * @throws GrpcCallError as {@link call} says
 */
function open(session: http2.ClientHttp2Session, method: DescMethod, onMessage: (bytes: Uint8Array) => void, opts: CallOptions, send: (stream: http2.ClientHttp2Stream) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    if (session.closed || session.destroyed) {
      reject(new GrpcCallError(GrpcCode.UNAVAILABLE, 'the node connection is closed'));
      return;
    }
    const headers: http2.OutgoingHttpHeaders = {
      ':method': 'POST',
      ':path': `/${method.parent.typeName}/${method.name}`,
      'content-type': 'application/grpc+proto',
      te: 'trailers',
      'user-agent': 'kube32-fleet/0.1',
    };
    if (opts.timeoutMs !== undefined) headers['grpc-timeout'] = `${Math.max(1, Math.ceil(opts.timeoutMs))}m`;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: false });
    } catch (err: unknown) {
      reject(new GrpcCallError(GrpcCode.UNAVAILABLE, `the node connection: ${err instanceof Error ? err.message : String(err)}`));
      return;
    }
    let settled = false;
    const finish = (err?: GrpcCallError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      if (err) {
        reject(err);
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      } else resolve();
    };
    const timer = opts.timeoutMs !== undefined ? setTimeout(() => finish(new GrpcCallError(GrpcCode.DEADLINE_EXCEEDED, `no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs) : undefined;
    const onAbort = () => finish(new GrpcCallError(GrpcCode.CANCELLED, 'the call was cancelled'));
    opts.signal?.addEventListener('abort', onAbort);
    let buf: Buffer = Buffer.alloc(0);
    const status = (h: http2.IncomingHttpHeaders): boolean => {
      const s = h['grpc-status'];
      if (s === undefined) return false;
      const codeNum = Number(s);
      let details = String(h['grpc-message'] ?? '');
      try {
        details = decodeURIComponent(details);
      } catch {
        // kept as sent
      }
      finish(codeNum === 0 ? undefined : new GrpcCallError(codeNum, details));
      return true;
    };
    stream.on('response', (h) => {
      const st = Number(h[':status']);
      if (st !== 200 && !status(h)) finish(new GrpcCallError(GrpcCode.UNKNOWN, `the node answered HTTP ${st}`));
      else status(h);
    });
    stream.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      while (buf.length >= 5) {
        const len = buf.readUInt32BE(1);
        if (buf[0] !== 0) return finish(new GrpcCallError(GrpcCode.INTERNAL, 'the node sent a compressed message; none was offered'));
        if (buf.length < 5 + len) break;
        const msg = buf.subarray(5, 5 + len);
        buf = buf.subarray(5 + len);
        if (!settled) onMessage(msg);
      }
    });
    stream.on('trailers', (h) => {
      status(h);
    });
    stream.on('close', () => finish(new GrpcCallError(GrpcCode.UNAVAILABLE, `the stream ended without a status (RST_STREAM ${stream.rstCode ?? '?'})`)));
    stream.on('error', (err: Error) => finish(new GrpcCallError(GrpcCode.UNAVAILABLE, `the node connection: ${err.message}`)));
    send(stream);
  });
}

/**
 * A unary call of `method` on a node connection.
 * @example await unary(session, PodService.method.listPods, {}, { timeoutMs: 10_000 })
 * @throws GrpcCallError as {@link call} says
 */
export async function unary<I extends DescMessage, O extends DescMessage>(
  session: http2.ClientHttp2Session,
  method: Method<I, O>,
  req: MessageInitShape<I>,
  opts: CallOptions = {},
): Promise<MessageShape<O>> {
  let answer: MessageShape<O> | undefined;
  await call(session, method, toBinary(method.input, create(method.input, req)), (b) => {
    answer = fromBinary(method.output, b);
  }, opts);
  if (answer === undefined) throw new GrpcCallError(GrpcCode.INTERNAL, 'the node answered OK without a message');
  return answer;
}

/**
 * A server-streaming call: `onMessage` sees every answer until the status.
 * @throws GrpcCallError as {@link call} says (CANCELLED once `opts.signal` aborts)
 */
export async function serverStream<I extends DescMessage, O extends DescMessage>(
  session: http2.ClientHttp2Session,
  method: Method<I, O>,
  req: MessageInitShape<I>,
  onMessage: (msg: MessageShape<O>) => void,
  opts: CallOptions = {},
): Promise<void> {
  await call(session, method, toBinary(method.input, create(method.input, req)), (b) => onMessage(fromBinary(method.output, b)), opts);
}

/** A bidirectional call in flight ({@link bidiStream}). */
export interface BidiCall<I extends DescMessage> {
  /** Sends one request message (ignored once the call ended). */
  write(msg: MessageInitShape<I>): void;
  /** Ends the requests (half-close); the answers go on until the status. */
  end(): void;
  /** Gives the call up (RST_STREAM CANCEL): `done` fails with CANCELLED. */
  cancel(): void;
  /** Resolves once the status is OK. @throws GrpcCallError as {@link call} says */
  done: Promise<void>;
}

/**
 * A bidirectional streaming call (ExecPod, PortForwardPod): requests written as they come, every
 * answer to `onMessage` until the status.
 */
export function bidiStream<I extends DescMessage, O extends DescMessage>(
  session: http2.ClientHttp2Session,
  method: Method<I, O>,
  onMessage: (msg: MessageShape<O>) => void,
  opts: CallOptions = {},
): BidiCall<I> {
  const abort = new AbortController();
  const outer = opts.signal;
  if (outer) outer.addEventListener('abort', () => abort.abort(), { once: true });
  let stream: http2.ClientHttp2Stream | undefined;
  let ended = false;
  const pending: Buffer[] = [];
  const done = open(session, method, (b) => onMessage(fromBinary(method.output, b)), { ...opts, signal: abort.signal }, (s) => {
    stream = s;
    for (const p of pending.splice(0)) s.write(p);
    if (ended) s.end();
  });
  done.catch(() => {});
  return {
    write(msg) {
      const b = frame(toBinary(method.input, create(method.input, msg)));
      if (ended) return;
      if (stream) {
        if (!stream.destroyed && stream.writable) stream.write(b);
      } else pending.push(b);
    },
    end() {
      if (ended) return;
      ended = true;
      if (stream && !stream.destroyed && stream.writable) stream.end();
    },
    cancel: () => abort.abort(),
    done,
  };
}
