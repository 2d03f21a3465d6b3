/**
 * `kube32.io/v1` Checkpoint (seed 002 "Checkpoint objects and data"): a namespaced object with
 * status and data subresources. Table: NAME POD ACTION PHASE NODE SIZE AGE | TARGET NEW POD MESSAGE.
 */
import { formatBytes } from '../../../lib/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, invalidValue, rec, required, validateMetaMaps, validateSubdomain, immutable } from '../util.ts';

/** The phases of a Checkpoint (seed table). */
export const CHECKPOINT_PHASES = ['Pending', 'Saving', 'Saved', 'Moving', 'Completed', 'Failed'] as const;

/** checkpoints */
export const checkpoints: ResourceDef = {
  group: 'kube32.io',
  version: 'v1',
  kind: 'Checkpoint',
  listKind: 'CheckpointList',
  plural: 'checkpoints',
  singular: 'checkpoint',
  namespaced: true,
  shortNames: ['ckpt'],
  categories: ['kube32'],
  subresources: ['status', 'data'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.action ??= 'Save';
  },
  prepareForUpdate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.action ??= 'Save';
  },
  validate(obj, old) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return [...out, required('spec')];
    if (typeof spec.podName !== 'string' || !spec.podName) out.push(required('spec.podName'));
    else out.push(...validateSubdomain(spec.podName, 'spec.podName'));
    if (spec.action !== 'Save' && spec.action !== 'Move') {
      out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: "${String(spec.action)}": supported values: "Save", "Move"`, field: 'spec.action' });
    }
    if (spec.containerName !== undefined && typeof spec.containerName !== 'string') out.push(invalidValue('spec.containerName', spec.containerName, 'must be a string'));
    if (spec.target !== undefined && (spec.target === null || typeof spec.target !== 'object' || Array.isArray(spec.target))) {
      out.push(invalidValue('spec.target', spec.target, 'must be an object: nodeName or nodeSelector'));
    } else if (spec.target !== undefined) {
      const t = rec(spec.target);
      if (spec.action !== 'Move') out.push(invalidValue('spec.target', spec.target, 'only a Move has a target'));
      if (t.nodeName !== undefined && typeof t.nodeName !== 'string') out.push(invalidValue('spec.target.nodeName', t.nodeName, 'must be a string'));
      if (t.nodeSelector !== undefined && (typeof t.nodeSelector !== 'object' || Array.isArray(t.nodeSelector))) {
        out.push(invalidValue('spec.target.nodeSelector', t.nodeSelector, 'must be a map of labels'));
      }
      // The controller goes to a named node without looking at a selector: both would ignore the selector.
      if (t.nodeName !== undefined && t.nodeName !== null && t.nodeSelector !== undefined && t.nodeSelector !== null) {
        out.push(invalidValue('spec.target', spec.target, 'nodeName and nodeSelector are exclusive: name the node, or give a selector for the scheduler to pick among'));
      }
    }
    const phase = rec(obj.status).phase;
    if (phase !== undefined && !(CHECKPOINT_PHASES as readonly unknown[]).includes(phase)) {
      out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: "${String(phase)}": supported values: ${CHECKPOINT_PHASES.map((p) => `"${p}"`).join(', ')}`, field: 'status.phase' });
    }
    if (old) {
      const os = rec(old.spec);
      if (os.podName !== spec.podName) out.push(immutable('spec.podName'));
      if (os.action !== spec.action) out.push(immutable('spec.action'));
    }
    return out;
  },
  fieldSelectors: {
    'spec.podName': (o) => (rec(o.spec).podName as string | undefined) ?? '',
    'spec.action': (o) => (rec(o.spec).action as string | undefined) ?? '',
    'status.phase': (o) => (rec(o.status).phase as string | undefined) ?? '',
  },
  columns: [
    NAME_COLUMN,
    { name: 'Pod', type: 'string', description: 'The pod' },
    { name: 'Action', type: 'string', description: 'Save or Move' },
    { name: 'Phase', type: 'string', description: 'Pending, Saving, Saved, Moving, Completed or Failed' },
    { name: 'Node', type: 'string', description: 'Where the snapshot was taken' },
    { name: 'Size', type: 'string', description: 'Bytes of the stored snapshot' },
    { ...AGE_COLUMN, type: 'date' },
    { name: 'Target', type: 'string', priority: 1, description: 'The node the pod moves to' },
    { name: 'New Pod', type: 'string', priority: 1, description: 'The replacement pod' },
    { name: 'Message', type: 'string', priority: 1, description: 'The outcome' },
    { name: 'Kind', type: 'string', priority: 1, description: 'The snapshot it holds: wasm (in its data) or microvm (a FeOS hibernation in the object store)' },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const st = rec(o.status);
    const size = typeof st.sizeBytes === 'number' ? formatBytes(st.sizeBytes) : null;
    return [
      o.metadata.name,
      spec.podName ?? null,
      spec.action ?? null,
      st.phase ?? null,
      st.nodeName ?? null,
      size,
      age(o.metadata.creationTimestamp, now),
      st.targetNode ?? rec(spec.target).nodeName ?? null,
      st.newPodName ?? null,
      st.message ?? null,
      st.snapshotKind ?? null,
    ];
  },
};
