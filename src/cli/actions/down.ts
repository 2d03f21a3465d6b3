/**
 * `kube32-cli down`: stops the local cluster that a `kube32-cli up` runs on a data dir, from another
 * terminal (or after `up ... &`), as Ctrl-C where it runs does: SIGTERM to the `up` named in
 * `DATA_DIR/up.lock` (or to a `control-plane`/`apiserver` holding `DATA_DIR/control-plane.lock`), then a wait
 * for its exit (the workers drain first, then the control plane stops). Nothing running there is not an
 * error: `down` twice stops the cluster once.
 */
import { isProcessAlive } from '../../lib/index.ts';
import { dataDirHolder } from '../data-dir-lock.ts';
import { CliError } from '../errors.ts';
import { parseWaitTimeout } from '../wait.ts';

/** The flags of `down`. */
export interface DownFlags {
  /** The cluster's data dir, resolved. */
  dataDir: string;
  /** `--timeout`: how long to wait for the stop before killing it at once (Go duration, `0` for no limit). */
  timeout: string;
}

/** Polls until `pid` is gone or `ms` have passed (0: no limit); resolves to whether it is gone. */
async function exited(pid: number, ms: number): Promise<boolean> {
  const deadline = ms > 0 ? Date.now() + ms : Number.POSITIVE_INFINITY;
  while (isProcessAlive(pid)) {
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

/**
 * Runs `down`.
 * @throws CliError for a bad `--timeout` (before anything is signalled), or when the holder is still alive
 *   10 s after a second SIGTERM (which makes `up` kill its children at once)
 */
export async function down(flags: DownFlags): Promise<void> {
  const timeoutMs = parseWaitTimeout(flags.timeout);
  const holder = dataDirHolder(flags.dataDir);
  if (!holder) {
    process.stdout.write(`kube32: no cluster runs in ${flags.dataDir}: nothing to stop\n`);
    return;
  }
  process.stdout.write(`stopping the cluster in ${flags.dataDir} (${holder.what}, pid ${holder.pid}; its workers drain first)\n`);
  try {
    process.kill(holder.pid, 'SIGTERM');
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return void process.stdout.write('cluster stopped\n');
    throw new CliError(`cannot signal pid ${holder.pid} (${holder.what}): ${(err as Error).message}`);
  }
  if (await exited(holder.pid, timeoutMs)) return void process.stdout.write('cluster stopped\n');
  process.stdout.write(`still running after ${flags.timeout}: killing it at once (as a second Ctrl-C)\n`);
  try {
    process.kill(holder.pid, 'SIGTERM');
  } catch {}
  if (await exited(holder.pid, 10_000)) return void process.stdout.write('cluster killed\n');
  throw new CliError(`pid ${holder.pid} (${holder.what}) is still running: kill -KILL ${holder.pid}`);
}
