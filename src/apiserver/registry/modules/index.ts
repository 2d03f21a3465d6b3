/**
 * `kube32.io/v1` Module (cluster-scoped, plural modules): one stored WebAssembly module for pod
 * images `wasm://NAME`. Its bytes live content-addressed in the object store (`PUT .../data`);
 * `spec.sha256` (hex) and `spec.sizeBytes` describe them.
 */
import { formatBytes } from '../../../lib/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, invalidValue, rec, validateMetaMaps, validateSubdomain } from '../util.ts';

const HEX64 = /^[0-9a-f]{64}$/;

/** modules */
export const modules: ResourceDef = {
  group: 'kube32.io',
  version: 'v1',
  kind: 'Module',
  listKind: 'ModuleList',
  plural: 'modules',
  singular: 'module',
  namespaced: false,
  shortNames: ['mod'],
  categories: ['kube32'],
  subresources: ['data'],
  hasStatus: false,
  fields: ['spec'],
  validate(obj) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    const spec = rec(obj.spec);
    if (typeof spec.sha256 !== 'string' || !HEX64.test(spec.sha256)) out.push(invalidValue('spec.sha256', spec.sha256, 'must be 64 lowercase hex digits'));
    if (typeof spec.sizeBytes !== 'number' || !Number.isInteger(spec.sizeBytes) || spec.sizeBytes < 0) out.push(invalidValue('spec.sizeBytes', spec.sizeBytes, 'must be a non-negative integer'));
    return out;
  },
  columns: [NAME_COLUMN, { name: 'SHA256', type: 'string' }, { name: 'Size', type: 'string' }, AGE_COLUMN],
  cells(o, now) {
    const spec = rec(o.spec);
    return [o.metadata.name, typeof spec.sha256 === 'string' ? spec.sha256.slice(0, 12) : '', typeof spec.sizeBytes === 'number' ? formatBytes(spec.sizeBytes) : '', age(o.metadata.creationTimestamp, now)];
  },
};
