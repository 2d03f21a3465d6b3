/**
 * The REST calls kube32-cli makes, with the credentials and TLS settings of a client-node `KubeConfig`:
 * JSON requests, raw byte uploads (module data), and watches (one JSON event a line). Errors follow
 * kubectl's wording, so a user sees the same text from `kubectl` and from `kube32-cli`:
 * `Error from server (NotFound): pods "x" not found`, or
 * `The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?`.
 */
import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import { CliError } from './errors.ts';

/** A `metav1.Status` as the API server answers on failure. */
export interface ApiStatus {
  kind?: string;
  apiVersion?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: Record<string, unknown>;
}

/**
 * A request the API server answered with a failure status. `message` is kubectl's
 * `Error from server (<reason>): <message>`; exit code 1.
 */
export class ApiError extends CliError {
  /** The HTTP status code. */
  readonly code: number;
  /** The Status reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`...), or '' when the body had none. */
  readonly reason: string;
  /** The decoded Status, when the body was one. */
  readonly status: ApiStatus | undefined;
  constructor(code: number, status: ApiStatus | undefined, fallback: string) {
    const reason = status?.reason ?? '';
    const text = status?.message ?? fallback;
    super(reason ? `Error from server (${reason}): ${text}` : `Error from server: ${text}`);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
    this.status = status;
  }
}

/** One request. */
export interface RequestOptions {
  /** HTTP method. @default 'GET' */
  method?: string;
  /** Path below the server URL, with its query string, e.g. `/api/v1/namespaces/default/pods/x`. */
  path: string;
  /** A JSON body (serialised here) or raw bytes. */
  body?: unknown;
  /** Content type of the body. @default 'application/json' for a JSON body, 'application/octet-stream' for bytes */
  contentType?: string;
  /** Cancels the request (and a watch). */
  signal?: AbortSignal;
}

/** The server's answer, its body not yet read. */
export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: http.IncomingMessage;
}

/** The server URL of the current context, without a trailing slash. */
export function serverUrl(kc: KubeConfig): string {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new CliError('the kubeconfig names no server for the current context');
  return server.replace(/\/+$/, '');
}

/** The server could not be reached. Printed as kubectl prints it, without an `error:` prefix. */
export class ConnectionError extends CliError {
  constructor(message: string, options?: ErrorOptions) {
    super(message, 1, options);
    this.name = 'ConnectionError';
  }
}

function connectionError(server: string, err: unknown): CliError {
  const code = (err as { code?: string } | null)?.code;
  const host = (() => {
    try {
      return new URL(server).host;
    } catch {
      return server;
    }
  })();
  if (code === 'ECONNREFUSED') {
    return new ConnectionError(`The connection to the server ${host} was refused - did you specify the right host or port?`, {
      cause: err,
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new ConnectionError(`Unable to connect to the server: ${message}`, { cause: err });
}

/**
 * Sends one request and answers the response with its body as a stream (for watches and downloads).
 * @throws CliError when the server cannot be reached (kubectl's wording)
 */
export async function rawRequest(kc: KubeConfig, opts: RequestOptions): Promise<RawResponse> {
  const server = serverUrl(kc);
  const url = new URL(server + opts.path);
  let payload: Buffer | undefined;
  let contentType = opts.contentType;
  if (opts.body instanceof Uint8Array) {
    payload = Buffer.from(opts.body.buffer, opts.body.byteOffset, opts.body.byteLength);
    contentType ??= 'application/octet-stream';
  } else if (opts.body !== undefined) {
    payload = Buffer.from(JSON.stringify(opts.body));
    contentType ??= 'application/json';
  }
  const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': 'kube32-cli/0.1.0' };
  if (payload) {
    headers['Content-Type'] = contentType!;
    headers['Content-Length'] = String(payload.byteLength);
  }
  const reqOpts: https.RequestOptions = {
    method: opts.method ?? 'GET',
    hostname: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port || (url.protocol === 'https:' ? 443 : 80),
    path: url.pathname + url.search,
    headers,
    signal: opts.signal,
  };
  try {
    await kc.applyToHTTPSOptions(reqOpts);
  } catch (err: unknown) {
    throw new CliError(`kubeconfig: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
  const transport = url.protocol === 'https:' ? https : http;
  return await new Promise<RawResponse>((resolve, reject) => {
    const req = transport.request(reqOpts, (res) => {
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body: res });
    });
    req.on('error', (err) => {
      if (opts.signal?.aborted) reject(opts.signal.reason);
      else reject(connectionError(server, err));
    });
    req.end(payload);
  });
}

async function readAll(stream: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function decodeStatus(text: string): ApiStatus | undefined {
  try {
    const parsed = JSON.parse(text) as ApiStatus;
    return parsed && typeof parsed === 'object' && parsed.kind === 'Status' ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Sends one request and decodes the JSON answer.
 * @returns the decoded body
 * @throws ApiError for any status >= 400 (kubectl's "Error from server (<reason>): <message>")
 * @throws CliError when the server cannot be reached or answers something that is not JSON
 */
export async function apiJson<T>(kc: KubeConfig, opts: RequestOptions): Promise<T> {
  const res = await rawRequest(kc, opts);
  const text = (await readAll(res.body)).toString('utf8');
  if (res.status >= 400) {
    throw new ApiError(res.status, decodeStatus(text), text.trim() || `the server answered ${res.status}`);
  }
  try {
    return JSON.parse(text) as T;
  } catch (err: unknown) {
    throw new CliError(`${opts.method ?? 'GET'} ${opts.path}: the server answered ${res.status} with a body that is not JSON`, 1, {
      cause: err,
    });
  }
}

/** One watch event. */
export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

/**
 * Watches a collection from `resourceVersion` and yields its events until the server ends the watch
 * or `signal` aborts (then the generator returns quietly).
 * @param path the collection's path, without a query string
 * @param query extra query parameters (`fieldSelector`, `labelSelector`)
 * @throws ApiError when the server refuses the watch (410 Gone when `resourceVersion` is too old)
 */
export async function* watch<T>(
  kc: KubeConfig,
  path: string,
  query: Record<string, string>,
  resourceVersion: string,
  signal: AbortSignal,
): AsyncGenerator<WatchEvent<T>> {
  const params = new URLSearchParams({ ...query, watch: 'true', resourceVersion, allowWatchBookmarks: 'true' });
  let res: RawResponse;
  try {
    res = await rawRequest(kc, { path: `${path}?${params}`, signal });
  } catch (err: unknown) {
    if (signal.aborted) return;
    throw err;
  }
  if (res.status >= 400) {
    const text = (await readAll(res.body)).toString('utf8');
    throw new ApiError(res.status, decodeStatus(text), text.trim() || `the server answered ${res.status}`);
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

/**
 * Waits until the object at `path` satisfies `done`, watching it by name (a list, then a watch from the
 * list's resourceVersion, listed again whenever the watch ends). Returns the object that satisfied it.
 * @param collection the collection path, e.g. `/apis/kube32.io/v1/namespaces/default/checkpoints`
 * @param name the object's name
 * @param done decides on each version of the object (`undefined` once it is deleted)
 * @param signal bounds the wait; its abort reason is thrown
 */
export async function waitForObject<T extends { metadata?: { resourceVersion?: string } }>(
  kc: KubeConfig,
  collection: string,
  name: string,
  done: (obj: T | undefined) => boolean,
  signal: AbortSignal,
): Promise<T | undefined> {
  const fieldSelector = `metadata.name=${name}`;
  while (true) {
    signal.throwIfAborted();
    const list = await apiJson<{ metadata?: { resourceVersion?: string }; items?: T[] }>(kc, {
      path: `${collection}?${new URLSearchParams({ fieldSelector })}`,
      signal,
    });
    let current = list.items?.[0];
    if (done(current)) return current;
    let rv = list.metadata?.resourceVersion ?? '';
    try {
      for await (const ev of watch<T>(kc, collection, { fieldSelector }, rv, signal)) {
        if (ev.type === 'BOOKMARK') {
          rv = ev.object.metadata?.resourceVersion ?? rv;
          continue;
        }
        if (ev.type === 'ERROR') break; // e.g. 410 Gone: list again
        current = ev.type === 'DELETED' ? undefined : ev.object;
        if (done(current)) return current;
      }
    } catch (err: unknown) {
      if (!(err instanceof ApiError && err.code === 410)) throw err;
    }
    signal.throwIfAborted();
  }
}
