/**
 * The kubelet endpoint's one error mapping: every refusal is an {@link EndpointError} (or a
 * `PodStateError` from the pod), written once as a `metav1.Status` by {@link sendError}.
 */
import type { ServerResponse } from 'node:http';
import { PodStateError } from '../../wasm/index.ts';

/** Writes a `metav1.Status` failure (with extra fields such as `blockers`). */
export function sendStatus(res: ServerResponse, code: number, reason: string, message: string, extra: Record<string, unknown> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code, ...extra });
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

/**
 * A refusal of a kubelet endpoint: HTTP `code`, the Status `reason` (`BadRequest`, `NotFound`,
 * `NotMovable`, `Timeout`, ...) and extra Status fields (`blockers`, `details`).
 */
export class EndpointError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly extra: Record<string, unknown>;
  constructor(code: number, reason: string, message: string, extra: Record<string, unknown> = {}) {
    super(message);
    this.name = 'EndpointError';
    this.code = code;
    this.reason = reason;
    this.extra = extra;
  }
}

/** 400 `BadRequest`. */
export const badRequest = (message: string): EndpointError => new EndpointError(400, 'BadRequest', message);
/** 404 `NotFound` of a pod (with the Status `details` kubectl reads). */
export const podNotFound = (message: string, pod: string): EndpointError => new EndpointError(404, 'NotFound', message, { details: { name: pod, kind: 'pods' } });
/** 405 `MethodNotAllowed`. */
export const wrongMethod = (method: string): EndpointError => new EndpointError(405, 'MethodNotAllowed', `use ${method}`);

/**
 * The Status of a caught value: an {@link EndpointError} as it says; a `PodStateError` as 409
 * `NotMovable` (with its blockers), 504 `Timeout` (with its blockers), else 404 `NotFound` (the pod
 * ended, or is not frozen); anything else 500 `InternalError`.
 */
export function statusOf(err: unknown): EndpointError {
  if (err instanceof EndpointError) return err;
  if (err instanceof PodStateError) {
    if (err.code === 'NotMovable') return new EndpointError(409, 'NotMovable', err.message, { blockers: err.blockers });
    if (err.code === 'Timeout') return new EndpointError(504, 'Timeout', err.message, { blockers: err.blockers });
    return new EndpointError(404, 'NotFound', err.message);
  }
  return new EndpointError(500, 'InternalError', err instanceof Error ? err.message : String(err));
}

/** Answers `err` as its Status ({@link statusOf}); a stream already begun is cut instead. */
export function sendError(res: ServerResponse, err: unknown): EndpointError {
  const s = statusOf(err);
  sendStatus(res, s.code, s.reason, s.message, s.extra);
  return s;
}
