/**
 * Who holds a data dir. `kube32-cli up` holds `D/up.lock` (./local-cluster.ts); a `kube32-cli
 * control-plane` holds `D/control-plane.lock`. Both name the holder's pid as the first JSON field
 * `"pid"` (up.lock) or as the file's whole text (control-plane.lock); a lock whose pid is no longer
 * alive is stale and is taken over.
 */
import { closeSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  /** What holds it: `kube32-cli up` or `kube32-cli control-plane`. */
  what: string;
  /** The lock file. */
  lockPath: string;
}

/** The pid written in a lock file (`{"pid":N,...}` or `N`), or 0 when it names none. */
function lockPid(path: string): number {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch {
    return 0;
  }
  try {
    const v: unknown = JSON.parse(text);
    const pid = typeof v === 'number' ? v : (v as { pid?: unknown } | null)?.pid;
    return typeof pid === 'number' && Number.isInteger(pid) && pid > 0 ? pid : 0;
  } catch {
    return 0; // half-written or foreign: stale
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
    const pid = lockPid(lockPath);
    if (pid > 0 && pid !== process.pid && !except.includes(pid) && isProcessAlive(pid)) return { pid, what, lockPath };
  }
  return undefined;
}

/** The message of a data dir held by `h`. */
export function inUseMessage(dataDir: string, h: DataDirHolder): string {
  return `the data dir ${dataDir} is in use by ${h.pid} (${h.what}, ${h.lockPath}): stop it (Ctrl-C there, or kill ${h.pid}) or pass another --data-dir`;
}

/**
 * Takes `dataDir` for a control plane: writes `D/control-plane.lock` with our pid, or refuses when a
 * live `up` (other than our parent: `up`'s own control-plane child runs inside its lock) or another
 * control plane holds it. A stale lock is taken over. `dataDir` must exist. Nothing else in it is touched.
 * @returns a function that releases the lock (idempotent; also run when the process exits)
 * @throws CliError "the data dir D is in use by PID (...)" (exit code 1), or when the dir is not writable
 */
export function lockControlPlaneDataDir(dataDir: string): () => void {
  const path = join(dataDir, CONTROL_PLANE_LOCK_FILE);
  const check = (): void => {
    const h = dataDirHolder(dataDir, [process.ppid]);
    if (h) throw new CliError(inUseMessage(dataDir, h));
  };
  check();
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o644);
      writeFileSync(fd, `${process.pid}\n`);
      closeSync(fd);
      let held = true;
      const release = (): void => {
        if (!held) return;
        held = false;
        process.off('exit', release);
        if (lockPid(path) === process.pid) rmSync(path, { force: true });
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
