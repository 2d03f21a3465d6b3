/**
 * The kubelet's one way to the control plane: REST calls through `@kubernetes/client-node`'s
 * `KubeConfig` (its server, CA, client certificate or bearer token) with undici, the HTTP client
 * that client-node itself uses. Streaming bodies (module bytes, checkpoint data) stay streams.
 */
import { type HttpMethod, type KubeConfig, RequestContext } from '@kubernetes/client-node';
import { type Dispatcher, fetch, type Response } from 'undici';

/** A failed API call: the HTTP status and the `metav1.Status` reason and message the server sent. */
export class ApiError extends Error {
  /** The HTTP status code (404, 409, ...); 0 when the server could not be reached. */
  readonly code: number;
  /** The `metav1.Status` reason (`NotFound`, `AlreadyExists`, `Conflict`, ...), or `''`. */
  readonly reason: string;
  constructor(message: string, code: number, reason: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
  }
}

/** Options of one request. */
export interface RequestOptions {
  /** A JSON value (sent as JSON) or raw bytes/string (sent as is). */
  body?: unknown;
  /** The request's content type. @default `application/json` for a JSON body */
  contentType?: string;
  /** Query parameters, added to the path's own. */
  query?: Record<string, string | number | boolean | undefined>;
  /** Cancels the request (and its body stream). */
  signal?: AbortSignal;
}

/** Whether `err` is an {@link ApiError} with one of the HTTP codes. */
export function isApiError(err: unknown, ...codes: number[]): err is ApiError {
  return err instanceof ApiError && (codes.length === 0 || codes.includes(err.code));
}

/** The message of any caught value. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A REST client of one API server, as one identity (the node's kubeconfig).
 * @example const cp = new ControlPlane(kc); const node = await cp.json<V1Node>('GET', '/api/v1/nodes/n1');
 */
export class ControlPlane {
  readonly kubeConfig: KubeConfig;
  readonly server: string;
  /**
   * The connection pool of every request, kept from the first one: client-node makes a new undici `Agent`
   * each time it applies the kubeconfig, and a new agent is a new TCP connection and TLS handshake per call
   * (a checkpoint's data, each status write). Idle connections do not keep the process alive.
   */
  #dispatcher: Dispatcher | undefined;
  #dispatcherSet = false;
  constructor(kubeConfig: KubeConfig) {
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new RangeError('the kubeconfig has no current cluster');
    this.kubeConfig = kubeConfig;
    this.server = cluster.server.replace(/\/+$/, '');
  }

  /**
   * Sends one request and answers the response whatever its status (the body unread).
   * @throws ApiError with code 0 when the server cannot be reached
   */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const ctx = new RequestContext(url.toString(), method as HttpMethod);
    await this.kubeConfig.applySecurityAuthentication(ctx);
    if (!this.#dispatcherSet) {
      this.#dispatcher = ctx.getDispatcher() as Dispatcher | undefined;
      this.#dispatcherSet = true;
    }
    const headers: Record<string, string> = { ...(ctx.getHeaders() as Record<string, string>), accept: 'application/json, */*' };
    let body: string | Uint8Array | undefined;
    if (opts.body !== undefined) {
      if (typeof opts.body === 'string' || opts.body instanceof Uint8Array) body = opts.body;
      else body = JSON.stringify(opts.body);
      headers['content-type'] = opts.contentType ?? 'application/json';
    }
    try {
      return await fetch(url, { method, headers, body, dispatcher: this.#dispatcher, signal: opts.signal });
    } catch (err: unknown) {
      throw new ApiError(`${method} ${path}: ${errorMessage(err)}`, 0, '', { cause: err });
    }
  }

  /**
   * Sends one request and parses the JSON answer.
   * @throws ApiError with the Status's code, reason and message for any status of 300 or more
   */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, opts);
    const text = await res.text();
    if (res.status >= 300) throw statusError(method, path, res.status, text);
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }

  /**
   * Sends one request and answers the response body as a stream of chunks.
   * @throws ApiError for any status of 300 or more (the body is read for the Status)
   */
  async stream(method: string, path: string, opts: RequestOptions = {}): Promise<{ response: Response; body: AsyncIterable<Uint8Array> }> {
    const res = await this.request(method, path, opts);
    if (res.status >= 300 || !res.body) throw statusError(method, path, res.status, await res.text());
    return { response: res, body: res.body as AsyncIterable<Uint8Array> };
  }
}

/** Turns an error answer into an {@link ApiError}, with the Status's reason and message where the body is one. */
export function statusError(method: string, path: string, code: number, text: string): ApiError {
  let reason = '';
  let message = text.slice(0, 500);
  try {
    const s = JSON.parse(text) as { reason?: string; message?: string };
    reason = s.reason ?? '';
    message = s.message ?? message;
  } catch {
    // not a Status: keep the text
  }
  return new ApiError(`${method} ${path}: ${code} ${reason ? `${reason}: ` : ''}${message}`, code, reason);
}
