/** Process facts from /proc: whether a pid is still the process it was (pid + start time). */
import { readFileSync } from 'node:fs';

/** Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot; undefined when gone. */
export function pidStartTicks(pid: number): bigint | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command is in parentheses and may hold spaces: count fields after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z') return undefined;
    return BigInt(fields[19]);
  } catch {
    return undefined;
  }
}

/** Whether `pid` runs and is the process that started at `startTicks`. */
export function isSameProcess(pid: number, startTicks: bigint): boolean {
  return pid > 0 && pidStartTicks(pid) === startTicks;
}

/** The host's boot_id. */
export function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}
