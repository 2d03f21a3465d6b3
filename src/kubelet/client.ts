/**
 * The kubelet's way to the control plane: src/api's {@link RestClient} (kept-alive connections with the
 * node kubeconfig's server, CA, client certificate or bearer token) called as the kubelet's code calls
 * it, `json(method, path, opts)`. No timeout of its own (a restore's snapshot may take long); as many
 * connections as the node's calls need. Failures are src/api's {@link ApiError}.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { ApiError, errorMessage, isApiError, RestClient, type RestRequest, type RestResponse } from '../api/index.ts';

export { ApiError, errorMessage, isApiError };

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
  /** Headers of this request (`If-None-Match` ...). */
  headers?: Record<string, string>;
}

/**
 * A REST client of one API server, as one identity (the node's kubeconfig).
 * @example const cp = new ControlPlane(kc); const node = await cp.json<V1Node>('GET', '/api/v1/nodes/n1');
 */
export class ControlPlane {
  readonly kubeConfig: KubeConfig;
  readonly server: string;
  readonly rest: RestClient;

  /** @throws RangeError when the kubeconfig has no current cluster */
  constructor(kubeConfig: KubeConfig) {
    this.rest = new RestClient(kubeConfig, { timeoutMs: 0, maxSockets: Number.POSITIVE_INFINITY });
    this.kubeConfig = kubeConfig;
    this.server = this.rest.server;
  }

  #req(method: string, path: string, opts: RequestOptions): RestRequest {
    return { method: method as RestRequest['method'], path, ...opts };
  }

  /**
   * Sends one request and answers the response whatever its status (the body unread).
   * @throws ApiError with code 0 when the server cannot be reached
   */
  request(method: string, path: string, opts: RequestOptions = {}): Promise<RestResponse> {
    return this.rest.request(this.#req(method, path, opts));
  }

  /**
   * Sends one request and parses the JSON answer.
   * @throws ApiError with the Status's code, reason and message for any status of 300 or more
   */
  json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return this.rest.json<T>(this.#req(method, path, opts));
  }

  /** Stops keeping connections alive. */
  close(): void {
    this.rest.close();
  }
}
