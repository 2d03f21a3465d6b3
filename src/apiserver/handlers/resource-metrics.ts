/**
 * The resource metrics API, `metrics.k8s.io/v1beta1` `NodeMetrics` and `PodMetrics`, served by the API
 * server itself (where Kubernetes aggregates metrics-server): each request reads the Summary API
 * (`GET /stats/summary`, src/kubelet/stats.ts) of the nodes it needs, from their kubelets as the node
 * proxy reaches them (the node's InternalIP and kubelet port, the server's own kubelet token), at most
 * {@link SUMMARY_TIMEOUT_MS} each, all at once. So `kubectl top nodes`, `kubectl top pods [-A]
 * [--containers]` and the HorizontalPodAutoscaler controller read the nodes' own figures.
 *
 * | path | what |
 * |---|---|
 * | `GET /apis/metrics.k8s.io/v1beta1/nodes[/<name>]` | NodeMetricsList / NodeMetrics (`labelSelector`) |
 * | `GET /apis/metrics.k8s.io/v1beta1/[namespaces/<ns>/]pods[/<name>]` | PodMetricsList / PodMetrics (`labelSelector`, `fieldSelector` on metadata.name/namespace) |
 *
 * What a node cannot give is left out, without an error, as metrics-server leaves out what it could not
 * scrape: a node whose kubelet does not answer (or has no endpoint), a FeOS node (its pods are microVMs,
 * whose figures are not read yet: docs/apiserver.md), a pod not running, a pod the registry no longer
 * holds with that uid, and a pod with a container too young for a rate (the kubelet measures one over a
 * second at least; metrics-server too lists a pod only once it has a rate). A named object left out is 404 `NotFound` (`nodes.metrics.k8s.io "x" not found`).
 * `usage.cpu` is in nanocores (`123456n`), `usage.memory` in KiB (`1024Ki`), as metrics-server writes them;
 * `window` is what the kubelet measured the rate over (its `cpu.window`: from its newest sample at least a
 * second old, and it samples every 10 s), as metrics-server's is its scrape interval.
 */
import { request as httpRequest } from 'node:http';
import { nodeRuntime } from '../../api/index.ts';
import { ApiError, notFound } from '../errors.ts';
import { nodes } from '../registry/nodes/index.ts';
import { pods } from '../registry/pods/index.ts';
import { parseFieldSelector, parseLabelSelector } from '../registry/selectors.ts';
import { arr, rec } from '../registry/util.ts';
import type { KubeObject } from '../storage/index.ts';
import type { RequestScope, ServerContext } from './context.ts';
import { sendJson } from './http.ts';
import { kubeletAddress } from './proxy.ts';

/** The API group and version served here. */
export const METRICS_GROUP = 'metrics.k8s.io';
export const METRICS_VERSION = 'v1beta1';
const API_VERSION = `${METRICS_GROUP}/${METRICS_VERSION}`;
/** How long one kubelet's summary may take, ms. */
export const SUMMARY_TIMEOUT_MS = 5_000;
/** The part of a Summary read here. */
interface Usage {
  time?: string;
  usageNanoCores?: number;
  /** The kubelet's window of usageNanoCores (Kube32's addition to CPUStats: src/kubelet/stats.ts). */
  window?: string;
  workingSetBytes?: number;
}
interface SummaryDoc {
  node?: { startTime?: string; cpu?: Usage; memory?: Usage };
  pods?: Array<{ podRef?: { name?: string; namespace?: string; uid?: string }; containers?: Array<{ name?: string; startTime?: string; cpu?: Usage; memory?: Usage }>; cpu?: Usage }>;
}

/** `GET /stats/summary` of one node's kubelet; undefined when it cannot be read. */
function fetchSummary(ctx: ServerContext, node: KubeObject): Promise<SummaryDoc | undefined> {
  let target: { host: string; port: number };
  try {
    target = kubeletAddress(node);
  } catch {
    return Promise.resolve(undefined);
  }
  return new Promise((resolve) => {
    const req = httpRequest({ host: target.host, port: target.port, path: '/stats/summary', headers: { authorization: `Bearer ${ctx.kubeletToken}`, accept: 'application/json' }, timeout: SUMMARY_TIMEOUT_MS });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) return resolve(undefined);
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as SummaryDoc);
        } catch {
          resolve(undefined);
        }
      });
      res.on('error', () => resolve(undefined));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => {
      ctx.log.debug({ node: node.metadata.name, err: err.message }, 'metrics: the node\'s summary could not be read');
      resolve(undefined);
    });
    req.end();
  });
}

/** One node's summary, read now. */
interface NodeReading {
  node: KubeObject;
  summary: SummaryDoc;
  /** RFC 3339, the reading's time. */
  timestamp: string;
}

/** A kubelet's window (`2.513s`) as metrics.k8s.io writes it; `1s` when it gave none. */
const windowOf = (u: Usage | undefined) => (typeof u?.window === 'string' && /^(\d+m)?\d+(\.\d+)?s$/.test(u.window) ? u.window : '1s');

/** Reads the summaries of `list` (Wasm nodes only: FeOS nodes give nothing yet) at once. */
async function readNodes(ctx: ServerContext, list: KubeObject[]): Promise<NodeReading[]> {
  const wasm = list.filter((n) => nodeRuntime(n as never) === 'wasm');
  const docs = await Promise.all(wasm.map((n) => fetchSummary(ctx, n)));
  const out: NodeReading[] = [];
  wasm.forEach((node, i) => {
    const summary = docs[i];
    if (!summary) return;
    out.push({ node, summary, timestamp: summary.node?.cpu?.time ?? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z') });
  });
  return out;
}

const cpuQuantity = (u: Usage | undefined) => `${Math.max(0, Math.round(u?.usageNanoCores ?? 0))}n`;
const memoryQuantity = (u: Usage | undefined) => `${Math.ceil(Math.max(0, u?.workingSetBytes ?? 0) / 1024)}Ki`;

function metadataOf(obj: KubeObject): Record<string, unknown> {
  const m: Record<string, unknown> = { name: obj.metadata.name, creationTimestamp: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z') };
  if (obj.metadata.namespace) m.namespace = obj.metadata.namespace;
  if (obj.metadata.labels) m.labels = obj.metadata.labels;
  return m;
}

/** NodeMetrics of the nodes (one named, or those the label selector picks). */
async function nodeMetrics(ctx: ServerContext, name: string | undefined, labelSelector: string | null): Promise<Record<string, unknown>[]> {
  let list: KubeObject[];
  if (name !== undefined) {
    const n = await ctx.registry.find(nodes, '', name);
    list = n ? [n] : [];
  } else {
    list = (await ctx.registry.list(nodes, undefined, labelSelector ? { labelSelector } : {})).items;
  }
  return (await readNodes(ctx, list)).map((r) => ({
    kind: 'NodeMetrics',
    apiVersion: API_VERSION,
    metadata: metadataOf(r.node),
    timestamp: r.timestamp,
    window: windowOf(r.summary.node?.cpu),
    usage: { cpu: cpuQuantity(r.summary.node?.cpu), memory: memoryQuantity(r.summary.node?.memory) },
  }));
}

/** PodMetrics of the pods in `namespace` (all when undefined) that the selectors pick, from their nodes' summaries. */
async function podMetrics(ctx: ServerContext, namespace: string | undefined, name: string | undefined, labelSelector: string | null, fieldSelector: string | null): Promise<Record<string, unknown>[]> {
  let wanted: KubeObject[];
  if (name !== undefined) {
    const p = await ctx.registry.find(pods, namespace ?? '', name);
    wanted = p ? [p] : [];
  } else {
    wanted = (
      await ctx.registry.list(pods, namespace, {
        ...(labelSelector ? { labelSelector } : {}),
        ...(fieldSelector ? { fieldSelector } : {}),
      })
    ).items;
  }
  const byUid = new Map<string, KubeObject>();
  const nodeNames = new Set<string>();
  for (const p of wanted) {
    const node = rec(p.spec).nodeName;
    if (rec(p.status).phase !== 'Running' || typeof node !== 'string' || !p.metadata.uid) continue;
    byUid.set(p.metadata.uid, p);
    nodeNames.add(node);
  }
  const nodeObjs = (await Promise.all([...nodeNames].map((n) => ctx.registry.find(nodes, '', n)))).filter((n): n is KubeObject => n !== undefined);
  const out: Record<string, unknown>[] = [];
  for (const r of await readNodes(ctx, nodeObjs)) {
    for (const ps of arr(r.summary.pods) as NonNullable<SummaryDoc['pods']>) {
      const pod = byUid.get(ps.podRef?.uid ?? '');
      if (!pod || rec(pod.spec).nodeName !== r.node.metadata.name) continue;
      // A container without a rate yet (started less than a second ago): no metrics for the pod yet.
      if ((ps.containers ?? []).some((c) => typeof c.cpu?.usageNanoCores !== 'number')) continue;
      out.push({
        kind: 'PodMetrics',
        apiVersion: API_VERSION,
        metadata: metadataOf(pod),
        timestamp: ps.cpu?.time ?? r.timestamp,
        window: windowOf(ps.cpu),
        containers: (ps.containers ?? []).map((c) => ({ name: c.name ?? '', usage: { cpu: cpuQuantity(c.cpu), memory: memoryQuantity(c.memory) } })),
      });
    }
  }
  const key = (o: Record<string, unknown>) => `${rec(o.metadata).namespace}/${rec(o.metadata).name}`;
  return out.sort((a, b) => key(a).localeCompare(key(b)));
}

/**
 * Serves a `metrics.k8s.io/v1beta1` request (already authorized: `get`/`list` on `nodes` or `pods`
 * in `metrics.k8s.io`, which `view` holds through `system:aggregated-metrics-reader`).
 * @throws ApiError MethodNotAllowed for anything but GET; NotFound for another resource, or a named
 *   node or pod with no metrics; BadRequest for a bad selector
 */
export async function serveResourceMetrics(scope: RequestScope): Promise<void> {
  const { req, res, url, info, ctx } = scope;
  if (info.plural !== 'nodes' && info.plural !== 'pods') throw new ApiError('NotFound', 'the server could not find the requested resource');
  if (info.subresource !== undefined) throw new ApiError('NotFound', 'the server could not find the requested resource');
  if (req.method !== 'GET' && req.method !== 'HEAD') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on ${info.plural}.${METRICS_GROUP}: the metrics are read only (get, list)`);
  if (url.searchParams.get('watch') === 'true') throw new ApiError('MethodNotAllowed', `watch is not supported on ${info.plural}.${METRICS_GROUP}: list it again`);
  const labelSelector = url.searchParams.get('labelSelector');
  const fieldSelector = url.searchParams.get('fieldSelector');
  // A bad selector is a 400 before any node is asked.
  if (labelSelector) parseLabelSelector(labelSelector);
  if (fieldSelector) parseFieldSelector(fieldSelector);
  if (info.plural === 'nodes') {
    if (info.namespace !== undefined) throw new ApiError('NotFound', 'the server could not find the requested resource: nodes are not namespaced');
    const items = await nodeMetrics(ctx, info.name, labelSelector);
    if (info.name !== undefined) {
      if (items.length === 0) throw notFound('nodes', METRICS_GROUP, info.name);
      return sendJson(res, 200, items[0]);
    }
    return sendJson(res, 200, { kind: 'NodeMetricsList', apiVersion: API_VERSION, metadata: {}, items });
  }
  const items = await podMetrics(ctx, info.namespace, info.name, labelSelector, fieldSelector);
  if (info.name !== undefined) {
    if (items.length === 0) throw notFound('pods', METRICS_GROUP, info.name);
    return sendJson(res, 200, items[0]);
  }
  return sendJson(res, 200, { kind: 'PodMetricsList', apiVersion: API_VERSION, metadata: {}, items });
}
