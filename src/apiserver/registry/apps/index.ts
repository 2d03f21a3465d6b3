/**
 * `apps/v1` workloads: deployments, replica sets, stateful sets (with status and scale), daemon sets (with
 * status) and controller revisions (a StatefulSet's template history): defaults, selector validation (it must
 * match the template's labels and never change) and the Table columns kubectl prints.
 */
import { isDeepStrictEqual } from 'node:util';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { defaultPodSpec, validateContainerPorts, validateContainerResources } from '../pods/index.ts';
import { labelSelectorFromObject, parseLabelSelector } from '../selectors.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, age, arr, immutable, invalidValue, NAME_COLUMN, rec, required, selectorString, validateMetaMaps, validateSubdomain, validateTemplateMetaMaps } from '../util.ts';

/**
 * Defaults a workload's pod template in place, and leaves out the zeros that mean "not set": a template's
 * `metadata.generation: 0` and a port's `hostPort: 0`. Kubernetes' protobuf writes every non-pointer
 * number, so `kubectl create deployment --port` sends both, where the same template as JSON (what
 * `kubectl rollout undo` sends) has neither; stored alike, the same template is the same ReplicaSet.
 */
function defaultTemplate(spec: Record<string, unknown>): void {
  const tpl = rec(spec.template);
  spec.template = tpl;
  tpl.metadata ??= {};
  const meta = rec(tpl.metadata);
  if (meta.generation === 0) delete meta.generation;
  tpl.spec = rec(tpl.spec);
  const podSpec = tpl.spec as Record<string, unknown>;
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(podSpec[list])) {
      for (const p of arr(c.ports)) if (p.hostPort === 0) delete p.hostPort;
    }
  }
  defaultPodSpec(podSpec);
}

function validateWorkload(obj: KubeObject, old: KubeObject | undefined, withReplicas: boolean): StatusCause[] {
  const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj), ...validateTemplateMetaMaps(obj)];
  const spec = rec(obj.spec);
  if (obj.spec === undefined) return [...out, required('spec')];
  if (withReplicas && (typeof spec.replicas !== 'number' || !Number.isInteger(spec.replicas) || spec.replicas < 0)) {
    out.push(invalidValue('spec.replicas', spec.replicas, 'must be greater than or equal to 0'));
  }
  const sel = spec.selector;
  if (!sel || (Object.keys(rec(rec(sel).matchLabels)).length === 0 && arr(rec(sel).matchExpressions).length === 0)) {
    out.push(required('spec.selector'));
  } else {
    try {
      const match = labelSelectorFromObject(sel);
      const labels = (rec(rec(spec.template).metadata).labels ?? {}) as Record<string, string>;
      if (!match(labels)) out.push(invalidValue('spec.template.metadata.labels', labels, '`selector` does not match template `labels`'));
    } catch (err: unknown) {
      out.push(invalidValue('spec.selector', sel, err instanceof Error ? err.message : String(err)));
    }
  }
  const containers = arr(rec(rec(spec.template).spec).containers);
  if (containers.length === 0) out.push(required('spec.template.spec.containers'));
  containers.forEach((c, i) => {
    if (typeof c.image !== 'string' || !c.image) out.push(required(`spec.template.spec.containers[${i}].image`));
    if (typeof c.name !== 'string' || !c.name) out.push(required(`spec.template.spec.containers[${i}].name`));
    out.push(...validateContainerPorts(c, `spec.template.spec.containers[${i}]`));
    out.push(...validateContainerResources(c, `spec.template.spec.containers[${i}]`));
  });
  // ValidateNonnegativeField of each workload's counts (their Go types were checked as the body was decoded).
  for (const f of ['minReadySeconds', 'revisionHistoryLimit', 'progressDeadlineSeconds']) {
    const v = spec[f];
    if (typeof v === 'number' && v < 0) out.push(invalidValue(`spec.${f}`, v, 'must be greater than or equal to 0'));
  }
  // A Deployment's (no other workload has one).
  const deadline = spec.progressDeadlineSeconds;
  if (typeof deadline === 'number' && deadline >= 0 && deadline <= (typeof spec.minReadySeconds === 'number' ? spec.minReadySeconds : 0)) {
    out.push(invalidValue('spec.progressDeadlineSeconds', deadline, 'must be greater than minReadySeconds'));
  }
  if (old && !isDeepStrictEqual(rec(old.spec).selector, spec.selector)) out.push(immutable('spec.selector'));
  return out;
}

const intOr = (v: unknown) => (typeof v === 'number' ? v : 0);

/** deployments */
export const deployments: ResourceDef = {
  group: 'apps',
  version: 'v1',
  kind: 'Deployment',
  listKind: 'DeploymentList',
  plural: 'deployments',
  singular: 'deployment',
  namespaced: true,
  shortNames: ['deploy'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  hasStatus: true,
  scale: { specReplicas: ['spec', 'replicas'], statusReplicas: ['status', 'replicas'], selector: ['spec', 'selector'] },
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.replicas ??= 1;
    spec.revisionHistoryLimit ??= 10;
    spec.progressDeadlineSeconds ??= 600;
    const strat = rec(spec.strategy);
    spec.strategy = strat;
    strat.type ??= 'RollingUpdate';
    if (strat.type === 'RollingUpdate') strat.rollingUpdate = { maxUnavailable: '25%', maxSurge: '25%', ...rec(strat.rollingUpdate) };
    defaultTemplate(spec);
  },
  prepareForUpdate(obj) {
    if (obj.spec === undefined) return;
    deployments.prepareForCreate!(obj, { now: new Date(), list: async () => [] });
  },
  validate: (obj, old) => validateWorkload(obj, old, true),
  columns: [
    NAME_COLUMN,
    { name: 'Ready', type: 'string' },
    { name: 'Up-to-date', type: 'integer' },
    { name: 'Available', type: 'integer' },
    AGE_COLUMN,
    { name: 'Containers', type: 'string', priority: 1 },
    { name: 'Images', type: 'string', priority: 1 },
    { name: 'Selector', type: 'string', priority: 1 },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const st = rec(o.status);
    const cs = arr(rec(rec(spec.template).spec).containers);
    return [
      o.metadata.name,
      `${intOr(st.readyReplicas)}/${intOr(spec.replicas)}`,
      intOr(st.updatedReplicas),
      intOr(st.availableReplicas),
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
      selectorString(spec.selector),
    ];
  },
};

/** replica sets */
export const replicasets: ResourceDef = {
  group: 'apps',
  version: 'v1',
  kind: 'ReplicaSet',
  listKind: 'ReplicaSetList',
  plural: 'replicasets',
  singular: 'replicaset',
  namespaced: true,
  shortNames: ['rs'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  hasStatus: true,
  scale: { specReplicas: ['spec', 'replicas'], statusReplicas: ['status', 'replicas'], selector: ['spec', 'selector'] },
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.replicas ??= 1;
    defaultTemplate(spec);
    obj.status = { replicas: 0 };
  },
  prepareForUpdate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.replicas ??= 1;
    defaultTemplate(spec);
  },
  validate: (obj, old) => validateWorkload(obj, old, true),
  fieldSelectors: { 'status.replicas': (o) => String(rec(o.status).replicas ?? 0) },
  columns: [
    NAME_COLUMN,
    { name: 'Desired', type: 'integer' },
    { name: 'Current', type: 'integer' },
    { name: 'Ready', type: 'integer' },
    AGE_COLUMN,
    { name: 'Containers', type: 'string', priority: 1 },
    { name: 'Images', type: 'string', priority: 1 },
    { name: 'Selector', type: 'string', priority: 1 },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const st = rec(o.status);
    const cs = arr(rec(rec(spec.template).spec).containers);
    return [
      o.metadata.name,
      intOr(spec.replicas),
      intOr(st.replicas),
      intOr(st.readyReplicas),
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
      selectorString(spec.selector),
    ];
  },
};

/** daemon sets */
export const daemonsets: ResourceDef = {
  group: 'apps',
  version: 'v1',
  kind: 'DaemonSet',
  listKind: 'DaemonSetList',
  plural: 'daemonsets',
  singular: 'daemonset',
  namespaced: true,
  shortNames: ['ds'],
  categories: ['all'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.revisionHistoryLimit ??= 10;
    const strat = rec(spec.updateStrategy);
    spec.updateStrategy = strat;
    strat.type ??= 'RollingUpdate';
    if (strat.type === 'RollingUpdate') strat.rollingUpdate = { maxUnavailable: 1, maxSurge: 0, ...rec(strat.rollingUpdate) };
    defaultTemplate(spec);
    obj.status = { currentNumberScheduled: 0, numberMisscheduled: 0, desiredNumberScheduled: 0, numberReady: 0 };
  },
  prepareForUpdate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    defaultTemplate(spec);
  },
  validate: (obj, old) => validateWorkload(obj, old, false),
  columns: [
    NAME_COLUMN,
    { name: 'Desired', type: 'integer' },
    { name: 'Current', type: 'integer' },
    { name: 'Ready', type: 'integer' },
    { name: 'Up-to-date', type: 'integer' },
    { name: 'Available', type: 'integer' },
    { name: 'Node Selector', type: 'string' },
    AGE_COLUMN,
    { name: 'Containers', type: 'string', priority: 1 },
    { name: 'Images', type: 'string', priority: 1 },
    { name: 'Selector', type: 'string', priority: 1 },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const st = rec(o.status);
    const tspec = rec(rec(spec.template).spec);
    const cs = arr(tspec.containers);
    const ns = Object.entries(rec(tspec.nodeSelector)).map(([k, v]) => `${k}=${String(v)}`).join(',') || '<none>';
    return [
      o.metadata.name,
      intOr(st.desiredNumberScheduled),
      intOr(st.currentNumberScheduled),
      intOr(st.numberReady),
      intOr(st.updatedNumberScheduled),
      intOr(st.numberAvailable),
      ns,
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
      selectorString(spec.selector),
    ];
  },
};

/** The StatefulSet spec fields an update may change (Kubernetes' `ValidateStatefulSetUpdate`). */
const STATEFULSET_MUTABLE = ['replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy', 'minReadySeconds'];

function validateStatefulSet(obj: KubeObject, old: KubeObject | undefined): StatusCause[] {
  const out = validateWorkload(obj, old, true);
  const spec = rec(obj.spec);
  if (obj.spec === undefined) return out;
  const policy = spec.podManagementPolicy;
  if (policy !== 'OrderedReady' && policy !== 'Parallel') {
    out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(policy)}: supported values: "OrderedReady", "Parallel"`, field: 'spec.podManagementPolicy' });
  }
  const strat = rec(spec.updateStrategy);
  if (strat.type !== 'RollingUpdate' && strat.type !== 'OnDelete') {
    out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(strat.type)}: supported values: "OnDelete", "RollingUpdate"`, field: 'spec.updateStrategy.type' });
  }
  const ru = rec(strat.rollingUpdate);
  if (strat.type === 'OnDelete' && strat.rollingUpdate !== undefined) {
    out.push({ reason: 'FieldValueInvalid', message: 'Invalid value: only allowed for updateStrategy \'RollingUpdate\'', field: 'spec.updateStrategy.rollingUpdate' });
  }
  if (ru.partition !== undefined && (typeof ru.partition !== 'number' || !Number.isInteger(ru.partition) || ru.partition < 0)) {
    out.push(invalidValue('spec.updateStrategy.rollingUpdate.partition', ru.partition, 'must be greater than or equal to 0'));
  }
  const start = rec(spec.ordinals).start;
  if (start !== undefined && (typeof start !== 'number' || !Number.isInteger(start) || start < 0)) {
    out.push(invalidValue('spec.ordinals.start', start, 'must be greater than or equal to 0'));
  }
  const restart = rec(rec(spec.template).spec).restartPolicy;
  if (restart !== undefined && restart !== 'Always') {
    out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(restart)}: supported values: "Always"`, field: 'spec.template.spec.restartPolicy' });
  }
  if (old) {
    const was = rec(old.spec);
    const fixed = (s: Record<string, unknown>) => Object.fromEntries(Object.entries(s).filter(([k]) => !STATEFULSET_MUTABLE.includes(k) && k !== 'selector'));
    if (!isDeepStrictEqual(fixed(spec), fixed(was))) {
      out.push({
        reason: 'FieldValueForbidden',
        message: "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        field: 'spec',
      });
    }
  }
  return out;
}

/**
 * Stateful sets: pods `<name>-<ordinal>` made in order (src/controllers/workloads/statefulset.ts). The defaults
 * are kube-apiserver's: one replica, `OrderedReady`, `RollingUpdate` with partition 0, ten revisions kept, and
 * the PVC retention policy `Retain` (Kube32 has no volume claims; kept as sent).
 */
export const statefulsets: ResourceDef = {
  group: 'apps',
  version: 'v1',
  kind: 'StatefulSet',
  listKind: 'StatefulSetList',
  plural: 'statefulsets',
  singular: 'statefulset',
  namespaced: true,
  shortNames: ['sts'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  hasStatus: true,
  scale: { specReplicas: ['spec', 'replicas'], statusReplicas: ['status', 'replicas'], selector: ['spec', 'selector'] },
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    spec.replicas ??= 1;
    spec.podManagementPolicy ??= 'OrderedReady';
    spec.revisionHistoryLimit ??= 10;
    const strat = rec(spec.updateStrategy);
    spec.updateStrategy = strat;
    strat.type ??= 'RollingUpdate';
    if (strat.type === 'RollingUpdate') strat.rollingUpdate = { partition: 0, ...rec(strat.rollingUpdate) };
    spec.persistentVolumeClaimRetentionPolicy = { whenDeleted: 'Retain', whenScaled: 'Retain', ...rec(spec.persistentVolumeClaimRetentionPolicy) };
    defaultTemplate(spec);
  },
  prepareForUpdate(obj) {
    if (obj.spec === undefined) return;
    statefulsets.prepareForCreate!(obj, { now: new Date(), list: async () => [] });
  },
  validate: (obj, old) => validateStatefulSet(obj, old),
  columns: [NAME_COLUMN, { name: 'Ready', type: 'string' }, AGE_COLUMN, { name: 'Containers', type: 'string', priority: 1 }, { name: 'Images', type: 'string', priority: 1 }],
  cells(o, now) {
    const spec = rec(o.spec);
    const st = rec(o.status);
    const cs = arr(rec(rec(spec.template).spec).containers);
    return [
      o.metadata.name,
      `${intOr(st.readyReplicas)}/${intOr(spec.replicas)}`,
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
    ];
  },
};

/** Controller revisions: a StatefulSet's templates by revision (`data` is the template as a patch, `revision` its number). */
export const controllerrevisions: ResourceDef = {
  group: 'apps',
  version: 'v1',
  kind: 'ControllerRevision',
  listKind: 'ControllerRevisionList',
  plural: 'controllerrevisions',
  singular: 'controllerrevision',
  namespaced: true,
  subresources: [],
  hasStatus: false,
  fields: ['data', 'revision'],
  validate(obj, old) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    const rev = (obj as Record<string, unknown>).revision;
    if (typeof rev !== 'number' || !Number.isInteger(rev) || rev < 0) out.push(invalidValue('revision', rev, 'must be greater than or equal to 0'));
    if (old && !isDeepStrictEqual((old as Record<string, unknown>).data, (obj as Record<string, unknown>).data)) out.push(immutable('data'));
    return out;
  },
  columns: [NAME_COLUMN, { name: 'Controller', type: 'string' }, { name: 'Revision', type: 'integer' }, AGE_COLUMN],
  cells(o, now) {
    const owner = (o.metadata.ownerReferences ?? []).find((r) => r.controller);
    // As kubectl prints a GroupKind: `statefulset.apps/web`, and `kind/name` for the core group (`v1`).
    const group = owner && String(owner.apiVersion).includes('/') ? `.${String(owner.apiVersion).split('/')[0]}` : '';
    const ctl = owner ? `${String(owner.kind).toLowerCase()}${group}/${owner.name}` : '<none>';
    return [o.metadata.name, ctl, intOr((o as Record<string, unknown>).revision), age(o.metadata.creationTimestamp, now)];
  },
};

void parseLabelSelector;
