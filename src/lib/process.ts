/**
 * Whether a process still holds what it held: its sockets, its files, its locks.
 */
import { readFileSync, readdirSync } from 'node:fs';

/**
 * Whether process `pid` is alive. A process killed a moment ago stays a zombie until its parent
 * (or init, for an orphan) reaps it; it holds nothing any more once its other threads have ended
 * too, so such a zombie counts as gone. A process of another user (EPERM) counts as alive.
 * @param pid a process id (> 0)
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err: unknown) {
    return (err as { code?: string }).code === 'EPERM';
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.charAt(stat.lastIndexOf(')') + 2);
    return state !== 'Z' || readdirSync(`/proc/${pid}/task`).length > 1;
  } catch {
    return true; // no /proc to look at: trust kill(0)
  }
}
