/**
 * HorizontalPodAutoscalers: `autoscaling/v2` stored, and `autoscaling/v1` served as a version of the same
 * objects (converted on the way, as kube-apiserver converts between them), with Kubernetes' defaults
 * (`SetDefaults_HorizontalPodAutoscaler`: minReplicas 1, a CPU utilization of 80 % when no metric is
 * given, a given `behavior`'s missing rules filled in) and validation (`ValidateHorizontalPodAutoscaler`:
 * the target's kind and name, minReplicas at least 1, maxReplicas at least minReplicas, each metric's
 * type, resource name and target). The controller is src/controllers/autoscaling.
 *
 * autoscaling/v1 has one metric, `targetCPUUtilizationPercentage`; a v2 object's other metrics do not show
 * through v1 (kube-apiserver keeps them in an annotation; Kube32 keeps them only in the stored v2 object,
 * which a v1 write replaces: docs/apiserver.md).
 */
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, rec, required, validateMetaMaps, validateSubdomain } from '../util.ts';

/** The CPU utilization an HPA without metrics aims at, percent (`autoscaling.DefaultCPUUtilization`). */
export const DEFAULT_CPU_UTILIZATION = 80;

const METRIC_TYPES = ['ContainerResource', 'External', 'Object', 'Pods', 'Resource'];
const TARGET_TYPES = ['AverageValue', 'Utilization', 'Value'];

/** `GenerateHPAScaleUpRules`: the default scale-up rules, a given rule's fields kept. */
function scaleUpRules(given: unknown): Record<string, unknown> {
  const g = rec(given);
  return {
    stabilizationWindowSeconds: g.stabilizationWindowSeconds ?? 0,
    selectPolicy: g.selectPolicy ?? 'Max',
    policies: g.policies ?? [
      { type: 'Pods', value: 4, periodSeconds: 15 },
      { type: 'Percent', value: 100, periodSeconds: 15 },
    ],
  };
}

/** `GenerateHPAScaleDownRules`: the default scale-down rules (the window stays the controller's flag when unset). */
function scaleDownRules(given: unknown): Record<string, unknown> {
  const g = rec(given);
  return {
    ...(g.stabilizationWindowSeconds !== undefined ? { stabilizationWindowSeconds: g.stabilizationWindowSeconds } : {}),
    selectPolicy: g.selectPolicy ?? 'Max',
    policies: g.policies ?? [{ type: 'Percent', value: 100, periodSeconds: 15 }],
  };
}

/** Kubernetes' v2 defaults, in place. */
function setDefaults(obj: KubeObject): void {
  const spec = rec(obj.spec);
  obj.spec = spec;
  if (spec.minReplicas === undefined || spec.minReplicas === null) spec.minReplicas = 1;
  if (!Array.isArray(spec.metrics) || spec.metrics.length === 0) {
    spec.metrics = [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: DEFAULT_CPU_UTILIZATION } } }];
  }
  if (spec.behavior !== undefined && spec.behavior !== null) {
    const b = rec(spec.behavior);
    spec.behavior = { scaleUp: scaleUpRules(b.scaleUp), scaleDown: scaleDownRules(b.scaleDown) };
  }
}

const cause = (reason: string, field: string, message: string): StatusCause => ({ reason, field, message });
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/** The causes of a metric target (`validateMetricTarget`). */
function validateTarget(target: unknown, field: string, resource: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  const t = rec(target);
  if (target === undefined) return [cause('FieldValueRequired', field, 'Required value: must specify a metric target')];
  if (t.type === undefined) out.push(cause('FieldValueRequired', `${field}.type`, 'Required value: must specify a metric target type'));
  else if (!TARGET_TYPES.includes(String(t.type))) out.push(cause('FieldValueNotSupported', `${field}.type`, `Unsupported value: ${JSON.stringify(t.type)}: supported values: ${TARGET_TYPES.map((x) => `"${x}"`).join(', ')}`));
  if (t.averageUtilization !== undefined && (!isInt(t.averageUtilization) || t.averageUtilization < 1)) {
    out.push(cause('FieldValueInvalid', `${field}.averageUtilization`, `Invalid value: ${JSON.stringify(t.averageUtilization)}: must be greater than 0`));
  }
  if (t.type === 'Utilization' && t.averageUtilization === undefined) out.push(cause('FieldValueRequired', `${field}.averageUtilization`, 'Required value: must set either a target raw value or a target utilization'));
  if (t.type === 'AverageValue' && t.averageValue === undefined) out.push(cause('FieldValueRequired', `${field}.averageValue`, 'Required value: must set either a target raw value or a target utilization'));
  if (t.type === 'Value' && t.value === undefined) out.push(cause('FieldValueRequired', `${field}.value`, 'Required value: must set either a target value, average value, or average utilization'));
  if (resource && t.type === 'Value') out.push(cause('FieldValueInvalid', `${field}.type`, 'Invalid value: "Value": must be either Utilization or AverageValue'));
  return out;
}

/** The causes of a v2 HPA (`ValidateHorizontalPodAutoscaler`). */
function validate(obj: KubeObject): StatusCause[] {
  const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  const spec = rec(obj.spec);
  const ref = rec(spec.scaleTargetRef);
  if (!ref.kind) out.push(cause('FieldValueRequired', 'spec.scaleTargetRef.kind', 'Required value'));
  if (!ref.name) out.push(required('spec.scaleTargetRef.name'));
  else if (String(ref.name).includes('/') || ref.name === '.' || ref.name === '..') out.push(cause('FieldValueInvalid', 'spec.scaleTargetRef.name', `Invalid value: ${JSON.stringify(ref.name)}: may not contain '/'`));
  const min = spec.minReplicas;
  const max = spec.maxReplicas;
  if (min !== undefined && (!isInt(min) || min < 1)) out.push(cause('FieldValueInvalid', 'spec.minReplicas', `Invalid value: ${JSON.stringify(min)}: must be greater than or equal to 1`));
  if (max === undefined) out.push(required('spec.maxReplicas'));
  else if (!isInt(max) || max < 1) out.push(cause('FieldValueInvalid', 'spec.maxReplicas', `Invalid value: ${JSON.stringify(max)}: must be greater than 0`));
  else if (isInt(min) && max < min) out.push(cause('FieldValueInvalid', 'spec.maxReplicas', `Invalid value: ${max}: must be greater than or equal to \`minReplicas\``));
  arr(spec.metrics).forEach((m, i) => {
    const f = `spec.metrics[${i}]`;
    if (!METRIC_TYPES.includes(String(m.type))) {
      out.push(cause(m.type === undefined ? 'FieldValueRequired' : 'FieldValueNotSupported', `${f}.type`, m.type === undefined ? 'Required value: must specify a metric source type' : `Unsupported value: ${JSON.stringify(m.type)}: supported values: ${METRIC_TYPES.map((x) => `"${x}"`).join(', ')}`));
      return;
    }
    const key = String(m.type).charAt(0).toLowerCase() + String(m.type).slice(1);
    const src = m[key];
    if (src === undefined) {
      out.push(cause('FieldValueRequired', `${f}.${key}`, `Required value: must populate information for the given metric source (only allowed when type is ${m.type})`));
      return;
    }
    const s = rec(src);
    if (m.type === 'Resource' || m.type === 'ContainerResource') {
      if (!s.name) out.push(cause('FieldValueRequired', `${f}.${key}.name`, 'Required value: must specify a resource name'));
      if (m.type === 'ContainerResource' && !s.container) out.push(cause('FieldValueRequired', `${f}.${key}.container`, 'Required value: must specify a container'));
      out.push(...validateTarget(s.target, `${f}.${key}.target`, true));
    } else {
      if (!rec(s.metric).name) out.push(cause('FieldValueRequired', `${f}.${key}.metric.name`, 'Required value: must specify a metric name'));
      out.push(...validateTarget(s.target, `${f}.${key}.target`, false));
    }
  });
  for (const dir of ['scaleUp', 'scaleDown'] as const) {
    const rules = rec(rec(spec.behavior)[dir]);
    const w = rules.stabilizationWindowSeconds;
    if (w !== undefined && (!isInt(w) || w < 0 || w > 3600)) out.push(cause('FieldValueInvalid', `spec.behavior.${dir}.stabilizationWindowSeconds`, `Invalid value: ${JSON.stringify(w)}: must be less than or equal to 3600 and greater than or equal to 0`));
    arr(rules.policies).forEach((p, i) => {
      const f = `spec.behavior.${dir}.policies[${i}]`;
      if (p.type !== 'Pods' && p.type !== 'Percent') out.push(cause('FieldValueNotSupported', `${f}.type`, `Unsupported value: ${JSON.stringify(p.type)}: supported values: "Percent", "Pods"`));
      if (!isInt(p.value) || p.value <= 0) out.push(cause('FieldValueInvalid', `${f}.value`, `Invalid value: ${JSON.stringify(p.value)}: must be greater than zero`));
      if (!isInt(p.periodSeconds) || p.periodSeconds <= 0 || p.periodSeconds > 1800) out.push(cause('FieldValueInvalid', `${f}.periodSeconds`, `Invalid value: ${JSON.stringify(p.periodSeconds)}: must be greater than zero and less than or equal to 1800`));
    });
  }
  return out;
}

/** `cpu: 12%/50%` per metric, as kubectl 1.32's printer writes TARGETS. */
function targets(o: KubeObject): string {
  const spec = rec(o.spec);
  const current = arr(rec(o.status).currentMetrics);
  const parts = arr(spec.metrics).map((m, i) => {
    if (m.type !== 'Resource' && m.type !== 'ContainerResource') return `${String(m.type)}: <unknown>`;
    const r = rec(m[m.type === 'Resource' ? 'resource' : 'containerResource']);
    const t = rec(r.target);
    const cur = rec(rec(current[i]?.[m.type === 'Resource' ? 'resource' : 'containerResource']).current);
    if (t.type === 'Utilization') return `${String(r.name)}: ${cur.averageUtilization !== undefined ? `${String(cur.averageUtilization)}%` : '<unknown>'}/${String(t.averageUtilization)}%`;
    return `${String(r.name)}: ${cur.averageValue !== undefined ? String(cur.averageValue) : '<unknown>'}/${String(t.averageValue ?? t.value)}`;
  });
  return parts.length ? parts.join(', ') : '<none>';
}

/** autoscaling/v2 horizontal pod autoscalers */
export const horizontalpodautoscalers: ResourceDef = {
  group: 'autoscaling',
  version: 'v2',
  kind: 'HorizontalPodAutoscaler',
  listKind: 'HorizontalPodAutoscalerList',
  plural: 'horizontalpodautoscalers',
  singular: 'horizontalpodautoscaler',
  namespaced: true,
  shortNames: ['hpa'],
  categories: ['all'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate: setDefaults,
  prepareForUpdate: setDefaults,
  validate,
  columns: [
    NAME_COLUMN,
    { name: 'Reference', type: 'string', description: 'scaleTargetRef points to the target resource to scale' },
    { name: 'Targets', type: 'string', description: 'metrics contains the specifications for which to use to calculate the desired replica count' },
    { name: 'MinPods', type: 'string', description: 'minReplicas is the lower limit for the number of replicas' },
    { name: 'MaxPods', type: 'integer', description: 'maxReplicas is the upper limit for the number of replicas' },
    { name: 'Replicas', type: 'integer', description: 'currentReplicas is current number of replicas of pods managed by this autoscaler' },
    AGE_COLUMN,
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const ref = rec(spec.scaleTargetRef);
    return [o.metadata.name, `${String(ref.kind)}/${String(ref.name)}`, targets(o), String(spec.minReplicas ?? 1), spec.maxReplicas, rec(o.status).currentReplicas ?? 0, age(o.metadata.creationTimestamp, now)];
  },
};

/** A v1 HPA as stored (v2): its one CPU target becomes a Resource metric. */
function v1ToV2(o: KubeObject): KubeObject {
  const spec = rec(o.spec);
  const status = rec(o.status);
  const cpu = spec.targetCPUUtilizationPercentage;
  const out: KubeObject = {
    metadata: o.metadata,
    spec: {
      scaleTargetRef: spec.scaleTargetRef,
      ...(spec.minReplicas !== undefined ? { minReplicas: spec.minReplicas } : {}),
      maxReplicas: spec.maxReplicas,
      ...(cpu !== undefined && cpu !== null ? { metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: cpu } } }] } : {}),
    },
  };
  if (o.status !== undefined) {
    out.status = {
      ...(status.observedGeneration !== undefined ? { observedGeneration: status.observedGeneration } : {}),
      ...(status.lastScaleTime !== undefined ? { lastScaleTime: status.lastScaleTime } : {}),
      currentReplicas: status.currentReplicas ?? 0,
      desiredReplicas: status.desiredReplicas ?? 0,
      ...(status.currentCPUUtilizationPercentage !== undefined ? { currentMetrics: [{ type: 'Resource', resource: { name: 'cpu', current: { averageUtilization: status.currentCPUUtilizationPercentage } } }] } : {}),
    };
  }
  return out;
}

/** A stored (v2) HPA as v1: its CPU utilization metric, if any, is `targetCPUUtilizationPercentage`. */
function v2ToV1(o: KubeObject): KubeObject {
  const spec = rec(o.spec);
  const status = rec(o.status);
  const cpu = arr(spec.metrics).find((m) => m.type === 'Resource' && rec(m.resource).name === 'cpu' && rec(rec(m.resource).target).type === 'Utilization');
  const cur = arr(status.currentMetrics).find((m) => m.type === 'Resource' && rec(m.resource).name === 'cpu');
  const curUtil = rec(rec(cur?.resource).current).averageUtilization;
  return {
    metadata: o.metadata,
    spec: {
      scaleTargetRef: spec.scaleTargetRef,
      ...(spec.minReplicas !== undefined ? { minReplicas: spec.minReplicas } : {}),
      maxReplicas: spec.maxReplicas,
      ...(cpu ? { targetCPUUtilizationPercentage: rec(rec(cpu.resource).target).averageUtilization } : {}),
    },
    status: {
      ...(status.observedGeneration !== undefined ? { observedGeneration: status.observedGeneration } : {}),
      ...(status.lastScaleTime !== undefined ? { lastScaleTime: status.lastScaleTime } : {}),
      currentReplicas: status.currentReplicas ?? 0,
      desiredReplicas: status.desiredReplicas ?? 0,
      ...(curUtil !== undefined ? { currentCPUUtilizationPercentage: curUtil } : {}),
    },
  };
}

/** autoscaling/v1 horizontal pod autoscalers, stored as v2 */
export const horizontalpodautoscalersV1: ResourceDef = {
  ...horizontalpodautoscalers,
  version: 'v1',
  subresources: [],
  storedAs: { def: horizontalpodautoscalers, toStored: v1ToV2, fromStored: v2ToV1 },
};
