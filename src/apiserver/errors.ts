/**
 * The API server's errors: one class, `ApiError`, carrying a Kubernetes `StatusReason`, mapped to a
 * `metav1.Status` body in one place (`toStatus`). Every handler error goes through `errorToStatus`,
 * so anything unexpected becomes a 500 InternalError without a stack trace on the wire.
 */

/** The `metav1.StatusReason` values this server answers, each with exactly one HTTP code. */
export const StatusReasons = {
  BadRequest: 400,
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  MethodNotAllowed: 405,
  NotAcceptable: 406,
  AlreadyExists: 409,
  Conflict: 409,
  Gone: 410,
  Expired: 410,
  RequestEntityTooLarge: 413,
  UnsupportedMediaType: 415,
  Invalid: 422,
  TooManyRequests: 429,
  InternalError: 500,
  ServiceUnavailable: 503,
  Timeout: 504,
} as const;

/** One of `StatusReasons`' keys. */
export type StatusReason = keyof typeof StatusReasons;

/** A field-level cause of an error (`details.causes[]`): `FieldValueRequired`, `FieldValueInvalid`, ... */
export interface StatusCause {
  reason: string;
  message: string;
  field?: string;
}

/** `metav1.Status.details`. */
export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: StatusCause[];
  retryAfterSeconds?: number;
}

/** `metav1.Status` as JSON. */
export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, unknown>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: StatusDetails;
  code: number;
}

/**
 * An error the API server answers as a `metav1.Status`.
 * @example throw new ApiError('NotFound', 'pods "web" not found', { name: 'web', kind: 'pods' })
 */
export class ApiError extends Error {
  readonly reason: StatusReason;
  readonly code: number;
  readonly details: StatusDetails | undefined;
  /** Extra response headers (`Retry-After`). */
  readonly headers: Record<string, string>;
  constructor(reason: StatusReason, message: string, details?: StatusDetails, options?: ErrorOptions & { headers?: Record<string, string> }) {
    super(message, options);
    this.name = 'ApiError';
    this.reason = reason;
    this.code = StatusReasons[reason];
    this.details = details;
    this.headers = options?.headers ?? {};
  }

  /** The `metav1.Status` body of this error. */
  toStatus(): Status {
    const s: Status = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: this.message, reason: this.reason, code: this.code };
    if (this.details) s.details = this.details;
    return s;
  }
}

/** `<resource>[.<group>]`, the way Kubernetes names a resource in messages (`pods`, `checkpoints.kube32.io`). */
export function qualifiedResource(resource: string, group: string): string {
  return group ? `${resource}.${group}` : resource;
}

/** 404 NotFound: `pods "web" not found`. */
export function notFound(resource: string, group: string, name: string): ApiError {
  return new ApiError('NotFound', `${qualifiedResource(resource, group)} "${name}" not found`, { name, group: group || undefined, kind: resource });
}

/**
 * 404 NotFound for a path the server does not serve (an unknown resource, subresource or API
 * document), with empty `details` as kube-apiserver answers it: clients tell it from a missing
 * object by the empty `details.name` (kubectl debug then says "ephemeral containers are disabled for
 * this cluster"; without `details` it crashed).
 */
export function resourceNotFound(): ApiError {
  return new ApiError('NotFound', 'the server could not find the requested resource', {});
}

/** 409 AlreadyExists: `pods "web" already exists`. */
export function alreadyExists(resource: string, group: string, name: string): ApiError {
  return new ApiError('AlreadyExists', `${qualifiedResource(resource, group)} "${name}" already exists`, { name, group: group || undefined, kind: resource });
}

/** 409 Conflict on a stale resourceVersion or a failed precondition. */
export function conflict(resource: string, group: string, name: string, why: string): ApiError {
  return new ApiError('Conflict', `Operation cannot be fulfilled on ${qualifiedResource(resource, group)} "${name}": ${why}`, {
    name,
    group: group || undefined,
    kind: resource,
  });
}

/** 422 Invalid: `Pod "web" is invalid: spec.containers[0].image: Required value`. */
export function invalid(kind: string, group: string, name: string, causes: StatusCause[]): ApiError {
  const list = causes.map((c) => (c.field ? `${c.field}: ${c.message}` : c.message));
  const text = list.length === 1 ? list[0] : `[${list.join(', ')}]`;
  return new ApiError('Invalid', `${kind} "${name}" is invalid: ${text}`, { name, group: group || undefined, kind, causes });
}

/** 400 BadRequest. */
export function badRequest(message: string): ApiError {
  return new ApiError('BadRequest', message);
}

/**
 * Maps any thrown value to a Status: an `ApiError` as itself, anything else as 500 InternalError
 * whose message names the error but carries no stack.
 */
export function errorToStatus(err: unknown): { status: Status; headers: Record<string, string> } {
  if (err instanceof ApiError) return { status: err.toStatus(), headers: err.headers };
  // Input nested past what a recursive step can walk (the body scan bounds it; this is the backstop).
  if (err instanceof RangeError && /Maximum call stack size exceeded/.test(err.message)) {
    return { status: new ApiError('BadRequest', 'the request nests arrays or objects too deeply to be processed (exceeded max depth)').toStatus(), headers: {} };
  }
  const message = err instanceof Error ? err.message : String(err);
  return {
    status: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: `Internal error occurred: ${message}`, reason: 'InternalError', code: 500 },
    headers: {},
  };
}

/** A `Status` of success (`code` 200 or 201), as delete and eviction answer. */
export function successStatus(code: number, details?: StatusDetails): Status {
  const s: Status = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code };
  if (details) s.details = details;
  return s;
}
