/**
 * The kubelet's `GET /stats/summary`: Kubernetes' Summary API (`stats.k8s.io/v1alpha1` `Summary`, the
 * document metrics-server scrapes) from the node's own figures, served with the same auth as every
 * kubelet endpoint and reached through the API server's node proxy
 * (`/api/v1/nodes/<node>/proxy/stats/summary`).
 *
 * - A container: `cpu.usageCoreNanoSeconds`, the CPU time of its pod's thread since the container
 *   started (a shared thread: the time its own code ran; src/wasm's `PodInstance.usage`);
 *   `cpu.usageNanoCores`, that counter's rate (see {@link UsageRates}); `memory.workingSetBytes` (and
 *   `usageBytes`, `rssBytes`), its linear memory plus its instance.
 * - A pod: the sums of its running containers.
 * - The node: the sums of its pods (several nodes may share one process, so the process's own CPU and
 *   RSS are no node's); `memory.availableBytes` is its heap (`--heap`, its allocatable memory) less that.
 *
 * Only containers that run now are listed (a container that has ended has no usage to give).
 */
import type { ServerResponse } from 'node:http';
import type { PodManager } from './pods.ts';

/** The shortest window a rate is measured over, ms: a newer sample waits for a later request. */
export const MIN_RATE_WINDOW_MS = 1_000;
/** Samples older than this are dropped, ms (a rate is measured over at most about this long). */
export const MAX_RATE_WINDOW_MS = 60_000;

/** `cpu` of the Summary API (`CPUStats`). */
export interface CpuStats {
  /** RFC 3339 time of the sample. */
  time: string;
  /** Cores used over the last window, in billionths of a core. */
  usageNanoCores: number;
  /** CPU time used since the start, ns. */
  usageCoreNanoSeconds: number;
}

/** `memory` of the Summary API (`MemoryStats`), bytes. */
export interface MemoryStats {
  time: string;
  availableBytes?: number;
  usageBytes: number;
  workingSetBytes: number;
  rssBytes: number;
  pageFaults: number;
  majorPageFaults: number;
}

/** A container of the Summary API (`ContainerStats`). */
export interface ContainerStats {
  name: string;
  startTime: string;
  cpu: CpuStats;
  memory: MemoryStats;
}

/** A pod of the Summary API (`PodStats`). */
export interface PodStats {
  podRef: { name: string; namespace: string; uid: string };
  startTime: string;
  containers: ContainerStats[];
  cpu: CpuStats;
  memory: MemoryStats;
}

/** The Summary API's document (`Summary`). */
export interface Summary {
  node: { nodeName: string; startTime: string; cpu: CpuStats; memory: MemoryStats; systemContainers: never[] };
  pods: PodStats[];
}

interface Sample {
  atMs: number;
  ns: number;
}

/**
 * The rates of CPU counters, from the samples each request takes: a counter's rate is measured from
 * the newest earlier sample at least {@link MIN_RATE_WINDOW_MS} old to now, so that frequent readers
 * (kubectl top, the HPA controller, metrics in a loop) all get a rate over a second or more, without a
 * timer sampling for nobody. The first reading of a counter gives its average since its start. A
 * counter that went back (its container started again) starts its samples afresh.
 */
export class UsageRates {
  readonly #samples = new Map<string, Sample[]>();

  /**
   * The rate of counter `key`, in ns of CPU per s (nanocores).
   * @param ns the counter now, ns
   * @param startMs when the counter started from 0 (Unix ms), for a first reading
   */
  rate(key: string, ns: number, nowMs: number, startMs: number): number {
    let list = this.#samples.get(key);
    if (list && list.length > 0 && list[list.length - 1]!.ns > ns) list = undefined;
    if (!list) {
      list = [];
      this.#samples.set(key, list);
    }
    let from: Sample | undefined;
    for (let i = list.length - 1; i >= 0; i--) {
      if (nowMs - list[i]!.atMs >= MIN_RATE_WINDOW_MS) {
        from = list[i];
        list.splice(0, i);
        break;
      }
    }
    while (list.length > 1 && nowMs - list[0]!.atMs > MAX_RATE_WINDOW_MS) list.shift();
    list.push({ atMs: nowMs, ns });
    if (!from) from = { atMs: startMs, ns: 0 };
    const dtMs = nowMs - from.atMs;
    return dtMs > 0 ? Math.max(0, Math.round(((ns - from.ns) / dtMs) * 1000)) : 0;
  }

  /** Forgets the counters not in `live` (containers gone). */
  keep(live: Set<string>): void {
    for (const k of this.#samples.keys()) if (!live.has(k)) this.#samples.delete(k);
  }
}

/** RFC 3339 with ms, as the kubelet's Summary carries sub-second times (a reading's window is judged against readiness to the second). */
const iso = (ms: number) => new Date(ms).toISOString();

function memory(time: string, bytes: number, availableBytes?: number): MemoryStats {
  return { time, ...(availableBytes !== undefined ? { availableBytes } : {}), usageBytes: bytes, workingSetBytes: bytes, rssBytes: bytes, pageFaults: 0, majorPageFaults: 0 };
}

/** What the summary needs of its node. */
export interface SummarySource {
  nodeName: string;
  /** When the kubelet started, Unix ms. */
  startedAtMs: number;
  /** The heap pods may hold, bytes (the node's allocatable memory). */
  heapBytes: number;
  pods: PodManager | undefined;
  rates: UsageRates;
}

/** Builds the node's Summary now. */
export async function buildSummary(src: SummarySource): Promise<Summary> {
  const nowMs = Date.now();
  const time = iso(nowMs);
  const live = new Set<string>();
  const pods: PodStats[] = [];
  let nodeNs = 0;
  let nodeCores = 0;
  let nodeBytes = 0;
  for (const w of src.pods?.workers.values() ?? []) {
    const containers: ContainerStats[] = [];
    for (const r of w.runners) {
      const inst = r.instance;
      const state = r.view().state;
      if (!inst || inst.exit || state.kind !== 'running') continue;
      const u = await inst.usage();
      const key = `${w.uid}/${r.spec.name}`;
      live.add(key);
      const cores = src.rates.rate(key, u.cpuNs, nowMs, state.startedAt);
      containers.push({
        name: r.spec.name,
        startTime: iso(state.startedAt),
        cpu: { time, usageNanoCores: cores, usageCoreNanoSeconds: Math.round(u.cpuNs) },
        memory: memory(time, u.memoryBytes),
      });
    }
    if (containers.length === 0) continue;
    const ns = containers.reduce((n, c) => n + c.cpu.usageCoreNanoSeconds, 0);
    const cores = containers.reduce((n, c) => n + c.cpu.usageNanoCores, 0);
    const bytes = containers.reduce((n, c) => n + c.memory.workingSetBytes, 0);
    nodeNs += ns;
    nodeCores += cores;
    nodeBytes += bytes;
    const meta = w.pod.metadata ?? {};
    const started = w.pod.status?.startTime ? new Date(w.pod.status.startTime).getTime() : Math.min(...containers.map((c) => Date.parse(c.startTime)));
    pods.push({
      podRef: { name: meta.name ?? '', namespace: meta.namespace ?? '', uid: w.uid },
      startTime: iso(started),
      containers,
      cpu: { time, usageNanoCores: cores, usageCoreNanoSeconds: ns },
      memory: memory(time, bytes),
    });
  }
  src.rates.keep(live);
  return {
    node: {
      nodeName: src.nodeName,
      startTime: iso(src.startedAtMs),
      cpu: { time, usageNanoCores: nodeCores, usageCoreNanoSeconds: nodeNs },
      memory: memory(time, nodeBytes, Math.max(0, src.heapBytes - nodeBytes)),
      systemContainers: [],
    },
    pods,
  };
}

/** Answers `GET /stats/summary` with the node's Summary. */
export async function serveSummary(res: ServerResponse, src: SummarySource): Promise<void> {
  const body = JSON.stringify(await buildSummary(src));
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}
