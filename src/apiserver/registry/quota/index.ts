/**
 * `v1` ResourceQuota (with status) and LimitRange: their defaults, validation and the Table columns kubectl
 * prints. What they enforce is admission (admission.ts): a namespace's LimitRanges default and bound its pods'
 * containers, its ResourceQuotas refuse an object that would take it over a hard limit.
 */
import { QUOTA_SCOPES } from '../../../api/index.ts';
import { parseQuantity } from '../../../lib/index.ts';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, age, arr, invalidValue, NAME_COLUMN, rec, validateMetaMaps, validateSubdomain } from '../util.ts';

export { admitLimitRanges, admitQuota, QuotaNamespaces } from './admission.ts';

function quantityCauses(map: unknown, field: string): StatusCause[] {
  const out: StatusCause[] = [];
  for (const [k, v] of Object.entries(rec(map))) {
    let ok = typeof v === 'string' || typeof v === 'number';
    if (ok) {
      try {
        ok = parseQuantity(v as string | number) >= 0;
      } catch {
        ok = false;
      }
    }
    if (!ok) out.push(invalidValue(`${field}[${k}]`, v, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' and be non-negative"));
  }
  return out;
}

/** `name: used/hard` for each hard resource that `pick` keeps, as kubectl prints a quota's Request and Limit columns. */
function usageCell(o: KubeObject, pick: (name: string) => boolean): string {
  const st = rec(o.status);
  const used = rec(st.used);
  return Object.keys(rec(st.hard))
    .filter(pick)
    .sort()
    .map((k) => `${k}: ${String(used[k] ?? '0')}/${String(rec(st.hard)[k])}`)
    .join(', ');
}

/** Resource quotas: `spec.hard` and `spec.scopes` (Terminating, NotTerminating, BestEffort, NotBestEffort); `status.hard` and `status.used` are the quota controller's. */
export const resourcequotas: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'ResourceQuota',
  listKind: 'ResourceQuotaList',
  plural: 'resourcequotas',
  singular: 'resourcequota',
  namespaced: true,
  shortNames: ['quota'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  validate(obj) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj), ...quantityCauses(rec(obj.spec).hard, 'spec.hard')];
    const scopes = rec(obj.spec).scopes;
    (Array.isArray(scopes) ? scopes : []).forEach((s, i) => {
      if (!(QUOTA_SCOPES as readonly unknown[]).includes(s)) {
        out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(s)}: supported values: ${QUOTA_SCOPES.map((x) => `"${x}"`).join(', ')}`, field: `spec.scopes[${i}]` });
      }
    });
    return out;
  },
  columns: [NAME_COLUMN, AGE_COLUMN, { name: 'Request', type: 'string' }, { name: 'Limit', type: 'string' }],
  cells(o, now) {
    return [o.metadata.name, age(o.metadata.creationTimestamp, now), usageCell(o, (k) => !k.startsWith('limits.')), usageCell(o, (k) => k.startsWith('limits.'))];
  },
};

/**
 * A LimitRange item's defaults (Kubernetes' `SetDefaults_LimitRangeItem`), for `Container` items: a missing
 * `default` from `max`, a missing `defaultRequest` from `default`, then from `min`.
 */
function defaultLimitRange(obj: KubeObject): void {
  for (const item of arr(rec(obj.spec).limits)) {
    if (item.type !== 'Container') continue;
    const def = { ...rec(item.default) };
    const req = { ...rec(item.defaultRequest) };
    for (const [k, v] of Object.entries(rec(item.max))) def[k] ??= v;
    for (const [k, v] of Object.entries(def)) req[k] ??= v;
    for (const [k, v] of Object.entries(rec(item.min))) req[k] ??= v;
    if (Object.keys(def).length > 0) item.default = def;
    if (Object.keys(req).length > 0) item.defaultRequest = req;
  }
}

const LIMIT_TYPES = ['Container', 'Pod', 'PersistentVolumeClaim'];

/** Limit ranges: per container (or per pod) defaults, minimums and maximums, applied at admission. */
export const limitranges: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'LimitRange',
  listKind: 'LimitRangeList',
  plural: 'limitranges',
  singular: 'limitrange',
  namespaced: true,
  shortNames: ['limits'],
  subresources: [],
  hasStatus: false,
  fields: ['spec'],
  prepareForCreate: (obj) => defaultLimitRange(obj),
  prepareForUpdate: (obj) => defaultLimitRange(obj),
  validate(obj) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    arr(rec(obj.spec).limits).forEach((item, i) => {
      const f = `spec.limits[${i}]`;
      if (!LIMIT_TYPES.includes(String(item.type))) {
        out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(item.type)}: supported values: "Container", "PersistentVolumeClaim", "Pod"`, field: `${f}.type` });
      }
      for (const k of ['max', 'min', 'default', 'defaultRequest', 'maxLimitRequestRatio']) out.push(...quantityCauses(item[k], `${f}.${k}`));
      if (item.type === 'Pod' && (item.default !== undefined || item.defaultRequest !== undefined)) {
        out.push({ reason: 'FieldValueForbidden', message: 'Forbidden: may not be specified when `type` is \'Pod\'', field: `${f}.default` });
      }
      const min = rec(item.min);
      const max = rec(item.max);
      for (const [k, lo] of Object.entries(min)) {
        const hi = max[k];
        try {
          if (hi !== undefined && parseQuantity(lo as string) > parseQuantity(hi as string)) {
            out.push(invalidValue(`${f}.min[${k}]`, lo, `min value ${String(lo)} is greater than max value ${String(hi)}`));
          }
        } catch {
          // reported by quantityCauses
        }
      }
      for (const [k, d] of Object.entries(rec(item.default))) {
        try {
          if (max[k] !== undefined && parseQuantity(d as string) > parseQuantity(max[k] as string)) {
            out.push(invalidValue(`${f}.default[${k}]`, d, `default value ${String(d)} is greater than max value ${String(max[k])}`));
          }
          if (min[k] !== undefined && parseQuantity(d as string) < parseQuantity(min[k] as string)) {
            out.push(invalidValue(`${f}.default[${k}]`, d, `min value ${String(min[k])} is greater than default value ${String(d)}`));
          }
        } catch {
          // reported by quantityCauses
        }
      }
    });
    return out;
  },
  columns: [NAME_COLUMN, { name: 'Created At', type: 'date' }],
  cells(o) {
    return [o.metadata.name, o.metadata.creationTimestamp];
  },
};
