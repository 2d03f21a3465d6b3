/**
 * The gRPC wire protocol over one Node `http2` session, unary and streaming calls: the guest channel
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
 * @param streaming paths that serveStreams answers (left alone here)
 */
export function serveUnary(
  session: http2.ServerHttp2Session,
  handlers: ReadonlyMap<string, UnaryHandler>,
  streaming: ReadonlySet<string> = new Set(),
): void {
  session.on('stream', (stream, headers) => {
    const path = String(headers[':path'] ?? '');
    if (streaming.has(path)) return;
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

/** Reads length-prefixed messages out of a byte stream that arrives in arbitrary chunks. */
export class FrameReader {
  #buf: Buffer = Buffer.alloc(0);

  /**
   * Takes a chunk; returns the messages it completed.
   * @throws GrpcError UNIMPLEMENTED for a compressed message
   */
  push(chunk: Buffer): Uint8Array[] {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    const out: Uint8Array[] = [];
    while (this.#buf.length >= 5) {
      if (this.#buf[0] !== 0) throw new GrpcError(GrpcCode.UNIMPLEMENTED, 'message frame: compressed messages are not supported');
      const len = this.#buf.readUInt32BE(1);
      if (this.#buf.length < 5 + len) break;
      out.push(this.#buf.subarray(5, 5 + len));
      this.#buf = this.#buf.subarray(5 + len);
    }
    return out;
  }

  /** Bytes of an unfinished message held. */
  get pending(): number {
    return this.#buf.length;
  }
}

/** An unbounded queue read as an async iterable; `end` finishes it (with an error to throw, or none). */
export class AsyncQueue<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  #ended = false;
  #error: unknown;
  #wake: (() => void) | undefined;

  push(item: T): void {
    if (this.#ended) return;
    this.#items.push(item);
    this.#wake?.();
  }

  end(error?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#error = error;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift()!;
        continue;
      }
      if (this.#ended) {
        if (this.#error !== undefined) throw this.#error;
        return;
      }
      await new Promise<void>((r) => {
        this.#wake = r;
      });
      this.#wake = undefined;
    }
  }
}

/**
 * A streaming handler (server, client or bidirectional streams alike): the request messages as they
 * come, `send` for each response; resolving answers OK, a thrown GrpcError its status. `signal` aborts
 * when the caller goes away.
 */
export type StreamHandler = (requests: AsyncIterable<Uint8Array>, send: (message: Uint8Array) => void, signal: AbortSignal) => Promise<void>;

/** Serves streaming calls on an HTTP/2 server session: `/<service>/<method>` looked up in `handlers`. */
export function serveStreams(session: http2.ServerHttp2Session, handlers: ReadonlyMap<string, StreamHandler>): void {
  session.on('stream', (stream, headers) => {
    const handler = handlers.get(String(headers[':path'] ?? ''));
    if (!handler) return;
    const ac = new AbortController();
    const requests = new AsyncQueue<Uint8Array>();
    const reader = new FrameReader();
    stream.on('data', (c: Buffer) => {
      try {
        for (const m of reader.push(c)) requests.push(m);
      } catch (err: unknown) {
        requests.end(err);
      }
    });
    stream.on('end', () => requests.end());
    stream.on('error', () => {});
    stream.on('close', () => {
      requests.end();
      ac.abort(new GrpcError(GrpcCode.CANCELLED, 'the caller went away'));
    });
    stream.respond({ ':status': 200, 'content-type': 'application/grpc+proto' }, { waitForTrailers: true });
    let status: Record<string, string> = { 'grpc-status': '0' };
    stream.on('wantTrailers', () => stream.sendTrailers(status));
    const send = (m: Uint8Array): void => {
      if (!stream.destroyed && !stream.writableEnded) stream.write(frameMessage(m));
    };
    handler(requests, send, ac.signal).then(
      () => {
        if (!stream.destroyed) stream.end();
      },
      (err: unknown) => {
        const code = err instanceof GrpcError ? err.code : GrpcCode.UNKNOWN;
        status = { 'grpc-status': String(code), 'grpc-message': encodeURIComponent(err instanceof Error ? err.message : String(err)) };
        if (!stream.destroyed) stream.end();
      },
    );
  });
}

/** A streaming call in flight (client side). */
export interface StreamCall {
  /** Sends one request message. */
  send(message: Uint8Array): void;
  /** Ends the requests (half-close). */
  end(): void;
  /** The response messages; ends with the call, throwing its status when it is not OK. */
  messages: AsyncIterable<Uint8Array>;
  /** Cancels the call. */
  cancel(): void;
}

/**
 * Opens a streaming call on a client session (no deadline: a stream lasts as long as it lasts).
 * @throws GrpcError UNAVAILABLE when the session cannot open a stream
 */
export function streamCall(session: http2.ClientHttp2Session, path: string): StreamCall {
  let stream: http2.ClientHttp2Stream;
  try {
    stream = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc+proto', te: 'trailers' });
  } catch (err: unknown) {
    throw new GrpcError(GrpcCode.UNAVAILABLE, `${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const out = new AsyncQueue<Uint8Array>();
  const reader = new FrameReader();
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
  stream.on('data', (c: Buffer) => {
    try {
      for (const m of reader.push(c)) out.push(m);
    } catch (err: unknown) {
      out.end(err);
    }
  });
  stream.on('error', (err: Error) => out.end(new GrpcError(GrpcCode.UNAVAILABLE, `${path}: ${err.message}`, { cause: err })));
  stream.on('close', () => {
    if (status === undefined) out.end(new GrpcError(GrpcCode.UNAVAILABLE, `${path}: the stream closed without a status`));
    else if (status !== GrpcCode.OK) out.end(new GrpcError(status, message));
    else out.end();
  });
  return {
    send: (m) => {
      if (!stream.destroyed && !stream.writableEnded) stream.write(frameMessage(m));
    },
    end: () => {
      if (!stream.destroyed && !stream.writableEnded) stream.end();
    },
    messages: out,
    cancel: () => {
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    },
  };
}
