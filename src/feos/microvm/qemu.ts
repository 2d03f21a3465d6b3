/**
 * QEMU as the microVM layer's VMM (./vmm.ts; seed 000, "A pod's microVM"): a process per microVM with
 * the arguments of ./qemu-args.ts, and its QMP socket (./qmp.ts) as the session.
 *
 * A snapshot is QEMU's migration stream into a file. The session follows QMP's events rather than
 * polling: `migrate-set-capabilities events` on makes QEMU 7.2 send MIGRATION {status} as the migration
 * goes (measured here with qemu-system-x86 7.2: a suspend sends STOP, then MIGRATION setup, active,
 * completed, with MIGRATION_PASS between; a failed write MIGRATION failed, `error-desc` in query-migrate;
 * migrate_cancel MIGRATION cancelling, cancelled; `cont` RESUME). An incoming stream (`-incoming exec:`)
 * starts with QEMU, before QMP answers: the capability set then still makes QEMU send MIGRATION active,
 * completed (or failed, and QEMU exits 1) for it, and query-status says whether it ended before.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { MicroVmBusyError, VmmError } from './errors.ts';
import { QmpClient, type QmpEvent } from './qmp.ts';
import { qemuArgs, vmPaths } from './qemu-args.ts';
import type { Vmm, VmConfig, VmmSession, VmmSessionEvents, VmmState } from './vmm.ts';

/** The migration statuses of a stream still being written (QEMU's MigrationStatus). */
const WRITING = ['setup', 'active', 'device', 'pre-switchover', 'cancelling'];
/** The migration statuses that end one. */
const ENDED = ['completed', 'failed', 'cancelled'];

/** QMP's BLOCK_IO_ERROR data in words: the operation, the drive, QEMU's reason, and a full disk said so. */
export function blockIoError(data: Record<string, unknown>): string {
  const drive = String(data.device || data['node-name'] || 'a disk');
  const full = data.nospace === true ? " (the node's disk is full)" : '';
  return `QEMU paused it on a failed ${String(data.operation ?? 'access')} of ${drive}: ${String(data.reason ?? 'I/O error')}${full}`;
}

/** QEMU (`qemu-system-x86_64` or the binary given) as a VMM. */
export class QemuVmm implements Vmm {
  readonly name = 'QEMU';
  readonly #binary: string;

  /** @param binary the QEMU binary (a name on PATH or a path) */
  constructor(binary: string) {
    this.#binary = binary;
  }

  async launch(vmId: string, config: VmConfig, logFd: number, incoming?: string): Promise<ChildProcess> {
    const child = spawn(this.#binary, qemuArgs(config, incoming), { detached: true, stdio: ['ignore', logFd, logFd] });
    const spawned = await new Promise<Error | undefined>((resolve) => {
      child.once('spawn', () => resolve(undefined));
      child.once('error', (err) => resolve(err));
    });
    if (spawned) throw new VmmError(vmId, `QEMU: spawn ${this.#binary}: ${spawned.message}`, { cause: spawned });
    return child;
  }

  async connect(dir: string, timeoutMs: number): Promise<VmmSession> {
    return new QmpSession(await QmpClient.connect(vmPaths(dir).qmp, timeoutMs), dir.split('/').at(-1) ?? '');
  }
}

/** The outcome of waiting for a migration's end. */
type MigrationEnd = 'completed' | 'failed' | 'cancelled' | 'timeout' | 'closed';

/** A QMP connection as a VMM session. */
class QmpSession extends EventEmitter<VmmSessionEvents> implements VmmSession {
  readonly #qmp: QmpClient;
  readonly #vmId: string;

  constructor(qmp: QmpClient, vmId: string) {
    super();
    this.#qmp = qmp;
    this.#vmId = vmId;
    qmp.on('event', (ev: QmpEvent) => {
      if (ev.event === 'SHUTDOWN' && ev.data?.guest === true) this.emit('guest-shutdown');
      // QEMU's default werror=enospc stops the vCPUs when a write to a disk's file finds the node's file
      // system full: the guest then answers nothing, and nothing else says why.
      if (ev.event === 'BLOCK_IO_ERROR' && ev.data?.action === 'stop') this.emit('io-error', blockIoError(ev.data), ev.data);
      if (ev.event === 'RESUME') this.emit('resumed');
    });
    qmp.once('close', () => this.emit('close'));
  }

  get closed(): boolean {
    return this.#qmp.closed;
  }

  async state(): Promise<VmmState> {
    const st = await this.#qmp.execute<{ status: string; running: boolean }>('query-status');
    const mig = (await this.#qmp.execute<{ status?: string }>('query-migrate')).status ?? '';
    const snapshot =
      st.status === 'inmigrate'
        ? 'reading'
        : st.status === 'finish-migrate' || WRITING.includes(mig)
          ? 'writing'
          : st.status === 'postmigrate' || mig === 'completed'
            ? 'whole'
            : mig === 'failed' || mig === 'cancelled'
              ? 'failed'
              : 'none';
    return { running: st.running, snapshot, detail: st.status, snapshotDetail: mig || 'none' };
  }

  async cont(): Promise<void> {
    await this.#qmp.execute('cont');
  }

  async quit(): Promise<void> {
    await this.#qmp.execute('quit').catch(() => {});
  }

  /** Turns MIGRATION events on; QEMU keeps the capability for the process's life. */
  async #migrationEvents(): Promise<void> {
    await this.#qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'events', state: true }] });
  }

  /**
   * The end of the migration under way, by its MIGRATION event, within `timeoutMs`; `cancel` stops
   * waiting. Listen before starting the migration: its events may come before the command's answer.
   */
  #migrationEnd(timeoutMs: number): { ended: Promise<MigrationEnd>; cancel: () => void } {
    let cancel = () => {};
    const ended = new Promise<MigrationEnd>((resolve) => {
      const done = (how: MigrationEnd) => {
        cancel();
        resolve(how);
      };
      const onEvent = (ev: QmpEvent) => {
        const status = String(ev.data?.status ?? '');
        if (ev.event === 'MIGRATION' && ENDED.includes(status)) done(status as MigrationEnd);
      };
      const onClose = () => done('closed');
      const timer = setTimeout(() => done('timeout'), timeoutMs);
      this.#qmp.on('event', onEvent);
      this.#qmp.once('close', onClose);
      if (this.#qmp.closed) queueMicrotask(onClose);
      cancel = () => {
        clearTimeout(timer);
        this.#qmp.off('event', onEvent);
        this.#qmp.off('close', onClose);
      };
    });
    return { ended, cancel };
  }

  async saveSnapshot(path: string, timeoutMs: number): Promise<void> {
    const qmp = this.#qmp;
    // Before the vCPUs stop: a refusal changes nothing.
    await this.#migrationEvents();
    await qmp.execute('stop');
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 8 * 1024 ** 3 });
    const end = this.#migrationEnd(timeoutMs);
    try {
      await qmp.execute('migrate', { uri: `exec:cat > '${path.replaceAll("'", "'\\''")}'` });
    } catch (err: unknown) {
      end.cancel();
      throw err;
    }
    const how = await end.ended;
    if (how === 'completed') return;
    if (how === 'failed' || how === 'cancelled') {
      const st = await qmp.execute<{ 'error-desc'?: string }>('query-migrate').catch(() => ({}) as { 'error-desc'?: string });
      await qmp.execute('cont').catch(() => {});
      throw new VmmError(this.#vmId, `snapshot: migration ${how}: ${st['error-desc'] ?? ''}`);
    }
    if (how === 'closed') throw new VmmError(this.#vmId, 'snapshot: QEMU ended while it wrote the snapshot');
    await qmp.execute('migrate_cancel').catch(() => {});
    await qmp.execute('cont').catch(() => {});
    throw new MicroVmBusyError(this.#vmId, `the snapshot was not written within ${Math.round(timeoutMs / 1000)} s; the microVM runs on`);
  }

  async waitLoaded(timeoutMs: number): Promise<void> {
    const qmp = this.#qmp;
    const deadline = performance.now() + timeoutMs;
    // Set while the stream may already be read: query-status says whether it ended before. A QEMU that
    // refuses the capability is asked again each second.
    await this.#migrationEvents().catch(() => {});
    for (;;) {
      // Listened to before the question: the stream's end may come between.
      const end = this.#migrationEnd(Math.max(0, Math.min(deadline - performance.now(), 1000)));
      let st: { status: string };
      try {
        st = await qmp.execute<{ status: string }>('query-status');
      } catch (err: unknown) {
        end.cancel();
        throw err;
      }
      if (st.status !== 'inmigrate') {
        end.cancel();
        break;
      }
      if (performance.now() > deadline) {
        end.cancel();
        throw new VmmError(this.#vmId, `resume: the snapshot did not load within ${timeoutMs} ms`);
      }
      // QEMU exits after a stream it cannot load: the caller adds qemu.log's words. Completed (or a
      // second without an event, or QEMU's end): asked again.
      if ((await end.ended) === 'failed') throw new Error('QEMU did not load the snapshot (MIGRATION failed)');
    }
    const mig = await qmp.execute<{ status?: string }>('query-migrate');
    if (mig.status === 'failed') throw new VmmError(this.#vmId, 'resume: the snapshot failed to load (see qemu.log)');
  }

  async settle(timeoutMs: number): Promise<VmmState> {
    const deadline = performance.now() + timeoutMs;
    // Refused while a stream is written out (QEMU keeps what it had); the re-check below covers that.
    await this.#migrationEvents().catch(() => {});
    for (;;) {
      const s = await this.state();
      if (s.running || (s.snapshot !== 'writing' && s.snapshot !== 'reading')) return s;
      const left = deadline - performance.now();
      if (left <= 0) {
        await this.#qmp.execute('migrate_cancel').catch(() => {});
        return this.state();
      }
      // A QEMU that a feosd before this one started may not send MIGRATION events (its suspend turned
      // them on; an incoming stream's start did not): the state is asked again each second.
      const end = this.#migrationEnd(Math.min(left, 1000));
      await end.ended;
    }
  }

  close(): void {
    this.#qmp.close();
  }
}
