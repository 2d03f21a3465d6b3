/**
 * A node's API through the cluster (docs/feos/fleet.md, "Through the cluster"): the API server hands
 * over the socket of an upgraded node proxy request (`Upgrade: feos-tunnel/1`, authorized as the node
 * proxy is); it carries HTTP/2 (feosctl's grpc-js client), and every stream of it is forwarded onto a
 * stream of the node's node connection: the request headers and body, the answer's headers, body and
 * trailers (or a trailers-only answer), and a reset either way. A call for a node without a node
 * connection with this instance answers UNAVAILABLE, as gRPC statuses do.
 */
import http2 from 'node:http2';
import { Duplex } from 'node:stream';

/**
 * A `grpc-message` value as the gRPC wire spells it: UTF-8, with `%` and the bytes outside 0x20-0x7E
 * percent-encoded (encodeURIComponent would encode `?` and the like, which clients show as `%3F`).
 */
function grpcMessage(message: string): string {
  let out = '';
  for (const b of Buffer.from(message, 'utf8')) out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}

const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'host', 'http2-settings']);

function copy(h: http2.IncomingHttpHeaders | http2.IncomingHttpHeaders, keepPseudo: string[]): http2.OutgoingHttpHeaders {
  const out: http2.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || CONNECTION_HEADERS.has(k)) continue;
    if (k.startsWith(':') && !keepPseudo.includes(k)) continue;
    out[k] = v;
  }
  return out;
}

function grpcError(stream: http2.ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.closed) return;
  if (!stream.headersSent) {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': grpcMessage(message) }, { endStream: true });
  } else stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
}

/** Forwards one stream onto the node's session. */
function forward(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, node: string, session: http2.ClientHttp2Session | undefined): void {
  stream.on('error', () => {});
  if (!session || session.closed || session.destroyed) {
    stream.resume();
    grpcError(stream, 14, `node ${node} has no node connection with this control plane (is its feosd running and joined?)`);
    return;
  }
  let up: http2.ClientHttp2Stream;
  try {
    up = session.request(copy(headers, [':method', ':path', ':scheme', ':authority']));
  } catch (err: unknown) {
    stream.resume();
    grpcError(stream, 14, `node ${node}'s node connection: ${err instanceof Error ? err.message : String(err)}`);
    return;
  }
  up.on('error', () => {});
  let trailers: http2.IncomingHttpHeaders | undefined;
  let done = false;
  up.on('response', (h, flags) => {
    const status = Number(h[':status'] ?? 200);
    const out = { ...copy(h, []), ':status': status };
    if ((flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0) {
      stream.respond(out, { endStream: true });
      done = true;
      return;
    }
    stream.respond(out, { waitForTrailers: true });
    up.pipe(stream);
  });
  up.on('trailers', (t) => {
    trailers = t;
  });
  stream.on('wantTrailers', () => {
    done = true;
    if (trailers) stream.sendTrailers(copy(trailers, []));
    else stream.sendTrailers({ 'grpc-status': '14', 'grpc-message': grpcMessage(`node ${node} ended the call without a status`) });
  });
  up.on('close', () => {
    if (done) return;
    // The node reset the stream or the node connection went (GOAWAY, closed).
    if (!stream.headersSent) grpcError(stream, 14, `node ${node}'s node connection ended the call (RST_STREAM ${up.rstCode ?? '?'})`);
    else if (!stream.closed && !stream.writableEnded) stream.close(up.rstCode ?? http2.constants.NGHTTP2_INTERNAL_ERROR);
  });
  stream.on('close', () => {
    // The caller reset the stream (cancelled) or went: so does the node's.
    if (!up.closed && !up.destroyed) up.close(http2.constants.NGHTTP2_CANCEL);
  });
  stream.pipe(up);
}

/** A duplex over `socket` without its TLS properties (alpnProtocol), with backpressure both ways. */
function plainDuplex(socket: Duplex): Duplex {
  const d = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      socket.write(chunk, cb);
    },
    final(cb) {
      socket.end();
      cb();
    },
    destroy(err, cb) {
      socket.destroy();
      cb(err);
    },
  });
  socket.on('data', (c: Buffer) => {
    if (!d.push(c)) socket.pause();
  });
  socket.on('end', () => d.push(null));
  socket.on('close', () => d.destroy());
  return d;
}

/**
 * Serves HTTP/2 on a tunnel's socket, forwarding every stream to `session()`, the node's newest node
 * connection at the time of the stream.
 * @returns a function that closes the tunnel
 */
export function serveTunnel(socket: Duplex, head: Buffer, node: string, session: () => http2.ClientHttp2Session | undefined): () => void {
  if (head.length > 0) socket.unshift(head);
  const server = http2.createServer({ settings: { maxConcurrentStreams: 1024 } });
  let h2: http2.ServerHttp2Session | undefined;
  server.on('session', (s) => {
    h2 = s;
    s.on('error', () => {});
  });
  server.on('stream', (stream, headers) => forward(stream as http2.ServerHttp2Stream, headers, node, session()));
  // Not the socket itself: the API server's TLS socket has no ALPN h2 (its client asked for HTTP/1.1),
  // and an HTTP/2 server hands such a socket to HTTP/1 (or drops it). A plain duplex over it has none.
  server.emit('connection', plainDuplex(socket));
  return () => {
    h2?.destroy();
    socket.destroy();
  };
}
