/**
 * One sync of a HorizontalPodAutoscaler (Kubernetes' `reconcileAutoscaler`): read the target's Scale
 * (`apps/v1` Deployment, ReplicaSet or StatefulSet), its pods (the cache, by the Scale's selector) and
 * their PodMetrics (`metrics.k8s.io`, which the API server reads from the kubelets), compute each metric's
 * replicas (replicas.ts), take the largest, stabilize and limit it, write the Scale when it changes (event
 * `SuccessfulRescale`), and write the status: currentReplicas, desiredReplicas, currentMetrics,
 * lastScaleTime and the conditions AbleToScale, ScalingActive and ScalingLimited. Then again after the sync
 * period.
 *
 * Metrics served: `Resource` and `ContainerResource` of `cpu` and `memory`, with `Utilization` or
 * `AverageValue` targets. `Pods`, `Object` and `External` metrics need a custom or external metrics API,
 * which Kube32 does not serve: such an HPA is ScalingActive False `FailedGetPodsMetric` (or `...ObjectMetric`,
 * `...ExternalMetric`), as kube-controller-manager says when those APIs are missing.
 */
import type { V1Pod, V1Scale, V2HorizontalPodAutoscaler, V2HorizontalPodAutoscalerCondition, V2MetricSpec, V2MetricStatus } from '@kubernetes/client-node';
import { errorMessage, isNotFound } from '../../api/index.ts';
import { parseQuantity } from '../../lib/index.ts';
import type { PodMetrics } from '../runtime/api.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import {
  type Limited,
  limitWithBehavior,
  limitWithoutBehavior,
  MetricsError,
  type PodSample,
  type Recommendation,
  resourceReplicas,
  type ScaleEvent,
  type ScalingRules,
  stabilize,
  stabilizeWithBehavior,
} from './replicas.ts';

/** The workloads an HPA scales here, by kind: their `apps/v1` plural. */
const SCALABLE: Record<string, string> = { Deployment: 'deployments', ReplicaSet: 'replicasets', StatefulSet: 'statefulsets' };

/** What the controller keeps of each HPA between syncs (lost on restart, as in Kubernetes). */
export interface AutoscalerMemory {
  recommendations: Recommendation[];
  ups: ScaleEvent[];
  downs: ScaleEvent[];
}

/** The controller's memory of every HPA, by `namespace/name`. */
export type AutoscalerState = Map<string, AutoscalerMemory>;

type Condition = V2HorizontalPodAutoscalerCondition;

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** Sets condition `type` in `list`, keeping its lastTransitionTime when its status did not change. */
function setCondition(list: Condition[], old: Condition[] | undefined, type: string, status: 'True' | 'False', reason: string, message: string, nowMs: number): void {
  const prev = old?.find((c) => c.type === type);
  const lastTransitionTime = (prev && prev.status === status ? prev.lastTransitionTime : iso(nowMs)) as unknown as Date;
  const i = list.findIndex((c) => c.type === type);
  const c: Condition = { type, status, lastTransitionTime, reason, message };
  if (i >= 0) list[i] = c;
  else list.push(c);
}

/** A pod's requests of `resource` (milli-cores or bytes), summed over its containers (or `container` only); undefined when one sets none. */
function podRequest(pod: V1Pod, resource: string, container: string | undefined): number | undefined {
  let sum = 0;
  for (const c of pod.spec?.containers ?? []) {
    if (container !== undefined && c.name !== container) continue;
    const q = c.resources?.requests?.[resource];
    if (q === undefined) return undefined;
    sum += toUnits(resource, String(q));
  }
  return sum;
}

/** A quantity in the unit the calculation uses: milli-cores for cpu, bytes otherwise. */
function toUnits(resource: string, q: string): number {
  const v = parseQuantity(q);
  return resource === 'cpu' ? v * 1000 : v;
}

/** A quantity back as the API writes it: `250m` for cpu, bytes otherwise. */
function fromUnits(resource: string, v: number): string {
  return resource === 'cpu' ? `${Math.round(v)}m` : String(Math.round(v));
}

/** The window of a PodMetrics (`15s`), ms. */
function windowMs(w: string): number {
  const m = /^(\d+(?:\.\d+)?)s$/.exec(w);
  return m ? Number(m[1]) * 1000 : 0;
}

/** The samples of `pods` for `resource`, their usage from `metrics`. */
function samples(pods: V1Pod[], metrics: PodMetrics[], resource: string, container: string | undefined): PodSample[] {
  const byName = new Map(metrics.map((m) => [m.metadata.name, m]));
  return pods.map((p) => {
    const ready = p.status?.conditions?.find((c) => c.type === 'Ready');
    const m = byName.get(p.metadata?.name ?? '');
    let usage: number | undefined;
    if (m) {
      usage = 0;
      for (const c of m.containers) if (container === undefined || c.name === container) usage += toUnits(resource, c.usage[resource] ?? '0');
    }
    const start = p.status?.startTime ? new Date(p.status.startTime).getTime() : undefined;
    const since = ready?.lastTransitionTime ? new Date(ready.lastTransitionTime).getTime() : undefined;
    const sample: PodSample = {
      name: p.metadata?.name ?? '',
      ignored: p.metadata?.deletionTimestamp !== undefined || p.status?.phase === 'Failed',
      pending: p.status?.phase === 'Pending',
      ready: ready?.status === 'True',
    };
    if (since !== undefined) sample.readySinceMs = since;
    if (start !== undefined) sample.startMs = start;
    const request = podRequest(p, resource, container);
    if (request !== undefined) sample.request = request;
    if (usage !== undefined) sample.usage = usage;
    if (m) {
      sample.metricAtMs = new Date(m.timestamp).getTime();
      sample.metricWindowMs = windowMs(m.window);
    }
    return sample;
  });
}

/** The metric's one-line name in messages: `cpu resource utilization (percentage of request)`. */
function describe(spec: V2MetricSpec): string {
  const r = spec.resource ?? spec.containerResource;
  const name = r?.name ?? spec.type;
  return r?.target.type === 'Utilization' ? `${name} resource utilization (percentage of request)` : `${name} resource`;
}

/** What one metric asks for. */
interface MetricAnswer {
  replicas: number;
  status: V2MetricStatus;
}

/**
 * The replicas one metric asks for and its current value.
 * @throws MetricsError when it cannot be computed (ScalingActive False)
 */
function metricReplicas(spec: V2MetricSpec, pods: V1Pod[], metrics: PodMetrics[], current: number, ctx: ControllerContext): MetricAnswer {
  const t = ctx.timings;
  if (spec.type !== 'Resource' && spec.type !== 'ContainerResource') {
    throw new MetricsError(`FailedGet${spec.type}Metric`, `the HPA was unable to compute the replica count: unable to get metric of type ${spec.type}: Kube32 serves no custom or external metrics API (only metrics.k8s.io resource metrics)`);
  }
  const src = spec.type === 'Resource' ? spec.resource! : spec.containerResource!;
  const resource = src.name;
  const container = spec.type === 'ContainerResource' ? spec.containerResource!.container : undefined;
  if (resource !== 'cpu' && resource !== 'memory') {
    throw new MetricsError('FailedGetResourceMetric', `the HPA was unable to compute the replica count: failed to get ${resource} utilization: the metrics API serves only cpu and memory`);
  }
  const target = src.target.type === 'Utilization'
    ? { utilization: src.target.averageUtilization ?? 0 }
    : { averageValue: toUnits(resource, String(src.target.averageValue ?? '0')) };
  let a: ReturnType<typeof resourceReplicas>;
  try {
    a = resourceReplicas(samples(pods, metrics, resource, container), {
      currentReplicas: current,
      target,
      tolerance: t.horizontalPodAutoscalerTolerance,
      cpuInitializationPeriodMs: t.horizontalPodAutoscalerCpuInitializationPeriodMs,
      initialReadinessDelayMs: t.horizontalPodAutoscalerInitialReadinessDelayMs,
      nowMs: ctx.clock.now(),
      cpu: resource === 'cpu',
    });
  } catch (err: unknown) {
    if (err instanceof MetricsError) throw new MetricsError(spec.type === 'Resource' ? 'FailedGetResourceMetric' : 'FailedGetContainerResourceMetric', `the HPA was unable to compute the replica count: ${err.message.replace(/cpu/g, resource)}`);
    throw err;
  }
  const currentValue = { averageValue: fromUnits(resource, a.averageValue), ...(a.utilization !== undefined ? { averageUtilization: a.utilization } : {}) };
  const status: V2MetricStatus = spec.type === 'Resource'
    ? { type: 'Resource', resource: { name: resource, current: currentValue as never } }
    : { type: 'ContainerResource', containerResource: { name: resource, container: container!, current: currentValue as never } };
  return { replicas: a.replicas, status };
}

/** The rules of one direction of `behavior` (defaults filled by the API server; the window from the flag when unset). */
function rules(r: { stabilizationWindowSeconds?: number; selectPolicy?: string; policies?: { type: string; value: number; periodSeconds: number }[] } | undefined, defaultWindowS: number): ScalingRules {
  return {
    stabilizationWindowSeconds: r?.stabilizationWindowSeconds ?? defaultWindowS,
    selectPolicy: (r?.selectPolicy ?? 'Max') as ScalingRules['selectPolicy'],
    policies: (r?.policies ?? []) as ScalingRules['policies'],
  };
}

/** Pods matching a Scale's `status.selector` (`k=v,k2 in (a,b)`): the workload's pods in the cache. */
function podsOf(ctx: ControllerContext, namespace: string, selector: string): V1Pod[] {
  const reqs = selector.split(/,(?![^(]*\))/).map((s) => s.trim()).filter(Boolean);
  const match = (labels: Record<string, string>) => reqs.every((r) => {
    let m = /^([^!=\s]+)\s*(==|=|!=)\s*(.*)$/.exec(r);
    if (m) return m[2] === '!=' ? labels[m[1]!] !== m[3] : labels[m[1]!] === m[3];
    m = /^(\S+)\s+(in|notin)\s+\((.*)\)$/.exec(r);
    if (m) {
      const vals = m[3]!.split(',').map((v) => v.trim());
      const has = m[1]! in labels && vals.includes(labels[m[1]!]!);
      return m[2] === 'in' ? has : !has;
    }
    if (r.startsWith('!')) return !(r.slice(1) in labels);
    return r in labels;
  });
  return ctx.cache.pods.list(namespace).filter((p) => match(p.metadata?.labels ?? {}));
}

/**
 * Syncs the HorizontalPodAutoscaler `namespace/name`.
 * @returns the next sync after the sync period; undefined once the HPA is gone
 * @throws ApiError when its status cannot be written (the worker retries with back-off)
 */
export async function reconcileHorizontalPodAutoscaler(key: string, ctx: ControllerContext, state: AutoscalerState): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const hpa = ctx.cache.horizontalPodAutoscalers.get(name, namespace);
  if (!hpa || hpa.metadata?.deletionTimestamp) {
    state.delete(key);
    return undefined;
  }
  let memory = state.get(key);
  if (!memory) {
    memory = { recommendations: [], ups: [], downs: [] };
    state.set(key, memory);
  }
  const nowMs = ctx.clock.now();
  const spec = hpa.spec!;
  const old = hpa.status?.conditions;
  const conditions: Condition[] = [];
  const ref = { kind: 'HorizontalPodAutoscaler', apiVersion: 'autoscaling/v2', namespace, name, uid: hpa.metadata?.uid };
  const event = (type: 'Normal' | 'Warning', reason: string, message: string) => recordEvent(ctx, ref, type, reason, message, { component: 'horizontal-pod-autoscaler' });
  const again = { requeueAfterMs: ctx.timings.horizontalPodAutoscalerSyncPeriodMs };
  const target = spec.scaleTargetRef;
  const resource = (target.apiVersion ?? 'apps/v1').startsWith('apps/') ? SCALABLE[target.kind] : undefined;
  const writeStatus = async (status: Record<string, unknown>) => {
    try {
      await ctx.api.patchHorizontalPodAutoscalerStatus(namespace, name, { status: { ...status, conditions } });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
  };
  const base = { observedGeneration: hpa.metadata?.generation, ...(hpa.status?.lastScaleTime ? { lastScaleTime: hpa.status.lastScaleTime } : {}) };

  let scale: V1Scale;
  try {
    if (!resource) throw new Error(`no matches for kind "${target.kind}" in group "${(target.apiVersion ?? '').split('/')[0]}": the HPA scales apps/v1 Deployments, ReplicaSets and StatefulSets`);
    scale = await ctx.api.getScale(namespace, resource, target.name);
  } catch (err: unknown) {
    const msg = `the HPA controller was unable to get the target's current scale: ${errorMessage(err)}`;
    setCondition(conditions, old, 'AbleToScale', 'False', 'FailedGetScale', msg, nowMs);
    await event('Warning', 'FailedGetScale', errorMessage(err));
    await writeStatus({ ...base, currentReplicas: hpa.status?.currentReplicas ?? 0, desiredReplicas: hpa.status?.desiredReplicas ?? 0 });
    return again;
  }
  setCondition(conditions, old, 'AbleToScale', 'True', 'SucceededGetScale', 'the HPA controller was able to get the target\'s current scale', nowMs);
  const current = scale.spec?.replicas ?? 0;
  const min = spec.minReplicas ?? 1;
  const max = spec.maxReplicas;
  let desired: number;
  let rescaleReason = '';
  let currentMetrics: V2MetricStatus[] | undefined;

  if (current === 0 && min !== 0) {
    desired = 0;
    setCondition(conditions, old, 'ScalingActive', 'False', 'ScalingDisabled', 'scaling is disabled since the replica count of the target is zero', nowMs);
  } else if (current > max) {
    desired = max;
    rescaleReason = 'Current number of replicas above Spec.MaxReplicas';
  } else if (current < min) {
    desired = min;
    rescaleReason = 'Current number of replicas below Spec.MinReplicas';
  } else {
    const pods = podsOf(ctx, namespace, scale.status?.selector ?? '');
    let metrics: PodMetrics[] = [];
    let proposal = 0;
    let proposalMetric = '';
    const statuses: V2MetricStatus[] = [];
    try {
      metrics = await ctx.api.listPodMetrics(namespace, scale.status?.selector ?? '');
    } catch (err: unknown) {
      const msg = `the HPA was unable to compute the replica count: unable to get metrics for resource: unable to fetch metrics from resource metrics API: ${errorMessage(err)}`;
      setCondition(conditions, old, 'ScalingActive', 'False', 'FailedGetResourceMetric', msg, nowMs);
      await event('Warning', 'FailedGetResourceMetric', msg);
      await writeStatus({ ...base, currentReplicas: current, desiredReplicas: hpa.status?.desiredReplicas ?? current });
      return again;
    }
    let failure: MetricsError | undefined;
    for (const m of spec.metrics ?? []) {
      try {
        const a = metricReplicas(m, pods, metrics, current, ctx);
        statuses.push(a.status);
        // As Kubernetes' computeReplicasForMetrics: the first valid metric names the proposal, a higher one replaces it.
        if (proposalMetric === '' || a.replicas > proposal) {
          proposal = a.replicas;
          proposalMetric = describe(m);
        }
      } catch (err: unknown) {
        if (!(err instanceof MetricsError)) throw err;
        failure ??= err;
        statuses.push({ type: m.type } as V2MetricStatus);
      }
    }
    currentMetrics = statuses;
    // As Kubernetes: a metric that fails stops a scale-down (the failing one might ask for more) but not a scale-up.
    if (failure && (proposal === 0 || proposal < current)) {
      setCondition(conditions, old, 'ScalingActive', 'False', failure.reason, failure.message, nowMs);
      await event('Warning', failure.reason, failure.message);
      await writeStatus({ ...base, currentReplicas: current, desiredReplicas: hpa.status?.desiredReplicas ?? current, currentMetrics });
      return again;
    }
    setCondition(conditions, old, 'ScalingActive', 'True', 'ValidMetricFound', `the HPA was able to successfully calculate a replica count from ${proposalMetric}`, nowMs);
    let stabilized: number;
    let limited: Limited;
    if (spec.behavior) {
      const up = rules(spec.behavior.scaleUp, 0);
      const down = rules(spec.behavior.scaleDown, Math.round(ctx.timings.horizontalPodAutoscalerDownscaleStabilizationMs / 1000));
      stabilized = stabilizeWithBehavior(memory.recommendations, current, proposal, nowMs, up, down);
      limited = limitWithBehavior(current, stabilized, min, max, memory.ups, memory.downs, up, down, nowMs);
    } else {
      stabilized = stabilize(memory.recommendations, proposal, nowMs, ctx.timings.horizontalPodAutoscalerDownscaleStabilizationMs);
      limited = limitWithoutBehavior(current, stabilized, min, max);
    }
    if (stabilized !== proposal) setCondition(conditions, old, 'AbleToScale', 'True', 'ScaleDownStabilized', 'recent recommendations were higher than current one, applying the highest recent recommendation', nowMs);
    else setCondition(conditions, old, 'AbleToScale', 'True', 'ReadyForNewScale', 'recommended size matches current size', nowMs);
    setCondition(conditions, old, 'ScalingLimited', limited.limited ? 'True' : 'False', limited.reason, limited.message, nowMs);
    desired = limited.desired;
    // kube-controller-manager's words: the metric that asked most when up, all of them when down.
    if (desired > current) rescaleReason = `${proposalMetric} above target`;
    else if (desired < current) rescaleReason = 'All metrics below target';
  }

  let lastScaleTime = hpa.status?.lastScaleTime;
  if (desired !== current) {
    try {
      await ctx.api.updateScale(namespace, resource!, target.name, { ...scale, spec: { ...scale.spec, replicas: desired } });
    } catch (err: unknown) {
      const msg = `the HPA controller was unable to update the target scale: ${errorMessage(err)}`;
      setCondition(conditions, old, 'AbleToScale', 'False', 'FailedUpdateScale', msg, nowMs);
      await event('Warning', 'FailedRescale', `New size: ${desired}; reason: ${rescaleReason}; error: ${errorMessage(err)}`);
      await writeStatus({ ...base, currentReplicas: current, desiredReplicas: desired, ...(currentMetrics ? { currentMetrics } : {}) });
      return again;
    }
    setCondition(conditions, old, 'AbleToScale', 'True', 'SucceededRescale', `the HPA controller was able to update the target scale to ${desired}`, nowMs);
    await event('Normal', 'SuccessfulRescale', `New size: ${desired}; reason: ${rescaleReason}`);
    (desired > current ? memory.ups : memory.downs).push({ atMs: nowMs, change: Math.abs(desired - current) });
    // Scale events older than the longest policy period (30 min at most) can no longer matter.
    const keep = (e: ScaleEvent) => e.atMs > nowMs - 1_800_000;
    memory.ups = memory.ups.filter(keep);
    memory.downs = memory.downs.filter(keep);
    lastScaleTime = iso(nowMs) as unknown as Date;
    ctx.log.info({ hpa: key, from: current, to: desired, reason: rescaleReason }, 'rescaled the HPA\'s target');
  }
  await writeStatus({
    observedGeneration: hpa.metadata?.generation,
    ...(lastScaleTime ? { lastScaleTime } : {}),
    currentReplicas: current,
    desiredReplicas: desired,
    ...(currentMetrics ? { currentMetrics } : {}),
  });
  return again;
}

/** The HPAs (their keys) whose target is `kind/name` in `namespace`. */
export function autoscalersOf(hpas: readonly V2HorizontalPodAutoscaler[], namespace: string, kind: string, name: string): string[] {
  return hpas
    .filter((h) => (h.metadata?.namespace ?? '') === namespace && h.spec?.scaleTargetRef.kind === kind && h.spec.scaleTargetRef.name === name)
    .map((h) => `${namespace}/${h.metadata?.name}`);
}
