/**
 * Which nodes a pod fits, and which one it goes to (issue 6 "Scheduler"; seed "Moves": the target of a
 * move "is never the node the pod runs on, and never a node that is cordoned or not Ready"; seed "Policies":
 * `kube32.io/placement: fastest`). Pure functions over the cache's objects.
 *
 * Filters, each with the reason Kubernetes' scheduler prints: Ready, cordoned, untolerated `NoSchedule` and
 * `NoExecute` taints, `nodeSelector` and required node affinity, memory requests against the node's
 * allocatable memory (its heap), and ports: pods share the node's address, so each container port (or its
 * `hostPort`) is taken on the node. Score: with `fastest`, the highest `kube32.io/interp-mops`; otherwise
 * the most free memory, then the fewest pods, then the name.
 */
import type {
  V1Node,
  V1NodeSelectorRequirement,
  V1NodeSelectorTerm,
  V1Pod,
  V1Taint,
  V1Toleration,
} from '@kubernetes/client-node';
import {
  podHoldsNode,
  nodeAllocatableMemory,
  nodeMops,
  nodeReadyStatus,
  podMemoryRequest,
  nodeAllocatableCpu,
  podCpuRequest,
} from './pods.ts';
import { ANNOTATIONS } from './names.ts';
import { nodeRuntime, runtimeMismatchReason } from './runtime.ts';

/** Options of {@link pickNode}. */
export interface PickOptions {
  /** Nodes that may not be chosen (a move's source), with the reason printed for them. */
  exclude?: Map<string, string>;
  /** Labels the node must have besides the pod's own `nodeSelector` (a move's `spec.target.nodeSelector`). */
  extraSelector?: Record<string, string>;
  /** Pods bound but not yet seen bound in the cache (the scheduler's assumed pods). */
  assumed?: V1Pod[];
  /** Override the pod's `kube32.io/placement`. */
  fastest?: boolean;
  /** Only this node may be chosen (a move's `spec.target.nodeName`); its taints and selector are not checked. */
  nodeName?: string;
  /**
   * What each node's pods take, kept by the caller (the scheduler's `NodeUsage`, assumed pods included):
   * when given, `pods` and `assumed` are not summed (the pod itself must not be counted in it).
   */
  usage?: ReadonlyMap<string, NodeUse>;
}

/** The outcome of {@link pickNode}. */
export type Placement = { nodeName: string } | { nodeName?: undefined; reason: 'Unschedulable'; message: string };

/** Whether a toleration tolerates a taint (Kubernetes' rules). */
export function tolerates(t: V1Toleration, taint: V1Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (!t.key) return t.operator === 'Exists';
  if (t.key !== taint.key) return false;
  if (t.operator === 'Exists') return true;
  return (t.value ?? '') === (taint.value ?? '');
}

function matchRequirement(labels: Record<string, string>, r: V1NodeSelectorRequirement): boolean {
  const v = labels[r.key];
  switch (r.operator) {
    case 'In':
      return v !== undefined && (r.values ?? []).includes(v);
    case 'NotIn':
      return v === undefined || !(r.values ?? []).includes(v);
    case 'Exists':
      return v !== undefined;
    case 'DoesNotExist':
      return v === undefined;
    case 'Gt':
      return v !== undefined && Number(v) > Number(r.values?.[0]);
    case 'Lt':
      return v !== undefined && Number(v) < Number(r.values?.[0]);
    default:
      return false;
  }
}

function matchTerm(node: V1Node, term: V1NodeSelectorTerm): boolean {
  const labels = node.metadata?.labels ?? {};
  const exprs = term.matchExpressions ?? [];
  const fields = term.matchFields ?? [];
  if (exprs.length === 0 && fields.length === 0) return false;
  return (
    exprs.every((r) => matchRequirement(labels, r)) &&
    fields.every((r) => matchRequirement({ 'metadata.name': node.metadata?.name ?? '' }, r))
  );
}

/** Whether the node matches the pod's `nodeSelector`, required node affinity and `extra` labels. */
export function matchesSelector(pod: V1Pod, node: V1Node, extra: Record<string, string> = {}): boolean {
  const labels = node.metadata?.labels ?? {};
  for (const [k, v] of Object.entries({ ...(pod.spec?.nodeSelector ?? {}), ...extra })) if (labels[k] !== v) return false;
  const required = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  if (required && !required.nodeSelectorTerms.some((t) => matchTerm(node, t))) return false;
  return true;
}

/** `port/protocol` strings a pod takes on its node's address. */
export function podPorts(pod: V1Pod): string[] {
  const out: string[] = [];
  for (const c of pod.spec?.containers ?? []) {
    for (const p of c.ports ?? []) out.push(`${p.hostPort || p.containerPort}/${p.protocol ?? 'TCP'}`);
  }
  return out;
}

/** What the pods on one node take: memory requested (bytes), cpu requested (millicores), how many pods, and the `port/protocol`s taken. */
export interface NodeUse {
  memory: number;
  cpu: number;
  pods: number;
  ports: ReadonlySet<string>;
}

function usage(pods: readonly V1Pod[], self: V1Pod): Map<string, NodeUse> {
  const out = new Map<string, NodeUse & { ports: Set<string> }>();
  const selfKey = `${self.metadata?.namespace}/${self.metadata?.name}`;
  for (const p of pods) {
    const n = p.spec?.nodeName;
    if (!n || !podHoldsNode(p) || `${p.metadata?.namespace}/${p.metadata?.name}` === selfKey) continue;
    const u = out.get(n) ?? { memory: 0, cpu: 0, pods: 0, ports: new Set<string>() };
    u.memory += podMemoryRequest(p);
    u.cpu += podCpuRequest(p);
    u.pods += 1;
    for (const port of podPorts(p)) u.ports.add(port);
    out.set(n, u);
  }
  return out;
}

/** The first reason a node does not take the pod, or undefined when it fits. */
function unfit(pod: V1Pod, node: V1Node, use: NodeUse | undefined, opts: PickOptions): string | undefined {
  const name = node.metadata?.name ?? '';
  const excluded = opts.exclude?.get(name);
  if (excluded) return excluded;
  if (nodeReadyStatus(node) !== 'True') return 'node(s) were not ready';
  const mismatch = runtimeMismatchReason(pod, node);
  if (mismatch) return mismatch;
  if (node.spec?.unschedulable) return 'node(s) were unschedulable';
  if (opts.nodeName === undefined) {
    const tolerations = pod.spec?.tolerations ?? [];
    for (const taint of node.spec?.taints ?? []) {
      if (taint.effect !== 'NoSchedule' && taint.effect !== 'NoExecute') continue;
      if (!tolerations.some((t) => tolerates(t, taint))) {
        return `node(s) had untolerated taint {${taint.key}: ${taint.value ?? ''}}`;
      }
    }
    if (!matchesSelector(pod, node, opts.extraSelector)) return "node(s) didn't match Pod's node affinity/selector";
  }
  const maxPods = Number(node.status?.allocatable?.pods ?? Number.POSITIVE_INFINITY);
  if ((use?.pods ?? 0) + 1 > maxPods) return 'Too many pods';
  if ((use?.memory ?? 0) + podMemoryRequest(pod) > nodeAllocatableMemory(node)) return 'Insufficient memory';
  // cpu is fitted on FeOS nodes, whose microVMs take their vCPUs (a Wasm worker's one cpu is its event loop's, not a budget).
  if (nodeRuntime(node) === 'microvm' && (use?.cpu ?? 0) + podCpuRequest(pod) > nodeAllocatableCpu(node)) return 'Insufficient cpu';
  if (podPorts(pod).some((p) => use?.ports.has(p))) return "node(s) didn't have free ports for the requested pod ports";
  return undefined;
}

/**
 * Picks the node for `pod` among `nodes`, given every pod in the cluster (`pods`), or what each node's
 * pods take (`opts.usage`).
 * @returns the node's name, or `Unschedulable` with Kubernetes' message:
 *   `0/3 nodes are available: 1 Insufficient memory, 2 node(s) were unschedulable.`
 */
export function pickNode(pod: V1Pod, nodes: readonly V1Node[], pods: readonly V1Pod[], opts: PickOptions = {}): Placement {
  const use = opts.usage ?? usage([...pods, ...(opts.assumed ?? [])], pod);
  const candidates = opts.nodeName === undefined ? nodes : nodes.filter((n) => n.metadata?.name === opts.nodeName);
  if (opts.nodeName !== undefined && candidates.length === 0) {
    return { reason: 'Unschedulable', message: `node "${opts.nodeName}" not found` };
  }
  const reasons = new Map<string, number>();
  const fit: V1Node[] = [];
  for (const node of candidates) {
    const why = unfit(pod, node, use.get(node.metadata?.name ?? ''), opts);
    if (why === undefined) fit.push(node);
    else reasons.set(why, (reasons.get(why) ?? 0) + 1);
  }
  if (fit.length === 0) {
    const parts = [...reasons.entries()].map(([r, n]) => `${n} ${r}`).sort();
    return {
      reason: 'Unschedulable',
      message: `0/${candidates.length} nodes are available${parts.length ? `: ${parts.join(', ')}` : ''}.`,
    };
  }
  const fastest = opts.fastest ?? pod.metadata?.annotations?.[ANNOTATIONS.placement] === 'fastest';
  // The best node by the order below, in one pass (each node's figures computed once).
  const score = (n: V1Node) => {
    const name = n.metadata?.name ?? '';
    const u = use.get(name);
    return { name, mops: fastest ? nodeMops(n) : 0, free: nodeAllocatableMemory(n) - (u?.memory ?? 0), pods: u?.pods ?? 0 };
  };
  const better = (a: ReturnType<typeof score>, b: ReturnType<typeof score>): boolean => {
    if (a.mops !== b.mops) return a.mops > b.mops;
    if (a.free !== b.free) return a.free > b.free;
    if (a.pods !== b.pods) return a.pods < b.pods;
    return a.name.localeCompare(b.name) < 0;
  };
  let best = score(fit[0]!);
  for (let i = 1; i < fit.length; i++) {
    const s = score(fit[i]!);
    if (better(s, best)) best = s;
  }
  return { nodeName: best.name };
}
