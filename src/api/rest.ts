/**
 * The one REST client of Kube32's components: requests to the API server of a kubeconfig's current
 * context, with its credentials (client certificate, bearer token) and TLS settings
 * (@kubernetes/client-node's `applyToHTTPSOptions`), over kept-alive connections. JSON calls, raw and
 * streamed bodies both ways (module bytes, checkpoint data, the node proxy), and watches (one JSON event
 * a line). Every failure is an {@link ApiError}: the answer's code, reason and message, or code 0 when
 * there was no answer. The typed APIs of client-node remain for what they do well (its `Watch` under
 * {@link Informer}).
 */
import http from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import { ApiError, errorFromAnswer } from './errors.ts';

/** Connections to the API server kept open at most by default (requests beyond wait for one). */
export const MAX_SOCKETS = 8;

/** A request. */
export interface RestRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Path and query, from the server's root: `/api/v1/pods?limit=500`. */
  path: string;
  /** Query parameters added to the path's own (undefined ones are left out). */
  query?: Record<string, string | number | boolean | undefined>;
  /** A JSON value (serialized here), raw bytes or a string (sent as they are), or a stream (sent as is, with `contentLength` if given). */
  body?: unknown;
  /** The body's type. @default `application/json` for a JSON value, `application/octet-stream` for bytes and streams */
  contentType?: string;
  contentLength?: number;
  /** Abort after this many ms; 0: never. @default the client's `timeoutMs` */
  timeoutMs?: number;
  /** Cancels the request (and the reading of its answer). */
  signal?: AbortSignal;
  /** Headers of this request (`If-None-Match` ...), added to the kubeconfig's. */
  headers?: Record<string, string>;
}

/** An answer whose body is still a stream. */
export interface RestResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: http.IncomingMessage;
}

/** Options of a {@link RestClient}. */
export interface RestClientOptions {
  /** Kept-alive connections at most. @default {@link MAX_SOCKETS} */
  maxSockets?: number;
  /** The default bound of a request, ms; 0: none. @default 30000 */
  timeoutMs?: number;
  /** `User-Agent` of every request. @default Node's none */
  userAgent?: string;
}

/** One watch event. */
export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

const isStream = (b: unknown): b is Readable => b !== undefined && b !== null && typeof (b as Readable).pipe === 'function';

/**
 * HTTP(S) access to the API server of a kubeconfig's current context.
 * @example const rest = new RestClient(kc); const node = await rest.json<V1Node>({ method: 'GET', path: '/api/v1/nodes/n1' }); rest.close();
 */
export class RestClient {
  readonly kubeConfig: KubeConfig;
  /** The server's URL, without a trailing slash. */
  readonly server: string;
  readonly #url: URL;
  readonly #timeoutMs: number;
  readonly #userAgent: string | undefined;
  #options: Promise<https.RequestOptions> | undefined;
  readonly #agent: http.Agent;
  /** For streamed bodies, which cannot be sent twice: fresh connections, never a stale pooled one. */
  readonly #freshAgent: http.Agent;

  /** @throws RangeError when the kubeconfig has no current cluster */
  constructor(kc: KubeConfig, o: RestClientOptions = {}) {
    const cluster = kc.getCurrentCluster();
    if (!cluster?.server) throw new RangeError('the kubeconfig names no server for the current context');
    this.kubeConfig = kc;
    this.server = cluster.server.replace(/\/+$/, '');
    this.#url = new URL(cluster.server);
    this.#timeoutMs = o.timeoutMs ?? 30_000;
    this.#userAgent = o.userAgent;
    const isHttps = this.#url.protocol === 'https:';
    // Kept alive and bounded: a burst of calls (a slow-start batch of 256 creates) queues for a
    // connection instead of opening (and TLS-handshaking) one each.
    const maxSockets = o.maxSockets ?? MAX_SOCKETS;
    this.#agent = isHttps ? new https.Agent({ keepAlive: true, maxSockets }) : new http.Agent({ keepAlive: true, maxSockets });
    this.#freshAgent = isHttps ? new https.Agent({ keepAlive: false }) : new http.Agent({ keepAlive: false });
  }

  /** The kubeconfig's TLS options and headers, applied once. @throws what client-node throws for a kubeconfig it cannot use */
  #baseOptions(): Promise<https.RequestOptions> {
    this.#options ??= (async () => {
      const opts: https.RequestOptions = {};
      await this.kubeConfig.applyToHTTPSOptions(opts);
      return opts;
    })();
    return this.#options;
  }

  /**
   * Sends `req` and answers the response with its body unread (any status). A request with a body that
   * can be sent again (or none) that fails on a reused keep-alive connection before any answer (the
   * server closed it while idle) is sent once more on a new one, as Node's documentation advises.
   * @throws ApiError code 0 when there is no answer (the abort reason itself when `req.signal` aborted)
   */
  async request(req: RestRequest): Promise<RestResponse> {
    try {
      return await this.#send(req);
    } catch (err: unknown) {
      if (!isStream(req.body) && (err as { reusedSocket?: boolean }).reusedSocket) return this.#send(req);
      throw err;
    }
  }

  /** `path` with `query` added. */
  #path(req: RestRequest): string {
    const entries = Object.entries(req.query ?? {}).filter(([, v]) => v !== undefined);
    if (entries.length === 0) return req.path;
    const q = new URLSearchParams(entries.map(([k, v]) => [k, String(v)]));
    return `${req.path}${req.path.includes('?') ? '&' : '?'}${q}`;
  }

  async #send(req: RestRequest): Promise<RestResponse> {
    const base = await this.#baseOptions();
    const isHttps = this.#url.protocol === 'https:';
    const prefix = this.#url.pathname.replace(/\/$/, '');
    const path = this.#path(req);
    const headers: Record<string, string | number> = { Accept: 'application/json' };
    if (this.#userAgent) headers['User-Agent'] = this.#userAgent;
    for (const [k, v] of Object.entries(base.headers ?? {})) if (v !== undefined) headers[k] = String(v);
    for (const [k, v] of Object.entries(req.headers ?? {})) headers[k] = v;
    let payload: Buffer | undefined;
    let stream: Readable | undefined;
    if (isStream(req.body)) {
      stream = req.body;
      headers['Content-Type'] = req.contentType ?? 'application/octet-stream';
      if (req.contentLength !== undefined) headers['Content-Length'] = req.contentLength;
    } else if (req.body !== undefined) {
      if (req.body instanceof Uint8Array) payload = Buffer.from(req.body.buffer, req.body.byteOffset, req.body.byteLength);
      else if (typeof req.body === 'string') payload = Buffer.from(req.body);
      else payload = Buffer.from(JSON.stringify(req.body));
      headers['Content-Type'] = req.contentType ?? (req.body instanceof Uint8Array ? 'application/octet-stream' : 'application/json');
      headers['Content-Length'] = payload.length;
    }
    const timeoutMs = req.timeoutMs ?? this.#timeoutMs;
    const signals = [...(timeoutMs > 0 ? [AbortSignal.timeout(timeoutMs)] : []), ...(req.signal ? [req.signal] : [])];
    const options: https.RequestOptions = {
      ca: base.ca,
      cert: base.cert,
      key: base.key,
      pfx: base.pfx,
      passphrase: base.passphrase,
      rejectUnauthorized: base.rejectUnauthorized,
      servername: base.servername,
      auth: base.auth,
      hostname: this.#url.hostname.replace(/^\[|\]$/g, ''),
      port: this.#url.port || (isHttps ? 443 : 80),
      method: req.method,
      path: prefix + path,
      headers,
      agent: stream ? this.#freshAgent : this.#agent,
      ...(signals.length > 0 ? { signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals) } : {}),
    };
    const mod = isHttps ? https : http;
    return new Promise<RestResponse>((resolve, reject) => {
      const r = mod.request(options, (res) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: res }));
      r.on('error', (err) => {
        if (req.signal?.aborted) return reject(req.signal.reason);
        const e = new ApiError(`${req.method} ${path}`, 0, '', err.message, undefined, { cause: err });
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
   * Sends `req` and answers its JSON body (`{}` for an empty one).
   * @throws ApiError with the Status's code, reason and message for any status of 300 or more; code 0 without an answer
   */
  async json<T>(req: RestRequest): Promise<T> {
    const res = await this.request(req);
    const text = await readText(res.body);
    if (res.status >= 300) throw errorFromAnswer(`${req.method} ${this.#path(req)}`, res.status, text);
    return (text ? JSON.parse(text) : {}) as T;
  }

  /**
   * Sends `req` and answers the response, its body a stream, when the status is below 300.
   * @throws ApiError for any status of 300 or more (the body is read for the Status)
   */
  async stream(req: RestRequest): Promise<RestResponse> {
    const res = await this.request(req);
    if (res.status >= 300) throw errorFromAnswer(`${req.method} ${this.#path(req)}`, res.status, await readText(res.body));
    return res;
  }

  /**
   * Watches a collection from `resourceVersion` and yields its events until the server ends the watch or
   * `signal` aborts (then the generator returns quietly). Bookmarks are asked for.
   * @param path the collection's path, without a query string
   * @param query extra query parameters (`fieldSelector`, `labelSelector`)
   * @throws ApiError when the server refuses the watch (410 Gone when `resourceVersion` is too old)
   */
  async *watch<T>(path: string, query: Record<string, string>, resourceVersion: string, signal: AbortSignal): AsyncGenerator<WatchEvent<T>> {
    let res: RestResponse;
    try {
      res = await this.stream({ method: 'GET', path, query: { ...query, watch: 'true', resourceVersion, allowWatchBookmarks: 'true' }, signal, timeoutMs: 0 });
    } catch (err: unknown) {
      if (signal.aborted) return;
      throw err;
    }
    let buffered = '';
    try {
      for await (const chunk of res.body) {
        buffered += (chunk as Buffer).toString('utf8');
        let nl = buffered.indexOf('\n');
        while (nl >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line) yield JSON.parse(line) as WatchEvent<T>;
          nl = buffered.indexOf('\n');
        }
      }
    } catch (err: unknown) {
      if (signal.aborted) return;
      throw err;
    }
  }

  /** Stops keeping connections alive. */
  close(): void {
    this.#agent.destroy();
    this.#freshAgent.destroy();
  }
}

/** Reads a whole body as bytes. */
export async function readBytes(body: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Reads a whole (small) body as text. */
export async function readText(body: AsyncIterable<unknown>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
