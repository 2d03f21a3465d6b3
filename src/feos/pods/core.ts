/**
 * What every pod action shares (seed 000, "A pod"): the service's options, each pod's entry (its lock
 * and what runs on it), and the steps that keep a pod's record and talk to its guest. The actions live
 * in a file each (bring-up.ts, lifecycle.ts, hibernate.ts, restore.ts) and take a `PodCore`.
 */
import { clone, create } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type PodEvent, PodEventSchema, type PodInfo, PodInfoSchema, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import type { Logger } from '../../lib/index.ts';
import { FeosError, errorMessage } from '../api/index.ts';
import type { MicroVmService } from '../microvm/index.ts';
import type { VolumeStore } from '../volumes/index.ts';
import type { ObjectStore } from '../store/index.ts';
import { type PodRecords, POD_RECORD_VERSION } from './records.ts';
import { Mutex } from './mutex.ts';
import type { PodNetworkAttachment, PodNetworkProvider } from './network.ts';
import { PUSH_MS } from './actions.ts';
import { hostNowNs } from './clock.ts';
import type { Hibernation } from './hibernate.ts';
import { MemoryAdmission } from './admission.ts';

/** Options of the pod service. */
export interface PodServiceOptions {
  records: PodRecords;
  vms: MicroVmService;
  network: PodNetworkProvider;
  /** The installed guests' directory. */
  guestDir: string;
  /** `<state-dir>/disks`: the pods' disks, `<id>.qcow2`. */
  disksDir: string;
  log: Logger;
  /** Round trips above this drop a clock measurement (ms). @default 10 */
  clockMaxRttMs?: number;
  /** How long a boot's guest has to attach (ms). @default GUEST_ATTACH_MS (the seed's 60 s) */
  guestAttachMs?: number;
  /** The node's volumes; none = a pod with volumes is refused (FAILED_PRECONDITION). */
  volumes?: VolumeStore;
  /**
   * Registries on the node (`host:port`) that every pod reaches through its microVM's registry link
   * (`--registry-forward`; microvm/qemu-args.ts), a pod with a network too.
   */
  registryForwards?: string[];
  /** Registries the guest pulls from over plain HTTP (`--insecure-registry`; registries.ts). */
  insecureRegistries?: string[];
  /** Where pods hibernate (`--object-store`); none = HibernatePod and RestorePod are FAILED_PRECONDITION. */
  objectStore?: ObjectStore;
  /** The node's allocatable memory (memory admission, admission.ts). @default the host's, `os.totalmem()` */
  allocatableMemoryBytes?: () => bigint;
}

/** A pod's entry: its lock, and what runs on it. */
export interface Entry {
  lock: Mutex;
  /** Ends the bring-up in flight (a stop or delete). */
  bringUp?: AbortController;
  /** Set while a suspend runs: other calls to the guest say "busy". */
  suspending?: boolean;
  /** The hibernation in flight: a second HibernatePod joins it, a ResumePod may abandon it. */
  hibernation?: Hibernation;
}

/** The shared state and steps of the pod actions. */
export class PodCore {
  readonly o: PodServiceOptions;
  readonly entries = new Map<string, Entry>();
  /**
   * Pull tokens for each pod's next bring-up (seed "Pull tokens"): in memory only, never in a record,
   * a log or an error; the bring-up takes it, and a restart of feosd loses it.
   */
  readonly pullTokens = new Map<string, string>();
  /**
   * Pods whose hibernation a kill cut and whose store did not answer at feosd's start (pod ID → the
   * checkpoint): whether the checkpoint is whole is unknown, so they do not resume on the node until a
   * later start settles them (src/feos/pods/recovery.ts).
   */
  readonly unsettled = new Map<string, string>();
  /** The node's memory and what the pods hold of it: CreatePod, StartPod, ResumePod and RestorePod admit their pod. */
  readonly memory: MemoryAdmission;
  readonly #emit: (ev: PodEvent) => void;

  constructor(opts: PodServiceOptions, emit: (ev: PodEvent) => void) {
    this.o = opts;
    this.#emit = emit;
    this.memory = new MemoryAdmission(() => opts.records.list(), opts.allocatableMemoryBytes);
  }

  get log(): Logger {
    return this.o.log;
  }

  /** The pod's entry, made when missing. */
  entry(id: string): Entry {
    let e = this.entries.get(id);
    if (!e) {
      e = { lock: new Mutex() };
      this.entries.set(id, e);
    }
    return e;
  }

  /**
   * Runs `fn` under the pod's lock, only if the lock is still its pod's once taken.
   * @throws FeosError NOT_FOUND when the pod is gone (before or while waiting)
   */
  locked<T>(id: string, fn: (pod: PodInfo, entry: Entry) => Promise<T>): Promise<T> {
    const entry = this.entries.get(id);
    if (!entry || !this.o.records.get(id)) return Promise.reject(new FeosError('NOT_FOUND', `pod ${id} not found`));
    return entry.lock.run(async () => {
      const pod = this.o.records.get(id);
      if (this.entries.get(id) !== entry || !pod) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
      return fn(pod, entry);
    });
  }

  /**
   * Keeps the pod's record (its generation counted) and sends its event once kept. The event carries a
   * copy: the caller changes its pod on, and a watcher that reads slowly has its events serialized late.
   */
  async save(pod: PodInfo): Promise<void> {
    pod.generation += 1n;
    pod.recordVersion = POD_RECORD_VERSION;
    await this.o.records.save(pod);
    this.#emit(create(PodEventSchema, { podId: pod.id, pod: clone(PodInfoSchema, pod), time: timestampNow() }));
  }

  /** Sends a pod's deleted event (its record is removed). */
  emitDeleted(id: string): void {
    this.#emit(create(PodEventSchema, { podId: id, deleted: true, time: timestampNow() }));
  }

  /** Changes the pod's state and reason, and keeps it. */
  async setState(pod: PodInfo, state: PodState, reason: string): Promise<void> {
    if (pod.state !== state) pod.stateChangedAt = timestampNow();
    pod.state = state;
    pod.reason = reason;
    if (state === PodState.RUNNING) pod.startedAt = timestampNow();
    await this.save(pod);
    this.o.log.info({ id: pod.id, state: PodState[state], reason }, 'pod');
  }

  /** Attaches the guest (ping), pushes the wall time and the network configuration. */
  async pushAfterAttach(pod: PodInfo, attachMs: number, signal?: AbortSignal, net?: PodNetworkAttachment): Promise<void> {
    const guest = this.o.vms.guest(pod.id);
    await guest.attach(attachMs, signal);
    await guest.call('Ping', {}, attachMs);
    await guest.call('SetTime', { unixNanos: hostNowNs() }, PUSH_MS);
    if (pod.spec!.network) {
      const n = net ?? (await this.o.network.setUp(pod));
      await guest.call('ConfigureNetwork', n.guest, PUSH_MS);
    }
  }

  /** The TAP device goes with the microVM's process (a pod with a network only); failures are logged. */
  async detach(pod: PodInfo): Promise<void> {
    if (!pod.spec?.network || !this.o.network.detach) return;
    await this.o.network.detach(pod).catch((err: unknown) => this.o.log.warn({ id: pod.id, err: errorMessage(err) }, 'network: detach failed'));
  }
}
