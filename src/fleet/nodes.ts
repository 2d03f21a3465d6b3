/**
 * FeOS nodes as Kubernetes objects (docs/feos/fleet.md, "The control plane's side"; seed 000, "The
 * control plane"): the Node of a joined node (label, taint, capacity, node info, addresses, Ready), its
 * Lease in kube-node-lease (renewed on each report), its events as core/v1 Events on the Node, and the
 * revocation record: the Node's annotation {@link SERIALS_ANNOTATION} names the serial numbers of the
 * certificates that may call (the current one, and the one it replaced while that drains). A call whose
 * certificate's serial is not there, or whose Node is gone (`kubectl delete node`), is refused; being in
 * the API (etcd), the record holds on every API server at once.
 */
import type { CoordinationV1Api, CoreV1Api, V1Node, V1NodeCondition } from '@kubernetes/client-node';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import type { NodeEvent, NodeInfo } from '../feos/gen/feos/fleet/v1/fleet_pb.js';
import { PodState } from '../feos/gen/feos/pod/v1/pod_pb.js';

/** The label and value that mark a FeOS node. */
export const RUNTIME_LABEL = 'kube32.io/runtime';
export const RUNTIME_FEOS = 'feos';
/** The serials (lowercase hex, current first, comma-separated) of the node's certificates that may call. */
export const SERIALS_ANNOTATION = 'feos.kube32.io/certificate-serials';
/** The start of feosd (its start_id) and the last event sequence kept of it, `<start_id>/<sequence>`. */
export const EVENTS_ANNOTATION = 'feos.kube32.io/events-acknowledged';
/** How long a node's Lease lasts without renewal, s (as a kubelet's). */
export const LEASE_DURATION_SECONDS = 40;

/** The node may not call: its Node is gone or its certificate is not the one on record. */
export class NodeRevoked extends Error {}
/** A Node of that name exists that is not a FeOS node. */
export class NotAFeosNode extends Error {}

/** A join under the name of a FeOS node whose reports still arrive (its Node Ready): another feosd has the name. */
export class NodeNameTaken extends Error {}

function code(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

/** Retries `fn` on 409 Conflict (a read-modify-write lost a race), up to 5 times. */
async function onConflict<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (err: unknown) {
      if (code(err) !== 409 || i >= 4) throw err;
    }
  }
}

/** The serials the Node allows. */
export function allowedSerials(node: V1Node): string[] {
  return (node.metadata?.annotations?.[SERIALS_ANNOTATION] ?? '').split(',').filter(Boolean);
}

/** Whether a Node is a FeOS node's. */
export function isFeosNode(node: V1Node): boolean {
  return node.metadata?.labels?.[RUNTIME_LABEL] === RUNTIME_FEOS;
}

/** The Kubernetes side of the fleet: Nodes, Leases, Events. */
export class FleetObjects {
  readonly #core: CoreV1Api;
  readonly #coord: CoordinationV1Api;
  /** Who records the events (`source.host`, `reportingInstance`): this instance's name. */
  readonly #instance: string;

  constructor(core: CoreV1Api, coord: CoordinationV1Api, instance: string) {
    this.#core = core;
    this.#coord = coord;
    this.#instance = instance;
  }

  /**
   * Makes the Node of a joining node, or takes over a FeOS Node of that name (a node that lost its
   * identity joins again): the label, the taint, and `serial` as the one allowed certificate (the
   * earlier ones are revoked).
   * @throws NotAFeosNode when a Node of the name is not a FeOS node's
   */
  async registerNode(name: string, serial: string): Promise<void> {
    await onConflict(async () => {
      let node: V1Node | undefined;
      try {
        node = await this.#core.readNode({ name });
      } catch (err: unknown) {
        if (code(err) !== 404) throw err;
      }
      if (node && !isFeosNode(node)) throw new NotAFeosNode(`a Node "${name}" exists that is not a FeOS node (it has no label ${RUNTIME_LABEL}=${RUNTIME_FEOS})`);
      // A node that joins again after it lost its identity waits until its Node is no longer Ready (the node
      // lifecycle's grace); a second machine under a name in use never takes it from the first.
      if (node?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) {
        throw new NodeNameTaken(
          `node ${name} is Ready: another feosd reports under this name. Give this one another --node-name, or remove the other first (kubectl delete node ${name}); a node that lost its identity joins once its Node is no longer Ready`,
        );
      }
      if (!node) {
        await this.#core.createNode({
          body: {
            apiVersion: 'v1',
            kind: 'Node',
            metadata: { name, labels: { [RUNTIME_LABEL]: RUNTIME_FEOS, 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux' }, annotations: { [SERIALS_ANNOTATION]: serial } },
            spec: { taints: [{ key: RUNTIME_LABEL, value: RUNTIME_FEOS, effect: 'NoSchedule' }] },
          },
        });
        return;
      }
      node.metadata!.annotations = { ...(node.metadata!.annotations ?? {}), [SERIALS_ANNOTATION]: serial };
      const taints = node.spec?.taints ?? [];
      if (!taints.some((t) => t.key === RUNTIME_LABEL && t.effect === 'NoSchedule')) {
        node.spec = { ...(node.spec ?? {}), taints: [...taints, { key: RUNTIME_LABEL, value: RUNTIME_FEOS, effect: 'NoSchedule' }] };
      }
      await this.#core.replaceNode({ name, body: node });
    });
  }

  /**
   * The Node of a calling node, checked against the revocation record.
   * @throws NodeRevoked when the Node is gone, is not a FeOS node, or does not allow `serial`
   */
  async checkNode(name: string, serial: string): Promise<V1Node> {
    let node: V1Node;
    try {
      node = await this.#core.readNode({ name });
    } catch (err: unknown) {
      if (code(err) === 404) throw new NodeRevoked(`node ${name} was removed (its Node is gone)`);
      throw err;
    }
    if (!isFeosNode(node)) throw new NodeRevoked(`Node ${name} is not a FeOS node`);
    if (!allowedSerials(node).includes(serial)) throw new NodeRevoked(`node ${name}'s certificate ${serial} is revoked (another was issued since)`);
    return node;
  }

  /** After a renewal: `next` becomes the current certificate and `current` the one that drains; older ones are revoked. */
  async renewed(name: string, current: string, next: string): Promise<void> {
    await onConflict(async () => {
      const node = await this.checkNode(name, current);
      node.metadata!.annotations = { ...(node.metadata!.annotations ?? {}), [SERIALS_ANNOTATION]: `${next},${current}` };
      await this.#core.replaceNode({ name, body: node });
    });
  }

  /**
   * A report: the Node's status from it (capacity, allocatable, node info, addresses, Ready=True with a
   * new heartbeat), then its Lease renewed.
   */
  async report(name: string, serial: string, info: NodeInfo | undefined, pods: number): Promise<void> {
    await onConflict(async () => {
      const node = await this.checkNode(name, serial);
      node.status = nodeStatus(node, info, pods, 'True', 'FeosdReady', 'feosd is reporting');
      await this.#core.replaceNodeStatus({ name, body: node });
    });
    await this.renewLease(name);
  }

  /** feosd says it stops: Ready=False (reason FeosdStopping) until the reports end and the grace turns it Unknown. */
  async stopping(name: string, serial: string, message: string): Promise<void> {
    await onConflict(async () => {
      const node = await this.checkNode(name, serial);
      node.status = nodeStatus(node, undefined, undefined, 'False', 'FeosdStopping', `feosd stops${message ? `: ${message}` : ''}`);
      await this.#core.replaceNodeStatus({ name, body: node });
    });
  }

  /** Creates or renews `kube-node-lease/<name>`. */
  async renewLease(name: string): Promise<void> {
    const namespace = 'kube-node-lease';
    const renewTime = new Date();
    await onConflict(async () => {
      try {
        const lease = await this.#coord.readNamespacedLease({ name, namespace });
        lease.spec = { ...(lease.spec ?? {}), holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime };
        await this.#coord.replaceNamespacedLease({ name, namespace, body: lease });
      } catch (err: unknown) {
        if (code(err) !== 404) throw err;
        await this.#coord.createNamespacedLease({
          namespace,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name, namespace }, spec: { holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_SECONDS, renewTime } },
        });
      }
    });
  }

  /**
   * Keeps a node's events as core/v1 Events on its Node (namespace default, as kubelets' node events):
   * each under a name made of the node, its start and the sequence, so an event sent twice (an answer
   * lost, or sent to two instances) is kept once.
   * @returns the highest sequence up to which every event of the batch is kept
   */
  async recordEvents(node: V1Node, startId: string, events: NodeEvent[]): Promise<bigint> {
    const name = node.metadata?.name ?? '';
    let acked = 0n;
    const start = startId.replace(/[^a-z0-9]/gi, '').toLowerCase().slice(0, 16) || 'start';
    for (const e of [...events].sort((a, b) => (a.sequence < b.sequence ? -1 : 1))) {
      const time = e.time ? timestampDate(e.time) : new Date();
      let reason = 'Unknown';
      let message = '';
      let type = 'Normal';
      if (e.event.case === 'feosd') {
        reason = e.event.value.reason || 'Feosd';
        message = e.event.value.message;
      } else if (e.event.case === 'pod') {
        const p = e.event.value;
        const state = p.pod ? podStateName(p.pod.state) : '';
        reason = p.deleted ? 'PodDeleted' : `Pod${state ? state.charAt(0) + state.slice(1).toLowerCase() : 'Changed'}`;
        message = `pod ${p.podId}: ${p.deleted ? 'deleted' : state || 'changed'}${p.pod?.reason ? `: ${p.pod.reason}` : ''}`;
        if (state === 'FAILED') type = 'Warning';
      }
      const evName = `${name.slice(0, 200)}.feos-${start}-${e.sequence}`;
      try {
        await this.#core.createNamespacedEvent({
          namespace: 'default',
          body: {
            apiVersion: 'v1',
            kind: 'Event',
            metadata: { name: evName, namespace: 'default' },
            involvedObject: { apiVersion: 'v1', kind: 'Node', name, uid: node.metadata?.uid ?? name },
            reason,
            message,
            type,
            count: 1,
            firstTimestamp: time,
            lastTimestamp: time,
            source: { component: 'feosd', host: name },
            reportingComponent: 'feosd',
            reportingInstance: this.#instance,
          },
        });
      } catch (err: unknown) {
        if (code(err) !== 409) throw err;
      }
      acked = e.sequence;
    }
    return acked;
  }
}

/** A pod state's name without its prefix (feos.pod.v1.PodState: RUNNING, FAILED, ...), for event reasons. */
function podStateName(state: PodState): string {
  const n = PodState[state];
  return n === undefined || n === 'UNSPECIFIED' ? '' : n;
}

/** The Node's status after a report (info given) or a change of Ready only (info undefined). */
function nodeStatus(node: V1Node, info: NodeInfo | undefined, pods: number | undefined, ready: 'True' | 'False', reason: string, message: string): V1Node['status'] {
  const status = { ...(node.status ?? {}) };
  const now = new Date();
  if (info) {
    status.capacity = { cpu: String(info.cpus), memory: String(info.memoryBytes), pods: String(info.maxPods) };
    status.allocatable = { cpu: String(info.allocatableCpus), memory: String(info.allocatableMemoryBytes), pods: String(info.maxPods) };
    status.nodeInfo = {
      architecture: info.architecture,
      bootID: info.bootId,
      containerRuntimeVersion: `feos://${info.feosdVersion}`,
      kernelVersion: info.kernelRelease,
      kubeProxyVersion: '',
      kubeletVersion: `feosd/${info.feosdVersion}`,
      machineID: '',
      operatingSystem: 'linux',
      osImage: `FeOS (${info.accelerator || 'unknown accelerator'}${info.guestVersions.length ? `, guests ${info.guestVersions.join(' ')}` : ''})`,
      systemUUID: '',
    };
    status.addresses = [...info.addresses.map((a) => ({ type: 'InternalIP', address: a })), ...(info.hostname ? [{ type: 'Hostname', address: info.hostname }] : [])];
  }
  const conditions = [...(status.conditions ?? [])];
  const i = conditions.findIndex((c) => c.type === 'Ready');
  const old = i >= 0 ? conditions[i] : undefined;
  const cond: V1NodeCondition = {
    type: 'Ready',
    status: ready,
    reason,
    message: pods === undefined ? message : `${message} (${pods} pods)`,
    lastHeartbeatTime: now,
    lastTransitionTime: old && old.status === ready ? old.lastTransitionTime : now,
  };
  if (i >= 0) conditions[i] = cond;
  else conditions.push(cond);
  status.conditions = conditions;
  return status;
}
