/**
 * The VMM interface (seed 000, "A pod's microVM"): what the microVM layer (./service.ts) asks of the
 * program that runs a microVM. The layer keeps the records, the states and their changes, the snapshot
 * files and the takeover of VMM processes that outlived feosd; a VMM starts its processes and answers on
 * their control sockets. QEMU (./qemu.ts, over QMP) is the one implementation; another (Firecracker,
 * say) implements these two interfaces, where it can be tested.
 */
import type { ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import type { QemuConfig } from './qemu-args.ts';

/** A microVM's machine as the VMM is given it (its `config.json`): CPUs, memory, kernel, disks, TAP. */
export type VmConfig = QemuConfig;

/** What a VMM says of a microVM's vCPUs and snapshot. */
export interface VmmState {
  /** Whether the vCPUs run. */
  running: boolean;
  /**
   * The snapshot: `writing` it out, `reading` it in, `whole` (written or read in whole, and the vCPUs
   * have not run since), `failed` (or cancelled), or `none`.
   */
  snapshot: 'none' | 'writing' | 'reading' | 'whole' | 'failed';
  /** The VMM's own word for its state (QEMU's run state, such as `postmigrate`), for logs and reasons. */
  detail: string;
  /** The VMM's own word for its snapshot (QEMU's migration status, or `none`), for logs. */
  snapshotDetail: string;
}

/** What a VMM session tells as it happens. */
export interface VmmSessionEvents {
  /** The guest powered itself off (its QEMU ends next). */
  'guest-shutdown': [];
  /** The vCPUs were stopped on a disk's failed access: why in words (a full disk said so), and the VMM's data. */
  'io-error': [reason: string, data: Record<string, unknown>];
  /** The vCPUs run again. */
  resumed: [];
  /** The control connection closed: the VMM ended, or `close()`. Once. */
  close: [];
}

/** The control connection of one running VMM process (QMP for QEMU). */
export interface VmmSession extends EventEmitter<VmmSessionEvents> {
  /** Whether the connection is closed. */
  readonly closed: boolean;
  /**
   * The vCPUs' and the snapshot's state.
   * @throws Error when the VMM does not answer (its connection closed)
   */
  state(): Promise<VmmState>;
  /**
   * Lets the vCPUs run (after a pause, a disk's error, or a loaded snapshot).
   * @throws Error when the VMM refuses or does not answer
   */
  cont(): Promise<void>;
  /** Asks the VMM process to end; the caller ends it itself when it does not. Never throws. */
  quit(): Promise<void>;
  /**
   * Stops the vCPUs and writes the microVM's whole state (memory and devices) into `path`, a file of the
   * microVM's directory; the VMM process stays, its vCPUs stopped, until `quit`.
   * @param timeoutMs how long the write may take
   * @throws MicroVmBusyError when it is not written within `timeoutMs` (the write is cancelled and the
   *   vCPUs run again: nothing changed); VmmError when the write fails (the vCPUs run again); Error when
   *   the VMM does not answer
   */
  saveSnapshot(path: string, timeoutMs: number): Promise<void>;
  /**
   * Waits until the snapshot the process was launched with is read in whole; its vCPUs do not run yet.
   * @throws VmmError when it is not read within `timeoutMs`, or the VMM says it failed to load; Error
   *   when the VMM ends first (a stream it cannot load)
   */
  waitLoaded(timeoutMs: number): Promise<void>;
  /**
   * For a VMM process taken over: waits until a snapshot being written or read ends; at the deadline a
   * write still going is cancelled.
   * @returns the state after
   */
  settle(timeoutMs: number): Promise<VmmState>;
  /** Closes the connection; the VMM process runs on. */
  close(): void;
}

/** A VMM: how the microVMs' processes start and how they are reached. */
export interface Vmm {
  /** Its name in reasons and logs: "QEMU". */
  readonly name: string;
  /**
   * Starts the VMM process of the microVM in `config.dir`, detached (it outlives feosd), its output
   * appended to `logFd`; with `incoming`, it loads that snapshot file instead of booting, its vCPUs not
   * running until `cont`.
   * @throws VmmError when the process cannot be started
   */
  launch(vmId: string, config: VmConfig, logFd: number, incoming?: string): Promise<ChildProcess>;
  /**
   * Connects to the control socket of the microVM whose directory is `dir` (a process just launched, or
   * one that outlived a feosd).
   * @throws Error when nothing answers within `timeoutMs` (the socket not there yet, or no VMM behind it)
   */
  connect(dir: string, timeoutMs: number): Promise<VmmSession>;
}
