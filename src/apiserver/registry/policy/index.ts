/**
 * `policy/v1` PodDisruptionBudgets: what an eviction must respect (429 TooManyRequests when it
 * would take the matching pods below the budget).
 */
import { labelSelectorFromObject } from '../selectors.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, rec, required, validateMetaMaps, validateSubdomain, invalidValue } from '../util.ts';

/** pod disruption budgets */
export const poddisruptionbudgets: ResourceDef = {
  group: 'policy',
  version: 'v1',
  kind: 'PodDisruptionBudget',
  listKind: 'PodDisruptionBudgetList',
  plural: 'poddisruptionbudgets',
  singular: 'poddisruptionbudget',
  namespaced: true,
  shortNames: ['pdb'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  validate(obj) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    const spec = rec(obj.spec);
    if (spec.minAvailable !== undefined && spec.maxUnavailable !== undefined) {
      out.push(invalidValue('spec', spec, 'minAvailable and maxUnavailable cannot be both set'));
    }
    if (spec.selector === undefined) out.push(required('spec.selector'));
    else {
      try {
        if (spec.selector === null || typeof spec.selector !== 'object' || Array.isArray(spec.selector)) throw new Error('must be a label selector');
        labelSelectorFromObject(spec.selector);
      } catch (err: unknown) {
        out.push(invalidValue('spec.selector', spec.selector, err instanceof Error ? err.message : String(err)));
      }
    }
    return out;
  },
  columns: [
    NAME_COLUMN,
    { name: 'Min Available', type: 'string' },
    { name: 'Max Unavailable', type: 'string' },
    { name: 'Allowed Disruptions', type: 'integer' },
    AGE_COLUMN,
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    return [o.metadata.name, spec.minAvailable ?? 'N/A', spec.maxUnavailable ?? 'N/A', rec(o.status).disruptionsAllowed ?? 0, age(o.metadata.creationTimestamp, now)];
  },
};
