/**
 * The `k32` imports (pod-abi.md, "Imports the node provides"), as they run inside a pod's worker
 * thread: the pod clock, logs, env and assets, channels and `k32_fs` in the pod's own directory.
 * A host function that is handed a range outside the module's memory traps (it throws, and the
 * call that led to it ends the container with reason Trap).
 */
import { closeSync, constants as fsConstants, lstatSync, mkdirSync, openSync, readdirSync, readSync, realpathSync, writeSync } from 'node:fs';
import { dirname, join, posix, sep } from 'node:path';
import { MAX_CHANNEL_NAME, MAX_CHANNEL_PAYLOAD } from './abi.ts';
import type { OpenFile } from './protocol.ts';
import type { WasmMemory } from './wasm-api.ts';

const EACCES = 13;
const EBADF = 9;
const EINVAL = 22;
const ENOSYS = 38;
const EMFILE = 24;
const ENOSPC = 28;
/** Most descriptors a pod may hold open at once. */
const MAX_OPEN_FILES = 64;

const utf8 = new TextDecoder('utf-8');
const utf8Enc = new TextEncoder();

/** A trap raised by a host function (the message says which and why). */
export class HostTrap extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HostTrap';
  }
}

/**
 * The pod's clock: ms since the pod first started, carried over a restore, never backward
 * (pod-abi.md, `k32_time_ms`).
 */
export class PodClock {
  #base: number;
  #t0: number;
  #last = 0;
  constructor(baseMs = 0) {
    this.#base = baseMs;
    this.#t0 = performance.now();
    this.#last = baseMs;
  }
  /** Restarts counting from `ms` (a restore). */
  reset(ms: number): void {
    this.#base = ms;
    this.#t0 = performance.now();
    this.#last = ms;
  }
  /** The current pod time in whole ms. */
  now(): number {
    const t = Math.floor(this.#base + performance.now() - this.#t0);
    if (t > this.#last) this.#last = t;
    return this.#last;
  }
}

/** What the host functions reach. */
export interface HostContext {
  env: Record<string, string>;
  assets: Record<string, Uint8Array>;
  fsDir?: string;
  /** Most bytes the pod's files may hold together (`PodStartOptions.fsLimitBytes`); unlimited when absent. */
  fsLimitBytes?: number;
  clock: PodClock;
  /** The module's memory once instantiated (undefined for a module without one). */
  memory: () => WasmMemory | undefined;
  log: (line: string) => void;
  send: (topic: string, payload: Uint8Array) => void;
}

/** State the imports keep, part of which a snapshot carries (channels). */
export class HostState {
  /** Channel handles by topic, and topics by handle. */
  readonly channelsByName = new Map<string, number>();
  readonly channelsByHandle = new Map<number, string>();
  /** Open descriptors: pod fd → host fd and the path the pod gave. */
  readonly files = new Map<number, { hostFd: number; path: string }>();

  openFiles(): OpenFile[] {
    return [...this.files].map(([fd, f]) => ({ fd, path: f.path }));
  }

  /** Reopens a channel under a given handle (a restore). */
  reopenChannel(handle: number, name: string): void {
    this.channelsByName.set(name, handle);
    this.channelsByHandle.set(handle, name);
  }

  /** What {@link dispose} undoes besides the descriptors (the imports' timers). */
  readonly #disposers: Array<() => void> = [];

  /**
   * Gives the pod its `k32_fs` directory after the imports were made (a prepared restore learns it at
   * its commit, before any of the pod's calls); set by {@link makeImports}.
   */
  bindFsDir: (dir: string) => void = () => {};

  /** Runs `f` when the pod ends here ({@link dispose}). */
  onDispose(f: () => void): void {
    this.#disposers.push(f);
  }

  /**
   * The pod has ended on its thread: closes every descriptor and stops the imports' timers, so that
   * nothing of it stays on a thread that goes on running other pods.
   */
  dispose(): void {
    this.closeAll();
    for (const f of this.#disposers.splice(0)) f();
  }

  /** Closes every descriptor (the container ends). */
  closeAll(): void {
    for (const f of this.files.values()) {
      try {
        closeSync(f.hostFd);
      } catch {
        // already gone
      }
    }
    this.files.clear();
  }
}

function bytesOf(ctx: HostContext, fn: string, ptr: number, len: number): Uint8Array {
  const mem = ctx.memory();
  if (!mem) throw new HostTrap(`${fn}: the module has no memory`);
  const p = ptr >>> 0;
  const n = len >>> 0;
  if (p + n > mem.buffer.byteLength) throw new HostTrap(`${fn}: range ${p}+${n} is outside the module's memory (${mem.buffer.byteLength} bytes)`);
  return new Uint8Array(mem.buffer, p, n);
}

function copyValue(ctx: HostContext, fn: string, value: Uint8Array | undefined, bufPtr: number, bufLen: number): number {
  if (value === undefined) return -1;
  const dest = bytesOf(ctx, fn, bufPtr, bufLen);
  dest.set(value.subarray(0, Math.min(value.length, dest.length)));
  return value.length;
}

/** Resolves a pod path inside `root`; undefined when it would escape (pod-abi.md: -EACCES). */
function resolveInside(root: string, path: string): string | undefined {
  if (path.length === 0 || path.includes('\0')) return undefined;
  // The pod's directory is its root: a leading "/" names it; ".." may not climb out of it.
  const rel = posix.normalize(path.replace(/^\/+/, ''));
  if (rel === '' || rel === '.' || rel === '..' || rel.startsWith('../')) return undefined;
  const full = join(root, rel);
  // Symbolic links must not lead out: the real parent directory must be inside the real root.
  let realRoot: string;
  let realParent: string;
  try {
    realRoot = realpathSync(root);
    realParent = realpathSync(dirname(full));
  } catch {
    return full; // the parent does not exist: open reports ENOENT
  }
  if (realParent !== realRoot && !realParent.startsWith(realRoot + sep)) return undefined;
  return full;
}

/** Bytes the regular files under `dir` hold (a quota's starting point; symbolic links not followed). */
function usedBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile()) continue;
    try {
      total += lstatSync(join(e.parentPath, e.name)).size;
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

function errno(err: unknown): number {
  const e = (err as { errno?: number }).errno;
  return typeof e === 'number' && e < 0 ? e : -EINVAL;
}

/** Longest log line passed on, bytes; the rest is cut and counted. */
const MAX_LOG_LINE_BYTES = 16 * 1024;
/** Log lines a pod may write a second (a burst of as many); more are dropped and counted. */
const LOG_LINES_PER_SECOND = 1000;

/** Channel messages a pod may send a second (a burst of as many); more are refused with -1. */
const CHANNEL_SENDS_PER_SECOND = 1000;

/** A token bucket: `rate` tokens a second, at most `rate` held; counts what it refuses. */
class RateLimiter {
  readonly #rate: number;
  #tokens: number;
  #at = performance.now();
  #dropped = 0;
  constructor(rate: number) {
    this.#rate = rate;
    this.#tokens = rate;
  }
  take(): boolean {
    const now = performance.now();
    this.#tokens = Math.min(this.#rate, this.#tokens + ((now - this.#at) / 1000) * this.#rate);
    this.#at = now;
    if (this.#tokens >= 1) {
      this.#tokens -= 1;
      return true;
    }
    this.#dropped++;
    return false;
  }
  /** The count refused since the last call, reset to 0. */
  takeDropped(): number {
    const d = this.#dropped;
    this.#dropped = 0;
    return d;
  }
}

/**
 * Builds the `k32` import object.
 * @returns the functions, by import name
 */
export function makeImports(ctx: HostContext, state: HostState): Record<string, (...args: never[]) => unknown> {
  if (ctx.fsDir) mkdirSync(ctx.fsDir, { recursive: true });
  // k32_fs has no seek: a write extends its file, and opening for write truncates. So the pod's
  // usage is what was there, plus each write, less what a truncation drops (never under the truth).
  const fsLimit = ctx.fsLimitBytes;
  let fsUsed = ctx.fsDir && fsLimit !== undefined ? usedBytes(ctx.fsDir) : 0;
  state.bindFsDir = (dir: string): void => {
    mkdirSync(dir, { recursive: true });
    ctx.fsDir = dir;
    fsUsed = fsLimit !== undefined ? usedBytes(dir) : 0;
  };
  const envBytes = new Map(Object.entries(ctx.env).map(([k, v]) => [k, utf8Enc.encode(v)]));
  const assets = new Map(Object.entries(ctx.assets));
  // A pod that logs in a tight loop must not flood the node's main thread with messages.
  const logLimiter = new RateLimiter(LOG_LINES_PER_SECOND);
  const sendLimiter = new RateLimiter(CHANNEL_SENDS_PER_SECOND);
  // A flood followed by silence still reports its drops: a second after the first line dropped,
  // between calls. (A timer only then: an idle pod, one of thousands on a thread, costs no wake-ups.)
  let reportTimer: NodeJS.Timeout | undefined;
  const reportDroppedLater = (): void => {
    if (reportTimer) return;
    reportTimer = setTimeout(() => {
      reportTimer = undefined;
      const dropped = logLimiter.takeDropped();
      if (dropped > 0) ctx.log(`kube32: ${dropped} log line${dropped === 1 ? '' : 's'} dropped (more than ${LOG_LINES_PER_SECOND} a second)`);
    }, 1000);
    reportTimer.unref();
  };
  state.onDispose(() => clearTimeout(reportTimer));
  return {
    k32_time_ms: (): bigint => BigInt(ctx.clock.now()),
    k32_log: (ptr: number, len: number): void => {
      const bytes = bytesOf(ctx, 'k32_log', ptr, len);
      if (!logLimiter.take()) {
        reportDroppedLater();
        return;
      }
      const dropped = logLimiter.takeDropped();
      if (dropped > 0) ctx.log(`kube32: ${dropped} log line${dropped === 1 ? '' : 's'} dropped (more than ${LOG_LINES_PER_SECOND} a second)`);
      if (bytes.length <= MAX_LOG_LINE_BYTES) ctx.log(utf8.decode(bytes));
      else ctx.log(`${utf8.decode(bytes.subarray(0, MAX_LOG_LINE_BYTES))}… (${bytes.length - MAX_LOG_LINE_BYTES} more bytes cut)`);
    },
    k32_env: (kp: number, kl: number, bp: number, bl: number): number => {
      const key = utf8.decode(bytesOf(ctx, 'k32_env', kp, kl));
      return copyValue(ctx, 'k32_env', envBytes.get(key), bp, bl);
    },
    k32_asset: (np: number, nl: number, bp: number, bl: number): number => {
      const name = utf8.decode(bytesOf(ctx, 'k32_asset', np, nl));
      return copyValue(ctx, 'k32_asset', assets.get(name), bp, bl);
    },
    kube32_channel_open: (np: number, nl: number): number => {
      const raw = bytesOf(ctx, 'kube32_channel_open', np, nl);
      if (raw.length === 0 || raw.length > MAX_CHANNEL_NAME) return -1;
      const name = utf8.decode(raw);
      let h = state.channelsByName.get(name);
      if (h === undefined) {
        h = 1;
        while (state.channelsByHandle.has(h)) h++;
        state.reopenChannel(h, name);
      }
      return h;
    },
    k32_channel_send: (h: number, p: number, l: number): number => {
      const topic = state.channelsByHandle.get(h);
      if (topic === undefined || l >>> 0 > MAX_CHANNEL_PAYLOAD) return -1;
      if (!sendLimiter.take()) return -1;
      ctx.send(topic, bytesOf(ctx, 'k32_channel_send', p, l).slice());
      return 0;
    },
    k32_fs_open: (pp: number, pl: number, flags: number): number => {
      const path = utf8.decode(bytesOf(ctx, 'k32_fs_open', pp, pl));
      if (!ctx.fsDir) return -ENOSYS;
      // O_NOFOLLOW: a symbolic link as the last component is refused (ELOOP), so it cannot lead out.
      const { O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC, O_APPEND, O_NOFOLLOW } = fsConstants;
      const mode = flags === 0 ? O_RDONLY : flags === 1 ? O_WRONLY | O_CREAT | O_TRUNC : flags === 2 ? O_WRONLY | O_CREAT | O_APPEND : undefined;
      if (mode === undefined) return -EINVAL;
      const full = resolveInside(ctx.fsDir, path);
      if (!full) return -EACCES;
      if (state.files.size >= MAX_OPEN_FILES) return -EMFILE;
      let hostFd: number;
      let dropped = 0;
      try {
        if (flags === 1 && fsLimit !== undefined) {
          try {
            const st = lstatSync(full);
            if (st.isFile()) dropped = st.size;
          } catch {
            // a new file
          }
        }
        hostFd = openSync(full, mode | O_NOFOLLOW, 0o644);
      } catch (err: unknown) {
        return errno(err);
      }
      fsUsed = Math.max(0, fsUsed - dropped);
      let fd = 3;
      while (state.files.has(fd)) fd++;
      state.files.set(fd, { hostFd, path });
      return fd;
    },
    k32_fs_read: (fd: number, p: number, l: number): number => {
      const f = state.files.get(fd);
      if (!f) return -EBADF;
      const buf = bytesOf(ctx, 'k32_fs_read', p, l);
      try {
        return readSync(f.hostFd, buf, 0, buf.length, null);
      } catch (err: unknown) {
        return errno(err);
      }
    },
    k32_fs_write: (fd: number, p: number, l: number): number => {
      const f = state.files.get(fd);
      if (!f) return -EBADF;
      const data = bytesOf(ctx, 'k32_fs_write', p, l);
      if (fsLimit !== undefined && fsUsed + data.length > fsLimit) return -ENOSPC;
      try {
        const n = writeSync(f.hostFd, data);
        fsUsed += n;
        return n;
      } catch (err: unknown) {
        return errno(err);
      }
    },
    k32_fs_close: (fd: number): number => {
      const f = state.files.get(fd);
      if (!f) return -EBADF;
      state.files.delete(fd);
      try {
        closeSync(f.hostFd);
        return 0;
      } catch (err: unknown) {
        return errno(err);
      }
    },
  };
}
