/**
 * The machine's processes as a test sees them through /proc: whether one runs, and which name a path on their
 * command line (a QEMU names its microVM's directory in its `-qmp unix:DIR/qmp.sock`, so a test can tell that no
 * QEMU is left for a pod even when the pid in its record is gone with the record).
 */
import { readdirSync, readFileSync } from 'node:fs';

/**
 * Whether the process runs: a zombie counts as ended (QEMU outlives feosd, and whoever reaps it then may take its time).
 * @throws Error for a pid ≤ 0 (a record whose pid was cleared), which would otherwise read as "ended" and let
 *   an assertion that a process is gone pass without one
 */
export function alive(pid: number): boolean {
  if (!(pid > 0)) throw new Error(`no pid: ${pid}`);
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** The pids of the running processes (zombies left out) whose command line holds `text` in one of its arguments. */
export function processesNaming(text: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // ended meanwhile
    }
    if (argv.some((a) => a.includes(text)) && alive(pid)) out.push(pid);
  }
  return out;
}
