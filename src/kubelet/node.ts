/**
 * The Node object of one kube32-sim worker: registration, status (conditions Ready and
 * MemoryPressure, capacity from the configured heap, addresses, the kubelet endpoint), and the
 * Lease in `kube-node-lease` that says the node is alive. Seed 002 "Policies" (MemoryPressure
 * below 24 KiB of free heap, the annotation `kube32.io/interp-mops`), "Drain and evictions"
 * (`kube32.io/left`).
 */
import { arch, platform, release } from 'node:os';
import { randomUUID } from 'node:crypto';
import type { V1Lease, V1Node, V1NodeCondition } from '@kubernetes/client-node';
import { formatBytes, type Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage, isApiError } from './client.ts';
import { ANNOTATIONS } from '../api/index.ts';

/** Free heap below which the node reports MemoryPressure: 24 KiB (seed "Policies"). */
export const MEMORY_PRESSURE_BYTES = 24 * 1024;
/**
 * How often the Lease is renewed and the Node's status computed: 10 s, as the kubelet does
 * (`nodeStatusUpdateFrequency`). The status is posted then only if it changed (see
 * {@link NODE_STATUS_REPORT_MS}).
 */
export const HEARTBEAT_MS = 10_000;
/**
 * How long an unchanged status goes without being posted again: 5 min, the kubelet's
 * `nodeStatusReportFrequency` since Kubernetes 1.17 (the Lease says the node is alive; a status write
 * every 10 s from every node is a write and a watch event to every Node watcher each time).
 */
export const NODE_STATUS_REPORT_MS = 300_000;
/** The Lease's duration: 40 s, the kubelet's default (four missed renewals). */
export const LEASE_DURATION_SECONDS = 40;
/** The annotation with the interpreter speed in millions of operations per second. */
export const INTERP_MOPS_ANNOTATION = ANNOTATIONS.interpMops;
/** The annotation a worker sets when it leaves (self-drain). */
export const LEFT_ANNOTATION = ANNOTATIONS.left;
/** The version the node reports as its kubelet's. */
export const KUBELET_VERSION = 'v1.32.0-kube32';

/** What the node knows of itself. */
export interface NodeIdentity {
  /** The Node's name (`--name`). */
  name: string;
  /** The address the node and its pods serve on (`--address`), its InternalIP. */
  address: string;
  /** The kubelet endpoint's port, where the node proxy reaches it. */
  kubeletPort: number;
  /** The heap pods may hold, in bytes (`--heap`): capacity and allocatable memory. */
  heapBytes: number;
  /** The most pods the node runs (`--max-pods`). */
  maxPods: number;
  /** Extra labels (`--labels`). */
  labels: Record<string, string>;
  /** The interpreter speed measured at boot, MOPS. */
  interpMops: number;
}

/** `process.arch` as Kubernetes names architectures (`kubernetes.io/arch`). */
export function kubernetesArch(a: string = arch()): string {
  return ({ x64: 'amd64', ia32: '386', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' } as Record<string, string>)[a] ?? a;
}

/** Formats an interpreter speed as the annotation holds it: one decimal below 100, whole above. */
export function formatMops(mops: number): string {
  return mops >= 100 ? String(Math.round(mops)) : mops.toFixed(1);
}

/** Kubernetes' `MicroTime` (RFC 3339 with microseconds, UTC). */
export function microTime(d: Date = new Date()): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** RFC 3339 seconds, as Kubernetes' `Time`. */
export function rfc3339(d: Date = new Date()): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * Keeps the Node registered and alive: `register()` once, then `start()` renews the Lease and
 * posts status every {@link HEARTBEAT_MS}; `refresh()` posts status at once (after a change of
 * memory or readiness).
 */
export class NodeAgent {
  readonly identity: NodeIdentity;
  readonly #cp: ControlPlane;
  readonly #log: Logger;
  readonly #heldBytes: () => number;
  readonly #bootId = randomUUID();
  #uid = '';
  #timer: NodeJS.Timeout | undefined;
  #conditions = new Map<string, V1NodeCondition>();
  #posting: Promise<void> = Promise.resolve();
  #ready = true;
  /** The last status posted, without its heartbeat times, and when (ms, Date.now()). */
  #posted: { status: string; at: number } | undefined;
  /** When the Lease was last renewed (ms, Date.now()): the fence's clock (fence.ts). */
  lastRenewedAt = Date.now();
  /** Called after each successful renewal of the Lease. */
  onRenewed: (() => void) | undefined;

  /**
   * @param heldBytes answers the bytes the node's pods hold now (their linear memories)
   */
  constructor(cp: ControlPlane, identity: NodeIdentity, heldBytes: () => number, log: Logger) {
    this.#cp = cp;
    this.identity = identity;
    this.#heldBytes = heldBytes;
    this.#log = log;
  }

  /** The Node's labels: the caller's, then the well-known ones (which win). */
  labels(): Record<string, string> {
    return { ...this.identity.labels, 'kubernetes.io/arch': kubernetesArch(), 'kubernetes.io/os': platform(), 'kubernetes.io/hostname': this.identity.name };
  }

  /** The Node's uid once registered. */
  get uid(): string {
    return this.#uid;
  }

  /** Free heap in bytes: the configured heap less what the pods hold (never below 0). */
  freeHeapBytes(): number {
    return Math.max(0, this.identity.heapBytes - this.#heldBytes());
  }

  /**
   * Creates the Node, or updates the one a former run left (labels, annotations, status), and
   * uncordons it when the former run had left with a self-drain (`kube32.io/left: "true"`).
   * @throws ApiError when the API server refuses the registration
   */
  async register(): Promise<V1Node> {
    const { name } = this.identity;
    const annotations = { [INTERP_MOPS_ANNOTATION]: formatMops(this.identity.interpMops) };
    let node: V1Node;
    try {
      node = await this.#cp.json<V1Node>('POST', '/api/v1/nodes', {
        body: { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: this.labels(), annotations }, spec: {} },
      });
      this.#log.info('registered the node');
    } catch (err: unknown) {
      if (!isApiError(err, 409)) throw err;
      const old = await this.#cp.json<V1Node>('GET', `/api/v1/nodes/${encodeURIComponent(name)}`);
      const left = old.metadata?.annotations?.[LEFT_ANNOTATION] === 'true';
      const patch: Record<string, unknown> = { metadata: { labels: this.labels(), annotations: { ...annotations, [LEFT_ANNOTATION]: null } } };
      if (left) patch.spec = { unschedulable: null };
      node = await this.#cp.json<V1Node>('PATCH', `/api/v1/nodes/${encodeURIComponent(name)}`, { body: patch, contentType: 'application/merge-patch+json' });
      this.#log.info({ rejoined: left }, 'updated the registered node');
    }
    this.#uid = node.metadata?.uid ?? '';
    // The Lease first: a node lifecycle controller that sees Ready=True beside a Lease a former run
    // left (renewed before the node was lost) must not judge the node by that old renewal.
    await this.renewLease();
    await this.postStatus();
    return node;
  }

  /**
   * Starts the heartbeat: every {@link HEARTBEAT_MS} the Lease is renewed and the status posted if it
   * changed or was last posted {@link NODE_STATUS_REPORT_MS} ago.
   */
  start(): void {
    this.#timer = setInterval(() => {
      this.renewLease().catch((err: unknown) => this.#log.warn({ err: errorMessage(err) }, 'lease renewal failed'));
      this.refresh({ ifChanged: true });
    }, HEARTBEAT_MS);
    this.#timer.unref();
  }

  /** Stops the heartbeat. With `ready: false`, posts the node NotReady first. */
  async stop(opts: { ready?: boolean } = {}): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (opts.ready === false) {
      this.#ready = false;
      await this.postStatus().catch(() => {});
    }
  }

  /**
   * Posts the status now (serialised with any post in flight); errors are logged, not thrown. With
   * `ifChanged`, posts only a status that changed or is {@link NODE_STATUS_REPORT_MS} old, and
   * otherwise reads the Node (so that a deleted Node is registered again within a heartbeat).
   */
  refresh(opts: { ifChanged?: boolean } = {}): Promise<void> {
    this.#posting = this.#posting
      .then(() => this.postStatus(opts))
      .catch(async (err: unknown) => {
        if (!isApiError(err, 404)) throw err;
        // Someone deleted the Node (kubectl delete node): register it again, as the kubelet does.
        this.#log.warn('the Node is gone: registering it again');
        await this.register();
      })
      .catch((err: unknown) => this.#log.warn({ err: errorMessage(err) }, 'node status update failed'));
    return this.#posting;
  }

  /** Whether the node reports MemoryPressure now. */
  memoryPressure(): boolean {
    return this.freeHeapBytes() < MEMORY_PRESSURE_BYTES;
  }

  #condition(type: string, status: 'True' | 'False', reason: string, message: string, now: string): V1NodeCondition {
    const prev = this.#conditions.get(type);
    const c = {
      type, status, reason, message, lastHeartbeatTime: now,
      lastTransitionTime: prev && prev.status === status ? prev.lastTransitionTime : now,
    } as unknown as V1NodeCondition;
    this.#conditions.set(type, c);
    return c;
  }

  /**
   * Builds and sends the Node's status (merge patch of `/status`). With `ifChanged`, a status equal
   * to the last one posted (heartbeat times aside) less than {@link NODE_STATUS_REPORT_MS} ago is not
   * sent; the Node is read instead.
   * @throws ApiError as the API server answers (404 when the Node is gone)
   */
  async postStatus(opts: { ifChanged?: boolean } = {}): Promise<void> {
    const now = rfc3339();
    const { heapBytes, maxPods, address, kubeletPort, name } = this.identity;
    const free = this.freeHeapBytes();
    const pressure = free < MEMORY_PRESSURE_BYTES;
    const conditions = [
      this.#condition('MemoryPressure', pressure ? 'True' : 'False', pressure ? 'KubeletHasInsufficientMemory' : 'KubeletHasSufficientMemory',
        pressure ? `kubelet has insufficient memory available: ${free} bytes of heap free` : 'kubelet has sufficient memory available', now),
      this.#condition('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure', now),
      this.#condition('PIDPressure', 'False', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available', now),
      this.#ready
        ? this.#condition('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status', now)
        : this.#condition('Ready', 'False', 'KubeletNotReady', 'kubelet is stopping', now),
    ];
    const resources = { memory: formatBytes(heapBytes), pods: String(maxPods), cpu: '1' };
    const status = {
      capacity: resources,
      allocatable: resources,
      conditions,
      addresses: [{ type: 'InternalIP', address }, { type: 'Hostname', address: name }],
      daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } },
      nodeInfo: {
        machineID: this.#bootId.replaceAll('-', ''), systemUUID: this.#bootId, bootID: this.#bootId,
        kernelVersion: release(), osImage: 'kube32-sim', containerRuntimeVersion: 'kube32-wasm://0.1.0',
        kubeletVersion: KUBELET_VERSION, kubeProxyVersion: '', operatingSystem: platform(), architecture: kubernetesArch(),
      },
    };
    const unchanged = JSON.stringify(status, (k, v: unknown) => (k === 'lastHeartbeatTime' ? undefined : v));
    const at = Date.now();
    if (opts.ifChanged && this.#posted?.status === unchanged && at - this.#posted.at < NODE_STATUS_REPORT_MS) {
      const onServer = await this.#cp.json<V1Node>('GET', `/api/v1/nodes/${encodeURIComponent(name)}`);
      // As the kubelet compares with the Node it read: a condition someone else changed (the node
      // lifecycle controller's Ready=Unknown after a late Lease renewal) is put right at once.
      if (sameConditions(onServer.status?.conditions, conditions)) return;
    }
    await this.#cp.json('PATCH', `/api/v1/nodes/${encodeURIComponent(name)}/status`, { body: { status }, contentType: 'application/merge-patch+json' });
    this.#posted = { status: unchanged, at };
  }

  /** Creates or renews the node's Lease (`kube-node-lease/<node>`). */
  async renewLease(): Promise<void> {
    const { name } = this.identity;
    const path = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${encodeURIComponent(name)}`;
    const spec = { holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: microTime() };
    let lease: V1Lease;
    try {
      lease = await this.#cp.json<V1Lease>('GET', path);
    } catch (err: unknown) {
      if (!isApiError(err, 404)) throw err;
      const ownerReferences = this.#uid ? [{ apiVersion: 'v1', kind: 'Node', name, uid: this.#uid }] : undefined;
      await this.#cp.json('POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', {
        body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name, namespace: 'kube-node-lease', ownerReferences }, spec },
      });
      this.lastRenewedAt = Date.now();
      this.onRenewed?.();
      return;
    }
    await this.#cp.json('PUT', path, { body: { ...lease, spec: { ...lease.spec, ...spec } } });
    this.lastRenewedAt = Date.now();
    this.onRenewed?.();
  }

  /**
   * Marks the node as leaving: cordoned (`spec.unschedulable`) and annotated `kube32.io/left: "true"`.
   * @throws ApiError when the patch is refused
   */
  async cordonAndMarkLeft(): Promise<void> {
    await this.#cp.json('PATCH', `/api/v1/nodes/${encodeURIComponent(this.identity.name)}`, {
      body: { metadata: { annotations: { [LEFT_ANNOTATION]: 'true' } }, spec: { unschedulable: true } },
      contentType: 'application/merge-patch+json',
    });
  }
}

/** Whether every condition the node posts has the same status and reason on the server's Node. */
function sameConditions(onServer: V1NodeCondition[] | undefined, ours: V1NodeCondition[]): boolean {
  return ours.every((c) => {
    const s = onServer?.find((o) => o.type === c.type);
    return s !== undefined && s.status === c.status && s.reason === c.reason;
  });
}
