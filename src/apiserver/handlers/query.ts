/**
 * Boolean query parameters as kube-apiserver reads them (apimachinery's `Convert_Slice_string_To_bool`):
 * absent, `0` or `false` (any case) is false, anything else true. The dispatcher normalizes them once (to
 * `true` / `false`) so that every handler, and the kubelet behind the log proxy, reads one form.
 */

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

/**
 * A boolean query parameter's value as kube-apiserver reads it (apimachinery's `Convert_Slice_string_To_bool`,
 * the conversion of every query options struct): `0` and `false` in any case are false; any other value, the
 * empty one (`?watch=`) and `yes` included, is true. Never an error.
 */
export function parseBool(value: string): boolean {
  return !(value === '0' || value.toLowerCase() === 'false');
}

/**
 * Rewrites every boolean parameter of `q` as `true` or `false`, in place, so that every handler and the
 * kubelet behind the log proxy read one form. Of a repeated one the first value counts, as the conversion
 * reads it.
 */
export function normalizeBooleanParameters(q: URLSearchParams): void {
  for (const name of BOOLEAN_PARAMETERS) {
    const values = q.getAll(name);
    if (values.length === 0) continue;
    q.set(name, parseBool(values[0]!) ? 'true' : 'false');
  }
}
