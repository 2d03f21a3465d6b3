/**
 * The query of `GET pods/<name>/log` read as kube-apiserver reads a `PodLogOptions`: the integers
 * converted as `Convert_Slice_string_To_Pointer_int64` converts them (Go's `strconv.ParseInt`, a 400
 * BadRequest with its error when it fails), then checked as `ValidatePodLogOptions` checks them (a 422
 * Invalid of kind PodLogOptions, before the pod is looked up, as LogREST.Get does).
 */
import { ApiError, badRequest, type StatusCause } from '../errors.ts';

/** The integer options of a pod log request; undefined when the query does not set them. */
export interface PodLogOptions {
  /** Lines from the end of the log; 0 or more. */
  tailLines?: number;
  /** Bytes at most; 1 or more. */
  limitBytes?: number;
  /** Seconds back from now; 1 or more, and not with sinceTime. */
  sinceSeconds?: number;
}

/** int64's range, as a bigint (Number is exact only to 2^53). */
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * `strconv.ParseInt(value, 10, 64)`: an optional sign and decimal digits, within int64.
 * @throws ApiError BadRequest with Go's error (`strconv.ParseInt: parsing "x": invalid syntax`, `... value out of range`)
 */
function parseInt64(value: string): number {
  if (!/^[+-]?\d+$/.test(value)) throw badRequest(`strconv.ParseInt: parsing ${JSON.stringify(value)}: invalid syntax`);
  const n = BigInt(value);
  if (n < INT64_MIN || n > INT64_MAX) throw badRequest(`strconv.ParseInt: parsing ${JSON.stringify(value)}: value out of range`);
  return Number(n);
}

/**
 * Reads and checks the integer options of a pod log request on pod `name`; of a repeated parameter
 * the first value counts, as the conversion reads it.
 * @throws ApiError BadRequest for a value that is not an integer; Invalid (422, kind PodLogOptions, a cause
 *   a field) for tailLines below 0, limitBytes or sinceSeconds below 1, or sinceSeconds with sinceTime
 */
export function podLogOptions(q: URLSearchParams, name: string): PodLogOptions {
  const opts: PodLogOptions = {};
  for (const key of ['tailLines', 'limitBytes', 'sinceSeconds'] as const) {
    const v = q.getAll(key)[0];
    if (v !== undefined) opts[key] = parseInt64(v);
  }
  const causes: StatusCause[] = [];
  const tooSmall = (field: string, value: number, message: string) => causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${value}: ${message}`, field });
  if (opts.tailLines !== undefined && opts.tailLines < 0) tooSmall('tailLines', opts.tailLines, 'must be greater than or equal to 0');
  if (opts.limitBytes !== undefined && opts.limitBytes < 1) tooSmall('limitBytes', opts.limitBytes, 'must be greater than 0');
  if (opts.sinceSeconds !== undefined && q.has('sinceTime')) {
    causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified' });
  } else if (opts.sinceSeconds !== undefined && opts.sinceSeconds < 1) tooSmall('sinceSeconds', opts.sinceSeconds, 'must be greater than 0');
  if (causes.length === 0) return opts;
  // field.ErrorList's aggregate: `<field>: <body>` each (the empty path of the Forbidden one too), bracketed when more than one.
  const list = causes.map((c) => `${c.field ?? ''}: ${c.message}`);
  const text = list.length === 1 ? list[0] : `[${list.join(', ')}]`;
  throw new ApiError('Invalid', `PodLogOptions ${JSON.stringify(name)} is invalid: ${text}`, { name, kind: 'PodLogOptions', causes });
}
