/**
 * Boolean query parameters as kube-apiserver reads them: Go's `strconv.ParseBool` (`1 t T TRUE true
 * True` and `0 f F FALSE false False`), anything else a 400 BadRequest. The dispatcher normalizes them
 * once (to `true` / `false`) so that every handler, and the kubelet behind the log proxy, reads one form.
 */
import { badRequest } from '../errors.ts';

/** The boolean parameters of Kubernetes' query options (ListOptions, DeleteOptions, PodLogOptions, exec, proxy...). */
export const BOOLEAN_PARAMETERS: readonly string[] = [
  'watch',
  'allowWatchBookmarks',
  'sendInitialEvents',
  'orphanDependents',
  'ignoreStoreReadErrorWithClusterBreakingPotential',
  'follow',
  'previous',
  'timestamps',
  'insecureSkipTLSVerifyBackend',
  'pretty',
  'stdin',
  'stdout',
  'stderr',
  'tty',
  'exact',
  'export',
];

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/**
 * Go's `strconv.ParseBool`.
 * @throws ApiError BadRequest `strconv.ParseBool: parsing "yes": invalid syntax`, as kube-apiserver answers
 */
export function parseBool(value: string): boolean {
  if (TRUE.has(value)) return true;
  if (FALSE.has(value)) return false;
  throw badRequest(`strconv.ParseBool: parsing ${JSON.stringify(value)}: invalid syntax`);
}

/**
 * Checks every boolean parameter of `q` and rewrites it as `true` or `false`, in place. A parameter
 * given with no value (`?watch=`) is refused, as `ParseBool("")` refuses it; of a repeated one the
 * first value counts, as Go's `url.Values.Get` reads it.
 * @throws ApiError BadRequest for a value ParseBool refuses
 */
export function normalizeBooleanParameters(q: URLSearchParams): void {
  for (const name of BOOLEAN_PARAMETERS) {
    const values = q.getAll(name);
    if (values.length === 0) continue;
    const v = parseBool(values[0]!);
    q.set(name, v ? 'true' : 'false');
  }
}
