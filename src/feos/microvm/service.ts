/**
 * The microVM layer (seed 000, "A pod's microVM", "Lifecycle"), on QEMU: one directory per microVM
 * under `<state-dir>/vms/<id>/` with its record `microvm.pb` (a feos.microvm.v1.MicroVm), its config,
 * sockets, logs and `snapshot/`. QEMU processes outlive feosd: `init` takes the running ones over (their
 * pid and start time, their QMP socket) and finds those that ended CRASHED (or STOPPED when QEMU said
 * the guest shut down). Each call records its change once the change is done; the pod layer waits.
 *
 * The pod layer serialises calls per microVM (the pod's lock); this layer does not lock.
 */
import { spawn, type ChildProcess } from 'node:child_process';
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
import { FeosError, errorMessage, vmBusy } from '../api/index.ts';
import { GuestClient } from '../guest/index.ts';
import { QmpClient, type QmpEvent } from './qmp.ts';
import { hostTscKhz, qemuArgs, vmPaths, type QemuConfig } from './qemu-args.ts';
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
  /** The QEMU binary. @default "qemu-system-x86_64" */
  qemu?: string;
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
  qmp?: QmpClient;
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
  readonly #opts: Required<Omit<MicroVmServiceOptions, 'cgroup'>> & { cgroup?: string };
  readonly #vms = new Map<string, Runtime>();

  constructor(opts: MicroVmServiceOptions) {
    super();
    this.#opts = { qemu: 'qemu-system-x86_64', ...opts };
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
   * @throws FeosError NOT_FOUND without the microVM, FAILED_PRECONDITION when it is not paused on an error
   */
  async continueAfterError(id: string): Promise<void> {
    const rt = this.#vms.get(id);
    if (!rt) throw new FeosError('NOT_FOUND', `microVM ${id} not found`);
    if (!rt.ioError || !rt.qmp) throw new FeosError('FAILED_PRECONDITION', `microVM ${id} is not paused on a disk's error`);
    const why = rt.ioError;
    rt.ioError = undefined;
    await rt.qmp.execute('cont');
    this.#opts.log.info({ id, after: why }, 'microVM continued after its disk error');
  }

  /** The guest client of a microVM (one per microVM, reconnecting). */
  guest(id: string): GuestClient {
    const rt = this.#vms.get(id);
    if (!rt) throw new FeosError('NOT_FOUND', `microVM ${id} not found`);
    return rt.guest;
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
      if (record.state !== MicroVmState.RUNNING) continue;
      if (record.bootId === boot && isSameProcess(record.pid, record.pidStartTicks)) {
        let attached = false;
        try {
          await this.#attachQmp(rt);
          attached = true;
          this.#watchAdopted(rt);
          const state = await this.#settleTakenOver(rt);
          this.#opts.log.info({ id, pid: record.pid, state: MicroVmState[state] }, 'microVM taken over');
          continue;
        } catch (err: unknown) {
          // A QEMU that answers QMP is not ended for what failed after (its record not written to a full
          // state dir): feosd does not start, and the next start takes it over.
          if (attached) {
            rt.qmp?.close();
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
    const qmp = rt.qmp!;
    const id = rt.record.id;
    const p = vmPaths(this.dir(id));
    const deadline = performance.now() + loadTimeoutMs;
    let st = await qmp.execute<{ status: string; running: boolean }>('query-status');
    let mig = await qmp.execute<{ status?: string }>('query-migrate');
    // A migration (out to the snapshot, or in from it) still running ends first.
    while (!st.running && (st.status === 'inmigrate' || st.status === 'finish-migrate' || ['setup', 'active', 'device', 'pre-switchover'].includes(mig.status ?? ''))) {
      if (performance.now() > deadline) {
        await qmp.execute('migrate_cancel').catch(() => {});
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
      st = await qmp.execute('query-status');
      mig = await qmp.execute('query-migrate');
    }
    if (st.running) return MicroVmState.RUNNING;
    if ((st.status === 'postmigrate' || mig.status === 'completed') && existsSync(p.vmstate)) {
      await this.#quitKeepingSnapshot(rt);
      await this.#setState(rt, MicroVmState.SUSPENDED, `suspended (its snapshot was whole when feosd took it over, QEMU ${st.status})`);
      this.#opts.log.warn({ id, qemu: st.status }, 'taken over: QEMU was paused with a whole snapshot; the microVM is SUSPENDED');
      return MicroVmState.SUSPENDED;
    }
    // Paused with no whole snapshot: nothing was handed over; the vCPUs run on.
    await qmp.execute('cont');
    await this.#removeSnapshot(rt);
    await this.#write(rt);
    this.#opts.log.warn({ id, qemu: st.status, migration: mig.status ?? 'none' }, 'taken over: QEMU was paused without a whole snapshot; its vCPUs run again');
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
    await rt.qmp?.execute('quit').catch(() => {});
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
   * @throws FeosError INVALID_ARGUMENT when a socket path would exceed the 107 bytes of sun_path
   */
  async create(spec: MicroVmSpec): Promise<MicroVm> {
    const existing = this.#vms.get(spec.id);
    if (existing) return existing.record;
    const dir = this.dir(spec.id);
    const p = vmPaths(dir);
    if (Buffer.byteLength(p.console) > 107) throw new FeosError('INVALID_ARGUMENT', `state dir too long for unix sockets: ${p.console}`);
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
   * Starts QEMU, which boots the microVM at once (CREATED, STOPPED or CRASHED → RUNNING).
   * @throws FeosError FAILED_PRECONDITION when it runs or is suspended; INTERNAL when QEMU does not come up
   */
  async start(id: string): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING) return rt.record;
    if (rt.record.state === MicroVmState.SUSPENDED) throw new FeosError('FAILED_PRECONDITION', `microVM ${id} is suspended: resume it`);
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
   * Suspends: pauses the vCPUs, writes QEMU's migration stream into `snapshot/vmstate`, ends QEMU and
   * punches the zero pages out of the file (RUNNING → SUSPENDED).
   * @param snapshotTimeoutMs the snapshot's own timeout (120 s + 4 s/GiB)
   * @throws FeosError UNAVAILABLE busy when the snapshot is not written in time (the migration is
   *   cancelled and the microVM runs on: nothing changed); FAILED_PRECONDITION when it does not run
   */
  async suspend(id: string, snapshotTimeoutMs: number): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.SUSPENDED) return rt.record;
    if (rt.record.state !== MicroVmState.RUNNING || !rt.qmp) throw new FeosError('FAILED_PRECONDITION', `microVM ${id} does not run`);
    const p = vmPaths(this.dir(id));
    const qmp = rt.qmp;
    rt.guest.close();
    await mkdir(p.snapshotDir, { recursive: true });
    await this.#removeSnapshot(rt);
    await qmp.execute('stop');
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 8 * 1024 ** 3 });
    await qmp.execute('migrate', { uri: `exec:cat > '${p.vmstate.replaceAll("'", "'\\''")}'` });
    const deadline = performance.now() + snapshotTimeoutMs;
    for (;;) {
      const st = await qmp.execute<{ status?: string; 'error-desc'?: string }>('query-migrate');
      if (st.status === 'completed') break;
      if (st.status === 'failed' || st.status === 'cancelled') {
        await qmp.execute('cont').catch(() => {});
        throw new FeosError('INTERNAL', `snapshot: migration ${st.status}: ${st['error-desc'] ?? ''}`);
      }
      if (performance.now() > deadline) {
        await qmp.execute('migrate_cancel').catch(() => {});
        await qmp.execute('cont').catch(() => {});
        throw vmBusy(`the snapshot was not written within ${Math.round(snapshotTimeoutMs / 1000)} s; the microVM runs on`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    await this.#quitKeepingSnapshot(rt);
    await this.#setState(rt, MicroVmState.SUSPENDED, 'suspended');
    return rt.record;
  }

  /**
   * Resumes: starts QEMU loading `snapshot/vmstate` (paused), runs the vCPUs, removes the snapshot
   * (SUSPENDED → RUNNING). A snapshot that does not load leaves the microVM SUSPENDED with it.
   * @throws FeosError FAILED_PRECONDITION when it is not suspended; INTERNAL when the load fails
   */
  async resume(id: string, loadTimeoutMs = 120_000): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING) return rt.record;
    if (rt.record.state !== MicroVmState.SUSPENDED) throw new FeosError('FAILED_PRECONDITION', `microVM ${id} is not suspended`);
    const p = vmPaths(this.dir(id));
    // Until the vCPUs run, an end of QEMU (such as on a stream it cannot load) is the resume's failure,
    // not a crash: the microVM goes back to SUSPENDED with its snapshot.
    rt.expectingExit = true;
    try {
      await this.#spawn(rt, p.vmstate);
      const qmp = rt.qmp!;
      const deadline = performance.now() + loadTimeoutMs;
      for (;;) {
        const st = await qmp.execute<{ status: string }>('query-status');
        if (st.status !== 'inmigrate') break;
        if (performance.now() > deadline) throw new FeosError('INTERNAL', `resume: the snapshot did not load within ${loadTimeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 25));
      }
      const mig = await qmp.execute<{ status?: string }>('query-migrate');
      if (mig.status === 'failed') throw new FeosError('INTERNAL', 'resume: the snapshot failed to load (see qemu.log)');
      await qmp.execute('cont');
    } catch (err: unknown) {
      // (#spawn recorded it RUNNING once QMP answered.)
      if ((rt.record.state as MicroVmState) === MicroVmState.RUNNING) await this.#backToSuspended(rt, errorMessage(err));
      rt.expectingExit = false;
      if (err instanceof FeosError) throw err;
      const log = await readFile(p.qemuLog, 'utf8').catch(() => '');
      throw new FeosError('INTERNAL', `resume: ${errorMessage(err)}; qemu.log: ${log.trim().split('\n').slice(-2).join(' | ')}`, { cause: err });
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
   * @throws FeosError FAILED_PRECONDITION when it runs or is suspended
   */
  async adoptSnapshot(id: string, vmstate: string): Promise<MicroVm> {
    const rt = this.#must(id);
    if (rt.record.state === MicroVmState.RUNNING || rt.record.state === MicroVmState.SUSPENDED) {
      throw new FeosError('FAILED_PRECONDITION', `microVM ${id} is ${MicroVmState[rt.record.state]}: only one that does not run takes a snapshot`);
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
      rt.qmp?.close();
      rt.guest.close();
      this.#vms.delete(id);
    }
    if (this.#opts.cgroup) await removeCgroup(this.#opts.cgroup, id);
    await rm(this.dir(id), { recursive: true, force: true });
  }

  /** Lets go of every QMP and guest connection (feosd's exit); QEMU processes run on. */
  closeAll(): void {
    for (const rt of this.#vms.values()) {
      rt.qmp?.close();
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

  #must(id: string): Runtime {
    const rt = this.#vms.get(id);
    if (!rt) throw new FeosError('NOT_FOUND', `microVM ${id} not found`);
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
    if (!rt.config) throw new FeosError('INTERNAL', `microVM ${rt.record.id}: config.json missing`);
    const p = vmPaths(this.dir(rt.record.id));
    for (const s of [p.qmp, p.guest, p.console]) await rm(s, { force: true });
    const logFd = openSync(p.qemuLog, 'a');
    let child: ChildProcess;
    try {
      child = spawn(this.#opts.qemu, qemuArgs(rt.config, incoming), { detached: true, stdio: ['ignore', logFd, logFd] });
    } finally {
      closeSync(logFd);
    }
    const spawned = await new Promise<Error | undefined>((resolve) => {
      child.once('spawn', () => resolve(undefined));
      child.once('error', (err) => resolve(err));
    });
    if (spawned) throw new FeosError('INTERNAL', `QEMU: spawn ${this.#opts.qemu}: ${spawned.message}`, { cause: spawned });
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
    if (this.#opts.cgroup) {
      await placeInCgroup(this.#opts.cgroup, rt.record.id, pid, rt.record.vcpus).catch((err: unknown) =>
        this.#opts.log.warn({ id: rt.record.id, err: errorMessage(err) }, 'cgroup: not placed'),
      );
    }
    // QEMU creates its sockets as it starts; wait for QMP with a deadline.
    const deadline = performance.now() + 10_000;
    for (;;) {
      try {
        await this.#attachQmp(rt);
        break;
      } catch (err: unknown) {
        if (child.exitCode !== null || child.signalCode !== null || performance.now() > deadline) {
          killPid(pid);
          const log = await readFile(p.qemuLog, 'utf8').catch(() => '');
          throw new FeosError('INTERNAL', `QEMU did not come up: ${errorMessage(err)}; qemu.log: ${log.trim().split('\n').slice(-3).join(' | ')}`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    await this.#setState(rt, MicroVmState.RUNNING, incoming ? 'resumed' : 'booted');
  }

  async #attachQmp(rt: Runtime): Promise<void> {
    const qmp = await QmpClient.connect(vmPaths(this.dir(rt.record.id)).qmp, 2000);
    rt.qmp?.close();
    rt.qmp = qmp;
    qmp.on('event', (ev: QmpEvent) => {
      if (ev.event === 'SHUTDOWN' && ev.data?.guest === true) rt.guestShutdownSeen = true;
      // QEMU's default werror=enospc stops the vCPUs when a write to a disk's file finds the node's file
      // system full: the guest then answers nothing, and nothing else says why.
      if (ev.event === 'BLOCK_IO_ERROR' && ev.data?.action === 'stop' && !rt.ioError) {
        rt.ioError = blockIoError(ev.data);
        this.#opts.log.error({ id: rt.record.id, event: ev.data }, `microVM paused: ${rt.ioError}`);
      }
      if (ev.event === 'RESUME') rt.ioError = undefined;
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
      rt.qmp!.once('close', check);
    });
    void rt.exited.then(() =>
      this.#onExit(rt, pid, rt.guestShutdownSeen ? undefined : 'QEMU ended without the guest shutting down'),
    );
  }

  async #onExit(rt: Runtime, pid: number, crash: string | undefined): Promise<void> {
    rt.qmp?.close();
    rt.qmp = undefined;
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

/** QMP's BLOCK_IO_ERROR data in words: the operation, the drive, QEMU's reason, and a full disk said so. */
export function blockIoError(data: Record<string, unknown>): string {
  const drive = String(data.device || data['node-name'] || 'a disk');
  const full = data.nospace === true ? " (the node's disk is full)" : '';
  return `QEMU paused it on a failed ${String(data.operation ?? 'access')} of ${drive}: ${String(data.reason ?? 'I/O error')}${full}`;
}
