/**
 * Raw requests to the API server with a kubeconfig's credentials, for the calls the typed APIs of
 * @kubernetes/client-node do not have: the one-write pod replacement, the node proxy to the kubelet
 * (streaming the snapshot out), the Checkpoint data PUT (streaming it in), and JSON lists for informers
 * (plain JSON, as watch events are, so cached objects have one shape).
 */
import http from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import { ApiCallError } from './errors.ts';

/** Connections to the API server kept open at most (requests beyond wait for one). */
export const MAX_SOCKETS = 8;

/** A raw request. */
export interface RestRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Path and query, from the server's root: `/api/v1/pods?limit=500`. */
  path: string;
  /** A JSON body (serialized here) or a stream (sent as is with `contentType` and `contentLength`). */
  body?: unknown;
  contentType?: string;
  contentLength?: number;
  /** Abort after this many ms. @default 30000 */
  timeoutMs?: number;
}

/** A response whose body is still a stream. */
export interface RestResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: http.IncomingMessage;
}

/** Raw HTTP(S) access to the API server of a kubeconfig's current context. */
export class KubeRest {
  readonly #kc: KubeConfig;
  #options: Promise<https.RequestOptions> | undefined;
  readonly #agent: http.Agent;
  /** For streamed bodies, which cannot be sent twice: fresh connections, never a stale pooled one. */
  readonly #freshAgent: http.Agent;
  readonly #server: URL;

  /** @throws Error when the kubeconfig has no current cluster */
  constructor(kc: KubeConfig) {
    this.#kc = kc;
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig: no current cluster');
    this.#server = new URL(cluster.server);
    const isHttps = this.#server.protocol === 'https:';
    // Kept alive and bounded: a burst of calls (a slow-start batch of 256 creates) queues for a
    // connection instead of opening (and TLS-handshaking) one each.
    this.#agent = isHttps ? new https.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS }) : new http.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS });
    this.#freshAgent = isHttps ? new https.Agent({ keepAlive: false }) : new http.Agent({ keepAlive: false });
  }

  async #baseOptions(): Promise<https.RequestOptions> {
    this.#options ??= (async () => {
      const opts: https.RequestOptions = {};
      await this.#kc.applyToHTTPSOptions(opts);
      return opts;
    })();
    return this.#options;
  }

  /**
   * Sends `req` and answers the response with its body unread (any status). A request with a JSON body
   * (or none) that fails on a reused keep-alive connection before any answer (the server closed it while
   * idle) is sent once more on a new one, as Node's documentation advises.
   */
  async request(req: RestRequest): Promise<RestResponse> {
    try {
      return await this.#send(req);
    } catch (err: unknown) {
      const streamed = req.body !== undefined && typeof (req.body as Readable).pipe === 'function';
      if (!streamed && (err as { reusedSocket?: boolean }).reusedSocket) return this.#send(req);
      throw err;
    }
  }

  async #send(req: RestRequest): Promise<RestResponse> {
    const base = await this.#baseOptions();
    const isHttps = this.#server.protocol === 'https:';
    const prefix = this.#server.pathname.replace(/\/$/, '');
    const headers: Record<string, string | number> = { Accept: 'application/json' };
    for (const [k, v] of Object.entries(base.headers ?? {})) if (v !== undefined) headers[k] = String(v);
    let payload: Buffer | undefined;
    let stream: Readable | undefined;
    if (req.body !== undefined && typeof (req.body as Readable).pipe === 'function') {
      stream = req.body as Readable;
      headers['Content-Type'] = req.contentType ?? 'application/octet-stream';
      if (req.contentLength !== undefined) headers['Content-Length'] = req.contentLength;
    } else if (req.body !== undefined) {
      payload = Buffer.from(JSON.stringify(req.body));
      headers['Content-Type'] = req.contentType ?? 'application/json';
      headers['Content-Length'] = payload.length;
    }
    const options: https.RequestOptions = {
      ca: base.ca,
      cert: base.cert,
      key: base.key,
      pfx: base.pfx,
      passphrase: base.passphrase,
      rejectUnauthorized: base.rejectUnauthorized,
      servername: base.servername,
      auth: base.auth,
      hostname: this.#server.hostname.replace(/^\[|\]$/g, ''),
      port: this.#server.port || (isHttps ? 443 : 80),
      method: req.method,
      path: prefix + req.path,
      headers,
      agent: stream ? this.#freshAgent : this.#agent,
      signal: AbortSignal.timeout(req.timeoutMs ?? 30_000),
    };
    const mod = isHttps ? https : http;
    return new Promise<RestResponse>((resolve, reject) => {
      const r = mod.request(options, (res) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: res }));
      r.on('error', (err) => {
        const e = new ApiCallError(`${req.method} ${req.path}`, 0, '', err.message, undefined, { cause: err });
        (e as { reusedSocket?: boolean }).reusedSocket = r.reusedSocket && (err as { code?: string }).code === 'ECONNRESET';
        reject(e);
      });
      if (stream) {
        stream.on('error', (err) => r.destroy(err));
        stream.pipe(r);
      } else {
        r.end(payload);
      }
    });
  }

  /**
   * Sends `req` and answers its JSON body; an error status becomes an {@link ApiCallError} with the
   * Status's reason and message.
   */
  async json<T>(req: RestRequest): Promise<T> {
    const res = await this.request(req);
    const text = await readText(res.body);
    if (res.status >= 300) throw errorFromAnswer(`${req.method} ${req.path}`, res.status, text);
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** Stops keeping connections alive. */
  close(): void {
    this.#agent.destroy();
    this.#freshAgent.destroy();
  }
}

/** Reads a whole (small) body as text. */
export async function readText(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** An {@link ApiCallError} from an error answer's text (a `metav1.Status` or a kubelet's JSON). */
export function errorFromAnswer(operation: string, status: number, text: string): ApiCallError {
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  const s = (typeof body === 'object' && body !== null ? body : {}) as { reason?: string; message?: string };
  return new ApiCallError(operation, status, s.reason ?? '', s.message ?? text.slice(0, 300), body);
}
