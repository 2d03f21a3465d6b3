/** The HTTP adapter between a Node HTTP server and a pod's k32_handle (pod-abi.md, "The request and the response"). */
import type { RequestListener } from 'node:http';
import type { PodInstance } from './instance.ts';

/** A parsed HTTP/1.1 response message. */
export interface HttpResponseParts {
  status: number;
  reason: string;
  /** Header pairs in order, names as the pod wrote them. */
  headers: Array<[string, string]>;
  body: Uint8Array;
}

/** Parses a raw response. @throws Error naming what does not parse */
export function parseHttpResponse(_raw: Uint8Array): HttpResponseParts {
  throw new Error('not implemented');
}

/** A request listener that serves the pod getPod() returns. */
export function serveHttp(_getPod: () => PodInstance | undefined): RequestListener {
  return (_req, res) => {
    res.writeHead(503, { 'retry-after': '1' }).end();
  };
}
