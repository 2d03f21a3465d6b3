/**
 * `apps/v1` workloads: deployments, replica sets (both with status and scale) and daemon sets (with
 * status): defaults, selector validation (it must match the template's labels and never change) and
 * the Table columns kubectl prints.
 */
import { isDeepStrictEqual } from 'node:util';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { defaultPodSpec } from '../pods/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, rec, required, selectorString, validateMetaMaps, validateSubdomain, validateTemplateMetaMaps } from '../util.ts';
import { parseLabelSelector, labelSelectorFromObject } from '../selectors.ts';

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
  });
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
    deployments.prepareForCreate!(obj, { now: new Date(), list: () => [] });
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

void parseLabelSelector;
