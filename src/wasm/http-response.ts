/**
 * Parsing a pod's HTTP response message (pod-abi.md, "The request and the response"). Its own
 * module, free of node:http, because the pod thread runs it (pod-context.ts splits a `k32_handle`
 * response there, so that the main thread does not parse it again) and `serveHttp` re-exports it.
 */

/** A parsed HTTP/1.1 response message. */
export interface HttpResponseParts {
  /** Status code, 100 to 999. */
  status: number;
  /** Reason phrase (may be empty). */
  reason: string;
  /** Header pairs in order, names as the pod wrote them. */
  headers: Array<[string, string]>;
  /** The body: `content-length` bytes, de-chunked, or the rest of the message. */
  body: Uint8Array;
}

const latin1 = new TextDecoder('latin1');

function indexOfHeaderEnd(raw: Uint8Array): { end: number; sep: number } | undefined {
  for (let i = 0; i + 1 < raw.length; i++) {
    if (raw[i] === 0x0a && raw[i + 1] === 0x0a) return { end: i, sep: 2 };
    if (raw[i] === 0x0d && raw[i + 1] === 0x0a && raw[i + 2] === 0x0d && raw[i + 3] === 0x0a) return { end: i, sep: 4 };
  }
  return undefined;
}

function dechunk(body: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let p = 0;
  for (;;) {
    let eol = p;
    while (eol < body.length && body[eol] !== 0x0a) eol++;
    if (eol >= body.length) throw new Error('chunked body ends before its last chunk');
    const size = Number.parseInt(latin1.decode(body.subarray(p, eol)).split(';')[0]!.trim(), 16);
    if (!Number.isFinite(size) || size < 0) throw new Error('bad chunk size in chunked body');
    p = eol + 1;
    if (size === 0) break;
    if (p + size > body.length) throw new Error('chunked body shorter than its chunk sizes');
    parts.push(body.subarray(p, p + size));
    p += size;
    if (body[p] === 0x0d) p++;
    if (body[p] === 0x0a) p++;
  }
  return Buffer.concat(parts);
}

/**
 * Parses a response message as `k32_handle` returns it.
 * @throws Error naming what does not parse (no status line, a bad status code, a header line
 *   without a colon, a `content-length` that is not a number or is longer than the body)
 * @example parseHttpResponse(new TextEncoder().encode('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi')).status // 200
 */
export function parseHttpResponse(raw: Uint8Array): HttpResponseParts {
  const he = indexOfHeaderEnd(raw);
  if (!he) throw new Error('the response has no empty line after its headers');
  const head = latin1.decode(raw.subarray(0, he.end)).split(/\r?\n/);
  const statusLine = head[0] ?? '';
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(statusLine);
  if (!m) throw new Error(`the response's status line ${JSON.stringify(statusLine.slice(0, 80))} is not "HTTP/1.1 <code> <reason>"`);
  const status = Number(m[1]);
  if (status < 100) throw new Error(`the response's status code ${status} is out of range`);
  const headers: Array<[string, string]> = [];
  for (const line of head.slice(1)) {
    const c = line.indexOf(':');
    if (c <= 0) throw new Error(`the response's header line ${JSON.stringify(line.slice(0, 80))} has no name and colon`);
    const name = line.slice(0, c).trim();
    if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name)) throw new Error(`the response's header name ${JSON.stringify(name)} is not a token`);
    headers.push([name, line.slice(c + 1).trim()]);
  }
  let body = raw.subarray(he.end + he.sep);
  const te = headers.find(([k]) => k.toLowerCase() === 'transfer-encoding');
  const cl = headers.find(([k]) => k.toLowerCase() === 'content-length');
  if (te && /chunked/i.test(te[1])) {
    body = dechunk(body);
  } else if (cl) {
    if (!/^\d+$/.test(cl[1])) throw new Error(`the response's content-length ${JSON.stringify(cl[1])} is not a number`);
    const n = Number(cl[1]);
    if (n > body.length) throw new Error(`the response's content-length is ${n}, but its body has ${body.length} bytes`);
    body = body.subarray(0, n);
  }
  return { status, reason: m[2] ?? '', headers, body };
}


/** Headers a pod's response does not pass on to the client: Node frames the message itself. */
const HOP_BY_HOP = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive']);

/**
 * A response as the pod thread hands it to the main thread (protocol.ts, a `handle` call with
 * `split`): ready for `res.writeHead(status, reason, headers)` and `res.end(body)`.
 */
export interface SplitResponse {
  /** Status code, 100 to 999. */
  status: number;
  /** Reason phrase (may be empty). */
  reason: string;
  /** Flat name, value, name, value... without the hop-by-hop headers, ending with the recomputed `content-length`. */
  headers: string[];
  /** The body's bytes, in a buffer of their own (transferred to the main thread, never a view of the pod's memory). */
  body: Uint8Array;
}

/**
 * Splits a `k32_handle` response for Node's `ServerResponse`: parsed as {@link parseHttpResponse}
 * does, the hop-by-hop headers dropped, `content-length` recomputed, the body copied once into a
 * buffer of its own (`raw` may be a view of the pod's live memory).
 * @throws Error as {@link parseHttpResponse} does
 */
export function splitHttpResponse(raw: Uint8Array): SplitResponse {
  const parts = parseHttpResponse(raw);
  const headers: string[] = [];
  for (const [k, v] of parts.headers) if (!HOP_BY_HOP.has(k.toLowerCase())) headers.push(k, v);
  headers.push('content-length', String(parts.body.length));
  const body = new Uint8Array(parts.body.length);
  body.set(parts.body);
  return { status: parts.status, reason: parts.reason, headers, body };
}
