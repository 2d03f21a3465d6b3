/**
 * The Go types of the scalar fields of the batch/v1 specs (`JobSpec`, `CronJobSpec`), checked when a
 * body is decoded as kube-apiserver's JSON decoder checks them: a value of the wrong JSON type, a
 * fraction or an out-of-range number for an integer is a 400 BadRequest with Go's words (`json: cannot
 * unmarshal string into Go struct field CronJobSpec.spec.suspend of type bool`), whatever the
 * `fieldValidation`. Without it `suspend: "true"` (a quoted YAML value) was stored, shown as `<unset>`,
 * and did not suspend anything.
 */

/** A scalar field's Go type. */
export type GoScalar = 'bool' | 'string' | 'int32' | 'int64';

/** A struct: its Go name and its fields (scalars, or nested structs). */
export interface GoStruct {
  name: string;
  fields: Record<string, GoScalar | GoStruct>;
}

/** batch/v1 JobSpec's scalar fields (k8s.io/api/batch/v1 types.go, 1.32). */
export const JOB_SPEC: GoStruct = {
  name: 'JobSpec',
  fields: {
    parallelism: 'int32',
    completions: 'int32',
    activeDeadlineSeconds: 'int64',
    backoffLimit: 'int32',
    backoffLimitPerIndex: 'int32',
    maxFailedIndexes: 'int32',
    manualSelector: 'bool',
    ttlSecondsAfterFinished: 'int32',
    completionMode: 'string',
    suspend: 'bool',
    podReplacementPolicy: 'string',
    managedBy: 'string',
  },
};

/** batch/v1 CronJobSpec's scalar fields, and its `jobTemplate.spec` (a JobSpec). */
export const CRONJOB_SPEC: GoStruct = {
  name: 'CronJobSpec',
  fields: {
    schedule: 'string',
    timeZone: 'string',
    startingDeadlineSeconds: 'int64',
    concurrencyPolicy: 'string',
    suspend: 'bool',
    successfulJobsHistoryLimit: 'int32',
    failedJobsHistoryLimit: 'int32',
    jobTemplate: { name: 'JobTemplateSpec', fields: { spec: JOB_SPEC } },
  },
};

/** The spec struct of each kind whose scalar types are checked, by `group/Kind`. */
export const SPEC_TYPES: Readonly<Record<string, GoStruct>> = {
  'batch/Job': JOB_SPEC,
  'batch/CronJob': CRONJOB_SPEC,
};

const INT_RANGE = { int32: [-(2 ** 31), 2 ** 31 - 1], int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER] } as const;

/** The JSON kind of a value as Go names it in an `UnmarshalTypeError`. */
function jsonKind(v: unknown): string {
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number') return 'number';
  if (typeof v === 'string') return 'string';
  return Array.isArray(v) ? 'array' : 'object';
}

/** Go's message when `v` does not fit `type`, or undefined when it does (null always does: the zero value). */
function scalarError(v: unknown, type: GoScalar, struct: string, path: string): string | undefined {
  if (v === null || v === undefined) return undefined;
  const at = `into Go struct field ${struct}.${path} of type ${type}`;
  if (type === 'bool' || type === 'string') {
    const ok = type === 'bool' ? typeof v === 'boolean' : typeof v === 'string';
    return ok ? undefined : `json: cannot unmarshal ${jsonKind(v)} ${at}`;
  }
  if (typeof v !== 'number') return `json: cannot unmarshal ${jsonKind(v)} ${at}`;
  const [min, max] = INT_RANGE[type];
  return Number.isInteger(v) && v >= min && v <= max ? undefined : `json: cannot unmarshal number ${JSON.stringify(v)} ${at}`;
}

/**
 * The first value of `spec` whose JSON type does not fit the Go type of its field, as Go's decoder says
 * it, or undefined. Fields that are not listed, and `$` directives of a patch, are not looked at.
 * @param spec the body's `spec` (of an object, or of a merge patch)
 * @param struct the kind's spec struct ({@link SPEC_TYPES})
 * @param path the JSON path of `spec` (`spec`)
 */
export function specTypeError(spec: unknown, struct: GoStruct, path = 'spec'): string | undefined {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) return undefined;
  for (const [k, v] of Object.entries(spec as Record<string, unknown>)) {
    const type = struct.fields[k];
    if (type === undefined) continue;
    const err = typeof type === 'string' ? scalarError(v, type, struct.name, `${path}.${k}`) : specTypeError(v, type, `${path}.${k}`);
    if (err) return err;
  }
  return undefined;
}
