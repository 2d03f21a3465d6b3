/**
 * The one error of a Kube32 API call, whatever component made it: the HTTP code, the `metav1.Status`
 * reason and message of the answer, and the decoded body. Code 0: the call got no answer (the server
 * could not be reached, the connection broke, the call timed out).
 */

/** An API call that the server answered with an error status, or that did not reach it (code 0). */
export class ApiError extends Error {
  /** HTTP status code; 0 when the request failed before an answer. */
  readonly code: number;
  /** `metav1.Status.reason` (`NotFound`, `Conflict`, `AlreadyExists`, ...), or `''`. */
  readonly reason: string;
  /** The server's own words: the Status's `message`, else the start of the answer's text, else the network error's message. */
  readonly detail: string;
  /** The decoded answer body, when it was JSON (a `metav1.Status`, or a kubelet's JSON); else its text. */
  readonly body: unknown;

  /**
   * @param operation what was called, e.g. `GET /api/v1/pods` or `create pod default/x`
   * @param message the server's message (or the network error's)
   * @example new ApiError('GET /api/v1/nodes/n1', 404, 'NotFound', 'nodes "n1" not found') // message: `GET /api/v1/nodes/n1: 404 NotFound: nodes "n1" not found`
   */
  constructor(operation: string, code: number, reason: string, message: string, body?: unknown, options?: ErrorOptions) {
    super(`${operation}: ${code === 0 ? 'request failed' : `${code} ${reason || 'error'}`}: ${message}`, options);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
    this.detail = message;
    this.body = body;
  }

  /** The decoded body when it is a `metav1.Status` (`kind: Status`). */
  get status(): ApiStatus | undefined {
    const b = this.body as ApiStatus | null | undefined;
    return b !== null && typeof b === 'object' && b.kind === 'Status' ? b : undefined;
  }
}

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

/** Whether `err` is an {@link ApiError} with one of the HTTP `codes` (any code when none is given). */
export function isApiError(err: unknown, ...codes: number[]): err is ApiError {
  return err instanceof ApiError && (codes.length === 0 || codes.includes(err.code));
}

/** Whether `err` is an API answer with HTTP `code` (an {@link ApiError}, or another error carrying a numeric `code`). */
export function hasCode(err: unknown, code: number): boolean {
  return err instanceof ApiError ? err.code === code : (err as { code?: unknown })?.code === code;
}

/** 404. */
export const isNotFound = (err: unknown): boolean => hasCode(err, 404);
/** 409 (a Conflict or an AlreadyExists). */
export const isConflict = (err: unknown): boolean => hasCode(err, 409);
/** 409 `AlreadyExists`. */
export const isAlreadyExists = (err: unknown): boolean => hasCode(err, 409) && (err instanceof ApiError ? err.reason === 'AlreadyExists' : true);

/** The message of any caught value. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The API server's own words for a failed call: the `metav1.Status` message of the answer (what Kubernetes'
 * controllers put in their events, e.g. `Pod "x" is invalid: spec.containers[0].image: ...`), else the
 * error's message.
 */
export function statusMessage(err: unknown): string {
  if (err instanceof ApiError && err.body !== null && typeof err.body === 'object') {
    const m = (err.body as { message?: unknown }).message;
    if (typeof m === 'string' && m !== '') return m;
  }
  return errorMessage(err);
}

/** An {@link ApiError} from an error answer's text (a `metav1.Status`, a kubelet's JSON, or plain text). */
export function errorFromAnswer(operation: string, status: number, text: string): ApiError {
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  const s = (typeof body === 'object' && body !== null ? body : {}) as { reason?: string; message?: string };
  return new ApiError(operation, status, s.reason ?? '', s.message ?? text.slice(0, 300), body);
}

/**
 * Turns whatever a client threw into an {@link ApiError} naming `operation`: client-node's typed APIs'
 * `ApiException` (with `code` and a `body` that is a Status or its JSON), or a network error (code 0).
 */
export function toApiError(operation: string, err: unknown): ApiError {
  if (err instanceof ApiError) return err;
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
    return new ApiError(operation, e.code, status.reason ?? '', status.message ?? errorMessage(err), body, { cause: err });
  }
  return new ApiError(operation, 0, '', errorMessage(err), undefined, { cause: err });
}
