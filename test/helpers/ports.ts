/**
 * Ports and loopback addresses for fixtures that run side by side: `npm test` runs two files at once
 * (scripts/run-tests.ts) and every suite starts real processes on one machine.
 *
 * Why not `listen(0)`, close, and hand the number to a child: the OS takes that number from the
 * ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 on Linux), which every
 * outgoing connection of every process draws from too. Between the close and the child's bind
 * another process may take it (a CI run lost that race: an etcd health check was answered by
 * another test's etcd). Ports picked here are below that range: only an explicit bind takes them.
 * A child that can bind port 0 itself and report the port (`--port 0`, `--kubelet-port 0`) needs
 * none of this.
 */
import { createSocket } from 'node:dgram';
import { connect, createServer } from 'node:net';
import { canListen, ephemeralLow, unusedPort } from '../../src/lib/index.ts';

export { canListen, ephemeralLow, unusedPort };

/** Where `refusedPort` picks: [15000, 20000), below the ports `unusedPort` hands to servers. */
const REFUSED_PORTS = { low: 15_000, high: 20_000 } as const;

/**
 * A TCP port on `address` where nothing listens now (a connection is refused), in a range that no
 * helper here hands to a server and that is below the ephemeral range: for "the server is not
 * there" cases. An ephemeral port closed after `listen(0)` could be listened on by anyone's
 * `listen(0)` a moment later and answer.
 */
export async function refusedPort(address = '127.0.0.1'): Promise<number> {
  for (;;) {
    const port = REFUSED_PORTS.low + Math.floor(Math.random() * (REFUSED_PORTS.high - REFUSED_PORTS.low));
    const refused = await new Promise<boolean>((resolve) => {
      const s = connect({ host: address, port });
      s.once('connect', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'));
    });
    if (refused) return port;
  }
}

/** The port each claimed range's lock listens on, at `127.A.B.1` (beside the kubelet's 10250). */
const RANGE_LOCK_PORT = 10_249;

/**
 * Claims a loopback /24 of its own, `127.A.B` (A and B in 1..250), for one suite's workers and
 * pods: a listener on `127.A.B.1:10249` is the lock, so two suites that run at once (each a process
 * of its own) never share an address, which random picks alone cannot promise. The lock is held
 * until this process exits (unreferenced: it keeps nothing alive), not released at a test's end,
 * where it would be let go before the test's own cleanups had stopped the processes on the range.
 * Workers take `127.A.B.2` and up. Fixed addresses (test/kubelet's 127.0.0.2–127.0.0.61) are each
 * used by one file only, and `kube32-cli up` without `--first-address` uses 127.0.N.2, outside these
 * ranges.
 * @returns the prefix, e.g. `127.37.201` (append `.2`, `.3`, ...)
 * @throws Error when no range can be claimed (every one tried is held)
 */
export async function claimLoopbackRange(): Promise<string> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const prefix = `127.${1 + Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
    const lock = createServer();
    const held = await new Promise<boolean>((resolve, reject) => {
      lock.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(false) : reject(err)));
      lock.listen({ host: `${prefix}.1`, port: RANGE_LOCK_PORT, exclusive: true }, () => resolve(true));
    });
    if (!held) continue;
    lock.unref();
    return prefix;
  }
  throw new Error('no loopback range 127.A.B could be claimed: 200 tries found each one held');
}

/** Where `unusedUdpPort` picks: [21000, 26000), below the ephemeral range. */
const UDP_PORTS = { low: 21_000, high: 26_000 } as const;

/**
 * A UDP port that nothing holds now on any address (bound on `::`, both families, and let go), below the
 * ephemeral range: for a WireGuard device's listen port (feosd's `--mesh-port`) in the host's namespace, where
 * the default 51820 may be another's.
 * @throws Error when 200 tries find each one taken
 */
export async function unusedUdpPort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = UDP_PORTS.low + Math.floor(Math.random() * (UDP_PORTS.high - UDP_PORTS.low));
    const free = await new Promise<boolean>((resolve) => {
      const s = createSocket({ type: 'udp6', ipv6Only: false });
      s.once('error', () => {
        s.close();
        resolve(false);
      });
      s.bind({ port, address: '::', exclusive: true }, () => s.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free UDP port: 200 tries found each one taken');
}
