/**
 * The resolver's sockets handed over by systemd's protocol (sd_listen_fds): from fd 3 on,
 * `LISTEN_FDS` of them, for this process when `LISTEN_PID` is its pid, named by `LISTEN_FDNAMES`
 * (here `dns`). The UDP socket and the listening TCP socket named `dns` are taken, the others
 * closed, and the variables removed from the environment.
 */
import { closeSync, readFileSync, readlinkSync } from 'node:fs';

/** The first fd systemd hands over. */
export const SD_LISTEN_FDS_START = 3;

/** The sockets taken: their fds, of each kind at most one. */
export interface ListenFds {
  udp?: number;
  tcp?: number;
}

function socketInodes(files: string[]): Set<string> {
  const set = new Set<string>();
  for (const f of files) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9) set.add(cols[9]);
    }
  }
  return set;
}

/**
 * Takes the `dns` sockets handed over, if any.
 * @param name the name to take. @default 'dns'
 * @returns the fds, or an empty object when nothing was handed to this process
 */
export function takeListenFds(name = 'dns', env: NodeJS.ProcessEnv = process.env): ListenFds {
  const pid = Number(env.LISTEN_PID);
  const count = Number(env.LISTEN_FDS);
  const names = (env.LISTEN_FDNAMES ?? '').split(':');
  delete env.LISTEN_PID;
  delete env.LISTEN_FDS;
  delete env.LISTEN_FDNAMES;
  if (pid !== process.pid || !(count > 0)) return {};
  const udp = socketInodes(['/proc/self/net/udp', '/proc/self/net/udp6']);
  const tcp = socketInodes(['/proc/self/net/tcp', '/proc/self/net/tcp6']);
  const out: ListenFds = {};
  for (let i = 0; i < count; i++) {
    const fd = SD_LISTEN_FDS_START + i;
    let inode = '';
    try {
      inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`))?.[1] ?? '';
    } catch {
      continue;
    }
    if (names[i] === name && udp.has(inode) && out.udp === undefined) out.udp = fd;
    else if (names[i] === name && tcp.has(inode) && out.tcp === undefined) out.tcp = fd;
    else closeSync(fd);
  }
  return out;
}

