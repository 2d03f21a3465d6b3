/**
 * The HTTP adapter between a Node HTTP server and a pod's `k32_handle` (pod-abi.md, "The request
 * and the response"; seed, "What moves": a frozen pod answers 503 with `Retry-After: 1`). Both
 * `kube32-cli dev` and the kubelet serve pods through it.
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { PodCallError, errorMessage } from './errors.ts';
import type { SplitResponse } from './http-response.ts';
import type { CallCancel, PodInstance } from './instance.ts';

/** Largest request body the adapter passes to a pod, bytes. */
const MAX_REQUEST_BODY = 16 << 20;

/**
 * Builds the raw request message a pod receives: the request line as it came, header names in
 * lower case, the body whole (de-chunked by Node) with a `content-length`. The bytes are in an
 * `ArrayBuffer` of their own (never Node's shared Buffer pool), so that they can be transferred to
 * the pod's thread without another copy.
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
  const head = `${lines.join('\r\n')}\r\n\r\n`;
  const headBytes = Buffer.byteLength(head, 'latin1');
  const out = Buffer.from(new ArrayBuffer(headBytes + body.length));
  out.write(head, 0, 'latin1');
  out.set(body, headBytes);
  return out;
}

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
  const cancel: CallCancel = {};
  const onClose = (): void => {
    if (!res.writableEnded) cancel.cancel?.();
  };
  res.on('close', onClose);
  const name = `${pod.namespace}/${pod.podName}`;
  let split: SplitResponse;
  try {
    // Parsed on the pod's thread: written here as it comes (see PodInstance.handleSplit).
    split = await pod.handleSplit(requestMessage(req, body), cancel);
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
      case 'BadResponse':
        report(`pod ${name}: ${errorMessage(err)}`, pod);
        plain(res, 502, `the pod's response does not parse: ${errorMessage(err).replace(/^k32_handle's response does not parse: /, '')}`);
        return 'answered';
      default:
        report(`pod ${name}: ${errorMessage(err)}`, pod);
        plain(res, 502, `the pod failed: ${errorMessage(err)}`);
        return 'answered';
    }
  }
  res.off('close', onClose);
  res.writeHead(split.status, split.reason, split.headers);
  res.end(split.body);
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
