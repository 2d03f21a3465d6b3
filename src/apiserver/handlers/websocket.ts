/**
 * The server side of a WebSocket (RFC 6455) on an upgraded HTTP/1.1 socket, as `kubectl exec` and
 * `kubectl port-forward` (1.30 and newer) speak it: the handshake with the subprotocol chosen, masked
 * client frames read (fragments joined), unmasked frames written, pings answered with pongs, the
 * close handshake. No extension (permessage-deflate) is taken. The project's dependencies have no
 * WebSocket server (`ws` comes only under @kubernetes/client-node, without types), and this much is small.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/** The largest message taken from a client (the streams' chunks are far smaller), bytes. */
const MAX_MESSAGE = 16 << 20;

/** The subprotocols a client offers in `Sec-WebSocket-Protocol`, in its order. */
export function offeredProtocols(req: IncomingMessage): string[] {
  return String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
}

/** Whether a request asks for a WebSocket (`Upgrade: websocket`, a GET). */
export function isWebSocketUpgrade(req: IncomingMessage): boolean {
  return req.method === 'GET' && String(req.headers.upgrade ?? '').toLowerCase() === 'websocket' && typeof req.headers['sec-websocket-key'] === 'string';
}

/** An open WebSocket. */
export interface WebSocketConn {
  /** The subprotocol agreed. */
  protocol: string;
  /** Sends one binary message. */
  send(data: Uint8Array): void;
  /** Sends a close frame (`code`, `reason`) and ends the socket. */
  close(code?: number, reason?: string): void;
  /** Every binary or text message, whole. */
  onMessage(cb: (data: Buffer) => void): void;
  /** Once: the peer closed, or the socket ended or failed. */
  onClose(cb: () => void): void;
  /** Whether it is closed or closing. */
  closed(): boolean;
}

function header(opcode: number, length: number): Buffer {
  if (length < 126) return Buffer.from([0x80 | opcode, length]);
  if (length < 65536) {
    const h = Buffer.alloc(4);
    h[0] = 0x80 | opcode;
    h[1] = 126;
    h.writeUInt16BE(length, 2);
    return h;
  }
  const h = Buffer.alloc(10);
  h[0] = 0x80 | opcode;
  h[1] = 127;
  h.writeBigUInt64BE(BigInt(length), 2);
  return h;
}

/**
 * Writes the 101 (with `protocol`) on `socket` and serves the WebSocket. `head` is what came after
 * the request. The caller checked the request ({@link isWebSocketUpgrade}).
 */
export function acceptWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, protocol: string): WebSocketConn {
  const accept = createHash('sha1')
    .update(`${req.headers['sec-websocket-key']}${GUID}`)
    .digest('base64');
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\nSec-WebSocket-Protocol: ${protocol}\r\n\r\n`);
  (socket as Duplex & { setNoDelay?: (b: boolean) => void }).setNoDelay?.(true);
  const messageCbs: Array<(d: Buffer) => void> = [];
  const closeCbs: Array<() => void> = [];
  let closing = false;
  let ended = false;
  let buf: Buffer = head.length ? Buffer.from(head) : Buffer.alloc(0);
  let fragments: Buffer[] = [];
  let fragmentBytes = 0;
  const write = (opcode: number, data: Uint8Array) => {
    if (socket.destroyed || !socket.writable) return;
    socket.write(Buffer.concat([header(opcode, data.length), data]));
  };
  const end = () => {
    if (ended) return;
    ended = true;
    closing = true;
    for (const cb of closeCbs.splice(0)) cb();
  };
  const close = (code = 1000, reason = '') => {
    if (!closing) {
      closing = true;
      const r = Buffer.from(reason).subarray(0, 120);
      const p = Buffer.alloc(2 + r.length);
      p.writeUInt16BE(code, 0);
      r.copy(p, 2);
      write(0x8, p);
    }
    socket.end();
    end();
  };
  const parse = () => {
    while (buf.length >= 2) {
      const fin = (buf[0]! & 0x80) !== 0;
      const opcode = buf[0]! & 0x0f;
      const masked = (buf[1]! & 0x80) !== 0;
      let len = buf[1]! & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        const big = buf.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE)) return close(1009, 'message too big');
        len = Number(big);
        off = 10;
      }
      if (!masked) return close(1002, 'a client frame must be masked');
      if (len > MAX_MESSAGE) return close(1009, 'message too big');
      if (buf.length < off + 4 + len) return;
      const mask = buf.subarray(off, off + 4);
      const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i & 3]!;
      buf = buf.subarray(off + 4 + len);
      if (opcode === 0x8) {
        // The peer's close: answered with the same code, then the socket ends.
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1000;
        return close(code === 1005 || code === 1006 ? 1000 : code);
      }
      if (opcode === 0x9) {
        write(0xa, payload);
        continue;
      }
      if (opcode === 0xa) continue;
      if (opcode === 0x1 || opcode === 0x2) {
        fragments = [payload];
        fragmentBytes = payload.length;
      } else if (opcode === 0x0) {
        fragments.push(payload);
        fragmentBytes += payload.length;
        if (fragmentBytes > MAX_MESSAGE) return close(1009, 'message too big');
      } else return close(1002, `unknown opcode ${opcode}`);
      if (fin) {
        const msg = fragments.length === 1 ? fragments[0]! : Buffer.concat(fragments);
        fragments = [];
        fragmentBytes = 0;
        if (!closing) for (const cb of messageCbs) cb(msg);
      }
    }
  };
  socket.on('data', (d: Buffer) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    parse();
  });
  socket.on('error', () => {
    socket.destroy();
    end();
  });
  socket.on('close', end);
  socket.on('end', () => {
    socket.end();
    end();
  });
  if (buf.length) queueMicrotask(parse);
  return {
    protocol,
    send: (data) => {
      if (!closing) write(0x2, data);
    },
    close,
    onMessage: (cb) => {
      messageCbs.push(cb);
    },
    onClose: (cb) => {
      if (ended) queueMicrotask(cb);
      else closeCbs.push(cb);
    },
    closed: () => closing,
  };
}
