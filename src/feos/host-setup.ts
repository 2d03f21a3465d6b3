/**
 * What feosd needs of the host before it serves (seed 000, "feosd"): flags checked before anything is
 * taken, directories made as `mkdir -p` makes them (but ending), the API socket's group, a run dir that
 * no other feosd serves, systemd's READY=1, and feosd's place in the cgroup tree (--vms-cgroup).
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import net from 'node:net';
import { dirname, resolve } from 'node:path';
import { HostService as HostServiceDesc } from './gen/feos/host/v1/host_pb.js';
import type { Logger } from '../lib/index.ts';
import { errorMessage, makeClient } from './api/index.ts';
import { cgroupOf, enterLeaf, givenCgroup, handOverVms } from './microvm/index.ts';
import type { ListenFds } from './network/index.ts';

/** The gid of the group `name` in /etc/group, or undefined (none, or no /etc/group). */
export function findGroup(name: string): number | undefined {
  try {
    for (const line of readFileSync('/etc/group', 'utf8').split('\n')) {
      const [n, , gid] = line.split(':');
      if (n === name) return Number(gid);
    }
  } catch {}
  return undefined;
}

/** Sends READY=1 to $NOTIFY_SOCKET (systemd-notify for this pid), where there is one; a failure is logged. */
export function notifyReady(log: Logger): void {
  const socket = process.env.NOTIFY_SOCKET;
  if (!socket) return;
  // Node has no unix datagram sockets: systemd-notify sends it for this pid (the unit needs NotifyAccess=all).
  execFile('systemd-notify', ['--ready', `--pid=${process.pid}`], (err) => {
    if (err) log.warn({ err: errorMessage(err) }, 'READY=1: systemd-notify failed');
  });
}

/**
 * `mkdir -p` that ends: Node's recursive mkdir loops forever where a parent refuses new entries with
 * ENOENT (such as /proc). Each missing directory is made on its own; the first error is thrown.
 * @throws Error naming the flag, the directory and the system's error
 */
export async function makeDirs(flag: string, dir: string, mode?: number): Promise<void> {
  const missing: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    try {
      await mkdir(d, { mode });
      break;
    } catch (err: unknown) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') break;
      if (code !== 'ENOENT' || dirname(d) === d) throw new Error(`${flag} ${dir}: cannot make ${d}: ${errorMessage(err)}`, { cause: err });
      missing.push(d);
    }
  }
  for (const d of missing.reverse()) {
    try {
      await mkdir(d, { mode });
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new Error(`${flag} ${dir}: cannot make ${d}: ${errorMessage(err)}`, { cause: err });
    }
  }
}

/**
 * Checks `--tcp`'s form before anything is taken: `host:port` or `[v6]:port`, the port 0 to 65535.
 * @throws Error "--tcp X: want host:port ..."
 */
export function checkTcpAddress(address: string): void {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(address);
  if (!m || Number(m[2]) > 65535) throw new Error(`--tcp ${JSON.stringify(address)}: want host:port (such as 127.0.0.1:1337, [::1]:1337; port 0 to 65535, 0 asks the OS)`);
}

/** Whether something accepts connections on a unix socket (a live feosd), within 2 s. */
function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect(path);
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(true);
    }, 2000);
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
}

/**
 * Refuses a run dir whose api.sock another feosd serves (another --state-dir, the same --run-dir): its
 * socket would be taken over and, at this one's exit, removed.
 * @throws Error "another feosd serves RUN/api.sock, pid N"
 */
export async function refuseServedSocket(socketPath: string): Promise<void> {
  if (!(await socketAnswers(socketPath))) return;
  let pid = '';
  const host = makeClient(HostServiceDesc, `unix:${socketPath}`);
  try {
    pid = `, pid ${(await host.getHostInfo({}, { deadline: Date.now() + 3000 })).pid}`;
  } catch {
  } finally {
    host.grpc.close();
  }
  throw new Error(`another feosd serves ${socketPath}${pid}: stop it, or give this one another --run-dir`);
}

/**
 * feosd's place in the cgroup tree with `--vms-cgroup DIR` (seed 000, "Jail, user and cgroup"): where DIR
 * is the cgroup feosd is given, feosd moves into its leaf `feosd/` (systemd's DelegateSubgroup=feosd
 * starts it there already; the real root keeps it); where DIR is another (feos-vms.service's), the
 * microVMs a feosd from before --vms-cgroup put below feosd's own cgroup move there (handOverVms).
 * Without a cgroup v2 hierarchy nothing is done. Failures are logged: the pods run on without cgroups.
 */
export async function placeFeosd(vmsCgroup: string, log: Logger): Promise<void> {
  try {
    const own = cgroupOf();
    if (!own) return;
    const given = givenCgroup(own);
    if (resolve(given) === resolve(vmsCgroup)) {
      if (own === given) log.info({ cgroup: await enterLeaf(given) }, 'feosd moved into its leaf cgroup; the microVMs go beside it in vms/');
      return;
    }
    const moved = await handOverVms(given, vmsCgroup);
    if (moved.length > 0) log.info({ from: given, to: vmsCgroup, microVms: moved }, 'cgroup: the microVMs below feosd were handed over to --vms-cgroup');
  } catch (err: unknown) {
    log.warn({ vmsCgroup, err: errorMessage(err) }, 'cgroup: feosd could not take its place; the microVMs may not get theirs');
  }
}

/**
 * `feosd --hand-over-vms` (feosd.service's ExecStopPost=): the microVMs below the cgroup feosd was given
 * move to `vmsCgroup`'s vms/, each with its cpu.weight.
 * @returns the ids moved
 * @throws Error without a cgroup v2 hierarchy, or naming the file the kernel refused
 */
export async function handOverVmsOf(vmsCgroup: string): Promise<string[]> {
  const own = cgroupOf();
  if (!own) throw new Error('--hand-over-vms: no cgroup v2 hierarchy is mounted (/proc/self/mountinfo has no cgroup2)');
  return handOverVms(givenCgroup(own), vmsCgroup);
}

/**
 * The trampoline of a self-upgrade that hands the resolver's sockets on (seed 000, "DNS"): Node makes
 * every fd close-on-exec and has no fcntl, so the sockets go to a child first (`sleep`, which spawn's
 * stdio gives them as fds 3 and 4), feosd execs this script with the same pid, and it takes them back
 * from the child with pidfd_getfd(2), puts them at fds 3 and 4, ends the child and execs the new binary
 * with LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES=dns:dns. Where anything fails it execs the new binary
 * without them (which then binds its own sockets).
 * argv: holder pid, the number of fds, the new binary's argv.
 */
const HAND_ON_SCRIPT = `
import ctypes, fcntl, os, signal, sys
holder, n, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
env = dict(os.environ)
try:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(holder)
    high = []
    for i in range(n):
        fd = libc.syscall(438, pidfd, 3 + i, 0)  # pidfd_getfd
        if fd < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        high.append(fcntl.fcntl(fd, fcntl.F_DUPFD, 100))
        os.close(fd)
    for i, fd in enumerate(high):
        os.dup2(fd, 3 + i)
        os.close(fd)
    env.update(LISTEN_FDS=str(n), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=":".join(["dns"] * n))
except Exception as e:
    print("feosd self-upgrade: the resolver's sockets are not handed on: %s" % e, file=sys.stderr)
try:
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
except Exception:
    pass
os.execve(argv[0], argv, env)
`;

/** Where the trampoline's interpreter is looked for. */
const PYTHON3 = ['/usr/bin/python3', '/usr/local/bin/python3'];

/**
 * Execs the binary of a self-upgrade (`argv[0]`) with the same pid, handing the resolver's sockets
 * taken at the start (`fds`) on to it through HAND_ON_SCRIPT where python3 is installed; without
 * sockets, or without python3 (logged), a plain execve. Does not return.
 */
export function execUpgrade(argv: string[], fds: ListenFds | undefined, log: Logger): never {
  const socks = [fds?.udp, fds?.tcp].filter((fd): fd is number => fd !== undefined);
  const python = PYTHON3.find((p) => existsSync(p));
  if (socks.length > 0 && python) {
    const holder = spawn('sleep', ['infinity'], { stdio: ['ignore', 'ignore', 'ignore', ...socks] });
    if (holder.pid !== undefined) process.execve!(python, [python, '-c', HAND_ON_SCRIPT, String(holder.pid), String(socks.length), ...argv], process.env);
    log.warn('self-upgrade: no holder for the resolver sockets could be started; the new binary binds its own');
  } else if (socks.length > 0) log.warn('self-upgrade: python3 is not installed, so the resolver sockets are not handed on; the new binary binds its own');
  process.execve!(argv[0], argv, process.env);
  throw new Error(`execve ${argv[0]} returned`);
}
