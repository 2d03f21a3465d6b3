/**
 * Who holds a data dir. `kube32-cli up` holds `D/up.lock` (./local-cluster.ts); a `kube32-cli
 * control-plane` or `apiserver` holds `D/control-plane.lock`. Both are JSON naming the holder's
 * `pid` (control-plane.lock also its `command`); a lock whose pid is no longer alive is stale and is
 * taken over.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isProcessAlive } from '../lib/index.ts';
import { CliError } from './errors.ts';

/** The lock file of `up` in its data dir. */
export const UP_LOCK_FILE = 'up.lock';
/** The lock file of `control-plane` in its data dir. */
export const CONTROL_PLANE_LOCK_FILE = 'control-plane.lock';

/** A live process that holds a data dir. */
export interface DataDirHolder {
  pid: number;
  /** What holds it: `kube32-cli up`, `kube32-cli control-plane` or `kube32-cli apiserver`. */
  what: string;
  /** The lock file. */
  lockPath: string;
}

/** The pid and command written in a lock file (`{"pid":N,...}` or `N`); pid 0 when it names none. */
function lockRecord(path: string): { pid: number; command?: string } {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch {
    return { pid: 0 };
  }
  try {
    const v: unknown = JSON.parse(text);
    const rec = (typeof v === 'number' ? { pid: v } : (v ?? {})) as { pid?: unknown; command?: unknown };
    const pid = typeof rec.pid === 'number' && Number.isInteger(rec.pid) && rec.pid > 0 ? rec.pid : 0;
    return typeof rec.command === 'string' ? { pid, command: rec.command } : { pid };
  } catch {
    return { pid: 0 }; // half-written or foreign: stale
  }
}

/**
 * The live process, other than this one and those in `except`, whose lock is in `dataDir`, if any.
 * @param except pids that may hold it (an `up` whose child we are)
 */
export function dataDirHolder(dataDir: string, except: number[] = []): DataDirHolder | undefined {
  for (const [file, what] of [
    [UP_LOCK_FILE, 'kube32-cli up'],
    [CONTROL_PLANE_LOCK_FILE, 'kube32-cli control-plane'],
  ] as const) {
    const lockPath = join(dataDir, file);
    const { pid, command } = lockRecord(lockPath);
    if (pid > 0 && pid !== process.pid && !except.includes(pid) && isProcessAlive(pid)) return { pid, what: command ?? what, lockPath };
  }
  return undefined;
}

/** The message of a data dir held by `h`. */
export function inUseMessage(dataDir: string, h: DataDirHolder): string {
  return `the data dir ${dataDir} is in use by ${h.pid} (${h.what}, ${h.lockPath}): stop it (Ctrl-C there, or kill ${h.pid}) or pass another --data-dir`;
}

/** A server's hold on its data dir. */
export interface DataDirClaim {
  /** Removes the lock (idempotent; also run when the process exits). */
  release(): void;
  /** After a refused start: releases, and removes the data dir when this run created it (all in it is ours). */
  abandon(): void;
}

/**
 * Takes `dataDir` for a server command (`kube32-cli control-plane` or `apiserver`), creating it (0700)
 * when missing: writes `D/control-plane.lock` (`{"pid":...,"command":...}`), or refuses when a live
 * `up` (other than our parent: `up`'s own control-plane child runs inside its lock) or another server
 * holds it. A stale lock is taken over. Nothing else in the data dir is touched.
 * @throws CliError "the data dir D is in use by PID (...)" (exit code 1), or when the dir cannot be
 *   created or written (a dir created here is removed again)
 */
export function claimServerDataDir(dataDir: string, command: string): DataDirClaim {
  const created = !existsSync(dataDir);
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  } catch (err: unknown) {
    throw new CliError(`cannot create the data dir ${dataDir}: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
  let release: () => void;
  try {
    release = lock(dataDir, command);
  } catch (err: unknown) {
    if (created) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  return {
    release,
    abandon() {
      release();
      if (created) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function lock(dataDir: string, command: string): () => void {
  const path = join(dataDir, CONTROL_PLANE_LOCK_FILE);
  const check = (): void => {
    const h = dataDirHolder(dataDir, [process.ppid]);
    if (h) throw new CliError(inUseMessage(dataDir, h));
  };
  check();
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o644);
      writeFileSync(fd, `${JSON.stringify({ pid: process.pid, command })}\n`);
      closeSync(fd);
      let held = true;
      const release = (): void => {
        if (!held) return;
        held = false;
        process.off('exit', release);
        if (lockRecord(path).pid === process.pid) rmSync(path, { force: true });
      };
      process.on('exit', release);
      return release;
    } catch (err: unknown) {
      const code = (err as { code?: string }).code;
      if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
        throw new CliError(`cannot write in the data dir ${dataDir} (${code}): pass a --data-dir you can write to`, 1, { cause: err });
      }
      if (code !== 'EEXIST') throw err;
    }
    check(); // a live holder refuses; a stale lock goes
    rmSync(path, { force: true });
  }
  throw new CliError(`could not take the data dir ${dataDir}: ${path} keeps reappearing`);
}
