/**
 * The control plane's instances (docs/feos/fleet.md, "Instances"): each API server process with a port
 * for nodes holds a Lease `kube-system/feos-instance-<name>` (label {@link INSTANCE_LABEL}, its address
 * in {@link ADDRESS_ANNOTATION}), renewed every 10 s for 30 s. The instance list that the join and every
 * report answer is the Leases not expired, so with several API servers on one etcd every node learns
 * every instance and holds a node connection to each; an instance that stops deletes its Lease.
 */
import type { CoordinationV1Api, V1Lease } from '@kubernetes/client-node';

export const INSTANCE_LABEL = 'feos.kube32.io/instance';
export const ADDRESS_ANNOTATION = 'feos.kube32.io/address';
const NAMESPACE = 'kube-system';
const DURATION_S = 30;
const RENEW_MS = 10_000;

/** An instance as the protos carry it. */
export interface InstanceRecord {
  name: string;
  address: string;
}

/** This instance's Lease and the list of all, kept fresh. */
export class Instances {
  readonly #coord: CoordinationV1Api;
  readonly #self: InstanceRecord;
  #timer: NodeJS.Timeout | undefined;
  #cached: { at: number; list: InstanceRecord[] } | undefined;
  readonly #onError: (err: unknown) => void;

  constructor(coord: CoordinationV1Api, self: InstanceRecord, onError: (err: unknown) => void) {
    this.#coord = coord;
    this.#self = self;
    this.#onError = onError;
  }

  get self(): InstanceRecord {
    return this.#self;
  }

  /** Writes this instance's Lease and renews it every 10 s until {@link stop}. */
  async start(): Promise<void> {
    await this.#renew();
    this.#timer = setInterval(() => this.#renew().catch(this.#onError), RENEW_MS);
    this.#timer.unref();
  }

  async #renew(): Promise<void> {
    const name = `feos-instance-${this.#self.name}`;
    const spec = { holderIdentity: this.#self.name, leaseDurationSeconds: DURATION_S, renewTime: new Date() };
    const metadata = { name, namespace: NAMESPACE, labels: { [INSTANCE_LABEL]: 'true' }, annotations: { [ADDRESS_ANNOTATION]: this.#self.address } };
    try {
      const lease = await this.#coord.readNamespacedLease({ name, namespace: NAMESPACE });
      lease.spec = { ...(lease.spec ?? {}), ...spec };
      lease.metadata = { ...(lease.metadata ?? {}), labels: metadata.labels, annotations: metadata.annotations };
      await this.#coord.replaceNamespacedLease({ name, namespace: NAMESPACE, body: lease });
    } catch (err: unknown) {
      if ((err as { code?: number }).code !== 404) throw err;
      await this.#coord.createNamespacedLease({ namespace: NAMESPACE, body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata, spec } });
    }
    this.#cached = undefined;
  }

  /**
   * Every live instance, this one first, then by name; read at most once a second. On an API failure
   * the last list (or this instance alone) is answered.
   */
  async list(): Promise<InstanceRecord[]> {
    const now = Date.now();
    if (this.#cached && now - this.#cached.at < 1000) return this.#cached.list;
    let leases: V1Lease[];
    try {
      leases = (await this.#coord.listNamespacedLease({ namespace: NAMESPACE, labelSelector: `${INSTANCE_LABEL}=true` })).items;
    } catch (err: unknown) {
      this.#onError(err);
      return this.#cached?.list ?? [this.#self];
    }
    const live = liveInstances(leases, now).filter((i) => i.name !== this.#self.name);
    const list = [this.#self, ...live];
    this.#cached = { at: now, list };
    return list;
  }

  /** Stops renewing and deletes this instance's Lease (errors are ignored: it expires anyway). */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#coord.deleteNamespacedLease({ name: `feos-instance-${this.#self.name}`, namespace: NAMESPACE }).catch(() => {});
  }
}

/** The instances whose Lease is not expired at `now` (ms since the epoch), by name. */
function liveInstances(leases: V1Lease[], now: number): InstanceRecord[] {
  return leases
    .filter((l) => {
      const renew = l.spec?.renewTime ? new Date(l.spec.renewTime as unknown as string).getTime() : 0;
      return renew + (l.spec?.leaseDurationSeconds ?? DURATION_S) * 1000 > now;
    })
    .map((l) => ({ name: l.spec?.holderIdentity ?? '', address: l.metadata?.annotations?.[ADDRESS_ANNOTATION] ?? '' }))
    .filter((i) => i.name && i.address)
    .sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * The control plane instances that serve a port for nodes now (their Leases in kube-system), for a client
 * such as `kube32-cli feos token create` that tells the operator where nodes join.
 * @throws the API's error (as @kubernetes/client-node raises it)
 */
export async function listFleetInstances(coord: CoordinationV1Api): Promise<InstanceRecord[]> {
  const leases = (await coord.listNamespacedLease({ namespace: NAMESPACE, labelSelector: `${INSTANCE_LABEL}=true` })).items;
  return liveInstances(leases, Date.now());
}
