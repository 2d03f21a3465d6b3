/**
 * Small helpers of the resource strategies: validation of names (RFC 1123) and a field path
 * reader.
 */
import type { StatusCause } from '../errors.ts';
import { humanDuration } from '../../lib/index.ts';
import type { KubeObject } from '../storage/index.ts';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Problems of `name` as an RFC 1123 subdomain (most objects' names), at `field`. */
export function validateSubdomain(name: string | undefined, field: string): StatusCause[] {
  if (!name) return [{ reason: 'FieldValueRequired', message: 'Required value: name or generateName is required', field }];
  // As apimachinery's IsDNS1123Subdomain: the length and the form are two errors, each a cause of its own.
  const causes: StatusCause[] = [];
  if (name.length > 253) causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${name}": must be no more than 253 characters`, field });
  if (!DNS1123_SUBDOMAIN.test(name)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
      field,
    });
  }
  return causes;
}

/** Problems of `name` as an RFC 1123 label (namespaces, services, container names), at `field`. */
export function validateLabel(name: string | undefined, field: string): StatusCause[] {
  if (!name) return [{ reason: 'FieldValueRequired', message: 'Required value', field }];
  const causes: StatusCause[] = [];
  if (name.length > 63) causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${name}": must be no more than 63 characters`, field });
  if (!DNS1123_LABEL.test(name)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: "${name}": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
      field,
    });
  }
  return causes;
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** Problems of `metadata.labels` and `metadata.annotations`. */
export function validateMetaMaps(obj: KubeObject): StatusCause[] {
  const out: StatusCause[] = [];
  const labels = obj.metadata.labels ?? {};
  if (typeof labels !== 'object' || Array.isArray(labels)) return [{ reason: 'FieldValueInvalid', message: 'Invalid value: must be a map of strings', field: 'metadata.labels' }];
  for (const [k, v] of Object.entries(labels)) {
    for (const msg of qualifiedNameErrors(k)) out.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${k}": ${msg}`, field: 'metadata.labels' });
    for (const msg of labelValueErrors(v)) out.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${String(v)}": ${msg}`, field: 'metadata.labels' });
  }
  const ann = obj.metadata.annotations ?? {};
  if (typeof ann !== 'object' || Array.isArray(ann)) return [{ reason: 'FieldValueInvalid', message: 'Invalid value: must be a map of strings', field: 'metadata.annotations' }];
  for (const [k, v] of Object.entries(ann)) {
    for (const msg of qualifiedNameErrors(k)) out.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${k}": ${msg}`, field: 'metadata.annotations' });
    if (typeof v !== 'string') out.push({ reason: 'FieldValueInvalid', message: `Invalid value: annotation "${k}" must be a string`, field: 'metadata.annotations' });
  }
  const annotationBytes = Object.entries(ann).reduce((n, [k, v]) => n + k.length + (typeof v === 'string' ? v.length : 0), 0);
  if (annotationBytes > MAX_ANNOTATIONS_BYTES) out.push(tooLong('metadata.annotations', MAX_ANNOTATIONS_BYTES));
  return out;
}

/**
 * Problems of a workload's `spec.template.metadata` labels and annotations (their size bound included),
 * named under `spec.template`: Kubernetes refuses such a Deployment or Job itself, where otherwise
 * every pod made from it would be refused.
 */
export function validateTemplateMetaMaps(obj: KubeObject): StatusCause[] {
  const meta = rec(rec(rec(obj.spec).template).metadata);
  return validateMetaMaps({ metadata: meta } as KubeObject).map((c) => ({ ...c, field: c.field ? `spec.template.${c.field}` : c.field }));
}

/** Kubernetes' bound on all of an object's annotations, keys and values together (bytes). */
export const MAX_ANNOTATIONS_BYTES = 256 * 1024;
/** Kubernetes' bound on a ConfigMap's or a Secret's data (bytes). */
export const MAX_DATA_BYTES = 1024 * 1024;

/** A FieldValueTooLong cause: `Too long: must have at most N bytes`. */
export function tooLong(field: string, max: number): StatusCause {
  return { reason: 'FieldValueTooLong', message: `Too long: must have at most ${max} bytes`, field };
}

/**
 * What is wrong with a label or annotation key, in apimachinery's IsQualifiedName words, one message
 * for each problem (the length and the form of each part apart): `[prefix/]name`, the name 1 to 63
 * characters, the prefix an RFC 1123 subdomain of at most 253. Empty for a good key.
 */
function qualifiedNameErrors(k: string): string[] {
  const parts = k.split('/');
  if (parts.length > 2) {
    return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"];
  }
  const out: string[] = [];
  const [prefix, name] = parts.length === 2 ? [parts[0]!, parts[1]!] : [undefined, parts[0]!];
  if (prefix !== undefined) {
    if (prefix.length === 0) out.push('prefix part must be non-empty');
    else {
      if (prefix.length > 253) out.push('prefix part must be no more than 253 characters');
      if (!DNS1123_SUBDOMAIN.test(prefix)) {
        out.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
      }
    }
  }
  if (name.length === 0) return [...out, 'name part must be non-empty'];
  if (name.length > 63) out.push('name part must be no more than 63 characters');
  if (!QUALIFIED_NAME.test(name)) {
    out.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
  }
  return out;
}

/** What is wrong with a label value, in apimachinery's IsValidLabelValue words (length and form apart). Empty for a good one. */
function labelValueErrors(v: unknown): string[] {
  if (typeof v !== 'string') return ['a label value must be a string'];
  const out: string[] = [];
  if (v.length > 63) out.push('must be no more than 63 characters');
  if (!LABEL_VALUE.test(v)) {
    out.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
  }
  return out;
}

/** Reads `obj.a.b.c` for path `['a','b','c']`; undefined when absent. */
export function at(obj: unknown, path: readonly string[]): unknown {
  let cur: unknown = obj;
  for (const p of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

/** A record-typed view of a field (creating nothing). */
export function rec(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** The object elements of a list field (other elements are left out: validation reports them). */
export function arr(v: unknown): Record<string, unknown>[] {
  return Array.isArray(v) ? (v.filter((e) => e !== null && typeof e === 'object' && !Array.isArray(e)) as Record<string, unknown>[]) : [];
}

/** The AGE cell of an object: kubectl's human duration of now − creationTimestamp, `<unknown>` without one. */
export function age(ts: unknown, now: Date): string {
  if (typeof ts !== 'string') return '<unknown>';
  const t = Date.parse(ts);
  if (Number.isNaN(t)) return '<unknown>';
  const d = now.getTime() - t;
  if (d < -1000) return '<invalid>';
  return humanDuration(d);
}

/** A `Column` list's name column. */
export const NAME_COLUMN = { name: 'Name', type: 'string', format: 'name', description: 'Name must be unique within a namespace.' } as const;
/** A `Column` list's age column. */
export const AGE_COLUMN = { name: 'Age', type: 'string', description: 'CreationTimestamp is a timestamp representing the server time when this object was created.' } as const;

/** A required string field's cause. */
export function required(field: string): StatusCause {
  return { reason: 'FieldValueRequired', message: 'Required value', field };
}

/**
 * An invalid value's cause: `Invalid value: <value as JSON>: why`; a value that is absent (undefined) is
 * kube's `Required value: why` (it printed `Invalid value: undefined`, JavaScript's word, not kube's).
 */
export function invalidValue(field: string, value: unknown, why: string): StatusCause {
  return value === undefined ? { reason: 'FieldValueRequired', message: `Required value: ${why}`, field } : { reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: ${why}`, field };
}

/** A cause for a field that may not change. */
export function immutable(field: string): StatusCause {
  return { reason: 'FieldValueInvalid', message: 'Invalid value: field is immutable', field };
}

/** Label selector of a workload (`spec.selector.matchLabels`) as `k=v,k2=v2` (matchExpressions rendered too). */
export function selectorString(sel: unknown): string {
  const s = rec(sel);
  const parts: string[] = [];
  for (const [k, v] of Object.entries(rec(s.matchLabels))) parts.push(`${k}=${String(v)}`);
  for (const e of arr(s.matchExpressions)) {
    const values = Array.isArray(e.values) ? (e.values as string[]) : [];
    switch (e.operator) {
      case 'In':
        parts.push(`${String(e.key)} in (${values.join(',')})`);
        break;
      case 'NotIn':
        parts.push(`${String(e.key)} notin (${values.join(',')})`);
        break;
      case 'Exists':
        parts.push(String(e.key));
        break;
      case 'DoesNotExist':
        parts.push(`!${String(e.key)}`);
        break;
    }
  }
  return parts.join(',');
}
