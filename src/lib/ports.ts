/**
 * Ports for a child process that must be told its port before it binds it (a local etcd's client and
 * peer ports, a pod's containerPort in a test, an API server restarted on the port its clients know).
 *
 * Why not `listen(0)`, close, and hand the number on: the OS takes that number from the ephemeral
 * range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 on Linux), which every outgoing
 * connection of every process draws from too. Between the close and the child's bind another process
 * may take it (a CI run lost that race: an etcd health check was answered by another test's etcd).
 * Ports picked here are below that range: only an explicit bind takes them. A child that can bind
 * port 0 itself and report the port needs none of this.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Where `unusedPort` picks: [20000, the ephemeral range). Below 20000 is left to tests' refused ports. */
export const UNUSED_PORTS_LOW = 20_000;

/** The first port of the ephemeral range, read from the kernel (32768 when it cannot be read). */
export function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 1024 ? low : 32_768;
  } catch {
    return 32_768;
  }
}


/** Whether `port` can be listened on at `address` now (tried with an exclusive listen, then closed). */
export function canListen(address: string, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' || err.code === 'EACCES' ? resolve(false) : reject(err)));
    s.listen({ host: address, port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

/**
 * A TCP port, below the ephemeral range, that can be listened on at every one of `addresses` now:
 * for a child that must be told its port (a pod's containerPort, a registry's `addr`, an API server
 * restarted on the port its clients know). No outgoing connection can take it before the child binds
 * it; another fixture picking at random from the same range could, with odds of about one in 12 000,
 * so the child's readiness check must still make sure that the process answering is the one started.
 * @param addresses IPv4 addresses, e.g. `127.0.0.1` or a worker's `127.A.B.2`
 * @param taken ports not to answer (already handed out by the caller), updated with the answer
 * @throws Error from listen other than EADDRINUSE (e.g. EADDRNOTAVAIL for an address not on this computer)
 */
export async function unusedPort(addresses: string | string[], taken: Set<number> = new Set()): Promise<number> {
  const all = typeof addresses === 'string' ? [addresses] : addresses;
  const high = ephemeralLow();
  for (;;) {
    const port = UNUSED_PORTS_LOW + Math.floor(Math.random() * (high - UNUSED_PORTS_LOW));
    if (taken.has(port)) continue;
    let free = true;
    for (const a of all) free = free && (await canListen(a, port));
    if (free) {
      taken.add(port);
      return port;
    }
  }
}

