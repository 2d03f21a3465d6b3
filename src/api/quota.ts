/**
 * ResourceQuota usage, as Kubernetes' quota evaluators count it (k8s.io/kubernetes/pkg/quota/v1/evaluator/core):
 * what one object uses of each quota resource (`pods`, `requests.cpu`, `limits.memory`, `services`,
 * `count/deployments.apps`, ...), the usage of a namespace, and quantities printed as Kubernetes' `Quantity.String()`
 * prints them (`500m`, `1Gi`, `2`). Shared by the API server's quota admission and the controller that keeps
 * `status.used`.
 */
import { parseQuantity } from '../lib/index.ts';

/** A quantity's value (base units: cores, bytes, objects) and the format it prints in. */
export interface Amount {
  value: number;
  format: 'BinarySI' | 'DecimalSI';
}

/** The compute resources a quota may track, each of which every container must then set (Kubernetes' `validationSet`). */
export const QUOTA_COMPUTE_RESOURCES = ['cpu', 'memory', 'requests.cpu', 'requests.memory', 'limits.cpu', 'limits.memory'] as const;

/** The object-count names of the core kinds (`services` is `count/services`). */
const LEGACY_COUNTS: Record<string, string> = {
  pods: 'pods',
  services: 'services',
  configmaps: 'configmaps',
  secrets: 'secrets',
  replicationcontrollers: 'replicationcontrollers',
  resourcequotas: 'resourcequotas',
  persistentvolumeclaims: 'persistentvolumeclaims',
};

/** The format of a quantity as written: binary for `Ki`…`Ei`, decimal otherwise. */
export function quantityFormat(text: unknown): Amount['format'] {
  return typeof text === 'string' && /[KMGTPE]i$/.test(text.trim()) ? 'BinarySI' : 'DecimalSI';
}

/** A quantity as written into an {@link Amount}. @throws RangeError when it is not a quantity */
export function amountOf(text: unknown): Amount {
  return { value: parseQuantity(typeof text === 'number' ? text : String(text)), format: quantityFormat(text) };
}

/**
 * A quantity in Kubernetes' canonical form: binary suffixes for a binary whole number they divide
 * (`1Gi`, `1536Ki`), else the largest decimal suffix that keeps it whole (`500m`, `2`, `3k`).
 */
export function formatQuantity(a: Amount): string {
  const v = a.value;
  if (a.format === 'BinarySI' && Number.isInteger(v) && v !== 0) {
    for (const [s, unit] of [['Ei', 2 ** 60], ['Pi', 2 ** 50], ['Ti', 2 ** 40], ['Gi', 2 ** 30], ['Mi', 2 ** 20], ['Ki', 2 ** 10]] as const) {
      if (Math.abs(v) >= unit && v % unit === 0) return `${v / unit}${s}`;
    }
  }
  const milli = Math.round(v * 1000);
  if (milli % 1000 !== 0) return `${milli}m`;
  let n = milli / 1000;
  let i = 0;
  const suffixes = ['', 'k', 'M', 'G', 'T', 'P', 'E'];
  while (n !== 0 && n % 1000 === 0 && i < suffixes.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n}${suffixes[i]}`;
}

/** `a + b` in the format of the first that is not zero (Kubernetes' `Quantity.Add` keeps the receiver's). */
export function addAmounts(a: Amount | undefined, b: Amount): Amount {
  if (!a) return { ...b };
  return { value: a.value + b.value, format: a.value === 0 ? b.format : a.format };
}

/** Whether `a ≤ b`, to the milli-unit (quantities are exact in Kubernetes; floats here). */
export function amountAtMost(a: Amount, b: Amount): boolean {
  return Math.round(a.value * 1000) <= Math.round(b.value * 1000);
}

type Rec = Record<string, unknown>;
const rec = (v: unknown): Rec => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Rec) : {});
const list = (v: unknown): Rec[] => (Array.isArray(v) ? (v as Rec[]) : []);

/**
 * A pod's compute usage (Kubernetes' `PodUsageFunc`): the larger of its containers' sum and its largest init
 * container, plus `spec.overhead`, as `cpu`, `requests.cpu`, `limits.cpu` and the same for memory.
 */
export function podComputeUsage(spec: unknown): Record<string, Amount> {
  const s = rec(spec);
  const of = (kind: 'requests' | 'limits', res: string): Amount | undefined => {
    let sum: Amount | undefined;
    for (const c of list(s.containers)) {
      const q = rec(rec(c.resources)[kind])[res];
      if (q !== undefined) sum = addAmounts(sum, amountOf(q));
    }
    for (const c of list(s.initContainers)) {
      const q = rec(rec(c.resources)[kind])[res];
      if (q !== undefined) {
        const a = amountOf(q);
        if (!sum || a.value > sum.value) sum = a;
      }
    }
    const extra = rec(s.overhead)[res];
    if (sum && extra !== undefined) sum = addAmounts(sum, amountOf(extra));
    return sum;
  };
  const out: Record<string, Amount> = {};
  for (const res of ['cpu', 'memory']) {
    const req = of('requests', res);
    const lim = of('limits', res);
    if (req) {
      out[res] = req;
      out[`requests.${res}`] = req;
    }
    if (lim) out[`limits.${res}`] = lim;
  }
  return out;
}

/** Whether a pod still counts against quota: not Succeeded or Failed, and not being deleted. */
export function podCountsForQuota(pod: { metadata?: Rec | { deletionTimestamp?: unknown }; status?: unknown }): boolean {
  const phase = rec(pod.status).phase;
  return phase !== 'Succeeded' && phase !== 'Failed' && !rec(pod.metadata).deletionTimestamp;
}

/**
 * The storage key (`pods`, `deployments.apps`) whose objects a quota resource counts, or undefined when it is
 * not an object count (`requests.cpu`, `services.nodeports`).
 */
export function countedResource(name: string): string | undefined {
  if (name.startsWith('count/')) return name.slice('count/'.length);
  return LEGACY_COUNTS[name];
}

/**
 * What one object uses of the quota resources `tracked`: 1 of its object count (a pod only while it counts),
 * its compute usage (pods), its node ports and load balancers (services).
 * @param key the object's storage key (`pods`, `services`, `deployments.apps`)
 */
export function objectUsage(key: string, obj: { metadata?: unknown; spec?: unknown; status?: unknown }, tracked: readonly string[]): Record<string, Amount> {
  const out: Record<string, Amount> = {};
  if (key === 'pods' && !podCountsForQuota(obj as never)) return out;
  const compute = key === 'pods' ? podComputeUsage(obj.spec) : {};
  for (const name of tracked) {
    if (countedResource(name) === key) out[name] = { value: 1, format: 'DecimalSI' };
    else if (compute[name]) out[name] = compute[name];
    else if (key === 'services' && name === 'services.loadbalancers' && rec(obj.spec).type === 'LoadBalancer') out[name] = { value: 1, format: 'DecimalSI' };
    else if (key === 'services' && name === 'services.nodeports' && (rec(obj.spec).type === 'NodePort' || rec(obj.spec).type === 'LoadBalancer')) {
      out[name] = { value: list(rec(obj.spec).ports).length, format: 'DecimalSI' };
    }
  }
  return out;
}

/** The quota scopes Kube32 applies (Kubernetes' `ResourceQuotaScope`s but PriorityClass and CrossNamespacePodAffinity). */
export const QUOTA_SCOPES = ['Terminating', 'NotTerminating', 'BestEffort', 'NotBestEffort'] as const;

/** Whether a pod is BestEffort: no container sets a request or a limit. */
function bestEffort(spec: unknown): boolean {
  return [...list(rec(spec).containers), ...list(rec(spec).initContainers)].every((c) => {
    const r = rec(c.resources);
    return Object.keys(rec(r.requests)).length === 0 && Object.keys(rec(r.limits)).length === 0;
  });
}

/**
 * Whether a quota with `scopes` counts an object (Kubernetes' `Matches`): without scopes, every object; with
 * scopes, only pods that match every one (`Terminating`: `spec.activeDeadlineSeconds` set; `BestEffort`: no
 * request or limit anywhere).
 */
export function quotaMatches(scopes: readonly string[], key: string, obj: { spec?: unknown }): boolean {
  if (scopes.length === 0) return true;
  if (key !== 'pods') return false;
  const spec = rec(obj.spec);
  return scopes.every((s) => {
    switch (s) {
      case 'Terminating':
        return typeof spec.activeDeadlineSeconds === 'number';
      case 'NotTerminating':
        return typeof spec.activeDeadlineSeconds !== 'number';
      case 'BestEffort':
        return bestEffort(spec);
      case 'NotBestEffort':
        return !bestEffort(spec);
      default:
        return false;
    }
  });
}

/** The storage keys whose objects a set of quota resources reads. */
export function quotaSources(tracked: readonly string[]): string[] {
  const keys = new Set<string>();
  for (const name of tracked) {
    const counted = countedResource(name);
    if (counted) keys.add(counted);
    else if ((QUOTA_COMPUTE_RESOURCES as readonly string[]).includes(name)) keys.add('pods');
    else if (name.startsWith('services.')) keys.add('services');
  }
  return [...keys];
}

/**
 * The usage of a namespace for the quota resources `tracked` (every one present, zero when nothing uses it),
 * from the objects `listOf(storageKey)` answers that a quota of `scopes` counts.
 */
export function namespaceUsage(
  tracked: readonly string[],
  listOf: (key: string) => readonly { metadata?: unknown; spec?: unknown; status?: unknown }[],
  scopes: readonly string[] = [],
): Record<string, Amount> {
  const used: Record<string, Amount> = {};
  for (const name of tracked) used[name] = { value: 0, format: name.includes('memory') ? 'BinarySI' : 'DecimalSI' };
  for (const key of quotaSources(tracked)) {
    for (const o of listOf(key)) {
      if (!quotaMatches(scopes, key, o)) continue;
      for (const [name, a] of Object.entries(objectUsage(key, o, tracked))) used[name] = addAmounts(used[name], a);
    }
  }
  return used;
}
