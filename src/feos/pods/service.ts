/**
 * The pod service (seed 000, "A pod", "Lifecycle", "The suspend's budget", "The guest"): the pods'
 * lifecycle on top of the microVM layer. Every call that changes a pod is one `PodAction`, runs under
 * the pod's lock in a task of its own (a caller that goes away leaves it running to its end), and is
 * answered once its record is kept. GetPod and ListPods read memory and never wait.
 *
 * States: PENDING → RUNNING | FAILED; RUNNING → STOPPED | SUSPENDED | FAILED | HIBERNATED; SUSPENDED →
 * RUNNING | STOPPED | HIBERNATED; STOPPED/FAILED → PENDING (StartPod) | HIBERNATED; HIBERNATED →
 * RUNNING (ResumePod, RestorePod) | PENDING (a disk-only restore). See docs/feos/feosd.md for each
 * call's prerequisites and effects. The actions live in bring-up.ts, lifecycle.ts, hibernate.ts and
 * restore.ts; this file dispatches them and answers the reads.
 */
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { create, equals } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { ContainerStatusSchema, GuestStatusSchema, type ImageLayers, type PodEvent, type PodInfo, PodInfoSchema, PodSpecSchema, type PodSpec, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { FeosError, errorMessage, vmBusy } from '../api/index.ts';
import type { MicroVmExit, MicroVmService } from '../microvm/index.ts';
import { mintPodId, parsePodId } from './id.ts';
import { normalizeSpec } from './spec.ts';
import { POD_RECORD_VERSION } from './records.ts';
import { ClockKeeper } from './clock.ts';
import { GUEST_CALL_MS, type PodAction, RESUME_PING_MS } from './actions.ts';
import { PodCore, type PodServiceOptions } from './core.ts';
import { podDiskPath, startBringUp } from './bring-up.ts';
import { recoverInFlight } from './recovery.ts';
import { deletePod, refuseUnsettled, resumeLocked, stopPod, suspendPod } from './lifecycle.ts';
import { abandonable, hibernatePod, hibernationStatus } from './hibernate.ts';
import { restorePod } from './restore.ts';
import { checkImageLayers, resumeLayerPushes } from './baked.ts';

export type { PodServiceOptions } from './core.ts';
export { GUEST_ATTACH_MS, GUEST_CALL_MS, type PodAction } from './actions.ts';

/** The pods of one node. Emits `event` (PodEvent) once a change is kept. */
export class PodService extends EventEmitter<{ event: [PodEvent] }> {
  readonly #core: PodCore;
  #clock?: ClockKeeper;

  constructor(opts: PodServiceOptions) {
    super();
    this.setMaxListeners(0);
    this.#core = new PodCore(opts, (ev) => this.emit('event', ev));
  }

  /**
   * Takes the node's pods over after a start: bring-ups cut off go on, running pods get their guest
   * attached and their time pushed, pods whose microVM ended while feosd was away are FAILED (or
   * STOPPED), and a suspend that went through in the microVM layer makes its pod SUSPENDED.
   */
  async init(): Promise<void> {
    const core = this.#core;
    const o = core.o;
    o.vms.on('exit', (exit) => void this.#onVmExit(exit));
    await o.volumes?.recover(o.records.list().map((p) => ({ id: p.id, volumeIds: p.spec?.volumes.map((v) => v.volumeId) ?? [] })));
    // Hibernations and restores a kill cut are settled first: no pod resumes on the node while its
    // whole checkpoint waits in the store.
    await recoverInFlight(core);
    for (const pod of o.records.list()) {
      const entry = core.entry(pod.id);
      const vm = o.vms.get(pod.id);
      if (pod.state === PodState.PENDING) {
        void startBringUp(core, pod.id, entry);
        continue;
      }
      if (!vm) {
        if (pod.state === PodState.SUSPENDED || pod.state === PodState.RUNNING) {
          await core.setState(pod, PodState.FAILED, `its microVM is gone${existsSync(podDiskPath(core, pod.id)) ? '; StartPod boots its disk' : ' and so is its disk: delete the pod, or restore it from a checkpoint'}`);
        }
        continue;
      }
      void entry.lock.run(async () => {
        const p = o.records.get(pod.id);
        if (!p) return;
        if (p.state === PodState.RUNNING && vm.state === MicroVmState.RUNNING) {
          await core.pushAfterAttach(p, RESUME_PING_MS).catch((err: unknown) => o.log.warn({ id: p.id, err: errorMessage(err) }, 'taken over: the guest did not answer'));
        } else if ((p.state === PodState.SUSPENDED || p.state === PodState.STOPPED) && vm.state === MicroVmState.RUNNING) {
          // A kill between the microVM's resume and the pod's record: its QEMU runs (seen at takeover).
          await core.setState(p, PodState.RUNNING, 'its microVM runs (taken over after a restart)');
          await core.pushAfterAttach(p, RESUME_PING_MS).catch((err: unknown) => o.log.warn({ id: p.id, err: errorMessage(err) }, 'taken over: the guest did not answer'));
        } else if (p.state === PodState.SUSPENDED && vm.state !== MicroVmState.SUSPENDED) {
          // Never SUSPENDED without a snapshot: neither ResumePod nor RestorePod could bring it back.
          await core.setState(p, PodState.FAILED, `its microVM holds no snapshot (${MicroVmState[vm.state]}: ${vm.reason}); StartPod boots its disk`);
        } else if (p.state === PodState.RUNNING && vm.state === MicroVmState.SUSPENDED) {
          await core.setState(p, PodState.SUSPENDED, 'its microVM was suspended');
        } else if ((p.state === PodState.RUNNING || p.state === PodState.SUSPENDED) && vm.state === MicroVmState.CRASHED) {
          await core.setState(p, PodState.FAILED, `its microVM crashed: ${vm.reason}`);
        } else if (p.state === PodState.RUNNING && vm.state === MicroVmState.STOPPED) {
          await core.setState(p, PodState.STOPPED, `its microVM stopped: ${vm.reason}`);
        }
      });
    }
    // Layers sealed here whose push a restart cut off (seed "Baked images").
    await resumeLayerPushes(core);
    this.#clock = new ClockKeeper(
      () =>
        o.records
          .list()
          .filter((p) => p.state === PodState.RUNNING && !core.entries.get(p.id)?.lock.busy)
          .map((p) => ({ id: p.id, guest: o.vms.guest(p.id) })),
      o.clockMaxRttMs ?? 10,
      o.log,
    );
  }

  /** Stops the background work (the clock keeper); microVMs run on. */
  close(): void {
    this.#clock?.stop();
  }

  /** Resolves once no hibernation runs (a stop of feosd waits for them). */
  async hibernationsDone(): Promise<void> {
    for (;;) {
      const running = [...this.#core.entries.values()].map((e) => e.hibernation?.done).filter((d) => d !== undefined);
      if (running.length === 0) return;
      await Promise.allSettled(running);
    }
  }

  /** The pod as it is now, with its hibernation in flight. @throws FeosError INVALID_ARGUMENT, NOT_FOUND */
  get(id: string): PodInfo {
    const pod = this.#core.o.records.get(parsePodId(id));
    if (!pod) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
    const h = this.#core.entries.get(pod.id)?.hibernation;
    if (h) pod.hibernation = hibernationStatus(h);
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
    const entry = this.#core.entries.get(pod.id);
    if (entry?.lock.busy) {
      pod.guest = create(GuestStatusSchema, { reason: 'a change of the pod runs' });
      return pod;
    }
    try {
      const guest = this.#core.o.vms.guest(pod.id);
      const ping = await guest.call('Ping', {}, GUEST_CALL_MS);
      pod.guest = create(GuestStatusSchema, { answered: true, uptimeMs: ping.uptimeMs, bootId: ping.bootId, agentVersion: ping.agentVersion });
      if (pod.spec!.containers.length > 0) {
        const listed = await guest.call('ListContainers', {}, GUEST_CALL_MS);
        pod.containers = listed.containers.map((c) => create(ContainerStatusSchema, { name: c.name, state: c.state, exitCode: c.exitCode }));
      }
    } catch (err: unknown) {
      const paused = this.#core.o.vms.pausedOnError(pod.id);
      const why = paused ? `; its microVM is paused: ${paused}: free space on the node, then ResumePod (feosctl pod resume ${pod.id}) lets it run` : '';
      pod.guest = create(GuestStatusSchema, { reason: `the guest of pod ${pod.id} did not answer within 5s: ${errorMessage(err)}${why}` });
    }
    return pod;
  }

  /** Every pod, by ID. */
  list(): PodInfo[] {
    return this.#core.o.records.list().map((p) => {
      const h = this.#core.entries.get(p.id)?.hibernation;
      if (h) p.hibernation = hibernationStatus(h);
      return p;
    });
  }

  /**
   * The guest of a RUNNING pod and one of its containers (the first when `container` is empty), for an
   * exec, a log or a port forward.
   * @throws FeosError NOT_FOUND (pod, container), FAILED_PRECONDITION (not RUNNING), UNAVAILABLE busy
   *   while it is being suspended or hibernates
   */
  guestOfRunning(id: string, container = ''): { guest: ReturnType<MicroVmService['guest']>; container: string } {
    const pod = this.get(id);
    if (pod.state !== PodState.RUNNING) throw new FeosError('FAILED_PRECONDITION', `pod ${pod.id} is ${PodState[pod.state]}: it must be RUNNING`);
    const entry = this.#core.entries.get(pod.id);
    if (entry?.suspending) throw vmBusy(`pod ${pod.id} is being suspended`);
    if (entry?.hibernation) throw vmBusy(`pod ${pod.id} hibernates`);
    const names = pod.spec!.containers.map((c) => c.name);
    const name = container || names[0] || '';
    if (!names.includes(name)) throw new FeosError('NOT_FOUND', container ? `pod ${pod.id} has no container ${container}` : `pod ${pod.id} has no containers`);
    return { guest: this.#core.o.vms.guest(pod.id), container: name };
  }

  /** The guest of a pod whose microVM exists (for tests and the API). */
  guest(id: string) {
    return this.#core.o.vms.guest(parsePodId(id));
  }

  /**
   * Runs one action on a pod (its ID checked first).
   * @throws FeosError with the seed's code: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
   *   FAILED_PRECONDITION, ABORTED (an abandoned hibernation), DATA_LOSS (a bad checkpoint), UNAVAILABLE busy
   */
  async act(rawId: string, action: PodAction): Promise<PodInfo | undefined> {
    const id = action.kind === 'create' && rawId === '' ? mintPodId() : parsePodId(rawId);
    const core = this.#core;
    switch (action.kind) {
      case 'create':
        return this.#create(id, action.spec, action.pullToken, action.imageLayers);
      case 'start':
        return this.#start(id, action.pullToken);
      case 'stop':
        return stopPod(core, id);
      case 'delete':
        await deletePod(core, id);
        return undefined;
      case 'suspend':
        return suspendPod(core, id, action.deadline, action.reason);
      case 'resume':
        return this.#resume(id, action.keepSuspendedOnFailure ?? false, action.diskOnly ?? false, action.keepSuspendedOnFailure ? 'resumed by feosd after its stop' : undefined);
      case 'hibernate':
        return hibernatePod(core, id, action.noAbandon ?? false, action.keepRunning ?? false);
      case 'restore':
        return restorePod(core, id, { checkpoint: action.checkpoint, diskOnly: action.diskOnly });
      default: {
        const never: never = action;
        throw new FeosError('INVALID_ARGUMENT', `unknown action ${JSON.stringify(never)}`);
      }
    }
  }

  async #create(id: string, rawSpec: PodSpec, pullToken?: string, rawLayers?: ImageLayers): Promise<PodInfo> {
    const core = this.#core;
    const o = core.o;
    const spec = normalizeSpec(rawSpec);
    // Kept in the record and never compared (seed "Baked images").
    const imageLayers = checkImageLayers(rawLayers, spec);
    const existing = o.records.get(id);
    if (existing) {
      if (equals(PodSpecSchema, existing.spec!, spec)) return existing;
      throw new FeosError('ALREADY_EXISTS', `pod ${id} exists with another spec`);
    }
    if (spec.network) {
      const why = o.network.check(spec.network);
      if (why) throw new FeosError('FAILED_PRECONDITION', why);
    }
    if (spec.volumes.length > 0 && !o.volumes) {
      throw new FeosError('FAILED_PRECONDITION', `volume ${spec.volumes[0].volumeId} is not on the node`);
    }
    // Memory admission, before anything is written: a pod the node cannot give its memory is refused.
    const release = core.memory.admit(id, spec.memoryBytes, 'CreatePod');
    const entry = core.entry(id);
    return entry.lock.run(async () => {
      const again = o.records.get(id);
      if (again) {
        if (equals(PodSpecSchema, again.spec!, spec)) return again;
        throw new FeosError('ALREADY_EXISTS', `pod ${id} exists with another spec`);
      }
      // Claims first, all or none; a start of feosd after a crash between the two records recovers.
      if (spec.volumes.length > 0) await o.volumes!.claim(id, spec.volumes.map((v) => v.volumeId));
      const now = timestampNow();
      const pod = create(PodInfoSchema, {
        id,
        spec,
        state: PodState.PENDING,
        reason: 'created',
        createdAt: now,
        stateChangedAt: now,
        recordVersion: POD_RECORD_VERSION,
        imageLayers,
      });
      await core.save(pod);
      if (pullToken) core.pullTokens.set(id, pullToken);
      o.log.info({ id }, 'pod created');
      void startBringUp(core, id, entry);
      return o.records.get(id)!;
    }).finally(release);
  }

  async #start(id: string, pullToken?: string): Promise<PodInfo> {
    const core = this.#core;
    const entry = core.entries.get(id);
    const refuse = (pod: PodInfo) => {
      if (pod.state === PodState.STOPPED || pod.state === PodState.FAILED) return;
      const why = pod.state === PodState.PENDING ? ': its bring-up runs (wait for RUNNING or FAILED)' : '';
      throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}${why}: only a STOPPED or FAILED pod starts`);
    };
    // The state the caller sees decides, before the lock: a start of a PENDING pod would wait for its
    // whole bring-up (the lock's) and, were it FAILED then, bring it up a second time.
    const seen = core.o.records.get(id);
    if (seen) refuse(seen);
    await core.locked(id, async (pod) => {
      refuse(pod);
      refuseUnsettled(core, id);
      const release = core.memory.admit(id, pod.spec!.memoryBytes, 'StartPod');
      try {
        if (pullToken) core.pullTokens.set(id, pullToken);
        await core.setState(pod, PodState.PENDING, 'started');
      } finally {
        release();
      }
    });
    await startBringUp(core, id, entry!);
    return this.get(id);
  }

  /**
   * ResumePod: a hibernation in flight is abandoned when it may be (the pod then resumes from its
   * snapshot on the node), else waited for; a HIBERNATED pod is restored from its checkpoint.
   * @throws FeosError INVALID_ARGUMENT for `diskOnly` on a pod that is not HIBERNATED
   */
  async #resume(id: string, keepSuspendedOnFailure: boolean, diskOnly: boolean, reason?: string): Promise<PodInfo> {
    const core = this.#core;
    const h = core.entries.get(id)?.hibernation;
    if (h) {
      if (abandonable(h)) {
        core.log.info({ id, checkpoint: h.checkpoint, step: h.step }, 'ResumePod abandons the hibernation');
        h.abandon.abort(new FeosError('ABORTED', `the hibernation of pod ${id} was abandoned for a ResumePod`));
      }
      await h.done.catch(() => {});
    }
    const resumed = await core.locked(id, async (pod) => {
      if (pod.state === PodState.HIBERNATED) return undefined;
      // disk_only means a fresh boot from a checkpoint's disk: a pod on the node has its own memory.
      if (diskOnly) throw new FeosError('INVALID_ARGUMENT', `pod ${id} is ${PodState[pod.state]}: disk_only applies to a HIBERNATED pod's restore; resume it without, or stop it and start it for a fresh boot`);
      // A RUNNING pod whose microVM QEMU paused on a disk's error (the node's disk was full) runs again.
      if (pod.state === PodState.RUNNING && core.o.vms.pausedOnError(id)) {
        await core.o.vms.continueAfterError(id);
        return pod;
      }
      if (pod.state !== PodState.SUSPENDED) return resumeLocked(core, pod, keepSuspendedOnFailure, reason);
      const release = core.memory.admit(id, pod.spec!.memoryBytes, 'ResumePod');
      try {
        return await resumeLocked(core, pod, keepSuspendedOnFailure, reason);
      } finally {
        release();
      }
    });
    return resumed ?? restorePod(core, id, { diskOnly });
  }

  /** A microVM that ended by itself: its RUNNING pod is FAILED (crash) or STOPPED (the guest shut down). */
  async #onVmExit(exit: MicroVmExit): Promise<void> {
    const core = this.#core;
    if (!core.entries.has(exit.id)) return;
    await core
      .locked(exit.id, async (pod) => {
        if (pod.state !== PodState.RUNNING) return;
        await core.detach(pod);
        if (exit.state === MicroVmState.CRASHED) await core.setState(pod, PodState.FAILED, `its microVM crashed: ${exit.reason}`);
        else await core.setState(pod, PodState.STOPPED, `its microVM stopped: ${exit.reason}`);
      })
      .catch((err: unknown) => core.log.error({ id: exit.id, err: errorMessage(err) }, 'microVM exit'));
  }
}
