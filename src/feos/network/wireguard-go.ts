/**
 * Debian's `wireguard-go` for the mesh's device: starting it with an error that names the cause,
 * and finding which process serves a UAPI socket and in which network namespace.
 *
 * Why the second: wireguard-go's UAPI sockets are in `/var/run/wireguard/<device>.sock`, a folder of
 * the machine (of the mount namespace), not of the network namespace. A node in namespace B that
 * uses the device name of a node in namespace A on the same machine would otherwise take A's
 * wireguard-go for its own and give it B's key, port and peers.
 *
 * How the server is found without SO_PEERCRED (which Node cannot read, and which for wireguard-go
 * names the parent that listened and exited when it went to the background): a connection to a
 * unix socket makes its server's end in the connecting side's network namespace, bound to the
 * listener's path, so `/proc/self/net/unix` lists it; once wireguard-go accepted it, the process
 * whose `/proc/PID/fd` holds that socket is the server. Its `/proc/PID/ns/net` is its namespace, and
 * the `iff:` of its `/dev/net/tun` descriptors (`/proc/PID/fdinfo`) the TUN devices it serves.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, readdir, readFile, readlink } from 'node:fs/promises';
import net from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NetworkError } from './errors.ts';

/** How long wireguard-go may take to make its device and go to the background, ms. */
export const START_TIMEOUT_MS = 20_000;
/** How long the server of a UAPI socket has to accept a connection before it counts as not found, ms. */
export const ACCEPT_TIMEOUT_MS = 3_000;
/** What feosd says to do when wireguard-go is not there. */
export const INSTALL_HINT = 'apt-get install wireguard-go';

/**
 * The executable a command name runs: itself when it holds a `/`, else the first executable file
 * of that name in PATH's folders.
 * @returns the path, or undefined when there is none
 */
export async function resolveExecutable(command: string, path = process.env.PATH ?? ''): Promise<string | undefined> {
  const candidates = command.includes('/') ? [command] : path.split(delimiter).filter((d) => d !== '').map((d) => join(d, command));
  for (const c of candidates) {
    try {
      await access(c, constants.F_OK);
      return c;
    } catch {}
  }
  return undefined;
}

/** The last lines of wireguard-go's output worth showing: its banner about the kernel's WireGuard left out. */
export function lastLines(text: string, n = 5): string {
  return text
    .split('\n')
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== '' && !/^[│┌└]/.test(l.trim()))
    .slice(-n)
    .join('; ');
}

/**
 * Runs `wireguard-go DEVICE`, which makes the TUN device and its UAPI socket, goes to the
 * background and exits 0. Its environment lacks `LOG_LEVEL` (feosd's own): with it, the daemon
 * keeps feosd's pipes as its output and the start would wait for it to end.
 * @param command `--wireguard-go`: a path, or a name looked up in PATH
 * @returns the path run
 * @throws NetworkError FAILED_PRECONDITION naming the cause: not installed (the path or PATH, and
 *   {@link INSTALL_HINT}), not runnable, an exit status or signal with the last lines of its output
 *   (such as "UAPI listen error: unix socket in use" or "Failed to create TUN device"), no exit
 *   within {@link START_TIMEOUT_MS}
 */
export async function startWireguardGo(command: string, device: string): Promise<string> {
  const file = await resolveExecutable(command);
  if (file === undefined) {
    const where = command.includes('/') ? `no file ${command}` : `no ${command} in PATH (${process.env.PATH ?? ''})`;
    throw new NetworkError('FAILED_PRECONDITION', `wireguard-go is not installed (${where}): ${INSTALL_HINT}, or give its path with --wireguard-go`);
  }
  const env = { ...process.env };
  delete env.LOG_LEVEL;
  const { code, signal, output, error, timedOut } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string; error?: Error; timedOut: boolean }>((resolve) => {
    let output = '';
    let timedOut = false;
    const child = spawn(file, [device], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, START_TIMEOUT_MS);
    const take = (d: Buffer) => {
      output = (output + d.toString('utf8')).slice(-8192);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ code: null, signal: null, output, error: err, timedOut });
    });
    child.once('close', (c, s) => {
      clearTimeout(timer);
      resolve({ code: c, signal: s, output, timedOut });
    });
  });
  const said = lastLines(output);
  const tail = said ? `: ${said}` : ' (it said nothing)';
  if (error) {
    const why = (error as NodeJS.ErrnoException).code === 'EACCES' ? 'permission denied (is it executable?)' : error.message;
    throw new NetworkError('FAILED_PRECONDITION', `wireguard-go ${file} cannot be run: ${why}`, { cause: error });
  }
  if (timedOut) throw new NetworkError('FAILED_PRECONDITION', `\`${file} ${device}\` did not exit within ${START_TIMEOUT_MS / 1000} s and was killed${tail}`);
  if (code !== 0) {
    const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
    throw new NetworkError('FAILED_PRECONDITION', `\`${file} ${device}\` ${how}${tail}`);
  }
  return file;
}

/** The process serving a UAPI socket. */
export interface UapiServer {
  pid: number;
  /** `/proc/PID/comm`, such as `wireguard-go`. */
  name: string;
  /** `/proc/PID/ns/net`, such as `net:[4026531840]`. */
  netns: string;
  /** The TUN devices it holds open (the `iff:` of its `/dev/net/tun` descriptors). */
  tunDevices: string[];
}

/** The inodes of the sockets that `/proc/self/net/unix` shows bound to `path` and connected. */
async function connectedInodes(path: string): Promise<Set<string>> {
  const out = new Set<string>();
  for (const line of (await readFile('/proc/self/net/unix', 'utf8')).split('\n').slice(1)) {
    // Num RefCount Protocol Flags Type St Inode Path
    const f = line.trim().split(/\s+/);
    if (f.length >= 8 && f[5] === '03' && f.slice(7).join(' ') === path) out.add(f[6]);
  }
  return out;
}

/** The process (but this one) holding one of the sockets `inodes`, if any. */
async function holderOf(inodes: Set<string>): Promise<number | undefined> {
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let fds: string[];
    try {
      fds = await readdir(`/proc/${name}/fd`);
    } catch {
      continue; // ended meanwhile
    }
    for (const fd of fds) {
      const target = await readlink(`/proc/${name}/fd/${fd}`).catch(() => '');
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1])) return Number(name);
    }
  }
  return undefined;
}

/** The TUN devices process `pid` holds open. */
async function tunDevicesOf(pid: number): Promise<string[]> {
  const out: string[] = [];
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
    if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) !== '/dev/net/tun') continue;
    const m = /^iff:\s*(\S+)/m.exec(await readFile(`/proc/${pid}/fdinfo/${fd}`, 'utf8').catch(() => ''));
    if (m) out.push(m[1]);
  }
  return out;
}

/** This process's network namespace, as `/proc/self/ns/net` names it. */
export function ownNetns(): Promise<string> {
  return readlink('/proc/self/ns/net');
}

/**
 * The process that serves the UAPI socket at `path`: connects, finds its end of the connection
 * and the process that accepted it (the connection is closed without a request).
 * @returns undefined when nothing listens there (no file, or a socket left by a process that
 *   ended); `pid` 0 when something listens but no process this one can see accepted the connection
 *   within {@link ACCEPT_TIMEOUT_MS}
 */
export async function uapiServer(path: string): Promise<UapiServer | undefined> {
  const before = await connectedInodes(path).catch(() => new Set<string>());
  const socket = net.connect(path);
  const connected = await new Promise<boolean>((resolve) => {
    socket.once('connect', () => resolve(true));
    socket.once('error', () => resolve(false));
  });
  if (!connected) return undefined;
  try {
    const deadline = Date.now() + ACCEPT_TIMEOUT_MS;
    for (;;) {
      const ours = new Set([...(await connectedInodes(path))].filter((i) => !before.has(i)));
      const pid = ours.size > 0 ? await holderOf(ours) : undefined;
      if (pid !== undefined) {
        const [name, netns, tunDevices] = await Promise.all([
          readFile(`/proc/${pid}/comm`, 'utf8').then((s) => s.trim(), () => '?'),
          readlink(`/proc/${pid}/ns/net`).catch(() => '?'),
          tunDevicesOf(pid),
        ]);
        return { pid, name, netns, tunDevices };
      }
      if (Date.now() > deadline) return { pid: 0, name: '', netns: '', tunDevices: [] };
      await sleep(20); // until the server accepts: a bounded poll, as /proc offers no event
    }
  } finally {
    socket.destroy();
  }
}

/**
 * Checks that the wireguard-go serving `device`'s UAPI socket serves a TUN device of that name in
 * this network namespace, before feosd takes it (or the one it just started) and configures it.
 * @param linkHere whether `ip link show dev DEVICE` finds the device in this namespace
 * @throws NetworkError FAILED_PRECONDITION naming the device, the socket, the process and what to do
 *   (another `--mesh-device`)
 */
export async function checkUapiServer(device: string, socketPath: string, server: UapiServer, linkHere: boolean): Promise<void> {
  const advice = `give this node another mesh device name with --mesh-device (the default is feos-mesh; nodes side by side on one machine share ${socketPath.slice(0, socketPath.lastIndexOf('/'))})`;
  if (server.pid === 0) {
    throw new NetworkError('FAILED_PRECONDITION', `the mesh device ${device}: its UAPI socket ${socketPath} answers, but no process feosd can see accepted a connection within ${ACCEPT_TIMEOUT_MS / 1000} s (one of another PID namespace, or a wireguard-go that hangs): ${advice}`);
  }
  const who = `${server.name} (pid ${server.pid})`;
  const here = await ownNetns();
  if (server.netns !== here) {
    throw new NetworkError(
      'FAILED_PRECONDITION',
      `the mesh device ${device}: its UAPI socket ${socketPath} is served by ${who} in another network namespace (${server.netns}, not feosd's ${here}): another node on this machine uses the name ${device}; ${advice}`,
    );
  }
  if (!server.tunDevices.includes(device) || !linkHere) {
    const serves = server.tunDevices.length > 0 ? `serves ${server.tunDevices.join(', ')}` : 'serves no TUN device';
    throw new NetworkError('FAILED_PRECONDITION', `the mesh device ${device}: its UAPI socket ${socketPath} is served by ${who}, which ${serves}${linkHere ? '' : `, and ${device} is not a device of feosd's network namespace`}; ${advice}`);
  }
}
