/**
 * What every reconcile receives: the API, the caches, the clock, the logger, the timing options, and the
 * little in-memory state that controllers of one process share (replacements in flight, the snapshot lock,
 * the Auto policy's cooldowns, freeze times of moves).
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import type { TimerClock } from '../../lib/index.ts';
import type { ClusterApi } from './api.ts';
import type { Caches } from './cache.ts';
import type { ControllerLog } from './controller.ts';
import { type CheckpointEventReason, errorMessage, isNotFound } from '../../api/index.ts';
import type { PodsByOwner } from './owner-index.ts';

/** Timings of the controllers, all in ms; the defaults are the seed's and Kubernetes'. */
export interface ControllerTimings {
  /** A move's replacement that does not run within this rolls back (seed "Limits"). @default 60000 */
  moveTimeoutMs: number;
  /** How long the current call may take before a snapshot (the kubelet's `timeoutMs`). @default 10000 */
  freezeTimeoutMs: number;
  /** A node whose Lease is not renewed for this long turns NotReady/Unknown. @default 40000 */
  nodeMonitorGracePeriodMs: number;
  /** Pods of an unreachable node are evicted this long after it turned Unknown. @default 300000 */
  podEvictionTimeoutMs: number;
  /**
   * Pods of an unreachable node with a Saved periodic checkpoint restore elsewhere this long after it turned
   * Unknown (issue 26: the node fenced them itself by then, see src/kubelet/fence.ts). @default 5000
   */
  nodeLossRestoreDelayMs: number;
  /** Finished non-periodic Checkpoints are removed this long after they finished (seed "Retention"). @default 3600000 */
  checkpointRetentionMs: number;
  /** An Auto pod moves on its own at most once per this (seed "Policies"). @default 600000 */
  autoMoveCooldownMs: number;
  /** At most one memory-pressure move per node per this. @default 60000 */
  memoryPressureNodeCooldownMs: number;
  /** The shortest `kube32.io/checkpoint-interval`. @default 10000 */
  minCheckpointIntervalMs: number;
  /** An unschedulable pod is tried again after this even without a node event. @default 15000 */
  unschedulableRetryMs: number;
  /** How often each HorizontalPodAutoscaler is synced (`--horizontal-pod-autoscaler-sync-period`). @default 15000 */
  horizontalPodAutoscalerSyncPeriodMs: number;
  /**
   * An HPA without `behavior` scales down to the highest recommendation of this window
   * (`--horizontal-pod-autoscaler-downscale-stabilization`). @default 300000
   */
  horizontalPodAutoscalerDownscaleStabilizationMs: number;
  /**
   * A pod younger than this counts toward CPU only once Ready with a window of metrics since
   * (`--horizontal-pod-autoscaler-cpu-initialization-period`). @default 300000
   */
  horizontalPodAutoscalerCpuInitializationPeriodMs: number;
  /** A pod unready this long after its start has never been Ready (`--horizontal-pod-autoscaler-initial-readiness-delay`). @default 30000 */
  horizontalPodAutoscalerInitialReadinessDelayMs: number;
  /**
   * The ratio of usage to target within which an HPA does not scale (`--horizontal-pod-autoscaler-tolerance`;
   * a fraction, not ms). @default 0.1
   */
  horizontalPodAutoscalerTolerance: number;
}

export const DEFAULT_TIMINGS: ControllerTimings = {
  moveTimeoutMs: 60_000,
  freezeTimeoutMs: 10_000,
  nodeMonitorGracePeriodMs: 40_000,
  podEvictionTimeoutMs: 300_000,
  nodeLossRestoreDelayMs: 5_000,
  checkpointRetentionMs: 3_600_000,
  autoMoveCooldownMs: 600_000,
  memoryPressureNodeCooldownMs: 60_000,
  minCheckpointIntervalMs: 10_000,
  unschedulableRetryMs: 15_000,
  horizontalPodAutoscalerSyncPeriodMs: 15_000,
  horizontalPodAutoscalerDownscaleStabilizationMs: 300_000,
  horizontalPodAutoscalerCpuInitializationPeriodMs: 300_000,
  horizontalPodAutoscalerInitialReadinessDelayMs: 30_000,
  horizontalPodAutoscalerTolerance: 0.1,
};

/**
 * Pods being replaced (a move, a rollback, a restore after node loss): between the DELETED of the old uid
 * and the ADDED of the new one, the workload controllers count the pod as present, so a ReplicaSet never
 * adds a pod that would start without the state (seed "Moves": "The Deployment counts one pod at every step").
 */
export class Replacements {
  readonly #inFlight = new Map<string, { until: number; ownerUid?: string }>();
  readonly #clock: TimerClock;
  constructor(clock: TimerClock) {
    this.#clock = clock;
  }
  /** Marks `namespace/name` (controlled by `ownerUid`) as being replaced, for at most 30 s. */
  begin(key: string, ownerUid?: string): void {
    this.#inFlight.set(key, { until: this.#clock.now() + 30_000, ownerUid });
  }
  /** The replacement is visible (its ADDED arrived) or failed. */
  end(key: string): void {
    this.#inFlight.delete(key);
  }
  /** Whether `namespace/name` is being replaced now. */
  has(key: string): boolean {
    const entry = this.#inFlight.get(key);
    if (entry === undefined) return false;
    if (entry.until < this.#clock.now()) {
      this.#inFlight.delete(key);
      return false;
    }
    return true;
  }
  /** The `namespace/name` keys being replaced whose controller is `ownerUid`. */
  ownedBy(ownerUid: string): string[] {
    return [...this.#inFlight.keys()].filter((k) => this.has(k) && this.#inFlight.get(k)?.ownerUid === ownerUid);
  }
}

/** A FIFO async lock: the control plane takes one snapshot at a time, others wait (seed "Limits"). */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();
  /** Runs `fn` when every earlier holder has finished. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const prev = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((r) => {
      release = r;
    });
    await prev;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

/** The shared, in-memory state of one control plane process (lost on restart, as the seed allows). */
export interface SharedState {
  replacements: Replacements;
  snapshotLock: Mutex;
  /** `namespace/name` of a pod → when it last moved on its own (Auto policy). */
  autoMovedAt: Map<string, number>;
  /** Node name → when its last memory-pressure move started. */
  pressureMoveAt: Map<string, number>;
  /** `namespace/checkpoint` → observer time of the freeze, for the Moved event's figure. */
  frozenAt: Map<string, number>;
  /** `namespace/checkpoint` → observer time of the replacement, for the 60 s rollback. */
  replacedAt: Map<string, number>;
  /** Node name → observer time its Lease last changed, and that Lease's renew time. */
  leaseSeen: Map<string, { renew: string; at: number }>;
  /** A node with no Node object but pods still bound to it → when this controller first saw it so (ms). */
  nodeGoneSince: Map<string, number>;
  /** Events recorded lately, for aggregation ({@link recordEvent}). */
  events: RecordedEvents;
  /** The rate limit of events per source and object ({@link recordEvent}). */
  eventSpam: EventSpamFilter;
  /**
   * The pod cache indexed by controller uid, kept from the pod informer (`startControllers` sets it;
   * without it, as in unit tests, owners' pods are found by walking the cache).
   */
  podsByOwner?: PodsByOwner;
  /** `namespace/name` of a pod → its uid and the annotation warnings already recorded for that uid. */
  annotationWarnings: Map<string, { uid: string; warned: Set<string> }>;
}

/** Creates empty shared state. */
export function newSharedState(clock: TimerClock): SharedState {
  return {
    replacements: new Replacements(clock),
    snapshotLock: new Mutex(),
    autoMovedAt: new Map(),
    pressureMoveAt: new Map(),
    frozenAt: new Map(),
    replacedAt: new Map(),
    leaseSeen: new Map(),
    nodeGoneSince: new Map(),
    events: new Map(),
    eventSpam: new EventSpamFilter(),
    annotationWarnings: new Map(),
  };
}

/** Everything a reconcile needs. */
export interface ControllerContext {
  api: ClusterApi;
  cache: Caches;
  clock: TimerClock;
  log: ControllerLog;
  timings: ControllerTimings;
  state: SharedState;
  /**
   * A move's snapshot goes on to its target while the API server stores it (`&target=`, issue 26): see
   * {@link StartControllersOptions}. @default true
   */
  pushSnapshotsToTarget?: boolean;
}

let eventSeq = 0;

/** A repeat of the same event (object, type, reason, message, component) within this raises its count: 10 min. */
export const EVENT_AGGREGATION_MS = 600_000;

/** Events one source may write about one object at once: client-go's `defaultSpamBurst`, 25. */
export const EVENT_SPAM_BURST = 25;
/** Then one more per this: client-go's `defaultSpamQPS`, 1/300 s. */
export const EVENT_SPAM_REFILL_MS = 300_000;
/** Sources and objects remembered by the spam filter (least recently used dropped): client-go's 4096. */
const EVENT_SPAM_KEYS = 4096;

/**
 * client-go's `EventSourceObjectSpamFilter`: a token bucket per source component and involved object
 * (kind, namespace, name, uid, apiVersion) holding {@link EVENT_SPAM_BURST} events, refilled by one every
 * {@link EVENT_SPAM_REFILL_MS}; an event (or a repeat's count update) that finds it empty is not written.
 * So a ReplicaSet creating 10 000 pods writes 25 `SuccessfulCreate` events, not 10 000, as in Kubernetes,
 * while every pod still gets its own `Scheduled` (one object each).
 */
export class EventSpamFilter {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  /**
   * Takes a token for `key` at `now` (ms).
   * @returns whether the event may be written
   */
  allow(key: string, now: number): boolean {
    const prev = this.#buckets.get(key);
    const tokens = prev ? Math.min(EVENT_SPAM_BURST, prev.tokens + (now - prev.at) / EVENT_SPAM_REFILL_MS) : EVENT_SPAM_BURST;
    this.#buckets.delete(key);
    this.#buckets.set(key, { tokens: tokens >= 1 ? tokens - 1 : tokens, at: now });
    if (this.#buckets.size > EVENT_SPAM_KEYS) {
      const oldest = this.#buckets.keys().next().value;
      if (oldest !== undefined) this.#buckets.delete(oldest);
    }
    return tokens >= 1;
  }
}

/** The events this process recorded lately, for aggregation: key → the Event's name and count. */
export type RecordedEvents = Map<string, { namespace: string; name: string; count: number; first: number }>;

/**
 * An Event timestamp as Kubernetes writes one (`metav1.Time`: RFC 3339, whole seconds). The kubelet's
 * events have whole seconds too; a controller's event in milliseconds would sort after a kubelet event of
 * the same second that happened later (`kubectl describe` orders by `lastTimestamp`).
 */
export function eventTimestamp(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Options of {@link recordEvent}. */
export interface RecordEventOptions {
  /** `source.component` and `reportingComponent`. @default 'kube32-controller-manager' */
  component?: string;
  /** When it happened (observer ms), e.g. the time of a decision made before a slow write. @default now */
  at?: number;
}

/**
 * Records an event on any object (`kubectl get events`, `kubectl describe`), as client-go's recorder does:
 * timestamps in whole seconds, and a repeat of the same event on the same object within
 * {@link EVENT_AGGREGATION_MS} raises the first one's `count` and `lastTimestamp` instead of adding one
 * (`kubectl describe` then shows `(x5 over 2m)`), and both go through client-go's spam filter
 * ({@link EventSpamFilter}: 25 at once per source and object, then one per 5 min). An event that cannot
 * be written is logged, never fatal: events are informational.
 * @param ref the object: `kind`, `apiVersion`, `namespace`, `name`, `uid`
 * @param type `Normal` or `Warning`
 */
export async function recordEvent(
  ctx: ControllerContext,
  ref: { kind: string; apiVersion: string; namespace?: string; name?: string; uid?: string },
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
  options: RecordEventOptions = {},
): Promise<void> {
  const component = options.component ?? 'kube32-controller-manager';
  const ns = ref.namespace ?? 'default';
  const name = ref.name ?? '';
  const at = options.at ?? ctx.clock.now();
  const stamp = eventTimestamp(at);
  const key = `${ref.kind}/${ns}/${name}/${ref.uid ?? ''}/${type}/${reason}/${component}/${message}`;
  const seen = ctx.state.events;
  const prev = seen.get(key);
  const spamKey = `${component}/${ref.kind}/${ns}/${name}/${ref.uid ?? ''}/${ref.apiVersion}`;
  if (!ctx.state.eventSpam.allow(spamKey, ctx.clock.now())) {
    ctx.log.debug({ object: `${ref.kind} ${ns}/${name}`, reason }, 'event not written: more than 25 from one source about one object (spam filter)');
    return;
  }
  try {
    if (prev && at - prev.first < EVENT_AGGREGATION_MS) {
      try {
        await ctx.api.patchEvent(prev.namespace, prev.name, { count: prev.count + 1, lastTimestamp: stamp });
        prev.count++;
        return;
      } catch (err: unknown) {
        if (!isNotFound(err)) throw err; // gone (expired): record it afresh
      }
    }
    const event: CoreV1Event = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: `${name}.${at.toString(16)}${(++eventSeq).toString(16)}`, namespace: ns },
      involvedObject: { apiVersion: ref.apiVersion, kind: ref.kind, namespace: ref.namespace, name, uid: ref.uid },
      reason,
      message,
      type,
      count: 1,
      firstTimestamp: stamp as unknown as Date,
      lastTimestamp: stamp as unknown as Date,
      source: { component },
      reportingComponent: component,
      reportingInstance: component,
    };
    await ctx.api.createEvent(ns, event);
    if (seen.size >= 4096) seen.clear();
    seen.set(key, { namespace: ns, name: event.metadata.name ?? '', count: 1, first: at });
  } catch (err: unknown) {
    ctx.log.warn({ object: `${ref.kind} ${ns}/${name}`, reason, err: errorMessage(err) }, 'cannot record event');
  }
}

/**
 * Records an event on a pod ({@link recordEvent}).
 * @param type `Normal` or `Warning`
 * @param component the reporting component
 * @param at when it happened (observer ms) @default now
 */
export async function recordPodEvent(
  ctx: ControllerContext,
  pod: Pick<V1Pod, 'metadata'>,
  type: 'Normal' | 'Warning',
  reason: CheckpointEventReason | string,
  message: string,
  component = 'kube32-controller-manager',
  at?: number,
): Promise<void> {
  const m = pod.metadata;
  await recordEvent(ctx, { apiVersion: 'v1', kind: 'Pod', namespace: m?.namespace ?? 'default', name: m?.name, uid: m?.uid }, type, reason, message, { component, at });
}
