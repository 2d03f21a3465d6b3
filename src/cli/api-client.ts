/**
 * The REST calls kube32-cli makes, through src/api's `RestClient` (the credentials and TLS settings of a
 * client-node `KubeConfig`): JSON requests, raw byte uploads (module data), and watches (one JSON event a
 * line). Errors are src/api's `ApiError`, printed in kubectl's wording (`kubectlMessage`):
 * kubectl's wording, so a user sees the same text from `kubectl` and from `kube32-cli`:
 * `Error from server (NotFound): pods "x" not found`, or
 * `The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?`.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { ApiError, type ApiStatus, errorFromAnswer, readText, RestClient, type RestRequest, type RestResponse, type WatchEvent } from '../api/index.ts';
import { CliError } from './errors.ts';

export { ApiError, type ApiStatus, type WatchEvent };

/**
 * kubectl's words for a refusal: `Error from server (<reason>): <message>` (or `Error from server:
 * <message>` when the Status has no reason), as kube32-cli prints it; a 401 is kubectl's
 * `error: You must be logged in to the server (<message>)` (kubectl's StandardErrorMessage).
 */
export function kubectlMessage(err: ApiError): string {
  const text = err.status?.message ?? (err.detail.trim() || `the server answered ${err.code}`);
  if (err.code === 401 || err.reason === 'Unauthorized') return `error: You must be logged in to the server (${text})`;
  return err.reason ? `Error from server (${err.reason}): ${text}` : `Error from server: ${text}`;
}

/**
 * Node's (OpenSSL's) codes for a server certificate that the kubeconfig's certificate-authority did not
 * sign: kubectl (Go) says `x509: certificate signed by unknown authority` for each of them.
 */
const UNKNOWN_AUTHORITY = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
]);

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
export type RawResponse = RestResponse;

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
  if (code && UNKNOWN_AUTHORITY.has(code)) {
    return new ConnectionError(
      `Unable to connect to the server: tls: failed to verify certificate: x509: certificate signed by unknown authority (${message}): the kubeconfig's certificate-authority-data is not this server's CA`,
      { cause: err },
    );
  }
  return new ConnectionError(`Unable to connect to the server: ${message}`, { cause: err });
}

/** The REST client of each kubeconfig (src/api's, kept-alive connections; no timeout of its own). */
const clients = new WeakMap<KubeConfig, RestClient>();

/** The client of `kc`. @throws CliError when the kubeconfig names no server */
export function restClient(kc: KubeConfig): RestClient {
  let c = clients.get(kc);
  if (!c) {
    serverUrl(kc);
    c = new RestClient(kc, { timeoutMs: 0, userAgent: 'kube32-cli/0.1.0' });
    clients.set(kc, c);
  }
  return c;
}

/**
 * Sends one request and answers the response with its body as a stream (for watches and downloads).
 * @throws CliError when the server cannot be reached (kubectl's wording) or the kubeconfig cannot be used
 */
export async function rawRequest(kc: KubeConfig, opts: RequestOptions): Promise<RestResponse> {
  const rest = restClient(kc);
  try {
    return await rest.request({ method: (opts.method ?? 'GET') as RestRequest['method'], path: opts.path, body: opts.body, contentType: opts.contentType, signal: opts.signal });
  } catch (err: unknown) {
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (err instanceof ApiError) throw connectionError(rest.server, err.cause);
    throw new CliError(`kubeconfig: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
}

/**
 * Sends one request and decodes the JSON answer.
 * @returns the decoded body
 * @throws ApiError for any status >= 400 (printed as kubectl's "Error from server (<reason>): <message>")
 * @throws CliError when the server cannot be reached or answers something that is not JSON
 */
export async function apiJson<T>(kc: KubeConfig, opts: RequestOptions): Promise<T> {
  const res = await rawRequest(kc, opts);
  const text = await readText(res.body);
  if (res.status >= 400) throw errorFromAnswer(`${opts.method ?? 'GET'} ${opts.path}`, res.status, text);
  try {
    return JSON.parse(text) as T;
  } catch (err: unknown) {
    throw new CliError(`${opts.method ?? 'GET'} ${opts.path}: the server answered ${res.status} with a body that is not JSON`, 1, {
      cause: err,
    });
  }
}

/**
 * Watches a collection from `resourceVersion` and yields its events until the server ends the watch
 * or `signal` aborts (then the generator returns quietly).
 * @throws ApiError when the server refuses the watch (410 Gone when `resourceVersion` is too old)
 * @throws CliError when the server cannot be reached
 */
export async function* watch<T>(kc: KubeConfig, path: string, query: Record<string, string>, resourceVersion: string, signal: AbortSignal): AsyncGenerator<WatchEvent<T>> {
  const rest = restClient(kc);
  try {
    yield* rest.watch<T>(path, query, resourceVersion, signal);
  } catch (err: unknown) {
    if (err instanceof ApiError && err.code === 0) throw connectionError(rest.server, err.cause);
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
