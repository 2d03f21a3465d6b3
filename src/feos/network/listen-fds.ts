/**
 * The resolver's sockets handed over by systemd's protocol (sd_listen_fds): from fd 3 on,
 * `LISTEN_FDS` of them, for this process when `LISTEN_PID` is its pid, named by `LISTEN_FDNAMES`
 * (here `dns`). The UDP socket and the listening TCP socket named `dns` are taken, the others
 * closed, and the variables removed from the environment.
 */
import { closeSync, readFileSync, readlinkSync } from 'node:fs';

/** The first fd systemd hands over. */
export const SD_LISTEN_FDS_START = 3;

/**
 * The sockets taken: their fds, both or neither. `problem` says, for the operator, why sockets
 * handed to this process were not taken (none named `name`, or not a UDP and a listening TCP one):
 * all of them are closed then.
 */
export interface ListenFds {
  udp?: number;
  tcp?: number;
  problem?: string;
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
 * Takes the `dns` sockets handed over, if any: a UDP socket and a listening TCP socket, both named
 * `name`. Sockets handed over that are not such a pair are all closed, and `problem` says why.
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
  if (out.udp !== undefined && out.tcp !== undefined) return out;
  // None, or half a pair: the resolver binds both of its own, which a kept half would block.
  for (const fd of [out.udp, out.tcp]) if (fd !== undefined) closeSync(fd);
  const given = names.slice(0, count).join(':');
  return {
    problem: `LISTEN_FDS handed ${count} socket(s) named ${JSON.stringify(given)} (LISTEN_FDNAMES), but the resolver takes a UDP socket and a listening TCP socket both named ${name}: name them so (FileDescriptorName=${name} in feosd.socket, with its ListenDatagram= and ListenStream=) or hand none`,
  };
}

