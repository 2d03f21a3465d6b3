/**
 * The machine's processes as a test sees them through /proc: whether one runs, and which name a path on their
 * command line (a QEMU names its microVM's directory in its `-qmp unix:DIR/qmp.sock`, so a test can tell that no
 * QEMU is left for a pod even when the pid in its record is gone with the record), and the processes of a network
 * namespace, which its suite ends before it removes the namespace (a process outlives `ip netns del`, and the
 * namespace with it: wireguard-go, which feosd starts as a daemon of its own for the mesh, ran on orphaned).
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { waitFor } from './wait.ts';

const execFileP = promisify(execFile);

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

/** A process's name (`/proc/PID/comm`, such as `wireguard-go`); undefined once it ended. */
export function processName(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
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

/** A process of a network namespace: its pid and its name (`/proc/PID/comm`, such as `wireguard-go`). */
export interface NetnsProcess {
  pid: number;
  name: string;
}

/**
 * The running processes of network namespace `ns` (`ip netns pids`), zombies left out.
 * @throws Error when `ip netns pids` fails (no such namespace)
 */
export async function processesInNetns(ns: string): Promise<NetnsProcess[]> {
  const { stdout } = await execFileP('ip', ['netns', 'pids', ns], { timeout: 20_000 });
  const out: NetnsProcess[] = [];
  for (const pid of stdout.split('\n').filter(Boolean).map(Number)) {
    const name = processName(pid);
    if (name !== undefined && alive(pid)) out.push({ pid, name });
  }
  return out;
}

/**
 * Ends every process of network namespace `ns`: SIGTERM, SIGKILL for what still runs after `graceMs`; answers,
 * once none of them runs, the processes it ended.
 * @throws Error when one still runs 10 s after its SIGKILL, naming it
 */
export async function endProcessesInNetns(ns: string, graceMs = 5_000): Promise<NetnsProcess[]> {
  const procs = await processesInNetns(ns);
  await endProcesses(procs.map((p) => p.pid), graceMs, ns);
  return procs;
}

/**
 * Ends processes `pids`: SIGTERM (wireguard-go then removes its UAPI socket), SIGKILL for what still runs after
 * `graceMs`; answers once none of them runs.
 * @param what whose processes, for the error
 * @throws Error when one still runs 10 s after its SIGKILL, naming it
 */
export async function endProcesses(pids: number[], graceMs = 5_000, what = 'the test'): Promise<void> {
  const procs = pids.map((pid) => ({ pid }));
  const signal = (sig: NodeJS.Signals) => {
    for (const p of procs) {
      try {
        process.kill(p.pid, sig);
      } catch {} // ended meanwhile
    }
  };
  const running = () => procs.filter((p) => alive(p.pid));
  signal('SIGTERM');
  try {
    await waitFor(`the processes of ${what} to end on SIGTERM`, graceMs, () => running().length === 0, { intervalMs: 50 });
  } catch {
    signal('SIGKILL');
    await waitFor(`the processes of ${what} to end on SIGKILL`, 10_000, () => running().length === 0, { intervalMs: 50, describe: () => JSON.stringify(running()) });
  }
}
