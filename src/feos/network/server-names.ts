/**
 * The server names of the traffic records (the seed's "Traffic records": "server names from the
 * copies on nflog group 3: a TLS ClientHello's server name, or an HTTP request's Host"): parsers of
 * the first bytes a pod sends on a TCP connection, and the reassembly of those bytes from the copied
 * segments. Pure and total: bytes that are truncated, fragmented or malformed give "incomplete" or
 * "none", never an exception.
 */

/** What the first bytes of a connection say about its server's name. */
export type NameScan =
  /** Found: the name, lower case. */
  | { status: 'name'; protocol: 'tls' | 'http'; name: string }
  /** Not found yet: more bytes may hold it. */
  | { status: 'incomplete' }
  /** Not found and never will be: not TLS or HTTP, no name in it, or malformed. */
  | { status: 'none' };

const INCOMPLETE: NameScan = { status: 'incomplete' };
const NONE: NameScan = { status: 'none' };

/** Bytes of a connection's start looked at, at most; a name later than this is not looked for. */
export const MAX_SCAN_BYTES = 16 * 1024;

/** A DNS name as a server name: 1 to 253 characters of letters, digits, '-', '_' and '.'. */
function cleanName(raw: string): string | undefined {
  const name = raw.toLowerCase().replace(/\.$/, '');
  if (name.length < 1 || name.length > 253) return undefined;
  if (!/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(name)) return undefined;
  return name;
}

/**
 * A TLS ClientHello's server_name (RFC 6066 section 3, host_name), from the first bytes a client
 * sent: TLS records of type handshake, whose fragments are joined until the ClientHello's
 * extensions are read.
 * @param data the connection's first bytes from offset 0 (contiguous)
 */
export function scanTlsClientHello(data: Uint8Array): NameScan {
  // The handshake messages, joined from the records that carry them.
  const hs: number[] = [];
  let off = 0;
  let needHandshake = -1;
  for (;;) {
    if (needHandshake >= 0 && hs.length >= needHandshake) break;
    if (off + 5 > data.length) return scanHello(Uint8Array.from(hs), true);
    if (data[off] !== 0x16 || data[off + 1] !== 0x03 || data[off + 2] > 0x04) return NONE;
    const len = (data[off + 3] << 8) | data[off + 4];
    if (len === 0 || len > 16384 + 2048) return NONE;
    const end = Math.min(off + 5 + len, data.length);
    for (let i = off + 5; i < end; i++) hs.push(data[i]);
    if (needHandshake < 0 && hs.length >= 4) {
      if (hs[0] !== 0x01) return NONE;
      needHandshake = 4 + ((hs[1] << 16) | (hs[2] << 8) | hs[3]);
    }
    if (end < off + 5 + len) return scanHello(Uint8Array.from(hs), true);
    off = end;
  }
  return scanHello(Uint8Array.from(hs), false);
}

/** Reads a ClientHello handshake message as far as its server_name; `more`: bytes may still come. */
function scanHello(h: Uint8Array, more: boolean): NameScan {
  const short = more ? INCOMPLETE : NONE;
  if (h.length < 4) return short;
  if (h[0] !== 0x01) return NONE;
  const end = 4 + ((h[1] << 16) | (h[2] << 8) | h[3]);
  // What lies past the bytes at hand may still come; what lies past the message's end is malformed.
  const check = (p: number, n: number): NameScan | undefined => (p + n > end ? NONE : p + n > h.length ? short : undefined);
  let p = 4 + 2 + 32; // legacy_version, random
  let r = check(p, 1);
  if (r) return r;
  p += 1 + h[p]; // legacy_session_id
  r = check(p, 2);
  if (r) return r;
  p += 2 + ((h[p] << 8) | h[p + 1]); // cipher_suites
  r = check(p, 1);
  if (r) return r;
  p += 1 + h[p]; // legacy_compression_methods
  if (p === end) return NONE; // no extensions
  r = check(p, 2);
  if (r) return r;
  const extEnd = p + 2 + ((h[p] << 8) | h[p + 1]);
  if (extEnd > end) return NONE;
  p += 2;
  while (p < extEnd) {
    if (p + 4 > extEnd) return NONE;
    r = check(p, 4);
    if (r) return r;
    const type = (h[p] << 8) | h[p + 1];
    const len = (h[p + 2] << 8) | h[p + 3];
    p += 4;
    if (p + len > extEnd) return NONE;
    if (type !== 0) {
      p += len;
      continue;
    }
    r = check(p, len);
    if (r) return r;
    // server_name: a list of (name_type, name).
    if (len < 2) return NONE;
    const listEnd = p + 2 + ((h[p] << 8) | h[p + 1]);
    if (listEnd > p + len) return NONE;
    let q = p + 2;
    while (q + 3 <= listEnd) {
      const nameType = h[q];
      const nameLen = (h[q + 1] << 8) | h[q + 2];
      q += 3;
      if (q + nameLen > listEnd) return NONE;
      if (nameType === 0) {
        const name = cleanName(String.fromCharCode(...h.subarray(q, q + nameLen)));
        return name ? { status: 'name', protocol: 'tls', name } : NONE;
      }
      q += nameLen;
    }
    return NONE;
  }
  return p > h.length ? short : NONE;
}

const HTTP_METHOD = /^[A-Z]{1,20}$/;
const MAX_HEADER_BYTES = 8 * 1024;

/**
 * An HTTP/1 request's Host (RFC 9112 section 3.2), without its port; for a request without a Host
 * header, the authority of an absolute-form target.
 * @param data the connection's first bytes from offset 0 (contiguous)
 */
export function scanHttpRequest(data: Uint8Array): NameScan {
  const n = Math.min(data.length, MAX_HEADER_BYTES);
  // The method: letters up to a space.
  let i = 0;
  while (i < n && data[i] >= 0x41 && data[i] <= 0x5a) i++;
  if (i === n) return i < 20 && data.length < MAX_HEADER_BYTES ? INCOMPLETE : NONE;
  if (i === 0 || i > 20 || data[i] !== 0x20) return NONE;
  const text = Buffer.from(data.buffer, data.byteOffset, n).toString('latin1');
  const lineEnd = text.indexOf('\r\n');
  if (lineEnd < 0) return data.length < MAX_HEADER_BYTES ? INCOMPLETE : NONE;
  const parts = text.slice(0, lineEnd).split(' ');
  if (parts.length !== 3 || !HTTP_METHOD.test(parts[0]) || !/^HTTP\/1\.[0-9]$/.test(parts[2])) return NONE;
  const headersEnd = text.indexOf('\r\n\r\n', lineEnd);
  const block = headersEnd >= 0 ? text.slice(lineEnd + 2, headersEnd) : text.slice(lineEnd + 2, text.lastIndexOf('\r\n') > lineEnd ? text.lastIndexOf('\r\n') : lineEnd + 2);
  for (const line of block.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    if (line.slice(0, colon).toLowerCase() !== 'host') continue;
    const name = hostOf(line.slice(colon + 1).trim());
    return name ? { status: 'name', protocol: 'http', name } : NONE;
  }
  if (headersEnd < 0) return data.length < MAX_HEADER_BYTES ? INCOMPLETE : NONE;
  const abs = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]+)/i.exec(parts[1]);
  const name = abs ? hostOf(abs[1].replace(/^[^@]*@/, '')) : undefined;
  return name ? { status: 'name', protocol: 'http', name } : NONE;
}

/** A Host value without its port: a DNS name, an IPv4 address, or an IPv6 address in brackets (kept bare). */
function hostOf(value: string): string | undefined {
  const v6 = /^\[([0-9a-fA-F:.]+)\](?::\d{1,5})?$/.exec(value);
  if (v6) return v6[1].toLowerCase();
  const m = /^([^:]+)(?::\d{1,5})?$/.exec(value);
  return m ? cleanName(m[1]) : undefined;
}

/**
 * The server name in a connection's first bytes: TLS when they start as a TLS handshake record,
 * else HTTP when they start as a request line, else none.
 */
export function scanServerName(data: Uint8Array): NameScan {
  if (data.length === 0) return INCOMPLETE;
  if (data[0] === 0x16) return scanTlsClientHello(data);
  return scanHttpRequest(data);
}

/** A TCP segment of a connection a pod opened, as nflog copied it. */
export interface TcpSegment {
  /** The connection's key: its addresses and ports, "src sport dst dport". */
  key: string;
  seq: number;
  syn: boolean;
  fin: boolean;
  rst: boolean;
  payload: Uint8Array;
}

interface Assembly {
  /** The sequence number of byte 0 (the SYN's + 1), or undefined until known. */
  base?: number;
  bytes: Uint8Array;
  /** How many bytes from 0 on are known. */
  filled: number;
  /** Bytes beyond `filled` that came early: [offset, bytes]. */
  early: Array<[number, Uint8Array]>;
}

/**
 * Joins the first segments of TCP connections in sequence order (they may come out of order, in
 * several segments, or again) and scans them for a server name. Bounded: at most `maxConnections`
 * are followed at once, the oldest forgotten first, and each only for its first
 * {@link MAX_SCAN_BYTES}.
 */
export class ServerNameAssembler {
  readonly #conns = new Map<string, Assembly>();
  readonly #max: number;

  constructor(maxConnections = 4096) {
    this.#max = maxConnections;
  }

  /** Connections being followed. */
  get size(): number {
    return this.#conns.size;
  }

  /**
   * Takes a segment.
   * @returns the name once found (then the connection is forgotten), else undefined
   */
  push(s: TcpSegment): { protocol: 'tls' | 'http'; name: string } | undefined {
    let a = this.#conns.get(s.key);
    if (s.rst) {
      this.#conns.delete(s.key);
      return undefined;
    }
    if (!a) {
      if (s.payload.length === 0 && !s.syn) return undefined;
      a = { bytes: new Uint8Array(0), filled: 0, early: [] };
      this.#conns.set(s.key, a);
      while (this.#conns.size > this.#max) this.#conns.delete(this.#conns.keys().next().value!);
    }
    if (s.syn) {
      a.base = (s.seq + 1) >>> 0;
      return undefined;
    }
    if (s.payload.length === 0) return this.#end(s);
    // Without the SYN (the connection began before feosd looked), its first data segment is byte 0.
    if (a.base === undefined) a.base = s.seq >>> 0;
    const offset = (s.seq - a.base) >>> 0;
    if (offset >= MAX_SCAN_BYTES) return this.#end(s);
    a.early.push([offset, s.payload.subarray(0, MAX_SCAN_BYTES - offset)]);
    // Fold what is contiguous from `filled` on.
    let grew = true;
    while (grew) {
      grew = false;
      for (let i = 0; i < a.early.length; i++) {
        const [o, b] = a.early[i];
        if (o <= a.filled && o + b.length > a.filled) {
          const add = b.subarray(a.filled - o);
          const next = new Uint8Array(a.filled + add.length);
          next.set(a.bytes.subarray(0, a.filled));
          next.set(add, a.filled);
          a.bytes = next;
          a.filled = next.length;
          grew = true;
        }
        if (o + b.length <= a.filled) {
          a.early.splice(i, 1);
          i--;
        }
      }
    }
    const scan = scanServerName(a.bytes.subarray(0, a.filled));
    if (scan.status === 'name') {
      this.#conns.delete(s.key);
      return { protocol: scan.protocol, name: scan.name };
    }
    if (scan.status === 'none' || a.filled >= MAX_SCAN_BYTES) this.#conns.delete(s.key);
    return this.#end(s);
  }

  /** A FIN ends what the connection's start can say. */
  #end(s: TcpSegment): undefined {
    if (s.fin) this.#conns.delete(s.key);
    return undefined;
  }

  /** Forgets every connection (on a restart of the reader: their segments' order is lost). */
  clear(): void {
    this.#conns.clear();
  }
}
