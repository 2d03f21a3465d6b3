/**
 * One feosd per state dir (seed 000, "feosd"): an exclusive flock(2) on `<state-dir>/feosd.lock`, with
 * feosd's pid written into it, held until feosd ends. While another process holds it, feosd says so and
 * tries again every second, as long as it takes.
 *
 * Node has no flock(2): the lock is taken by flock(1) (util-linux) on feosd's own open file, handed to
 * it as fd 3. flock locks belong to the open file description, so the lock stays with feosd's fd after
 * flock(1) exits; feosd's fd is close-on-exec (Node opens files so), so nothing feosd runs holds it and
 * a self-upgrade's exec takes it again.
 */
import { spawn } from 'node:child_process';
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import type { Logger } from '../lib/index.ts';

/** How often a waiting feosd tries the lock again (ms). */
export const LOCK_RETRY_MS = 1000;

function tryFlock(fd: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const child = spawn('flock', ['--exclusive', '--nonblock', '3'], { stdio: ['ignore', 'ignore', 'inherit', fd] });
    child.once('error', (err) => reject(new Error(`feosd.lock: flock(1): ${err.message}`, { cause: err })));
    child.once('exit', (code) => resolve(code === 0));
  });
}

/**
 * Takes the lock, waiting while another holds it.
 * @returns the fd that holds it (close it, or end the process, to let go)
 * @throws Error when the file cannot be opened, or `signal` aborts the wait
 */
export async function takeStateLock(path: string, log: Logger, signal?: AbortSignal): Promise<number> {
  const fd = openSync(path, 'a+');
  let said = false;
  for (;;) {
    if (await tryFlock(fd)) break;
    if (!said) {
      let holder = '';
      try {
        holder = readFileSync(path, 'utf8').trim();
      } catch {}
      log.warn({ path, holder }, `another feosd${holder ? ` (pid ${holder})` : ''} holds the state dir's lock; trying again every second`);
      said = true;
    }
    if (signal?.aborted) {
      closeSync(fd);
      throw new Error('feosd.lock: the wait was aborted');
    }
    await new Promise((r) => setTimeout(r, LOCK_RETRY_MS));
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`, 0);
  return fd;
}
