/**
 * The HTTP adapter between a Node HTTP server and a pod's `k32_handle` (pod-abi.md, "The request
 * and the response"; seed, "What moves": a frozen pod answers 503 with `Retry-After: 1`). Both
 * `kube32-cli dev` and the kubelet serve pods through it.
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { PodCallError, errorMessage } from './errors.ts';
import type { PodInstance } from './instance.ts';

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

/** Largest request body the adapter passes to a pod, bytes. */
const MAX_REQUEST_BODY = 16 << 20;
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

/**
 * Builds the raw request message a pod receives: the request line as it came, header names in
 * lower case, the body whole (de-chunked by Node) with a `content-length`.
 */
export function requestMessage(req: IncomingMessage, body: Uint8Array): Uint8Array {
  const lines = [`${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/1.1`];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    if (k === 'content-length' || k === 'transfer-encoding') continue;
    lines.push(`${k}: ${raw[i + 1]}`);
  }
  if (body.length > 0 || req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined) {
    lines.push(`content-length: ${body.length}`);
  }
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  return Buffer.concat([head, body]);
}

const HOP_BY_HOP = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive']);

function plain(res: ServerResponse, status: number, text: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', ...extra });
  res.end(`${text}\n`);
}

/** Options of {@link serveHttp}. */
export interface ServeHttpOptions {
  /**
   * Told of each request that failed on the pod's side (a trap, a response that does not parse),
   * with the pod's name; the kubelet logs it.
   * @default a line on standard error
   */
  onError?: (message: string, pod: PodInstance | undefined) => void;
}

/**
 * How {@link servePodRequest} ended: `answered` (a response was written or the request aborted), or
 * `refused` when the pod was frozen, absent or ended before the call started, so that the request never
 * ran and may be held and handed to the pod again (or to its replacement) without running twice.
 */
export type PodRequestOutcome = 'answered' | 'refused';

/**
 * Reads a request's body whole (at most 16 MiB) and calls `then` with it; a larger body is answered
 * 413, a request that errors is destroyed.
 */
export function readRequestBody(req: IncomingMessage, res: ServerResponse, then: (body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  req.on('data', (c: Buffer) => {
    size += c.length;
    if (size > MAX_REQUEST_BODY) tooLarge = true;
    else chunks.push(c);
  });
  req.on('error', () => res.destroy());
  req.on('end', () => {
    if (tooLarge) {
      plain(res, 413, `request body over ${MAX_REQUEST_BODY} bytes`);
      return;
    }
    then(Buffer.concat(chunks));
  });
}

/**
 * Hands one request (its body read whole) to `pod`'s `k32_handle` and writes the answer, as
 * {@link serveHttp} does, except that a pod that is absent, ended or frozen, or that refuses the call
 * `Frozen` before it started, gets no answer: the outcome is then `refused` and `res` untouched (the
 * kubelet holds such requests, see src/kubelet/pod-ports.ts).
 * @param report told of a request that failed on the pod's side
 */
export async function servePodRequest(pod: PodInstance | undefined, req: IncomingMessage, res: ServerResponse, body: Uint8Array, report: (message: string, pod: PodInstance | undefined) => void): Promise<PodRequestOutcome> {
  if (!pod || pod.exit || pod.frozen) return 'refused';
  const ac = new AbortController();
  const onClose = (): void => {
    if (!res.writableEnded) ac.abort();
  };
  res.on('close', onClose);
  const name = `${pod.namespace}/${pod.podName}`;
  let raw: Uint8Array;
  try {
    raw = await pod.handle(requestMessage(req, body), ac.signal);
  } catch (err: unknown) {
    res.off('close', onClose);
    const code = err instanceof PodCallError ? err.code : undefined;
    switch (code) {
      case 'Aborted': res.destroy(); return 'answered';
      case 'Frozen': return 'refused';
      case 'NotRunning': return 'refused';
      case 'NoMemory': plain(res, 503, 'the pod has no room for the request', { 'retry-after': '1' }); return 'answered';
      case 'NotHandled': plain(res, 501, 'the pod does not serve HTTP (no k32_handle export)'); return 'answered';
      case 'Trap':
        report(`pod ${name}: k32_handle trapped: ${errorMessage(err)}`, pod);
        plain(res, 502, `the pod crashed: ${errorMessage(err)}`);
        return 'answered';
      default:
        report(`pod ${name}: ${errorMessage(err)}`, pod);
        plain(res, 502, `the pod failed: ${errorMessage(err)}`);
        return 'answered';
    }
  }
  res.off('close', onClose);
  let parts: HttpResponseParts;
  try {
    parts = parseHttpResponse(raw);
  } catch (err: unknown) {
    report(`pod ${name}: k32_handle's response does not parse: ${errorMessage(err)}`, pod);
    plain(res, 502, `the pod's response does not parse: ${errorMessage(err)}`);
    return 'answered';
  }
  const headers: string[] = [];
  for (const [k, v] of parts.headers) if (!HOP_BY_HOP.has(k.toLowerCase())) headers.push(k, v);
  headers.push('content-length', String(parts.body.length));
  res.writeHead(parts.status, parts.reason, headers);
  res.end(parts.body);
  return 'answered';
}

/**
 * A Node request listener that serves the pod `getPod()` returns (`kube32-cli dev`, the kubelet's
 * pod ports). Answers:
 * - the pod's response as it wrote it (its `content-length` recomputed);
 * - 503 with `Retry-After: 1` while there is no pod, it is frozen, has ended, or has no room (k32_alloc gave 0);
 * - 502 when `k32_handle` traps (the container ends with reason Trap) or its response does not parse;
 * - 501 when the module does not export `k32_handle`; 413 for a body over 16 MiB.
 * @example http.createServer(serveHttp(() => pod)).listen(8080)
 */
export function serveHttp(getPod: () => PodInstance | undefined, opts: ServeHttpOptions = {}): RequestListener {
  const report = opts.onError ?? ((message: string) => process.stderr.write(`${message}\n`));
  return function servePod(req, res) {
    readRequestBody(req, res, (body) => {
      const pod = getPod();
      void servePodRequest(pod, req, res, body, report).then((outcome) => {
        if (outcome === 'answered') return;
        plain(res, 503, pod && !pod.exit && pod.frozen ? 'the pod is frozen' : 'the pod is not running', { 'retry-after': '1' });
      });
    });
  };
}
