/**
 * The pod service (seed 000, "A pod", "Lifecycle", "The suspend's budget", "The guest"): the pods'
 * lifecycle on top of the microVM layer. Every call that changes a pod is one `PodAction`, runs under
 * the pod's lock in a task of its own (a caller that goes away leaves it running to its end), and is
 * answered once its record is kept. GetPod and ListPods read memory and never wait.
 *
 * States: PENDING → RUNNING | FAILED; RUNNING → STOPPED | SUSPENDED | FAILED; SUSPENDED → RUNNING |
 * STOPPED; STOPPED/FAILED → PENDING (StartPod). See docs/feos/feosd.md for each call's prerequisites
 * and effects.
 */
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { rename, rm, mkdir } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { create, equals } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { ContainerStatusSchema, GuestStatusSchema, type PodEvent, PodEventSchema, type PodInfo, PodInfoSchema, PodSpecSchema, type PodSpec, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import type { Logger } from '../../lib/index.ts';
import { FeosError, errorMessage, vmBusy } from '../api/index.ts';
import { registryEndpoints, type MicroVmExit, type MicroVmService } from '../microvm/index.ts';
import { mintPodId, parsePodId } from './id.ts';
import { normalizeSpec } from './spec.ts';
import { type PodRecords, POD_RECORD_VERSION } from './records.ts';
import { Mutex } from './mutex.ts';
import type { PodNetworkAttachment, PodNetworkProvider } from './network.ts';
import { guestVersions } from './guests.ts';
import { snapshotTimeoutMs, suspendBudgetMs } from './budget.ts';
import { ClockKeeper, hostNowNs } from './clock.ts';
import type { VolumeStore } from '../volumes/index.ts';

const run = promisify(execFile);

/** How long a boot's guest has to attach (seed: 60 s). */
export const GUEST_ATTACH_MS = 60_000;
/** The ping of a resumed guest, its connect included (seed: 30 s). */
export const RESUME_PING_MS = 30_000;
/** A push (time, network) and the request to empty the memory (seed: 10 s). */
export const PUSH_MS = 10_000;
/** A call to the guest for the API, its connect included (seed: 5 s). */
export const GUEST_CALL_MS = 5_000;
/** How long a stop waits for the guest to power off before QEMU is ended (ms). */
export const SHUTDOWN_WAIT_MS = 30_000;

/** Every call that changes a pod (STYLE.md 5.9). */
export type PodAction =
  | { kind: 'create'; spec: PodSpec; pullToken?: string } // any state: the pod exists (same spec) or not
  | { kind: 'start'; pullToken?: string } // STOPPED or FAILED
  | { kind: 'stop' } // any but deleted
  | { kind: 'delete' } // any
  | { kind: 'suspend' } // RUNNING (SUSPENDED answers as it is)
  | { kind: 'resume' }; // SUSPENDED (RUNNING answers as it is)

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
   * Registries on the node (`host:port`) that pods without a network reach through their microVM's
   * registry link (`--registry-forward`; microvm/qemu-args.ts).
   */
  registryForwards?: string[];
}

/** How long a container's create may take, its image's pull included (ms). */
export const CONTAINER_CREATE_MS = 900_000;
/** How long a container's start may take (ms). */
export const CONTAINER_START_MS = 60_000;

interface Entry {
  lock: Mutex;
  /** Ends the bring-up in flight (a stop or delete). */
  bringUp?: AbortController;
  /** Set while a suspend runs: other calls to the guest say "busy". */
  suspending?: boolean;
}

/** The pods of one node. Emits `event` (PodEvent) once a change is kept. */
export class PodService extends EventEmitter<{ event: [PodEvent] }> {
  readonly #o: PodServiceOptions;
  readonly #entries = new Map<string, Entry>();
  /**
   * Pull tokens for each pod's next bring-up (seed "Pull tokens"): in memory only, never in a record,
   * a log or an error; the bring-up takes it, and a restart of feosd loses it.
   */
  readonly #pullTokens = new Map<string, string>();
  #clock?: ClockKeeper;

  constructor(opts: PodServiceOptions) {
    super();
    this.setMaxListeners(0);
    this.#o = opts;
  }

  /**
   * Takes the node's pods over after a start: bring-ups cut off go on, running pods get their guest
   * attached and their time pushed, pods whose microVM ended while feosd was away are FAILED (or
   * STOPPED), and a suspend that went through in the microVM layer makes its pod SUSPENDED.
   */
  async init(): Promise<void> {
    this.#o.vms.on('exit', (exit) => void this.#onVmExit(exit));
    await this.#o.volumes?.recover(this.#o.records.list().map((p) => ({ id: p.id, volumeIds: p.spec?.volumes.map((v) => v.volumeId) ?? [] })));
    for (const pod of this.#o.records.list()) {
      const entry = this.#entry(pod.id);
      const vm = this.#o.vms.get(pod.id);
      if (pod.state === PodState.PENDING) {
        this.#startBringUp(pod.id, entry);
        continue;
      }
      if (!vm) continue;
      void entry.lock.run(async () => {
        const p = this.#o.records.get(pod.id);
        if (!p) return;
        if (p.state === PodState.RUNNING && vm.state === MicroVmState.RUNNING) {
          await this.#pushAfterAttach(p, RESUME_PING_MS).catch((err: unknown) =>
            this.#o.log.warn({ id: p.id, err: errorMessage(err) }, 'taken over: the guest did not answer'),
          );
        } else if (p.state === PodState.RUNNING && vm.state === MicroVmState.SUSPENDED) {
          await this.#setState(p, PodState.SUSPENDED, 'its microVM was suspended');
        } else if ((p.state === PodState.RUNNING || p.state === PodState.SUSPENDED) && vm.state === MicroVmState.CRASHED) {
          await this.#setState(p, PodState.FAILED, `its microVM crashed: ${vm.reason}`);
        } else if (p.state === PodState.RUNNING && vm.state === MicroVmState.STOPPED) {
          await this.#setState(p, PodState.STOPPED, `its microVM stopped: ${vm.reason}`);
        }
      });
    }
    this.#clock = new ClockKeeper(
      () =>
        this.#o.records
          .list()
          .filter((p) => p.state === PodState.RUNNING && !this.#entries.get(p.id)?.lock.busy)
          .map((p) => ({ id: p.id, guest: this.#o.vms.guest(p.id) })),
      this.#o.clockMaxRttMs ?? 10,
      this.#o.log,
    );
  }

  /** Stops the background work (the clock keeper); microVMs run on. */
  close(): void {
    this.#clock?.stop();
  }

  /** The pod as it is now. @throws FeosError INVALID_ARGUMENT, NOT_FOUND */
  get(id: string): PodInfo {
    const pod = this.#o.records.get(parsePodId(id));
    if (!pod) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
    return pod;
  }

  /**
   * The pod as it is now, with its guest's answer when it runs and no change holds its lock (within
   * 5 s; a guest that does not answer leaves `guest.answered` false with the reason, and the call
   * succeeds all the same).
   * @throws FeosError INVALID_ARGUMENT, NOT_FOUND
   */
  async getWithGuest(id: string): Promise<PodInfo> {
    const pod = this.get(id);
    if (pod.state !== PodState.RUNNING) return pod;
    const entry = this.#entries.get(pod.id);
    if (entry?.lock.busy) {
      pod.guest = create(GuestStatusSchema, { reason: 'a change of the pod runs' });
      return pod;
    }
    try {
      const guest = this.#o.vms.guest(pod.id);
      const ping = await guest.call('Ping', {}, GUEST_CALL_MS);
      pod.guest = create(GuestStatusSchema, { answered: true, uptimeMs: ping.uptimeMs, bootId: ping.bootId, agentVersion: ping.agentVersion });
      if (pod.spec!.containers.length > 0) {
        const listed = await guest.call('ListContainers', {}, GUEST_CALL_MS);
        pod.containers = listed.containers.map((c) => create(ContainerStatusSchema, { name: c.name, state: c.state, exitCode: c.exitCode }));
      }
    } catch (err: unknown) {
      pod.guest = create(GuestStatusSchema, { reason: `the guest of pod ${pod.id} did not answer within 5s: ${errorMessage(err)}` });
    }
    return pod;
  }

  /** Every pod, by ID. */
  list(): PodInfo[] {
    return this.#o.records.list();
  }

  /**
   * The guest of a RUNNING pod and one of its containers (the first when `container` is empty), for an
   * exec, a log or a port forward.
   * @throws FeosError NOT_FOUND (pod, container), FAILED_PRECONDITION (not RUNNING), UNAVAILABLE busy
   *   while it is being suspended
   */
  guestOfRunning(id: string, container = ''): { guest: ReturnType<MicroVmService['guest']>; container: string } {
    const pod = this.get(id);
    if (pod.state !== PodState.RUNNING) throw new FeosError('FAILED_PRECONDITION', `pod ${pod.id} is ${PodState[pod.state]}: it must be RUNNING`);
    if (this.#entries.get(pod.id)?.suspending) throw vmBusy(`pod ${pod.id} is being suspended`);
    const names = pod.spec!.containers.map((c) => c.name);
    const name = container || names[0] || '';
    if (!names.includes(name)) throw new FeosError('NOT_FOUND', container ? `pod ${pod.id} has no container ${container}` : `pod ${pod.id} has no containers`);
    return { guest: this.#o.vms.guest(pod.id), container: name };
  }

  /** The guest of a pod whose microVM exists (for tests and the API). */
  guest(id: string) {
    return this.#o.vms.guest(parsePodId(id));
  }

  /**
   * Runs one action on a pod (its ID checked first).
   * @throws FeosError with the seed's code: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
   *   FAILED_PRECONDITION, UNAVAILABLE busy
   */
  async act(rawId: string, action: PodAction): Promise<PodInfo | undefined> {
    const id = action.kind === 'create' && rawId === '' ? mintPodId() : parsePodId(rawId);
    switch (action.kind) {
      case 'create':
        return this.#create(id, action.spec, action.pullToken);
      case 'start':
        return this.#start(id, action.pullToken);
      case 'stop':
        return this.#stop(id);
      case 'delete':
        await this.#delete(id);
        return undefined;
      case 'suspend':
        return this.#suspend(id);
      case 'resume':
        return this.#resume(id);
      default: {
        const never: never = action;
        throw new FeosError('INVALID_ARGUMENT', `unknown action ${JSON.stringify(never)}`);
      }
    }
  }

  #entry(id: string): Entry {
    let e = this.#entries.get(id);
    if (!e) {
      e = { lock: new Mutex() };
      this.#entries.set(id, e);
    }
    return e;
  }

  /** Runs `fn` under the pod's lock, only if the lock is still its pod's once taken. */
  #locked<T>(id: string, fn: (pod: PodInfo, entry: Entry) => Promise<T>): Promise<T> {
    const entry = this.#entries.get(id);
    if (!entry || !this.#o.records.get(id)) return Promise.reject(new FeosError('NOT_FOUND', `pod ${id} not found`));
    return entry.lock.run(async () => {
      const pod = this.#o.records.get(id);
      if (this.#entries.get(id) !== entry || !pod) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
      return fn(pod, entry);
    });
  }

  async #save(pod: PodInfo, deleted = false): Promise<void> {
    pod.generation += 1n;
    pod.recordVersion = POD_RECORD_VERSION;
    await this.#o.records.save(pod);
    this.emit('event', create(PodEventSchema, { podId: pod.id, pod, deleted, time: timestampNow() }));
  }

  async #setState(pod: PodInfo, state: PodState, reason: string): Promise<void> {
    if (pod.state !== state) pod.stateChangedAt = timestampNow();
    pod.state = state;
    pod.reason = reason;
    if (state === PodState.RUNNING) pod.startedAt = timestampNow();
    await this.#save(pod);
    this.#o.log.info({ id: pod.id, state: PodState[state], reason }, 'pod');
  }

  async #create(id: string, rawSpec: PodSpec, pullToken?: string): Promise<PodInfo> {
    const spec = normalizeSpec(rawSpec);
    const existing = this.#o.records.get(id);
    if (existing) {
      if (equals(PodSpecSchema, existing.spec!, spec)) return existing;
      throw new FeosError('ALREADY_EXISTS', `pod ${id} exists with another spec`);
    }
    if (spec.network) {
      const why = this.#o.network.check(spec.network);
      if (why) throw new FeosError('FAILED_PRECONDITION', why);
    }
    if (spec.volumes.length > 0 && !this.#o.volumes) {
      throw new FeosError('FAILED_PRECONDITION', `volume ${spec.volumes[0].volumeId} is not on the node`);
    }
    const entry = this.#entry(id);
    return entry.lock.run(async () => {
      const again = this.#o.records.get(id);
      if (again) {
        if (equals(PodSpecSchema, again.spec!, spec)) return again;
        throw new FeosError('ALREADY_EXISTS', `pod ${id} exists with another spec`);
      }
      // Claims first, all or none; a start of feosd after a crash between the two records recovers.
      if (spec.volumes.length > 0) await this.#o.volumes!.claim(id, spec.volumes.map((v) => v.volumeId));
      const now = timestampNow();
      const pod = create(PodInfoSchema, {
        id,
        spec,
        state: PodState.PENDING,
        reason: 'created',
        createdAt: now,
        stateChangedAt: now,
        recordVersion: POD_RECORD_VERSION,
      });
      await this.#save(pod);
      if (pullToken) this.#pullTokens.set(id, pullToken);
      this.#o.log.info({ id }, 'pod created');
      this.#startBringUp(id, entry);
      return this.#o.records.get(id)!;
    });
  }

  /** Queues the bring-up behind the lock (the create's answer goes first). */
  #startBringUp(id: string, entry: Entry): Promise<void> {
    const ac = new AbortController();
    entry.bringUp = ac;
    return this.#locked(id, async (pod) => {
      if (pod.state !== PodState.PENDING || ac.signal.aborted) return;
      await this.#bringUp(pod, ac.signal);
    })
      .catch((err: unknown) => this.#o.log.error({ id, err: errorMessage(err) }, 'bring-up'))
      .finally(() => {
        if (entry.bringUp === ac) entry.bringUp = undefined;
      });
  }

  /**
   * Brings a PENDING pod up; each step looks at what is there first. Ends RUNNING, or FAILED with the
   * reason (its microVM ended). Runs under the pod's lock.
   */
  async #bringUp(pod: PodInfo, signal: AbortSignal): Promise<void> {
    const id = pod.id;
    let step = 'guest';
    // The bring-up takes the pod's pull token: it is this bring-up's alone.
    const pullToken = this.#pullTokens.get(id) ?? '';
    this.#pullTokens.delete(id);
    try {
      if (!pod.guestVersion || !existsSync(join(this.#o.guestDir, pod.guestVersion))) {
        const versions = guestVersions(this.#o.guestDir);
        if (versions.length === 0) throw new Error(`no guest installed in ${this.#o.guestDir} (scripts/build-guest.sh)`);
        pod.guestVersion = versions.at(-1)!;
        await this.#save(pod);
      }
      const guestDir = join(this.#o.guestDir, pod.guestVersion);
      step = 'disk';
      const disk = join(this.#o.disksDir, `${id}.qcow2`);
      if (!existsSync(disk)) {
        await mkdir(this.#o.disksDir, { recursive: true });
        const tmp = `${disk}.tmp`;
        await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', join(guestDir, 'data.qcow2'), tmp]);
        await rename(tmp, disk);
      }
      step = 'network';
      let net: PodNetworkAttachment | undefined;
      if (pod.spec!.network) {
        net = await this.#o.network.setUp(pod);
        if (pod.ipv6Address !== net.ipv6Address || pod.ipv4Address !== net.ipv4Address) {
          pod.ipv6Address = net.ipv6Address;
          pod.ipv4Address = net.ipv4Address;
          await this.#save(pod);
        }
      }
      signal.throwIfAborted();
      step = 'microVM';
      let vm = this.#o.vms.get(id);
      if (vm && vm.guestVersion !== pod.guestVersion) {
        await this.#o.vms.delete(id);
        vm = undefined;
      }
      const volumeDisks: string[] = [];
      for (const v of pod.spec!.volumes) volumeDisks.push(await this.#o.volumes!.ensureDisk(v.volumeId));
      if (!vm) {
        await this.#o.vms.create({
          id,
          guestVersion: pod.guestVersion,
          guestDir,
          disk,
          vcpus: pod.spec!.vcpus,
          memoryBytes: pod.spec!.memoryBytes,
          tap: net ? { name: net.tap, mac: net.mac } : undefined,
          volumes: volumeDisks,
          registryForwards: net ? undefined : this.#o.registryForwards,
        });
      }
      if (this.#o.vms.get(id)!.state !== MicroVmState.RUNNING) await this.#o.vms.start(id);
      signal.throwIfAborted();
      step = 'guest attach';
      await this.#pushAfterAttach(pod, this.#o.guestAttachMs ?? GUEST_ATTACH_MS, signal, net);
      if (pod.spec!.volumes.length > 0) {
        step = 'volumes';
        await this.#mountVolumes(pod);
      }
      const guest = this.#o.vms.guest(id);
      const endpoints = net ? {} : registryEndpoints(this.#o.registryForwards ?? []);
      for (const c of pod.spec!.containers) {
        signal.throwIfAborted();
        step = `container ${c.name}: create`;
        await guest.call(
          'CreateContainer',
          {
            config: { name: c.name, image: c.image, command: c.command, args: c.args, env: c.env, volumeMounts: c.volumeMounts.map((m) => ({ name: m.name, path: m.path, readOnly: m.readOnly })) },
            pullToken,
            registryEndpoints: endpoints,
          },
          CONTAINER_CREATE_MS,
        );
        step = `container ${c.name}: start`;
        await guest.call('StartContainer', { name: c.name }, CONTAINER_START_MS);
      }
      signal.throwIfAborted();
      await this.#setState(pod, PodState.RUNNING, 'booted');
    } catch (err: unknown) {
      if (signal.aborted) return;
      const reason = `${step}: ${errorMessage(err)}`;
      await this.#o.vms.kill(id, `bring-up failed: ${reason}`).catch(() => {});
      await this.#detach(pod);
      await this.#setState(pod, PodState.FAILED, reason);
    }
  }

  /** MountVolumes with each volume's name, ID, drive, size and whether to format it; records the mounted as formatted. */
  async #mountVolumes(pod: PodInfo): Promise<void> {
    const store = this.#o.volumes!;
    const volumes = pod.spec!.volumes.map((v, i) => {
      const rec = store.get(v.volumeId);
      if (!rec) throw new Error(`volume ${v.volumeId} is not on the node`);
      return { name: v.name, id: v.volumeId, drive: i + 1, sizeBytes: rec.sizeBytes, format: !rec.formatted };
    });
    const res = await this.#o.vms.guest(pod.id).call('MountVolumes', { volumes }, 180_000);
    const mounted = new Set(res.mounted);
    await store.markFormatted(volumes.filter((v) => mounted.has(v.name)).map((v) => v.id));
    const failed = Object.entries(res.failed);
    if (failed.length > 0) throw new Error(failed.map(([n, why]) => `${n}: ${why}`).join('; '));
  }

  /** Attaches the guest (ping), pushes the wall time and the network configuration. */
  async #pushAfterAttach(pod: PodInfo, attachMs: number, signal?: AbortSignal, net?: PodNetworkAttachment): Promise<void> {
    const guest = this.#o.vms.guest(pod.id);
    await guest.attach(attachMs, signal);
    await guest.call('Ping', {}, attachMs);
    await guest.call('SetTime', { unixNanos: hostNowNs() }, PUSH_MS);
    if (pod.spec!.network) {
      const n = net ?? (await this.#o.network.setUp(pod));
      await guest.call('ConfigureNetwork', n.guest, PUSH_MS);
    }
  }

  /** The TAP device goes with the microVM's process (a pod with a network only); failures are logged. */
  async #detach(pod: PodInfo): Promise<void> {
    if (!pod.spec?.network || !this.#o.network.detach) return;
    await this.#o.network.detach(pod).catch((err: unknown) => this.#o.log.warn({ id: pod.id, err: errorMessage(err) }, 'network: detach failed'));
  }

  async #start(id: string, pullToken?: string): Promise<PodInfo> {
    const entry = this.#entries.get(id);
    await this.#locked(id, async (pod) => {
      if (pod.state !== PodState.STOPPED && pod.state !== PodState.FAILED) {
        throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: only a STOPPED or FAILED pod starts`);
      }
      if (pullToken) this.#pullTokens.set(id, pullToken);
      await this.#setState(pod, PodState.PENDING, 'started');
    });
    await this.#startBringUp(id, entry!);
    return this.get(id);
  }

  async #stop(id: string): Promise<PodInfo> {
    this.#entries.get(id)?.bringUp?.abort(new Error('stopped'));
    return this.#locked(id, async (pod) => {
      const vm = this.#o.vms.get(id);
      if (vm?.state === MicroVmState.RUNNING) {
        const guest = this.#o.vms.guest(id);
        const asked = await guest.call('Shutdown', {}, PUSH_MS).then(
          () => true,
          () => false,
        );
        if (!asked || !(await this.#o.vms.waitForExit(id, SHUTDOWN_WAIT_MS))) {
          await this.#o.vms.kill(id, 'stopped: the guest did not power off');
        }
      } else if (vm?.state === MicroVmState.SUSPENDED) {
        await this.#o.vms.discardSnapshot(id);
      }
      await this.#detach(pod);
      if (pod.state !== PodState.STOPPED) await this.#setState(pod, PodState.STOPPED, 'stopped by StopPod');
      return this.#o.records.get(id)!;
    });
  }

  async #delete(id: string): Promise<void> {
    this.#entries.get(id)?.bringUp?.abort(new Error('deleted'));
    await this.#locked(id, async (pod, entry) => {
      await this.#o.vms.delete(id);
      await rm(join(this.#o.disksDir, `${id}.qcow2`), { force: true });
      if (pod.spec!.network) await this.#o.network.tearDown(pod);
      await this.#o.volumes?.release(id);
      if (this.#entries.get(id) === entry) this.#entries.delete(id);
      this.#pullTokens.delete(id);
      await this.#o.records.remove(id);
      this.emit('event', create(PodEventSchema, { podId: id, deleted: true, time: timestampNow() }));
      this.#o.log.info({ id }, 'pod deleted');
    });
  }

  async #suspend(id: string): Promise<PodInfo> {
    const pod0 = this.get(id);
    const budget = suspendBudgetMs(pod0.spec!.memoryBytes);
    const entry = this.#entries.get(id);
    if (entry?.suspending) throw vmBusy(`pod ${id} is being suspended`);
    const task = this.#locked(id, async (pod, e) => {
      if (pod.state === PodState.SUSPENDED) return pod;
      if (pod.state !== PodState.RUNNING) {
        throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: only a RUNNING pod suspends`);
      }
      e.suspending = true;
      try {
        const guest = this.#o.vms.guest(id);
        await guest.call('EmptyMemory', {}, PUSH_MS).catch((err: unknown) =>
          this.#o.log.warn({ id, err: errorMessage(err) }, 'suspend: the guest did not empty its memory'),
        );
        await this.#o.vms.suspend(id, snapshotTimeoutMs(pod.spec!.memoryBytes));
        await this.#detach(pod);
        await this.#setState(pod, PodState.SUSPENDED, 'suspended by SuspendPod');
        return this.#o.records.get(id)!;
      } finally {
        e.suspending = false;
      }
    });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(vmBusy(`the suspend of pod ${id} did not end within its budget of ${budget / 1000} s`)), budget);
    });
    try {
      return await Promise.race([task, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #resume(id: string): Promise<PodInfo> {
    return this.#locked(id, async (pod) => {
      if (pod.state === PodState.RUNNING) return pod;
      if (pod.state !== PodState.SUSPENDED) {
        throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: only a SUSPENDED pod resumes`);
      }
      try {
        let net: PodNetworkAttachment | undefined;
        if (pod.spec!.network) net = await this.#o.network.setUp(pod);
        await this.#o.vms.resume(id);
        await this.#pushAfterAttach(pod, RESUME_PING_MS, undefined, net);
      } catch (err: unknown) {
        await this.#o.vms.kill(id, `resume failed: ${errorMessage(err)}`).catch(() => {});
        await this.#o.vms.discardSnapshot(id).catch(() => {});
        await this.#detach(pod);
        await this.#setState(pod, PodState.FAILED, `resume: ${errorMessage(err)}`);
        throw new FeosError('INTERNAL', `resume of pod ${id} failed: ${errorMessage(err)}`, { cause: err });
      }
      await this.#setState(pod, PodState.RUNNING, 'resumed by ResumePod');
      return this.#o.records.get(id)!;
    });
  }

  /** A microVM that ended by itself: its RUNNING pod is FAILED (crash) or STOPPED (the guest shut down). */
  async #onVmExit(exit: MicroVmExit): Promise<void> {
    if (!this.#entries.has(exit.id)) return;
    await this.#locked(exit.id, async (pod) => {
      if (pod.state !== PodState.RUNNING) return;
      await this.#detach(pod);
      if (exit.state === MicroVmState.CRASHED) await this.#setState(pod, PodState.FAILED, `its microVM crashed: ${exit.reason}`);
      else await this.#setState(pod, PodState.STOPPED, `its microVM stopped: ${exit.reason}`);
    }).catch((err: unknown) => this.#o.log.error({ id: exit.id, err: errorMessage(err) }, 'microVM exit'));
  }
}
