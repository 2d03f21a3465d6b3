/**
 * The microVM layer (seed 000, "A pod's microVM", "Lifecycle"), on a VMM (./vmm.ts; QEMU, ./qemu.ts,
 * by default): one directory per microVM
 * under `<state-dir>/vms/<id>/` with its record `microvm.pb` (a feos.microvm.v1.MicroVm), its config,
 * sockets, logs and `snapshot/`. QEMU processes outlive feosd: `init` takes the running ones over (their
 * pid and start time, their QMP socket) and finds those that ended CRASHED (or STOPPED when QEMU said
 * the guest shut down). Each call records its change once the change is done; the pod layer waits.
 *
 * The pod layer serialises calls per microVM (the pod's lock); this layer does not lock. Its failures
 * are its own errors (./errors.ts), which the API maps to gRPC statuses.
 */
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { existsSync, openSync, closeSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, open } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type MicroVm, MicroVmSchema, MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { writeFileAtomic, type Logger } from '../../lib/index.ts';
import { errorMessage } from '../api/index.ts';
import { GuestClient } from '../guest/index.ts';
import { MicroVmError, MicroVmInvalidError, MicroVmNotFoundError, MicroVmStateError, VmmError } from './errors.ts';
import { QemuVmm } from './qemu.ts';
import { hostTscKhz, vmPaths, type QemuConfig } from './qemu-args.ts';
import type { Vmm, VmmSession } from './vmm.ts';
import { bootId, isSameProcess, pidStartTicks } from './proc.ts';
import { placeInCgroup, removeCgroup } from './cgroup.ts';

const run = promisify(execFile);
/** SIGKILLs one process; never a pid ≤ 0 (which would signal a process group). */
function killPid(pid: number): void {
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

/** The record format this code writes. */
export const MICROVM_RECORD_VERSION = 1;

/** Options of the microVM layer. */
export interface MicroVmServiceOptions {
  /** `<state-dir>/vms` */
  vmsDir: string;
  /** The QEMU binary, for the default VMM. @default "qemu-system-x86_64" */
  qemu?: string;
  /** The VMM that runs the microVMs. @default QEMU (`qemu`) */
  vmm?: Vmm;
  accelerator: 'kvm' | 'tcg';
  log: Logger;
  /** A cgroup v2 directory under which each microVM gets `vms/<id>`; none = no cgroups. */
  cgroup?: string;
}

/** What `create` needs. */
export interface MicroVmSpec {
  id: string;
  guestVersion: string;
  guestDir: string;
  disk: string;
  vcpus: number;
  memoryBytes: bigint;
  tap?: { name: string; mac: string };
  /** The pod's volumes' disks, in their order. */
  volumes?: string[];
  /** Registries on the node the guest reaches (a microVM without a TAP only; qemu-args.ts). */
  registryForwards?: string[];
}

/** An exit that nobody asked for: the guest powered off (STOPPED) or QEMU ended otherwise (CRASHED). */
export interface MicroVmExit {
  id: string;
  pid: number;
  state: MicroVmState;
  reason: string;
}

interface Runtime {
  record: MicroVm;
  config?: QemuConfig;
  child?: ChildProcess;
  /** The VMM's control connection (QMP) while the process runs. */
  vmm?: VmmSession;
  guest: GuestClient;
  /** Set while this layer ends QEMU itself (suspend, kill): the exit is the caller's. */
  expectingExit: boolean;
  guestShutdownSeen: boolean;
  /** Why QEMU stopped the vCPUs on a disk's error (BLOCK_IO_ERROR, action stop), until they run again. */
  ioError?: string;
  exited?: Promise<{ code: number | null; signal: string | null }>;
}

/**
 * The microVMs of one node. Emits `exit` (MicroVmExit) for exits it did not cause.
 */
export class MicroVmService extends EventEmitter<{ exit: [MicroVmExit] }> {
  readonly #opts: Required<Omit<MicroVmServiceOptions, 'cgroup' | 'vmm'>> & { cgroup?: string };
  readonly #vmm: Vmm;
  readonly #vms = new Map<string, Runtime>();

  constructor(opts: MicroVmServiceOptions) {
    super();
    this.#opts = { qemu: 'qemu-system-x86_64', ...opts };
    this.#vmm = opts.vmm ?? new QemuVmm(this.#opts.qemu);
  }

  get accelerator(): 'kvm' | 'tcg' {
    return this.#opts.accelerator;
  }

  /** The microVM's directory. */
  dir(id: string): string {
    return join(this.#opts.vmsDir, id);
  }

  /** The record of a microVM, as it is now; undefined when there is none. */
  get(id: string): MicroVm | undefined {
    return this.#vms.get(id)?.record;
  }

  /**
   * Why QEMU paused a running microVM on a disk's error (a full file system on the node), or undefined:
   * `QEMU paused it on a failed write of DRIVE: No space left on device (the node's disk is full)`.
   */
  pausedOnError(id: string): string | undefined {
    return this.#vms.get(id)?.ioError;
  }

  /**
   * Lets a microVM that QEMU paused on a disk's error run again (QMP `cont`), once the cause is gone; a
   * write that fails again pauses it again.
   * @throws MicroVmNotFoundError without the microVM; MicroVmStateError when it is not paused on an error
   */
  async continueAfterError(id: string): Promise<void> {
    const rt = this.#must(id);
    if (!rt.ioError || !rt.vmm) throw new MicroVmStateError(id, `microVM ${id} is not paused on a disk's error`);
    const why = rt.ioError;
    rt.ioError = undefined;
    await rt.vmm.cont();
    this.#opts.log.info({ id, after: why }, 'microVM continued after its disk error');
  }

  /**
   * The guest client of a microVM (one per microVM, reconnecting).
   * @throws MicroVmNotFoundError without the microVM
   */
  guest(id: string): GuestClient {
    return this.#must(id).guest;
  }

  /**
   * Loads every record and takes the running microVMs over; a record that cannot be read is logged
   * and left alone.
   */
  async init(): Promise<void> {
    await mkdir(this.#opts.vmsDir, { recursive: true });
    const boot = bootId();
    for (const id of await readdir(this.#opts.vmsDir)) {
      const p = vmPaths(this.dir(id));
      let record: MicroVm;
      try {
        record = fromBinary(MicroVmSchema, await readFile(p.record));
      } catch (err: unknown) {
        if (existsSync(p.record)) this.#opts.log.error({ id, err: errorMessage(err) }, 'microVM record: unreadable; left alone');
        continue;
      }
      const rt: Runtime = { record, guest: new GuestClient(p.guest), expectingExit: false, guestShutdownSeen: false };
      this.#vms.set(id, rt);
      try {
        rt.config = JSON.parse(await readFile(p.config, 'utf8')) as QemuConfig;
        rt.config.memoryBytes = BigInt(rt.config.memoryBytes as unknown as string);
      } catch {}
      if (record.state !== MicroVmState.RUNNING) {
        if (record.pid > 0) await this.#endUnanswered(rt, boot);
        continue;
      }
      if (record.bootId === boot && isSameProcess(record.pid, record.pidStartTicks)) {
        let attached = false;
        try {
          await this.#attachVmm(rt);
          attached = true;
          this.#watchAdopted(rt);
          const state = await this.#settleTakenOver(rt);
          this.#opts.log.info({ id, pid: record.pid, state: MicroVmState[state] }, 'microVM taken over');
          continue;
        } catch (err: unknown) {
          // A QEMU that answers QMP is not ended for what failed after (its record not written to a full
          // state dir): feosd does not start, and the next start takes it over.
          if (attached) {
            rt.vmm?.close();
            throw new Error(`microVM ${id}: its QEMU (pid ${record.pid}) answers but was not taken over: ${errorMessage(err)}; it runs on for the next start of feosd`);
          }
          this.#opts.log.warn({ id, pid: record.pid, err: errorMessage(err) }, 'microVM: QMP unreachable; ending it');
          killPid(record.pid);
        }
      }
      // A feosd killed in a suspend after QEMU wrote its whole snapshot and was ended, before the record
      // said SUSPENDED (the snapshot's sync and punching take seconds): the snapshot is the microVM's.
      if (record.bootId === boot && (await this.#wholeSnapshotOf(rt))) {
        const pid = record.pid;
        try {
          await this.#finishSnapshot(rt);
          await this.#setState(rt, MicroVmState.SUSPENDED, 'suspended (its QEMU had written its whole snapshot and ended when feosd was killed)');
          this.#opts.log.warn({ id, pid }, 'taken over: QEMU ended after writing its whole snapshot; the microVM is SUSPENDED');
          continue;
        } catch (err: unknown) {
          this.#opts.log.error({ id, err: errorMessage(err) }, 'microVM: its whole snapshot could not be kept');
        }
      }
      await this.#setState(rt, MicroVmState.CRASHED, 'QEMU ended while feosd was away');
    }
  }

  /**
   * A microVM whose record is not RUNNING but names a QEMU (pid and start time, kept by #spawn before QMP
   * answers): a feosd was killed between the launch of a boot's or a resume's QEMU and its first answer. Its
   * vCPUs never ran past what the record says (a resume's `cont` comes after the record is RUNNING), so that
   * QEMU is ended, and waited for (it holds the disk's write lock), and the microVM stays as recorded: a
   * SUSPENDED one with its snapshot, for ResumePod. Before, it ran on unseen, and the next resume's QEMU
   * failed on the disk's lock ("Failed to get \"write\" lock"), which discarded the snapshot.
   */
  async #endUnanswered(rt: Runtime, boot: string): Promise<void> {
    const { id, pid, pidStartTicks: ticks } = rt.record;
    if (rt.record.bootId === boot && isSameProcess(pid, ticks)) {
      this.#opts.log.warn({ id, pid, state: MicroVmState[rt.record.state] }, 'taken over: a QEMU started before feosd was killed never answered it; ending it (the microVM stays as recorded)');
      killPid(pid);
      const deadline = performance.now() + 10_000;
      while (isSameProcess(pid, ticks) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      if (isSameProcess(pid, ticks)) {
        // Kept in the record: the next start ends it again.
        this.#opts.log.error({ id, pid }, 'taken over: that QEMU did not end within 10 s of SIGKILL; a resume or start of the microVM fails while it holds the disk');
        return;
      }
    }
    rt.record.pid = 0;
    rt.record.pidStartTicks = 0n;
    await this.#write(rt);
  }

  /**
   * Whether `snapshot/vmstate` is the whole snapshot of the QEMU the record names: `snapshot/whole.json`
   * (written by {@link #quitKeepingSnapshot} before it ends QEMU) names that process, and the stream is there.
   */
  async #wholeSnapshotOf(rt: Runtime): Promise<boolean> {
    const p = vmPaths(this.dir(rt.record.id));
    try {
      const whole = JSON.parse(await readFile(p.vmstateWhole, 'utf8')) as { pid?: unknown; pidStartTicks?: unknown };
      if (rt.record.pid <= 0 || whole.pid !== rt.record.pid || whole.pidStartTicks !== String(rt.record.pidStartTicks)) return false;
      return (await stat(p.vmstate)).size > 0;
    } catch {
      return false;
    }
  }

  /**
   * A QEMU taken over whose vCPUs do not run (a feosd killed during a suspend or a resume leaves it
   * so): a migration still writing is waited for; a whole snapshot (the migration completed, the
   * stream on disk: QEMU in `postmigrate`, or `paused` after loading one) makes the microVM SUSPENDED
   * (QEMU quits, the snapshot is kept); paused without one, its vCPUs run again (`cont`). Never RUNNING
   * while the vCPUs do not run.
   * @returns the microVM's state after it
   */
  async #settleTakenOver(rt: Runtime, loadTimeoutMs = 120_000): Promise<MicroVmState> {
    const vmm = rt.vmm!;
    const id = rt.record.id;
    const p = vmPaths(this.dir(id));
    // A snapshot still being written out or read in ends first (at the deadline a write is cancelled).
    const st = await vmm.settle(loadTimeoutMs);
    if (st.running) return MicroVmState.RUNNING;
    if (st.snapshot === 'whole' && existsSync(p.vmstate)) {
      await this.#quitKeepingSnapshot(rt);
      await this.#setState(rt, MicroVmState.SUSPENDED, `suspended (its snapshot was whole when feosd took it over, ${this.#vmm.name} ${st.detail})`);
      this.#opts.log.warn({ id, qemu: st.detail }, `taken over: ${this.#vmm.name} was paused with a whole snapshot; the microVM is SUSPENDED`);
      return MicroVmState.SUSPENDED;
    }
    // Paused with no whole snapshot: nothing was handed over; the vCPUs run on.
    await vmm.cont();
    await this.#removeSnapshot(rt);
    await this.#write(rt);
    this.#opts.log.warn({ id, qemu: st.detail, migration: st.snapshotDetail }, `taken over: ${this.#vmm.name} was paused without a whole snapshot; its vCPUs run again`);
    return MicroVmState.RUNNING;
  }

  /**
   * Ends a QEMU whose snapshot is whole on disk (`quit`, killed after 5 s), then syncs the snapshot,
   * punches its zero pages into holes and records its size (bytes). The state is the caller's to set.
   * `snapshot/whole.json` says first that the snapshot is this QEMU's whole one: a feosd killed after
   * QEMU's end and before the caller's record finds by it at its next start that the microVM is
   * SUSPENDED, not crashed ({@link init}).
   */
  async #quitKeepingSnapshot(rt: Runtime): Promise<void> {
    const p = vmPaths(this.dir(rt.record.id));
    // Best effort: without it (a full state dir) the suspend goes on as before, and only a kill in the
    // window below loses the snapshot.
    await writeFileAtomic(p.vmstateWhole, JSON.stringify({ pid: rt.record.pid, pidStartTicks: String(rt.record.pidStartTicks) })).catch((err: unknown) =>
      this.#opts.log.warn({ id: rt.record.id, err: errorMessage(err) }, 'snapshot: whole.json not written'),
    );
    rt.expectingExit = true;
    await rt.vmm?.quit();
    const ended = await Promise.race([rt.exited, new Promise((r) => setTimeout(() => r(undefined), 5000))]);
    if (ended === undefined) {
      killPid(rt.record.pid);
      await rt.exited;
    }
    rt.expectingExit = false;
    await this.#finishSnapshot(rt);
  }

  /** Syncs the snapshot of a QEMU that ended, punches its zero pages into holes and records its size (bytes). */
  async #finishSnapshot(rt: Runtime): Promise<void> {
    const p = vmPaths(this.dir(rt.record.id));
    const fh = await open(p.vmstate, 'r');
    await fh.sync();
    await fh.close();
    await run('fallocate', ['--dig-holes', p.vmstate]).catch((err: unknown) =>
      this.#opts.log.warn({ id: rt.record.id, err: errorMessage(err) }, 'snapshot: punching zeroes failed'),
    );
    rt.record.snapshotBytes = BigInt((await stat(p.vmstate)).size);
  }

  /**
   * Makes the microVM's directory and records it CREATED; finds it when it exists.
   * @throws MicroVmInvalidError when a socket path would exceed the 107 bytes of sun_path
   */
  async create(spec: MicroVmSpec): Promise<MicroVm> {
    const existing = this.#vms.get(spec.id);
    if (existing) return existing.record;
    const dir = this.dir(spec.id);
    const p = vmPaths(dir);
    if (Buffer.byteLength(p.console) > 107) throw new MicroVmInvalidError(spec.id, `state dir too long for unix sockets: ${p.console}`);
    await mkdir(p.snapshotDir, { recursive: true });
    const config: QemuConfig = {
      dir,
      guestDir: spec.guestDir,
      disk: spec.disk,
      vcpus: spec.vcpus,
      memoryBytes: spec.memoryBytes,
      accelerator: this.#opts.accelerator,
      tscKhz: hostTscKhz(),
      tap: spec.tap,
      volumes: spec.volumes,
      registryForwards: spec.registryForwards,
    };
    await writeFileAtomic(p.config, JSON.stringify({ ...config, memoryBytes: String(config.memoryBytes) }, null, 2));
    const now = timestampNow();
    const record = create(MicroVmSchema, {
      id: spec.id,
      recordVersion: MICROVM_RECORD_VERSION,
      state: MicroVmState.CREATED,
      guestVersion: spec.guestVersion,
      vcpus: spec.vcpus,
      memoryBytes: spec.memoryBytes,
      accelerator: this.#opts.accelerator,
      network: spec.tap !== undefined,
      macAddress: spec.tap?.mac ?? '',
      createdAt: now,
      stateChangedAt: now,
    });
    const rt: Runtime = { record, config, guest: new GuestClient(p.guest), expectingExit: false, guestShutdownSeen: false };
    this.#vms.set(spec.id, rt);
    await this.#write(rt);
    return record;
  }

  /**
   * Starts the VMM, which boots the microVM at once (CREATED, STOPPED or CRASHED → RUNNING).
   * @throws MicroVmNotFoundError; MicroVmStateError when it is suspended; VmmError when the VMM does not come up
   */
  async start(id: string): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING) return rt.record;
    if (rt.record.state === MicroVmState.SUSPENDED) throw new MicroVmStateError(id, `microVM ${id} is suspended: resume it`);
    await this.#spawn(rt);
    return rt.record;
  }

  /**
   * Waits for QEMU to end by itself (after the guest was asked to shut down).
   * @returns true when it ended within `timeoutMs`
   */
  async waitForExit(id: string, timeoutMs: number): Promise<boolean> {
    const rt = this.#must(id);
    if (rt.record.state !== MicroVmState.RUNNING || !rt.exited) return true;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((r) => {
      timer = setTimeout(() => r(false), timeoutMs);
    });
    const ok = await Promise.race([rt.exited.then(() => true as const), timeout]);
    clearTimeout(timer);
    return ok;
  }

  /** Ends QEMU (SIGKILL) and records the microVM STOPPED; a microVM that does not run is left as it is. */
  async kill(id: string, reason: string): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING) {
      rt.expectingExit = true;
      killPid(rt.record.pid);
      await rt.exited;
      rt.expectingExit = false;
      await this.#setState(rt, MicroVmState.STOPPED, reason);
    }
    return rt.record;
  }

  /**
   * Suspends: the VMM stops the vCPUs and writes the microVM's state into `snapshot/vmstate` (QEMU's
   * migration stream, followed by its QMP events), then ends; the zero pages are punched out of the file
   * (RUNNING → SUSPENDED).
   * @param snapshotTimeoutMs the snapshot's own timeout (120 s + 4 s/GiB)
   * @throws MicroVmBusyError when the snapshot is not written in time (the write is cancelled and the
   *   microVM runs on: nothing changed); VmmError when the write fails (the microVM runs on);
   *   MicroVmStateError when it does not run; MicroVmNotFoundError
   */
  async suspend(id: string, snapshotTimeoutMs: number): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.SUSPENDED) return rt.record;
    if (rt.record.state !== MicroVmState.RUNNING || !rt.vmm) throw new MicroVmStateError(id, `microVM ${id} does not run`);
    const p = vmPaths(this.dir(id));
    const vmm = rt.vmm;
    rt.guest.close();
    await mkdir(p.snapshotDir, { recursive: true });
    await this.#removeSnapshot(rt);
    await vmm.saveSnapshot(p.vmstate, snapshotTimeoutMs);
    await this.#quitKeepingSnapshot(rt);
    await this.#setState(rt, MicroVmState.SUSPENDED, 'suspended');
    return rt.record;
  }

  /**
   * Resumes: starts the VMM loading `snapshot/vmstate` (paused), waits until it is read in (QMP's
   * MIGRATION events), runs the vCPUs, removes the snapshot (SUSPENDED → RUNNING). A snapshot that does
   * not load leaves the microVM SUSPENDED with it.
   * @throws MicroVmStateError when it is not suspended; VmmError when the load fails; MicroVmNotFoundError
   */
  async resume(id: string, loadTimeoutMs = 120_000): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING) return rt.record;
    if (rt.record.state !== MicroVmState.SUSPENDED) throw new MicroVmStateError(id, `microVM ${id} is not suspended`);
    const p = vmPaths(this.dir(id));
    // Until the vCPUs run, an end of QEMU (such as on a stream it cannot load) is the resume's failure,
    // not a crash: the microVM goes back to SUSPENDED with its snapshot.
    rt.expectingExit = true;
    try {
      await this.#spawn(rt, p.vmstate);
      const vmm = rt.vmm!;
      await vmm.waitLoaded(loadTimeoutMs);
      await vmm.cont();
    } catch (err: unknown) {
      // (#spawn recorded it RUNNING once QMP answered.)
      if ((rt.record.state as MicroVmState) === MicroVmState.RUNNING) await this.#backToSuspended(rt, errorMessage(err));
      rt.expectingExit = false;
      if (err instanceof MicroVmError) throw err;
      const log = await readFile(p.qemuLog, 'utf8').catch(() => '');
      throw new VmmError(id, `resume: ${errorMessage(err)}; qemu.log: ${log.trim().split('\n').slice(-2).join(' | ')}`, { cause: err });
    }
    rt.expectingExit = false;
    await this.#removeSnapshot(rt);
    await this.#write(rt);
    return rt.record;
  }

  /**
   * Ends a QEMU whose snapshot did not load, before its vCPUs ran: the microVM is SUSPENDED again with
   * its snapshot, which nothing ran past.
   */
  async #backToSuspended(rt: Runtime, reason: string): Promise<void> {
    rt.expectingExit = true;
    killPid(rt.record.pid);
    await rt.exited;
    rt.expectingExit = false;
    await this.#setState(rt, MicroVmState.SUSPENDED, `resume failed: ${reason}`);
  }

  /**
   * Gives a microVM that does not run (CREATED, STOPPED or CRASHED) a snapshot written elsewhere, as a
   * restore from a checkpoint brings it: the file is moved (renamed: the same file system) into
   * `snapshot/vmstate`, and the microVM is SUSPENDED, to be resumed.
   * @throws MicroVmStateError when it runs or is suspended; MicroVmNotFoundError
   */
  async adoptSnapshot(id: string, vmstate: string): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING || rt.record.state === MicroVmState.SUSPENDED) {
      throw new MicroVmStateError(id, `microVM ${id} is ${MicroVmState[rt.record.state]}: only one that does not run takes a snapshot`);
    }
    const p = vmPaths(this.dir(id));
    await mkdir(p.snapshotDir, { recursive: true });
    await rm(p.vmstateWhole, { force: true });
    await rename(vmstate, p.vmstate);
    rt.record.snapshotBytes = BigInt((await stat(p.vmstate)).size);
    await this.#setState(rt, MicroVmState.SUSPENDED, 'restored from a checkpoint');
    return rt.record;
  }

  /** Discards a suspended microVM's snapshot: SUSPENDED → STOPPED. */
  async discardSnapshot(id: string): Promise<void> {
    const rt = this.#must(id);
    if (rt.record.state !== MicroVmState.SUSPENDED) return;
    await this.#removeSnapshot(rt);
    await this.#setState(rt, MicroVmState.STOPPED, 'its snapshot was discarded');
  }

  /** Ends QEMU if it runs and removes the microVM's directory and record. NotFound counts as done. */
  async delete(id: string): Promise<void> {
    const rt = this.#vms.get(id);
    if (rt) {
      await this.kill(id, 'deleted');
      rt.vmm?.close();
      rt.guest.close();
      this.#vms.delete(id);
    }
    if (this.#opts.cgroup) await removeCgroup(this.#opts.cgroup, id);
    await rm(this.dir(id), { recursive: true, force: true });
  }

  /** Lets go of every VMM and guest connection (feosd's exit); the VMM processes run on. */
  closeAll(): void {
    for (const rt of this.#vms.values()) {
      rt.vmm?.close();
      rt.guest.close();
      rt.child?.unref();
    }
  }

  /** Removes the snapshot and what said it was whole (its size in the record 0; the caller writes the record). */
  async #removeSnapshot(rt: Runtime): Promise<void> {
    const p = vmPaths(this.dir(rt.record.id));
    await rm(p.vmstateWhole, { force: true });
    await rm(p.vmstate, { force: true });
    rt.record.snapshotBytes = 0n;
  }

  /** @throws MicroVmNotFoundError */
  #must(id: string): Runtime {
    const rt = this.#vms.get(id);
    if (!rt) throw new MicroVmNotFoundError(id);
    return rt;
  }

  async #write(rt: Runtime): Promise<void> {
    await writeFileAtomic(vmPaths(this.dir(rt.record.id)).record, toBinary(MicroVmSchema, rt.record));
  }

  async #setState(rt: Runtime, state: MicroVmState, reason: string): Promise<void> {
    rt.record.state = state;
    rt.record.reason = reason;
    rt.record.stateChangedAt = timestampNow();
    if (state !== MicroVmState.RUNNING) {
      rt.record.pid = 0;
      rt.record.pidStartTicks = 0n;
    }
    await this.#write(rt);
  }

  async #spawn(rt: Runtime, incoming?: string): Promise<void> {
    if (!rt.config) throw new VmmError(rt.record.id, `microVM ${rt.record.id}: config.json missing`);
    const p = vmPaths(this.dir(rt.record.id));
    for (const s of [p.qmp, p.guest, p.console]) await rm(s, { force: true });
    const logFd = openSync(p.qemuLog, 'a');
    let child: ChildProcess;
    try {
      child = await this.#vmm.launch(rt.record.id, rt.config, logFd, incoming);
    } finally {
      closeSync(logFd);
    }
    child.unref();
    const pid = child.pid!;
    rt.child = child;
    rt.guestShutdownSeen = false;
    rt.guest.close();
    rt.guest = new GuestClient(p.guest);
    rt.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    void rt.exited.then(({ code, signal }) => this.#onExit(rt, pid, code === 0 ? undefined : `QEMU exited with ${signal ?? `code ${code}`}`));
    rt.record.pid = pid;
    rt.record.pidStartTicks = pidStartTicks(pid) ?? 0n;
    rt.record.bootId = bootId();
    // Kept before QMP answers (seconds under TCG and load): a feosd killed until then leaves a QEMU that the
    // record names, which the next start ends (#endUnanswered) instead of starting a second one on the disk.
    try {
      await this.#write(rt);
    } catch (err: unknown) {
      killPid(pid);
      rt.record.pid = 0;
      rt.record.pidStartTicks = 0n;
      throw new VmmError(rt.record.id, `microVM ${rt.record.id}: its record cannot be written, so ${this.#vmm.name} (pid ${pid}) was ended: ${errorMessage(err)}`, { cause: err });
    }
    if (this.#opts.cgroup) {
      await placeInCgroup(this.#opts.cgroup, rt.record.id, pid, rt.record.vcpus).catch((err: unknown) =>
        this.#opts.log.warn({ id: rt.record.id, err: errorMessage(err) }, 'cgroup: not placed'),
      );
    }
    // The VMM creates its sockets as it starts; wait for its control socket with a deadline.
    const deadline = performance.now() + 10_000;
    for (;;) {
      try {
        await this.#attachVmm(rt);
        break;
      } catch (err: unknown) {
        if (child.exitCode !== null || child.signalCode !== null || performance.now() > deadline) {
          killPid(pid);
          rt.record.pid = 0;
          rt.record.pidStartTicks = 0n;
          await this.#write(rt).catch(() => {});
          const log = await readFile(p.qemuLog, 'utf8').catch(() => '');
          throw new VmmError(rt.record.id, `${this.#vmm.name} did not come up: ${errorMessage(err)}; qemu.log: ${log.trim().split('\n').slice(-3).join(' | ')}`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    await this.#setState(rt, MicroVmState.RUNNING, incoming ? 'resumed' : 'booted');
  }

  /** Connects to the microVM's VMM (replacing a connection before) and follows what it tells. */
  async #attachVmm(rt: Runtime): Promise<void> {
    const session = await this.#vmm.connect(this.dir(rt.record.id), 2000);
    rt.vmm?.close();
    rt.vmm = session;
    session.on('guest-shutdown', () => {
      rt.guestShutdownSeen = true;
    });
    session.on('io-error', (reason, data) => {
      if (rt.ioError) return;
      rt.ioError = reason;
      this.#opts.log.error({ id: rt.record.id, event: data }, `microVM paused: ${reason}`);
    });
    session.on('resumed', () => {
      rt.ioError = undefined;
    });
  }

  /** A process that is not our child: its end shows as QMP's close, then its pid gone. */
  #watchAdopted(rt: Runtime): void {
    const pid = rt.record.pid;
    const start = rt.record.pidStartTicks;
    rt.exited = new Promise((resolve) => {
      const check = () => {
        if (!isSameProcess(pid, start)) {
          resolve({ code: null, signal: null });
          return;
        }
        setTimeout(check, 200);
      };
      rt.vmm!.once('close', check);
    });
    void rt.exited.then(() =>
      this.#onExit(rt, pid, rt.guestShutdownSeen ? undefined : 'QEMU ended without the guest shutting down'),
    );
  }

  async #onExit(rt: Runtime, pid: number, crash: string | undefined): Promise<void> {
    rt.vmm?.close();
    rt.vmm = undefined;
    rt.guest.close();
    if (rt.expectingExit || rt.record.pid !== pid || rt.record.state !== MicroVmState.RUNNING) return;
    if (!this.#vms.has(rt.record.id)) return;
    const state = crash && !rt.guestShutdownSeen ? MicroVmState.CRASHED : MicroVmState.STOPPED;
    const reason = state === MicroVmState.CRASHED ? crash! : 'the guest shut down';
    await this.#setState(rt, state, reason).catch((err: unknown) =>
      this.#opts.log.error({ id: rt.record.id, err: errorMessage(err) }, 'microVM record: write failed'),
    );
    this.emit('exit', { id: rt.record.id, pid, state, reason });
  }
}
