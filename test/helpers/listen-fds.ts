/**
 * Sockets handed to a program by systemd's socket-activation protocol (sd_listen_fds(3)): Debian's
 * python3 binds them, as feosd.socket or feos-host-init would, puts them at fds 3, 4, … (in the
 * order of `kinds`), sets LISTEN_FDS, LISTEN_PID (its own pid, which the exec keeps) and
 * LISTEN_FDNAMES, and execs the program in place. Used by the suites on feosd's resolver sockets
 * (seed "DNS"; docs/feos/packages.md).
 */

/** What python3 binds and how it names the sockets it hands over. */
export interface HandOver {
  /** IPv4 address to bind (e.g. `127.0.0.1`, or `169.254.0.53` with `freebind`). */
  address: string;
  /** Port to bind; 0 lets the kernel pick. */
  port: number;
  /** LISTEN_FDNAMES: colon-separated, one name per socket (e.g. `dns:dns`); may name fewer or other. */
  names: string;
  /** The sockets, in fd order from 3: `udp` (SOCK_DGRAM) or `tcp` (SOCK_STREAM, listening, backlog 128). */
  kinds: readonly ('udp' | 'tcp')[];
  /** IP_FREEBIND: bind an address the host (or namespace) does not hold yet. Default false. */
  freebind?: boolean;
}

/**
 * feosd.socket's pair as feos-host-init binds it on a node: UDP and TCP on the resolver's address
 * 169.254.0.53 port 53, before the node holds the address, both named dns.
 */
export const RESOLVER_PAIR: HandOver = { address: '169.254.0.53', port: 53, names: 'dns:dns', kinds: ['udp', 'tcp'], freebind: true };

/**
 * The script: argv[1] is the JSON of a HandOver, argv[2:] the program and its arguments. The sockets
 * are first moved to fds 100+ so that putting them at 3, 4, … never overwrites one not yet moved.
 */
const SCRIPT = `
import json, os, socket, sys
spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
held = []
for kind in spec["kinds"]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    if spec.get("freebind"):
        s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND
    s.bind((spec["address"], spec["port"]))
    if kind == "tcp":
        s.listen(128)
    fd = s.detach()
    os.dup2(fd, 100 + len(held))
    os.close(fd)
    held.append(100 + len(held))
for i, fd in enumerate(held):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)
    os.close(fd)
os.environ.update(LISTEN_FDS=str(len(held)), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=spec["names"])
os.execv(argv[0], argv)
`;

/**
 * python3's arguments (after `python3`) that bind `spec`'s sockets and exec `argv` (argv[0] a path:
 * execv does not search PATH) with them handed over. python3 exits non-zero with its traceback on
 * stderr if a bind fails (e.g. the port is taken).
 */
export function handOverArgs(spec: HandOver, argv: string[]): string[] {
  return ['-c', SCRIPT, JSON.stringify(spec), ...argv];
}
