/**
 * Stopping a process for a test (SIGSTOP) and knowing it is stopped. kill(2) only queues the signal:
 * each thread stops when the kernel next schedules it, so on a loaded machine a process may still
 * answer a request or two after `kill` returned (a CI run saw a SIGSTOPped etcd answer the next
 * read). {@link stopProcess} waits until every thread of the process is in state `T`.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Whether every thread of `pid` is stopped (state T or t in /proc/<pid>/task/<tid>/stat). */
function allThreadsStopped(pid: number): boolean {
  const tids = readdirSync(`/proc/${pid}/task`);
  return tids.every((tid) => {
    try {
      // The state follows the command name, which is in parentheses and may hold spaces.
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return state === 'T' || state === 't';
    } catch {
      return true; // the thread ended meanwhile
    }
  });
}

/**
 * Sends SIGSTOP to `pid` and resolves once every one of its threads is stopped.
 * @throws Error when it is not stopped within `timeoutMs` (default 5000 ms), or it is gone
 */
export async function stopProcess(pid: number, timeoutMs = 5000): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  const deadline = Date.now() + timeoutMs;
  while (!allThreadsStopped(pid)) {
    if (Date.now() > deadline) throw new Error(`process ${pid} not stopped within ${timeoutMs} ms of SIGSTOP`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
