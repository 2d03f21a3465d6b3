/**
 * The API server's Prometheus metrics (`GET /metrics`, for `system:masters`): requests by verb, resource
 * and code, their latency, the JavaScript thread's busy time, open streams, stored objects by resource, and the checkpoint data held in memory.
 */
import type { ServerResponse } from 'node:http';
import { Counter, Gauge, Histogram, Registry as MetricsRegistry, collectDefaultMetrics } from 'prom-client';
import type { CheckpointDataStore } from './registry/checkpoints/data-store.ts';
import { RESOURCES } from './registry/catalog.ts';
import { storageKey } from './registry/types.ts';
import type { Storage } from './storage/index.ts';
import type { Cacher } from './storage/cacher.ts';

/** The metrics of one API server, and the two that each request moves. */
export interface ServerMetrics {
  registry: MetricsRegistry;
  /** `apiserver_request_total{verb,resource,subresource,code}`. */
  requests: Counter<'verb' | 'resource' | 'subresource' | 'code'>;
  /** `apiserver_request_duration_seconds{verb,resource}`: to the answer (watches and proxies: to their headers), s. */
  latency: Histogram<'verb' | 'resource'>;
}

/** Registers the metrics; the gauges read `storage`, `checkpointData`, `streams` and `cacher` when scraped. */
export function createMetrics(storage: Storage, checkpointData: CheckpointDataStore, streams: Set<ServerResponse>, cacher?: Cacher): ServerMetrics {
  const metrics = new MetricsRegistry();
  collectDefaultMetrics({ register: metrics });
  const requests = new Counter({ name: 'apiserver_request_total', help: 'Requests by verb, resource and HTTP code.', labelNames: ['verb', 'resource', 'subresource', 'code'] as const, registers: [metrics] });
  const latency = new Histogram({
    name: 'apiserver_request_duration_seconds',
    help: 'Time to answer a request (watches and proxies: to their headers).',
    labelNames: ['verb', 'resource'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [metrics],
  });

  // The thread's busy time: with asynchronous storage requests overlap, so their summed durations are not it.
  new Counter({
    name: 'kube32_event_loop_busy_seconds_total',
    help: "Seconds this process's JavaScript thread (the API server's, and the controllers' when in the same process) was busy since it started: performance.eventLoopUtilization().active. Wall time, so it counts time the thread ran but the OS gave its core to another process.",
    registers: [metrics],
    collect() {
      this.reset();
      this.inc(performance.eventLoopUtilization().active / 1000);
    },
  });
  new Gauge({ name: 'apiserver_open_streams', help: 'Open watch and proxy streams.', registers: [metrics], collect() { this.set(streams.size); } });
  new Gauge({
    name: 'apiserver_storage_objects',
    help: 'Objects stored, by resource.',
    labelNames: ['resource'],
    registers: [metrics],
    async collect() {
      // The watch cache's count where it has the resource (kept current by its watch); the store's list otherwise.
      for (const def of RESOURCES) {
        const key = storageKey(def);
        this.set({ resource: key }, cacher?.sizeOf(key) ?? (await storage.listRaw(key)).rows.length);
      }
    },
  });
  new Counter({
    name: 'apiserver_terminated_watchers_total',
    help: 'Watchers ended because they could not keep up, by resource.',
    labelNames: ['resource'],
    registers: [metrics],
    collect() {
      this.reset();
      for (const [resource, n] of cacher?.terminatedWatchers ?? []) this.inc({ resource }, n);
    },
  });
  new Gauge({ name: 'kube32_checkpoint_data_bytes', help: 'Bytes of checkpoint snapshots held in memory.', registers: [metrics], collect() { this.set(checkpointData.usedBytes); } });
  new Gauge({ name: 'kube32_checkpoint_data_capacity_bytes', help: 'Bytes of memory for checkpoint snapshots (--checkpoint-data-bytes).', registers: [metrics], collect() { this.set(checkpointData.capacity); } });
  return { registry: metrics, requests, latency };
}
