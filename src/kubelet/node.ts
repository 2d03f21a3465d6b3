/**
 * The Node object of one kube32-sim worker: registration, status (conditions Ready and
 * MemoryPressure, capacity from the configured heap, addresses, the kubelet endpoint), and the
 * Lease in `kube-node-lease` that says the node is alive. Seed 002 "Policies" (MemoryPressure
 * below 24 KiB of free heap, the annotation `kube32.io/interp-mops`), "Drain and evictions"
 * (`kube32.io/left`).
 */
import { arch, hostname, platform, release } from 'node:os';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Lease, V1Node, V1NodeCondition } from '@kubernetes/client-node';
import { formatBytes, type Logger, writeFileAtomic } from '../lib/index.ts';
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
  /**
   * Who holds the node's Lease when this worker does (`holderIdentity`): the one kept in the worker's data
   * dir ({@link loadHolderIdentity}), so that a restart from the same data dir takes its own Lease back at
   * once. @default the node's name (as Kubernetes' kubelet; every process of that name is then the same holder)
   */
  holderIdentity?: string;
  /** The file the holder identity is kept in, named in the refusal's message. */
  holderIdentityFile?: string;
}

/** The file in a worker's data dir that keeps its Lease holder identity. */
export const HOLDER_IDENTITY_FILE = 'lease-holder-identity';

/**
 * The worker's Lease holder identity, kept in `<data-dir>/lease-holder-identity`: read when the file holds
 * one, else made (`<host name>_<random UUID>`, as client-go's leader election names its holders) and written
 * whole (temporary file, fsync, rename). One data dir, one holder: a worker restarted from its data dir
 * holds the Lease it held; a second worker with another data dir and the same `--name` is another holder.
 * @param dataDir the worker's data dir (it exists)
 * @throws Error when the file can be neither read nor written
 */
export async function loadHolderIdentity(dataDir: string): Promise<{ identity: string; file: string }> {
  const file = join(dataDir, HOLDER_IDENTITY_FILE);
  const kept = (await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return '';
    throw err;
  })).trim();
  if (/^[A-Za-z0-9][-A-Za-z0-9_.]{0,252}$/.test(kept)) return { identity: kept, file };
  const identity = `${hostname().toLowerCase().replace(/[^a-z0-9.-]/g, '-')}_${randomUUID()}`;
  await writeFileAtomic(file, `${identity}\n`);
  return { identity, file };
}

/**
 * A worker refused the node because another holder renews its Lease: another kube32-sim (or a FeOS
 * node, or a Kubernetes kubelet) of the same name runs, and a second one would run its pods twice.
 */
export class NodeHeldError extends Error {
  /** The Lease's holder. */
  readonly holder: string;
  /** How long ago it renewed the Lease, ms. */
  readonly renewedAgoMs: number;
  constructor(node: string, holder: string, renewedAgoMs: number, durationSeconds: number, own: string, ownFile: string | undefined) {
    const ago = Math.max(0, Math.round(renewedAgoMs / 1000));
    const left = Math.max(1, Math.ceil(durationSeconds - renewedAgoMs / 1000));
    super(`the node is held by another worker: its Lease kube-node-lease/${node} names holder "${holder}", renewed ${ago} s ago `
      + `(leaseDurationSeconds ${durationSeconds}); this worker is "${own}"${ownFile ? ` (${ownFile})` : ''}. Stop the other worker, `
      + `or start this one with that worker's --data-dir; once the other holder is gone its Lease expires (in ${left} s at most) and a new start takes the node over`
      + (holder === node ? ' (a holder named as the node is a FeOS node, or a kube32-sim from before holder identities: its Lease is waited out once)' : ''));
    this.name = 'NodeHeldError';
    this.holder = holder;
    this.renewedAgoMs = renewedAgoMs;
  }
}

/** The node's Lease's path. */
function leasePath(name: string): string {
  return `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${encodeURIComponent(name)}`;
}

/**
 * Whether a Lease names a holder other than `own` that renewed it within its `leaseDurationSeconds` (by
 * this machine's clock, at `nowMs`): that holder, how long ago, and the duration; undefined when the Lease
 * is free (no holder, `own`, or expired). A Lease without a renew time or a duration counts as expired.
 */
export function heldByAnother(lease: V1Lease, own: string, nowMs: number): { holder: string; renewedAgoMs: number; durationSeconds: number } | undefined {
  const holder = lease.spec?.holderIdentity ?? '';
  if (holder === '' || holder === own) return undefined;
  const durationSeconds = Number(lease.spec?.leaseDurationSeconds ?? 0);
  const renewed = Date.parse(String(lease.spec?.renewTime ?? ''));
  if (!(durationSeconds > 0) || Number.isNaN(renewed)) return undefined;
  const renewedAgoMs = nowMs - renewed;
  return renewedAgoMs < durationSeconds * 1000 ? { holder, renewedAgoMs, durationSeconds } : undefined;
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
  readonly #holder: string;
  readonly #holderFile: string | undefined;
  /** Whether this worker held the Lease at its last read of it (false until acquired, and once another holder took it). */
  #held = false;
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
    this.#holder = identity.holderIdentity ?? identity.name;
    this.#holderFile = identity.holderIdentityFile;
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
   * Takes the node's Lease ({@link acquireLease}: refused while another holder renews it), then creates
   * the Node, or updates the one a former run left (labels, annotations, status), and uncordons it when
   * the former run had left with a self-drain (`kube32.io/left: "true"`).
   * @throws NodeHeldError while another worker holds the node; ApiError when the API server refuses the registration
   */
  async register(): Promise<V1Node> {
    const { name } = this.identity;
    // The Lease before anything else: a worker that another holder's Lease refuses must change nothing
    // of the Node (labels, uncordon, status) the other one runs. The same Lease also means that a node
    // lifecycle controller that sees Ready=True beside a Lease a former run left (renewed before the node
    // was lost) does not judge the node by that old renewal.
    await this.acquireLease();
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
    await this.renewLease(); // with the Node's uid as the Lease's owner
    await this.postStatus();
    return node;
  }

  /**
   * Starts the heartbeat: every {@link HEARTBEAT_MS} the Lease is renewed and the status posted if it
   * changed or was last posted {@link NODE_STATUS_REPORT_MS} ago.
   */
  start(): void {
    this.#timer = setInterval(() => {
      this.renewLease().catch((err: unknown) => {
        // Another holder: said once (renewLease), then quiet until the Lease is ours again.
        if (err instanceof NodeHeldError) this.#log.debug({ holder: err.holder }, 'the node\'s Lease is held by another worker');
        else this.#log.warn({ err: errorMessage(err) }, 'lease renewal failed');
      });
      this.refresh({ ifChanged: true });
    }, HEARTBEAT_MS);
    this.#timer.unref();
  }

  /**
   * Stops the heartbeat. With `ready: false`, posts the node NotReady first, unless another holder has
   * taken the node's Lease (that one's node is not this worker's to mark).
   */
  async stop(opts: { ready?: boolean } = {}): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (opts.ready === false && this.#held) {
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
   * sent; the Node is read instead. Nothing is posted while another holder has the node's Lease.
   * @throws ApiError as the API server answers (404 when the Node is gone)
   */
  async postStatus(opts: { ifChanged?: boolean } = {}): Promise<void> {
    if (!this.#held) return;
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

  /** Whether this worker held the node's Lease at its last acquisition or renewal. */
  get holdsLease(): boolean {
    return this.#held;
  }

  /**
   * Takes the node's Lease (`kube-node-lease/<node>`) for this worker's holder identity, or refuses:
   * while the Lease names another holder renewed within its `leaseDurationSeconds`, another worker (or a
   * FeOS node) runs this node, and a second one would run its pods twice. A Lease that names no holder,
   * this worker's own (a restart from the same data dir), or one not renewed for its duration (the
   * holder is gone) is taken: `holderIdentity` ours, `renewTime` now, `acquireTime` and
   * `leaseTransitions` bumped when the holder changes. The write carries the read's resourceVersion,
   * so of two workers starting at once one gets a conflict, reads again and is refused.
   * @throws NodeHeldError while another holder renews the Lease; ApiError as the API server answers
   */
  async acquireLease(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#writeLease({ acquiring: true });
        return;
      } catch (err: unknown) {
        // Another writer came between our read and our write (409): read again (a few times at most).
        if (!isApiError(err, 409) || attempt >= 4) throw err;
      }
    }
  }

  /**
   * Renews the node's Lease (creates it when it is gone). A Lease another holder took meanwhile (see
   * {@link acquireLease}) is not written: the node stops posting its status, its pods are fenced once
   * the renewals have failed for `--fence-after`, and its exit neither cordons the node nor evicts its
   * pods (drain.ts). Once that holder's Lease expires this worker takes it back.
   * @throws NodeHeldError while another holder renews the Lease; ApiError as the API server answers
   */
  async renewLease(): Promise<void> {
    await this.#writeLease({ acquiring: false });
  }

  /**
   * Reads the Lease and answers whether it names this worker's holder identity now.
   * @throws ApiError as the API server answers (404 when there is no Lease)
   */
  async confirmLease(): Promise<boolean> {
    const lease = await this.#cp.json<V1Lease>('GET', leasePath(this.identity.name));
    this.#held = lease.spec?.holderIdentity === this.#holder;
    return this.#held;
  }

  async #writeLease(opts: { acquiring: boolean }): Promise<void> {
    const { name } = this.identity;
    const path = leasePath(name);
    const now = new Date();
    const spec = { holderIdentity: this.#holder, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime: microTime(now) };
    const ownerReferences = this.#uid ? [{ apiVersion: 'v1', kind: 'Node', name, uid: this.#uid }] : undefined;
    let lease: V1Lease;
    try {
      lease = await this.#cp.json<V1Lease>('GET', path);
    } catch (err: unknown) {
      if (!isApiError(err, 404)) throw err;
      await this.#cp.json('POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', {
        body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name, namespace: 'kube-node-lease', ownerReferences }, spec: { ...spec, acquireTime: spec.renewTime, leaseTransitions: 0 } },
      });
      this.#renewed();
      return;
    }
    const holder = lease.spec?.holderIdentity ?? '';
    if (holder !== this.#holder) {
      const held = heldByAnother(lease, this.#holder, now.getTime());
      if (held) {
        const wasHeld = this.#held;
        this.#held = false;
        const error = new NodeHeldError(name, held.holder, held.renewedAgoMs, held.durationSeconds, this.#holder, this.#holderFile);
        if (wasHeld && !opts.acquiring) this.#log.error({ holder: held.holder, renewedAgoMs: held.renewedAgoMs }, 'another worker took the node\'s Lease: no longer renewing it nor posting the node\'s status; its pods are fenced after --fence-after, and this worker\'s exit leaves the node alone');
        throw error;
      }
      this.#log.info({ formerHolder: holder || undefined }, 'taking the node\'s Lease');
    }
    const taken = holder !== this.#holder;
    const metadata = { ...lease.metadata, ...(ownerReferences && !lease.metadata?.ownerReferences?.length ? { ownerReferences } : {}) };
    await this.#cp.json('PUT', path, {
      body: {
        ...lease, metadata,
        spec: { ...lease.spec, ...spec, ...(taken ? { acquireTime: spec.renewTime, leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + (holder ? 1 : 0) } : {}) },
      },
    });
    this.#renewed();
  }

  #renewed(): void {
    this.#held = true;
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
