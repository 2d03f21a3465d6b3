/**
 * The kubelet's `GET /stats/summary`: Kubernetes' Summary API (`stats.k8s.io/v1alpha1` `Summary`, the
 * document metrics-server scrapes) from the node's own figures, served with the same auth as every
 * kubelet endpoint and reached through the API server's node proxy
 * (`/api/v1/nodes/<node>/proxy/stats/summary`).
 *
 * - A container: `cpu.usageCoreNanoSeconds`, the CPU time of its pod's thread since the container
 *   started (a shared thread: the time its own code ran; src/wasm's `PodInstance.usage`), its start
 *   (compile, instantiate, start steps) included; `cpu.usageNanoCores`, that counter's rate since the
 *   container started (see {@link UsageRates}), and `cpu.window`, what that rate was measured over; a
 *   container that started less than {@link MIN_RATE_WINDOW_MS} ago has no rate yet (no `usageNanoCores`,
 *   as the kubelet gives none before its second sample); `memory.workingSetBytes` (and `usageBytes`,
 *   `rssBytes`), its linear memory plus its instance.
 * - A pod: the sums of its running containers (`usageNanoCores` only once each has one).
 * - The node: the sums of its pods (several nodes may share one process, so the process's own CPU and
 *   RSS are no node's); `memory.availableBytes` is its heap (`--heap`, its allocatable memory) less that.
 *
 * Only containers that run now are listed (a container that has ended has no usage to give).
 */
import type { ServerResponse } from 'node:http';
import type { PodManager } from './pods.ts';

/** The shortest window a rate is measured over, ms: a newer sample waits for a later one. */
export const MIN_RATE_WINDOW_MS = 1_000;
/**
 * How often the kubelet samples its containers' CPU counters without being asked, ms (cAdvisor's
 * housekeeping interval, 10 s in the kubelet): so a rate is measured over at most about this long,
 * however long ago the summary was last read.
 */
export const HOUSEKEEPING_INTERVAL_MS = 10_000;

/** `cpu` of the Summary API (`CPUStats`). */
export interface CpuStats {
  /** RFC 3339 time of the sample. */
  time: string;
  /** Cores used over `window`, in billionths of a core; absent until a window of a second has passed. */
  usageNanoCores?: number;
  /** CPU time used since the start, ns. */
  usageCoreNanoSeconds: number;
  /**
   * Kube32's addition to `CPUStats` (the Summary API has no such field: cAdvisor's rate is over its
   * housekeeping interval): the duration `usageNanoCores` was measured over, as metrics.k8s.io writes a
   * `window` (`2.513s`), which the API server's PodMetrics and NodeMetrics carry on.
   */
  window?: string;
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

/** A counter's rate, and what it was measured over. */
export interface Rate {
  /** ns of CPU per s (nanocores). */
  nanoCores: number;
  /** The window, ms ({@link MIN_RATE_WINDOW_MS} at least). */
  windowMs: number;
}

/**
 * The rates of CPU counters, from their samples: one when the container started (the counter then: its
 * start's CPU, compile and instantiate included, is before it, so that no rate counts a start as load),
 * one every {@link HOUSEKEEPING_INTERVAL_MS} ({@link sampleContainers}), and one each summary request. A
 * rate is measured from the newest earlier sample at least {@link MIN_RATE_WINDOW_MS} old to now, so that
 * frequent readers (kubectl top, the HPA controller, metrics in a loop) all get a rate over a second or
 * more, and none over more than about the housekeeping interval. A counter is keyed by its container's
 * start (a container started again is a new counter).
 */
export class UsageRates {
  readonly #samples = new Map<string, Sample[]>();

  /** True when counter `key` has its start sample. */
  has(key: string): boolean {
    return this.#samples.has(key);
  }

  /**
   * Counter `key` was `ns` when its container started at `atMs` (Unix ms): its first sample. Nothing
   * when it has one already.
   */
  begin(key: string, atMs: number, ns: number): void {
    if (!this.#samples.has(key)) this.#samples.set(key, [{ atMs, ns }]);
  }

  /**
   * Records counter `key` at `nowMs` (Unix ms), and answers its rate since the newest earlier sample at
   * least {@link MIN_RATE_WINDOW_MS} old; undefined when there is none (a counter younger than that, or
   * without its start sample). Samples older than the one measured from are dropped.
   * @param ns the counter now, ns
   */
  rate(key: string, ns: number, nowMs: number): Rate | undefined {
    const list = this.#samples.get(key);
    if (!list) return undefined;
    let from: Sample | undefined;
    for (let i = list.length - 1; i >= 0; i--) {
      if (nowMs - list[i]!.atMs >= MIN_RATE_WINDOW_MS) {
        from = list[i];
        list.splice(0, i);
        break;
      }
    }
    const last = list[list.length - 1];
    // A counter never goes back: a reading that raced another (two requests at once) is not a sample.
    if (!last || (nowMs >= last.atMs && ns >= last.ns)) list.push({ atMs: nowMs, ns });
    if (!from) return undefined;
    const windowMs = nowMs - from.atMs;
    return { nanoCores: Math.max(0, Math.round(((ns - from.ns) / windowMs) * 1000)), windowMs };
  }

  /** Forgets the counters not in `live` (containers gone or started again). */
  keep(live: Set<string>): void {
    for (const k of this.#samples.keys()) if (!live.has(k)) this.#samples.delete(k);
  }
}

/**
 * A duration as metrics.k8s.io writes a `window` (Go's `time.Duration` text, to the millisecond):
 * `1s`, `2.513s`, `1m5.2s`.
 */
export function formatWindow(ms: number): string {
  const total = Math.max(0, Math.round(ms));
  const m = Math.floor(total / 60_000);
  const rest = total - m * 60_000;
  const s = `${Math.floor(rest / 1000)}${rest % 1000 ? `.${String(rest % 1000).padStart(3, '0').replace(/0+$/, '')}` : ''}s`;
  return m > 0 ? `${m}m${s}` : s;
}

/** One running container's counter, read now. */
interface ContainerReading {
  key: string;
  startedAt: number;
  cpuNs: number;
  memoryBytes: number;
}

/**
 * Reads the CPU counter of every running container of `pods` once, giving a counter seen for the first
 * time its start sample (the counter as its start returned), and forgets the containers gone.
 * @returns the readings by pod uid, in the workers' order
 */
async function readContainers(pods: PodManager | undefined, rates: UsageRates): Promise<Map<string, Map<string, ContainerReading>>> {
  const out = new Map<string, Map<string, ContainerReading>>();
  const live = new Set<string>();
  const reads: Promise<void>[] = [];
  for (const w of pods?.workers.values() ?? []) {
    const mine = new Map<string, ContainerReading>();
    out.set(w.uid, mine);
    for (const r of w.runners) {
      const inst = r.instance;
      const state = r.view().state;
      if (!inst || inst.exit || state.kind !== 'running') continue;
      const key = `${w.uid}/${r.spec.name}/${state.startedAt}`;
      live.add(key);
      reads.push((async () => {
        if (!rates.has(key)) rates.begin(key, state.startedAt, await inst.startCpuNs());
        const u = await inst.usage();
        mine.set(r.spec.name, { key, startedAt: state.startedAt, cpuNs: u.cpuNs, memoryBytes: u.memoryBytes });
      })());
    }
  }
  await Promise.all(reads);
  rates.keep(live);
  return out;
}

/**
 * Samples every running container's CPU counter (the kubelet's housekeeping, every
 * {@link HOUSEKEEPING_INTERVAL_MS}): so that the next summary's rates are over at most about that long.
 */
export async function sampleContainers(pods: PodManager | undefined, rates: UsageRates): Promise<void> {
  const readings = await readContainers(pods, rates);
  const nowMs = Date.now();
  for (const mine of readings.values()) for (const c of mine.values()) rates.rate(c.key, c.cpuNs, nowMs);
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
  const readings = await readContainers(src.pods, src.rates);
  const nowMs = Date.now();
  const time = iso(nowMs);
  const pods: PodStats[] = [];
  let nodeNs = 0;
  let nodeCores = 0;
  let nodeWindowMs = 0;
  let nodeBytes = 0;
  for (const w of src.pods?.workers.values() ?? []) {
    const containers: ContainerStats[] = [];
    let podCores: number | undefined = 0;
    let podWindowMs = 0;
    for (const r of w.runners) {
      const c = readings.get(w.uid)?.get(r.spec.name);
      if (!c) continue;
      const rate = src.rates.rate(c.key, c.cpuNs, nowMs);
      if (rate) {
        if (podCores !== undefined) podCores += rate.nanoCores;
        podWindowMs = Math.max(podWindowMs, rate.windowMs);
        nodeCores += rate.nanoCores;
        nodeWindowMs = Math.max(nodeWindowMs, rate.windowMs);
      } else {
        podCores = undefined;
      }
      containers.push({
        name: r.spec.name,
        startTime: iso(c.startedAt),
        cpu: { time, ...(rate ? { usageNanoCores: rate.nanoCores, window: formatWindow(rate.windowMs) } : {}), usageCoreNanoSeconds: Math.round(c.cpuNs) },
        memory: memory(time, c.memoryBytes),
      });
    }
    if (containers.length === 0) continue;
    const ns = containers.reduce((n, c) => n + c.cpu.usageCoreNanoSeconds, 0);
    const bytes = containers.reduce((n, c) => n + c.memory.workingSetBytes, 0);
    nodeNs += ns;
    nodeBytes += bytes;
    const meta = w.pod.metadata ?? {};
    const started = w.pod.status?.startTime ? new Date(w.pod.status.startTime).getTime() : Math.min(...containers.map((c) => Date.parse(c.startTime)));
    pods.push({
      podRef: { name: meta.name ?? '', namespace: meta.namespace ?? '', uid: w.uid },
      startTime: iso(started),
      containers,
      cpu: { time, ...(podCores !== undefined ? { usageNanoCores: podCores, window: formatWindow(podWindowMs) } : {}), usageCoreNanoSeconds: ns },
      memory: memory(time, bytes),
    });
  }
  return {
    node: {
      nodeName: src.nodeName,
      startTime: iso(src.startedAtMs),
      // The node's rate: its containers' that have one (a container too young for one is left out of it).
      cpu: { time, usageNanoCores: nodeCores, usageCoreNanoSeconds: nodeNs, window: formatWindow(Math.max(MIN_RATE_WINDOW_MS, nodeWindowMs)) },
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
