/**
 * The server side of SPDY/3.1 framing (draft-mbelshe-httpbis-spdy-00, as moby/spdystream speaks it:
 * no flow control) for `kubectl port-forward`, which carries SPDY inside a WebSocket
 * (`SPDY/3.1+portforward.k8s.io`, kubectl 1.31 and newer). Streams the client opens (SYN_STREAM) are
 * replied to at once (SYN_REPLY with no headers) and handed over with their headers; DATA both ways,
 * FIN, RST_STREAM, PING answered, GOAWAY. The client's header blocks are inflated with one zlib
 * context and the SPDY dictionary; ours are stored (uncompressed) deflate blocks in a zlib stream of
 * our own, which any inflater reads.
 */
import zlib from 'node:zlib';

/** The SPDY/3 header dictionary (1423 bytes), base64. */
const DICTIONARY = Buffer.from(
  'AAAAB29wdGlvbnMAAAAEaGVhZAAAAARwb3N0AAAAA3B1dAAAAAZkZWxldGUAAAAFdHJhY2UAAAAGYWNjZXB0AAAADmFjY2VwdC1jaGFyc2V0AAAAD2FjY2VwdC1lbmNvZGluZwAAAA9hY2NlcHQtbGFuZ3VhZ2UAAAANYWNjZXB0LXJhbmdlcwAAAANhZ2UAAAAFYWxsb3cAAAANYXV0aG9yaXphdGlvbgAAAA1jYWNoZS1jb250cm9sAAAACmNvbm5lY3Rpb24AAAAMY29udGVudC1iYXNlAAAAEGNvbnRlbnQtZW5jb2RpbmcAAAAQY29udGVudC1sYW5ndWFnZQAAAA5jb250ZW50LWxlbmd0aAAAABBjb250ZW50LWxvY2F0aW9uAAAAC2NvbnRlbnQtbWQ1AAAADWNvbnRlbnQtcmFuZ2UAAAAMY29udGVudC10eXBlAAAABGRhdGUAAAAEZXRhZwAAAAZleHBlY3QAAAAHZXhwaXJlcwAAAARmcm9tAAAABGhvc3QAAAAIaWYtbWF0Y2gAAAARaWYtbW9kaWZpZWQtc2luY2UAAAANaWYtbm9uZS1tYXRjaAAAAAhpZi1yYW5nZQAAABNpZi11bm1vZGlmaWVkLXNpbmNlAAAADWxhc3QtbW9kaWZpZWQAAAAIbG9jYXRpb24AAAAMbWF4LWZvcndhcmRzAAAABnByYWdtYQAAABJwcm94eS1hdXRoZW50aWNhdGUAAAATcHJveHktYXV0aG9yaXphdGlvbgAAAAVyYW5nZQAAAAdyZWZlcmVyAAAAC3JldHJ5LWFmdGVyAAAABnNlcnZlcgAAAAJ0ZQAAAAd0cmFpbGVyAAAAEXRyYW5zZmVyLWVuY29kaW5nAAAAB3VwZ3JhZGUAAAAKdXNlci1hZ2VudAAAAAR2YXJ5AAAAA3ZpYQAAAAd3YXJuaW5nAAAAEHd3dy1hdXRoZW50aWNhdGUAAAAGbWV0aG9kAAAAA2dldAAAAAZzdGF0dXMAAAAGMjAwIE9LAAAAB3ZlcnNpb24AAAAISFRUUC8xLjEAAAADdXJsAAAABnB1YmxpYwAAAApzZXQtY29va2llAAAACmtlZXAtYWxpdmUAAAAGb3JpZ2luMTAwMTAxMjAxMjAyMjA1MjA2MzAwMzAyMzAzMzA0MzA1MzA2MzA3NDAyNDA1NDA2NDA3NDA4NDA5NDEwNDExNDEyNDEzNDE0NDE1NDE2NDE3NTAyNTA0NTA1MjAzIE5vbi1BdXRob3JpdGF0aXZlIEluZm9ybWF0aW9uMjA0IE5vIENvbnRlbnQzMDEgTW92ZWQgUGVybWFuZW50bHk0MDAgQmFkIFJlcXVlc3Q0MDEgVW5hdXRob3JpemVkNDAzIEZvcmJpZGRlbjQwNCBOb3QgRm91bmQ1MDAgSW50ZXJuYWwgU2VydmVyIEVycm9yNTAxIE5vdCBJbXBsZW1lbnRlZDUwMyBTZXJ2aWNlIFVuYXZhaWxhYmxlSmFuIEZlYiBNYXIgQXByIE1heSBKdW4gSnVsIEF1ZyBTZXB0IE9jdCBOb3YgRGVjIDAwOjAwOjAwIE1vbiwgVHVlLCBXZWQsIFRodSwgRnJpLCBTYXQsIFN1biwgR01UY2h1bmtlZCx0ZXh0L2h0bWwsaW1hZ2UvcG5nLGltYWdlL2pwZyxpbWFnZS9naWYsYXBwbGljYXRpb24veG1sLGFwcGxpY2F0aW9uL3hodG1sK3htbCx0ZXh0L3BsYWluLHRleHQvamF2YXNjcmlwdCxwdWJsaWNwcml2YXRlbWF4LWFnZT1nemlwLGRlZmxhdGUsc2RjaGNoYXJzZXQ9dXRmLThjaGFyc2V0PWlzby04ODU5LTEsdXRmLSwqLGVucT0wLg==',
  'base64',
);

const SYN_STREAM = 1;
const SYN_REPLY = 2;
const RST_STREAM = 3;
const PING = 6;
const GOAWAY = 7;
const HEADERS = 8;
const FLAG_FIN = 0x01;
/** The largest DATA frame this side writes, bytes. */
const MAX_DATA = 32 * 1024;
/** RST_STREAM's status CANCEL. */
const RST_CANCEL = 5;

/** A stream the client opened. */
export interface SpdyStream {
  id: number;
  /** Its headers, names lowercase (as SPDY/3 has them). */
  headers: Record<string, string>;
  /** Data from the client. */
  onData(cb: (data: Buffer) => void): void;
  /** Once: the client's side ended (FIN) or the stream was reset (`reset` true) or the session closed. */
  onEnd(cb: (reset: boolean) => void): void;
  /** Sends data toward the client. */
  write(data: Uint8Array): void;
  /** Ends this side (FIN). */
  end(): void;
  /** Resets the stream (RST_STREAM CANCEL). */
  reset(): void;
}

/** A SPDY session on a byte transport. */
export interface SpdySession {
  /** Bytes from the client. */
  receive(data: Buffer): void;
  /** Ends every stream (the transport closed). */
  closed(): void;
}

interface StreamState {
  stream: SpdyStream;
  dataCbs: Array<(d: Buffer) => void>;
  endCbs: Array<(reset: boolean) => void>;
  remoteDone: boolean;
  localDone: boolean;
}

function control(type: number, flags: number, body: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(0x8000 | 3, 0);
  h.writeUInt16BE(type, 2);
  h.writeUInt32BE(((flags & 0xff) << 24) | body.length, 4);
  return Buffer.concat([h, body]);
}

function dataFrame(id: number, flags: number, data: Uint8Array): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32BE(id & 0x7fffffff, 0);
  h.writeUInt32BE(((flags & 0xff) << 24) | data.length, 4);
  return Buffer.concat([h, data]);
}

/** Parses an inflated SPDY/3 header block: 32-bit count, then 32-bit-length-prefixed names and values. @throws Error when it is cut */
export function parseHeaderBlock(b: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let off = 0;
  const u32 = () => {
    if (off + 4 > b.length) throw new Error('header block cut short');
    const v = b.readUInt32BE(off);
    off += 4;
    return v;
  };
  const str = () => {
    const n = u32();
    if (off + n > b.length) throw new Error('header block cut short');
    const s = b.subarray(off, off + n).toString('utf8');
    off += n;
    return s;
  };
  const count = u32();
  for (let i = 0; i < count; i++) {
    const name = str().toLowerCase();
    out[name] = str();
  }
  return out;
}

/** An uncompressed header block of `headers` (for tests and our replies). */
export function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n, 0);
    return b;
  };
  const entries = Object.entries(headers);
  parts.push(u32(entries.length));
  for (const [k, v] of entries) {
    const kb = Buffer.from(k.toLowerCase());
    const vb = Buffer.from(v);
    parts.push(u32(kb.length), kb, u32(vb.length), vb);
  }
  return Buffer.concat(parts);
}

/**
 * A stored (uncompressed), non-final deflate block of `data` (at most 65535 bytes), then the empty
 * stored block a sync flush writes: Go's inflater hands a block's data on at the next block's header,
 * so without the empty one it would wait for bytes the frame does not have.
 */
function storedBlock(data: Buffer): Buffer {
  const h = Buffer.alloc(5);
  h[0] = 0;
  h.writeUInt16LE(data.length, 1);
  h.writeUInt16LE(~data.length & 0xffff, 3);
  return Buffer.concat([h, data, Buffer.from([0, 0, 0, 0xff, 0xff])]);
}

/** The SPDY dictionary, for a client of this framing (tests). */
export const SPDY_DICTIONARY: Buffer = DICTIONARY;

/**
 * Serves SPDY on a transport: `send` writes bytes to the client, `fail` ends the transport on a
 * framing error; `onStream` gets every stream the client opens, replied to already.
 */
export function spdyServer(send: (b: Buffer) => void, fail: (why: string) => void, onStream: (s: SpdyStream) => void): SpdySession {
  const inflate = zlib.createInflate({ dictionary: DICTIONARY });
  let inflated: Buffer[] = [];
  inflate.on('data', (d: Buffer) => inflated.push(d));
  let broken = false;
  inflate.on('error', (err) => {
    broken = true;
    fail(`the client's header block: ${err.message}`);
  });
  /** One of the client's compressed header blocks, inflated in its turn (the zlib context runs on). */
  const inflateBlock = (b: Buffer) =>
    new Promise<Buffer>((resolve) => {
      inflate.write(b);
      inflate.flush(zlib.constants.Z_SYNC_FLUSH, () => {
        const out = Buffer.concat(inflated);
        inflated = [];
        resolve(out);
      });
    });
  let zlibStarted = false;
  const replyBlock = (headers: Record<string, string>) => {
    const block = storedBlock(headerBlock(headers));
    if (zlibStarted) return block;
    zlibStarted = true;
    // The zlib header (deflate, 32K window, no dictionary named: a stored block needs none).
    return Buffer.concat([Buffer.from([0x78, 0x01]), block]);
  };
  const streams = new Map<number, StreamState>();
  const finish = (st: StreamState, reset: boolean) => {
    if (reset) {
      st.remoteDone = true;
      st.localDone = true;
    }
    if (reset || (st.remoteDone && st.localDone)) streams.delete(st.stream.id);
  };
  const remoteEnd = (st: StreamState, reset: boolean) => {
    const already = st.remoteDone;
    st.remoteDone = true;
    finish(st, reset);
    if (!already || reset) for (const cb of st.endCbs.splice(0)) cb(reset);
  };
  let buf: Buffer = Buffer.alloc(0);
  let chain: Promise<void> = Promise.resolve();
  const handle = async (frame: Buffer): Promise<void> => {
    if (broken) return;
    if ((frame[0]! & 0x80) === 0) {
      const id = frame.readUInt32BE(0) & 0x7fffffff;
      const flags = frame[4]!;
      const st = streams.get(id);
      if (!st) return;
      const data = frame.subarray(8);
      if (data.length) for (const cb of st.dataCbs) cb(data);
      if (flags & FLAG_FIN) remoteEnd(st, false);
      return;
    }
    const type = frame.readUInt16BE(2);
    const flags = frame[4]!;
    const body = frame.subarray(8);
    switch (type) {
      case SYN_STREAM: {
        const id = body.readUInt32BE(0) & 0x7fffffff;
        const headers = parseHeaderBlock(await inflateBlock(body.subarray(10)));
        const st: StreamState = { stream: undefined as unknown as SpdyStream, dataCbs: [], endCbs: [], remoteDone: false, localDone: false };
        st.stream = {
          id,
          headers,
          onData: (cb) => {
            st.dataCbs.push(cb);
          },
          onEnd: (cb) => {
            if (st.remoteDone) queueMicrotask(() => cb(false));
            else st.endCbs.push(cb);
          },
          write: (data) => {
            if (st.localDone || !streams.has(id)) return;
            for (let off = 0; off < data.length; off += MAX_DATA) send(dataFrame(id, 0, data.subarray(off, off + MAX_DATA)));
          },
          end: () => {
            if (st.localDone || !streams.has(id)) return;
            st.localDone = true;
            send(dataFrame(id, FLAG_FIN, Buffer.alloc(0)));
            finish(st, false);
          },
          reset: () => {
            if (!streams.has(id)) return;
            const b = Buffer.alloc(8);
            b.writeUInt32BE(id, 0);
            b.writeUInt32BE(RST_CANCEL, 4);
            send(control(RST_STREAM, 0, b));
            remoteEnd(st, true);
          },
        };
        streams.set(id, st);
        const idb = Buffer.alloc(4);
        idb.writeUInt32BE(id, 0);
        send(control(SYN_REPLY, 0, Buffer.concat([idb, replyBlock({})])));
        onStream(st.stream);
        if (flags & FLAG_FIN) remoteEnd(st, false);
        return;
      }
      case SYN_REPLY:
      case HEADERS: {
        // Kept in step with the client's zlib context; nothing here needs them.
        await inflateBlock(body.subarray(4));
        const st = streams.get(body.readUInt32BE(0) & 0x7fffffff);
        if (st && flags & FLAG_FIN) remoteEnd(st, false);
        return;
      }
      case RST_STREAM: {
        const st = streams.get(body.readUInt32BE(0) & 0x7fffffff);
        if (st) remoteEnd(st, true);
        return;
      }
      case PING:
        send(control(PING, 0, Buffer.from(body.subarray(0, 4))));
        return;
      case GOAWAY:
        for (const st of [...streams.values()]) remoteEnd(st, true);
        return;
      default:
        // SETTINGS, WINDOW_UPDATE and others: nothing to do (no flow control here, none in spdystream).
        return;
    }
  };
  return {
    receive(data) {
      buf = buf.length ? Buffer.concat([buf, data]) : data;
      while (buf.length >= 8) {
        if (buf[0]! & 0x80 && (buf.readUInt16BE(0) & 0x7fff) !== 3) {
          broken = true;
          fail(`SPDY version ${buf.readUInt16BE(0) & 0x7fff}: only 3 is served`);
          return;
        }
        const len = buf.readUInt32BE(4) & 0xffffff;
        if (buf.length < 8 + len) break;
        const frame = buf.subarray(0, 8 + len);
        buf = buf.subarray(8 + len);
        chain = chain.then(() => handle(frame)).catch((err: unknown) => {
          broken = true;
          fail(`a SPDY frame: ${err instanceof Error ? err.message : String(err)}`);
        });
      }
    },
    closed() {
      broken = true;
      for (const st of [...streams.values()]) remoteEnd(st, true);
      inflate.destroy();
    },
  };
}

