/**
 * Errors of API calls, as the controllers see them: the HTTP code and the `metav1.Status` reason of the
 * answer, whatever client made the call (the typed APIs of @kubernetes/client-node or a raw request).
 */

/** An API call that the server answered with an error status, or that did not reach it (code 0). */
export class ApiCallError extends Error {
  /** HTTP status code; 0 when the request failed before an answer. */
  readonly code: number;
  /** `metav1.Status.reason` (`NotFound`, `Conflict`, `AlreadyExists`, ...), or `''`. */
  readonly reason: string;
  /** The decoded answer body, when it was JSON. */
  readonly body: unknown;

  constructor(operation: string, code: number, reason: string, message: string, body?: unknown, options?: ErrorOptions) {
    super(`${operation}: ${code === 0 ? 'request failed' : `${code} ${reason || 'error'}`}: ${message}`, options);
    this.name = 'ApiCallError';
    this.code = code;
    this.reason = reason;
    this.body = body;
  }
}

/** Whether `err` is an API answer with HTTP `code`. */
export function hasCode(err: unknown, code: number): boolean {
  return err instanceof ApiCallError ? err.code === code : (err as { code?: unknown })?.code === code;
}

export const isNotFound = (err: unknown): boolean => hasCode(err, 404);
export const isConflict = (err: unknown): boolean => hasCode(err, 409);
export const isAlreadyExists = (err: unknown): boolean =>
  hasCode(err, 409) && (err instanceof ApiCallError ? err.reason === 'AlreadyExists' : true);

/**
 * The API server's own words for a failed call: the `metav1.Status` message of the answer (what Kubernetes'
 * controllers put in their events, e.g. `Pod "x" is invalid: spec.containers[0].image: ...`), else the
 * error's message.
 */
export function statusMessage(err: unknown): string {
  if (err instanceof ApiCallError && err.body !== null && typeof err.body === 'object') {
    const m = (err.body as { message?: unknown }).message;
    if (typeof m === 'string' && m !== '') return m;
  }
  return errorMessage(err);
}

/** The message of any caught value. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Turns whatever a client threw into an {@link ApiCallError} naming `operation`: the typed APIs'
 * `ApiException` (with `code` and a `body` that is a Status or its JSON), or a network error.
 */
export function toApiCallError(operation: string, err: unknown): ApiCallError {
  if (err instanceof ApiCallError) return err;
  const e = err as { code?: unknown; body?: unknown };
  if (typeof e?.code === 'number') {
    let body = e.body;
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body);
      } catch {
        // not JSON: keep the text
      }
    }
    const status = (body ?? {}) as { reason?: string; message?: string };
    return new ApiCallError(operation, e.code, status.reason ?? '', status.message ?? errorMessage(err), body, { cause: err });
  }
  return new ApiCallError(operation, 0, '', errorMessage(err), undefined, { cause: err });
}
