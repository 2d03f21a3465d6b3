/**
 * Object metadata rules every resource shares: the fields of ObjectMeta a client may send, the
 * fields the server owns, timestamps as Kubernetes writes them (RFC 3339, seconds), and
 * strict field validation of the top level.
 */
import { randomBytes } from 'node:crypto';
import { ApiError, badRequest, type StatusCause } from '../errors.ts';
import type { KubeObject } from '../storage/index.ts';
import { SPEC_SCHEMAS, unknownFields } from './schema.ts';
import { specTypeError, specTypesOf } from './field-types.ts';
import { type ResourceDef, apiVersionOf } from './types.ts';

/** ObjectMeta fields a client may send. */
export const OBJECT_META_FIELDS = new Set([
  'name',
  'generateName',
  'namespace',
  'selfLink',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'labels',
  'annotations',
  'ownerReferences',
  'finalizers',
  'managedFields',
]);

/** `now` as Kubernetes writes timestamps: `2026-01-02T03:04:05Z`. */
export function timestamp(now: Date): string {
  return `${now.toISOString().slice(0, 19)}Z`;
}

/** Five random characters of `[bcdfghjklmnpqrstvwxz2456789]`, as `generateName` appends. */
export function randomSuffix(): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  const bytes = randomBytes(5);
  let s = '';
  for (const b of bytes) s += alphabet[b % alphabet.length];
  return s;
}

/** How unknown or duplicate fields are treated (`fieldValidation=`). */
export type FieldValidation = 'Strict' | 'Warn' | 'Ignore';

/**
 * Checks a request body's shape against the resource: an object, `apiVersion`/`kind` (when given)
 * those of the resource, known top-level and metadata fields. Answers warnings for `Warn`.
 * @throws ApiError BadRequest for a wrong kind or apiVersion, a spec value of the wrong Go type
 *   (`field-types.ts`), a top-level one (`def.decodeError`: ConfigMap and Secret data), or an unknown field under `Strict`
 */
export function checkBodyShape(def: ResourceDef, body: unknown, mode: FieldValidation, expectKind = def.kind, expectApiVersion = apiVersionOf(def)): string[] {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('the request body must be a JSON object');
  const obj = body as Record<string, unknown>;
  if (obj.kind !== undefined && obj.kind !== expectKind) {
    throw badRequest(`the kind of the object (${String(obj.kind)}) does not match the kind of the request (${expectKind})`);
  }
  if (obj.apiVersion !== undefined && obj.apiVersion !== expectApiVersion) {
    throw badRequest(`the API version in the data (${String(obj.apiVersion)}) does not match the expected API version (${expectApiVersion})`);
  }
  if (obj.metadata !== undefined && (obj.metadata === null || typeof obj.metadata !== 'object' || Array.isArray(obj.metadata))) {
    throw badRequest('metadata must be an object');
  }
  // kube-apiserver's JSON decoder refuses a value of the wrong type whatever the field validation.
  const types = specTypesOf(def.group, def.version, expectKind);
  const typeError = def.decodeError?.(obj) ?? (types && specTypeError(obj.spec, types));
  if (typeError) throw new ApiError('BadRequest', `${expectKind} in version "${def.version}" cannot be handled as a ${expectKind}: ${typeError}`);
  if (mode === 'Ignore') return [];
  const unknown: string[] = [];
  const allowed = new Set(['apiVersion', 'kind', 'metadata', ...def.fields]);
  for (const k of Object.keys(obj)) if (!allowed.has(k) && !k.startsWith('$')) unknown.push(`unknown field "${k}"`);
  for (const k of Object.keys((obj.metadata ?? {}) as object)) if (!OBJECT_META_FIELDS.has(k)) unknown.push(`unknown field "metadata.${k}"`);
  const spec = SPEC_SCHEMAS[`${def.group}/${expectKind}`];
  if (spec && obj.spec !== undefined) for (const f of unknownFields(obj.spec, spec, 'spec')) unknown.push(`unknown field "${f}"`);
  if (unknown.length === 0) return [];
  if (mode === 'Strict') {
    throw new ApiError('BadRequest', `${expectKind} in version "${def.version}" cannot be handled as a ${expectKind}: strict decoding error: ${unknown.join(', ')}`);
  }
  return unknown;
}

/**
 * Problems every object shares: the types of the metadata fields the server reads (name,
 * generateName, namespace, ownerReferences, finalizers) and of `spec`/`status` (objects). Pure.
 */
export function validateCommon(obj: KubeObject): StatusCause[] {
  const out: StatusCause[] = [];
  const m = obj.metadata as Record<string, unknown>;
  for (const f of ['name', 'generateName', 'namespace']) {
    if (m[f] !== undefined && typeof m[f] !== 'string') out.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(m[f])}: must be a string`, field: `metadata.${f}` });
  }
  if (m.ownerReferences !== undefined) {
    if (!Array.isArray(m.ownerReferences)) out.push({ reason: 'FieldValueInvalid', message: 'Invalid value: must be a list of owner references', field: 'metadata.ownerReferences' });
    else {
      let controllers = 0;
      m.ownerReferences.forEach((r: unknown, i: number) => {
        const ref = (r ?? {}) as Record<string, unknown>;
        for (const f of ['apiVersion', 'kind', 'name', 'uid']) {
          if (typeof ref[f] !== 'string' || ref[f] === '') out.push({ reason: 'FieldValueRequired', message: 'Required value', field: `metadata.ownerReferences[${i}].${f}` });
        }
        if (ref.controller === true) controllers++;
      });
      if (controllers > 1) out.push({ reason: 'FieldValueInvalid', message: 'Invalid value: Only one reference can have Controller set to true', field: 'metadata.ownerReferences' });
    }
  }
  if (m.finalizers !== undefined && (!Array.isArray(m.finalizers) || m.finalizers.some((f) => typeof f !== 'string' || f === ''))) {
    out.push({ reason: 'FieldValueInvalid', message: 'Invalid value: must be a list of finalizer names', field: 'metadata.finalizers' });
  }
  for (const f of ['spec', 'status']) {
    const v = obj[f];
    if (v !== undefined && (v === null || typeof v !== 'object' || Array.isArray(v))) out.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(v)}: must be an object`, field: f });
  }
  return out;
}

/** Drops empty labels, annotations, finalizers and ownerReferences, as Kubernetes' JSON (omitempty) does. In place. */
export function normalizeMeta(obj: KubeObject): void {
  const m = obj.metadata as Record<string, unknown>;
  for (const k of ['labels', 'annotations']) {
    const v = m[k];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0) delete m[k];
  }
  for (const k of ['finalizers', 'ownerReferences', 'managedFields']) {
    if (Array.isArray(m[k]) && (m[k] as unknown[]).length === 0) delete m[k];
  }
}

/** The object with `apiVersion` and `kind` of its resource, as every answer carries them. */
export function withTypeMeta(def: ResourceDef, obj: KubeObject): KubeObject {
  return { apiVersion: apiVersionOf(def), kind: def.kind, ...obj, metadata: obj.metadata };
}
