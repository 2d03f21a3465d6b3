/**
 * The HorizontalPodAutoscaler's arithmetic, as Kubernetes' `replica_calculator.go` and
 * `horizontal.go` do it, pure so that each rule has its test (replicas.test.ts):
 *
 * - {@link resourceReplicas}: the replicas a resource metric asks for. Pods being deleted or failed are
 *   ignored; a pod not Ready (or, within the CPU initialization period, one whose metrics predate its
 *   readiness) is unready; a pod without metrics is missing. The ratio is the ready pods' usage over their
 *   requests (Utilization) or their average usage over the target (AverageValue); within the tolerance the
 *   replicas stay. Missing pods then count as using their whole request when scaling down and nothing when
 *   scaling up, unready ones as nothing when scaling up, and a ratio that falls within the tolerance or
 *   turns around leaves the replicas as they are. desired = ceil(ratio × pods).
 * - {@link stabilize} and {@link limitWithoutBehavior}: without `spec.behavior`, the highest
 *   recommendation of the downscale stabilization window, then at most max(2 × current, 4) and within
 *   min/max replicas.
 * - {@link stabilizeWithBehavior} and {@link limitWithBehavior}: with it, the scale-up window's lowest and
 *   the scale-down window's highest recommendation, then the policies' rate over their periods
 *   (`selectPolicy` Max, Min or Disabled), within min/max replicas.
 */

/** The reason and message of a ScalingLimited condition. */
export interface Limited {
  desired: number;
  /** True when a limit changed the recommendation (the condition is True). */
  limited: boolean;
  reason: 'TooFewReplicas' | 'TooManyReplicas' | 'ScaleUpLimit' | 'ScaleDownLimit' | 'DesiredWithinRange';
  message: string;
}

/** One pod, as the calculation sees it. */
export interface PodSample {
  name: string;
  /** `deletionTimestamp` set, or phase Failed: ignored. */
  ignored: boolean;
  /** Phase Pending: unready. */
  pending: boolean;
  /** The Ready condition's status is True. */
  ready: boolean;
  /** When its Ready condition last changed, Unix ms (undefined: never). */
  readySinceMs?: number;
  /** `status.startTime`, Unix ms. */
  startMs?: number;
  /** The sum of its containers' requests of the resource, in its unit (milli-cores, bytes); undefined when a container sets none. */
  request?: number;
  /** Its usage from the metrics API, in the same unit; undefined when it has no metrics. */
  usage?: number;
  /** When its metrics were taken, and over what window, ms. */
  metricAtMs?: number;
  metricWindowMs?: number;
}

/** Options of {@link resourceReplicas}. */
export interface ResourceCalc {
  currentReplicas: number;
  /** The target: a utilization in percent of the request, or an average value (in the pods' unit). */
  target: { utilization: number } | { averageValue: number };
  /** `--horizontal-pod-autoscaler-tolerance`. @default 0.1 */
  tolerance: number;
  /** `--horizontal-pod-autoscaler-cpu-initialization-period`, ms; 0 for a resource other than CPU. */
  cpuInitializationPeriodMs: number;
  /** `--horizontal-pod-autoscaler-initial-readiness-delay`, ms. */
  initialReadinessDelayMs: number;
  nowMs: number;
  /** True for CPU (readiness rules apply), false for memory. */
  cpu: boolean;
}

/** What a resource metric asks for. */
export interface ResourceAnswer {
  replicas: number;
  /** The ready pods' utilization, percent of their requests (Utilization targets). */
  utilization?: number;
  /** Their average usage, in the pods' unit. */
  averageValue: number;
}

/** A calculation that cannot be made: the message of ScalingActive False. */
export class MetricsError extends Error {
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.name = 'MetricsError';
    this.reason = reason;
  }
}

type Group = 'ready' | 'unready' | 'missing' | 'ignored';

/** `groupPods` of replica_calculator.go. */
function groupOf(p: PodSample, o: ResourceCalc): Group {
  if (p.ignored) return 'ignored';
  if (p.pending) return 'unready';
  if (p.usage === undefined) return 'missing';
  if (!o.cpu) return 'ready';
  // No Ready condition or no start time: nothing to judge its samples by.
  if (p.startMs === undefined || p.readySinceMs === undefined) return 'ignored';
  if (p.startMs + o.cpuInitializationPeriodMs > o.nowMs) {
    // Within the initialization period: unready unless Ready, with one window of metrics since it became so.
    if (!p.ready) return 'unready';
    return (p.metricAtMs ?? o.nowMs) < p.readySinceMs + (p.metricWindowMs ?? 0) ? 'unready' : 'ready';
  }
  // Later: unready only if not Ready and never Ready since its start (plus the initial readiness delay).
  return !p.ready && p.startMs + o.initialReadinessDelayMs > p.readySinceMs ? 'unready' : 'ready';
}

/** The usage ratio of `pods` (each with usage and request) against the target. */
function ratioOf(pods: { usage: number; request: number }[], o: ResourceCalc): { ratio: number; utilization?: number; averageValue: number } {
  const usage = pods.reduce((n, p) => n + p.usage, 0);
  const averageValue = pods.length ? usage / pods.length : 0;
  if ('utilization' in o.target) {
    const requests = pods.reduce((n, p) => n + p.request, 0);
    const utilization = requests > 0 ? Math.trunc((usage * 100) / requests) : 0;
    return { ratio: utilization / o.target.utilization, utilization, averageValue };
  }
  return { ratio: averageValue / o.target.averageValue, averageValue };
}

/**
 * The replicas a resource metric asks for (`GetResourceReplicas` / `GetRawResourceReplicas`).
 * @throws MetricsError `FailedGetResourceMetric` when a counted pod lacks a request (Utilization), or no
 *   pod has metrics
 */
export function resourceReplicas(pods: PodSample[], o: ResourceCalc): ResourceAnswer {
  const groups = new Map<Group, PodSample[]>([['ready', []], ['unready', []], ['missing', []], ['ignored', []]]);
  for (const p of pods) groups.get(groupOf(p, o))!.push(p);
  const utilizationTarget = 'utilization' in o.target;
  const counted = pods.filter((p) => !p.ignored);
  if (utilizationTarget) {
    const lacking = counted.find((p) => p.request === undefined || p.request <= 0);
    if (lacking) throw new MetricsError('FailedGetResourceMetric', `failed to get cpu utilization: missing request for cpu in pod ${lacking.name}`);
  }
  const ready = groups.get('ready')!;
  const unready = groups.get('unready')!;
  const missing = groups.get('missing')!;
  if (ready.length === 0) throw new MetricsError('FailedGetResourceMetric', 'failed to get cpu utilization: did not receive metrics for targeted pods (pods might be unready)');
  const req = (p: PodSample) => p.request ?? 0;
  const base = ready.map((p) => ({ usage: p.usage!, request: req(p) }));
  const first = ratioOf(base, o);
  const scaleUpWithUnready = unready.length > 0 && first.ratio > 1;
  if (!scaleUpWithUnready && missing.length === 0) {
    if (Math.abs(1 - first.ratio) <= o.tolerance) return { replicas: o.currentReplicas, utilization: first.utilization, averageValue: first.averageValue };
    return { replicas: Math.ceil(first.ratio * ready.length), utilization: first.utilization, averageValue: first.averageValue };
  }
  const all = [...base];
  if (missing.length > 0) {
    for (const p of missing) {
      // Scaling down: a missing pod is taken to use its whole request (or the target); up: nothing.
      const full = utilizationTarget ? req(p) : (o.target as { averageValue: number }).averageValue;
      if (first.ratio < 1) all.push({ usage: full, request: req(p) });
      else if (first.ratio > 1) all.push({ usage: 0, request: req(p) });
    }
  }
  if (scaleUpWithUnready) for (const p of unready) all.push({ usage: 0, request: req(p) });
  const next = ratioOf(all, o);
  const keep = { replicas: o.currentReplicas, utilization: first.utilization, averageValue: first.averageValue };
  if (Math.abs(1 - next.ratio) <= o.tolerance || (first.ratio < 1 && next.ratio > 1) || (first.ratio > 1 && next.ratio < 1)) return keep;
  const replicas = Math.ceil(next.ratio * all.length);
  if ((next.ratio < 1 && replicas > o.currentReplicas) || (next.ratio > 1 && replicas < o.currentReplicas)) return keep;
  return { replicas, utilization: first.utilization, averageValue: first.averageValue };
}

/** One recommendation of an HPA, kept for the stabilization windows. */
export interface Recommendation {
  atMs: number;
  replicas: number;
}

/**
 * Without `behavior` (`stabilizeRecommendation`): the highest recommendation within the downscale
 * window, the new one included; `history` gets the new one (entries older than the window are dropped).
 */
export function stabilize(history: Recommendation[], proposed: number, nowMs: number, windowMs: number): number {
  let max = proposed;
  for (const r of history) if (r.atMs > nowMs - windowMs) max = Math.max(max, r.replicas);
  const kept = history.filter((r) => r.atMs > nowMs - windowMs);
  history.length = 0;
  history.push(...kept, { atMs: nowMs, replicas: proposed });
  return max;
}

/** Without `behavior` (`convertDesiredReplicasWithRules`): at most max(2 × current, 4), within min/max. */
export function limitWithoutBehavior(current: number, desired: number, min: number, max: number): Limited {
  const scaleUpLimit = Math.max(2 * current, 4);
  let maximumAllowed: number;
  let upReason: Limited['reason'];
  let upMessage: string;
  if (max > scaleUpLimit) {
    maximumAllowed = scaleUpLimit;
    upReason = 'ScaleUpLimit';
    upMessage = 'the desired replica count is increasing faster than the maximum scale rate';
  } else {
    maximumAllowed = max;
    upReason = 'TooManyReplicas';
    upMessage = 'the desired replica count is more than the maximum replica count';
  }
  if (desired < min) return { desired: min, limited: true, reason: 'TooFewReplicas', message: 'the desired replica count is less than the minimum replica count' };
  if (desired > maximumAllowed) return { desired: maximumAllowed, limited: true, reason: upReason, message: upMessage };
  return { desired, limited: false, reason: 'DesiredWithinRange', message: 'the desired count is within the acceptable range' };
}

/** A scaling policy of `behavior` (`HPAScalingPolicy`). */
export interface ScalingPolicy {
  type: 'Pods' | 'Percent';
  value: number;
  periodSeconds: number;
}

/** The rules of one direction of `behavior` (`HPAScalingRules`), defaults filled in. */
export interface ScalingRules {
  stabilizationWindowSeconds: number;
  selectPolicy: 'Max' | 'Min' | 'Disabled';
  policies: ScalingPolicy[];
}

/** A change of the target's replicas this HPA made. */
export interface ScaleEvent {
  atMs: number;
  /** Replicas added (scale-up) or removed (scale-down), positive. */
  change: number;
}

/**
 * With `behavior` (`stabilizeRecommendationWithBehaviors`): the scale-up window's lowest and the
 * scale-down window's highest recommendation bound the current replicas; `history` gets the new one.
 */
export function stabilizeWithBehavior(history: Recommendation[], current: number, proposed: number, nowMs: number, up: ScalingRules, down: ScalingRules): number {
  const upCut = nowMs - up.stabilizationWindowSeconds * 1000;
  const downCut = nowMs - down.stabilizationWindowSeconds * 1000;
  let upRec = proposed;
  let downRec = proposed;
  for (const r of history) {
    if (r.atMs > upCut) upRec = Math.min(upRec, r.replicas);
    if (r.atMs > downCut) downRec = Math.max(downRec, r.replicas);
  }
  let rec = current;
  if (rec < upRec) rec = upRec;
  if (rec > downRec) rec = downRec;
  const oldest = Math.min(upCut, downCut);
  const kept = history.filter((r) => r.atMs > oldest);
  history.length = 0;
  history.push(...kept, { atMs: nowMs, replicas: proposed });
  return rec;
}

const within = (events: ScaleEvent[], nowMs: number, periodSeconds: number) =>
  events.filter((e) => e.atMs > nowMs - periodSeconds * 1000).reduce((n, e) => n + e.change, 0);

/** The most replicas the scale-up policies allow now (`calculateScaleUpLimitWithScalingRules`). */
export function scaleUpLimit(current: number, ups: ScaleEvent[], downs: ScaleEvent[], rules: ScalingRules, nowMs: number): number {
  if (rules.selectPolicy === 'Disabled') return current;
  let result = rules.selectPolicy === 'Max' ? Number.MIN_SAFE_INTEGER : Number.MAX_SAFE_INTEGER;
  for (const p of rules.policies) {
    const start = current - within(ups, nowMs, p.periodSeconds) + within(downs, nowMs, p.periodSeconds);
    const proposed = p.type === 'Pods' ? start + p.value : Math.ceil(start * (1 + p.value / 100));
    result = rules.selectPolicy === 'Max' ? Math.max(result, proposed) : Math.min(result, proposed);
  }
  return result;
}

/** The fewest replicas the scale-down policies allow now (`calculateScaleDownLimitWithBehaviors`). */
export function scaleDownLimit(current: number, ups: ScaleEvent[], downs: ScaleEvent[], rules: ScalingRules, nowMs: number): number {
  if (rules.selectPolicy === 'Disabled') return current;
  let result = rules.selectPolicy === 'Max' ? Number.MAX_SAFE_INTEGER : Number.MIN_SAFE_INTEGER;
  for (const p of rules.policies) {
    const start = current - within(ups, nowMs, p.periodSeconds) + within(downs, nowMs, p.periodSeconds);
    const proposed = p.type === 'Pods' ? start - p.value : Math.trunc(start * (1 - p.value / 100));
    result = rules.selectPolicy === 'Max' ? Math.min(result, proposed) : Math.max(result, proposed);
  }
  return result;
}

/** With `behavior` (`convertDesiredReplicasWithBehaviorRate`): the policies' rate, within min/max. */
export function limitWithBehavior(current: number, desired: number, min: number, max: number, ups: ScaleEvent[], downs: ScaleEvent[], up: ScalingRules, down: ScalingRules, nowMs: number): Limited {
  if (desired > current) {
    const limit = Math.max(current, scaleUpLimit(current, ups, downs, up, nowMs));
    const byRate = max > limit;
    const allowed = byRate ? limit : max;
    if (desired > allowed) {
      return byRate
        ? { desired: allowed, limited: true, reason: 'ScaleUpLimit', message: 'the desired replica count is increasing faster than the maximum scale rate' }
        : { desired: allowed, limited: true, reason: 'TooManyReplicas', message: 'the desired replica count is more than the maximum replica count' };
    }
  } else if (desired < current) {
    const limit = Math.min(current, scaleDownLimit(current, ups, downs, down, nowMs));
    const byRate = min < limit;
    const allowed = byRate ? limit : min;
    if (desired < allowed) {
      return byRate
        ? { desired: allowed, limited: true, reason: 'ScaleDownLimit', message: 'the desired replica count is decreasing faster than the maximum scale rate' }
        : { desired: allowed, limited: true, reason: 'TooFewReplicas', message: 'the desired replica count is less than the minimum replica count' };
    }
  }
  return { desired, limited: false, reason: 'DesiredWithinRange', message: 'the desired count is within the acceptable range' };
}
