/**
 * feosd's command line (seed 000, "feosd"; docs/feos/feosd.md):
 *   feosd [--state-dir DIR] [--run-dir DIR] [--guest-dir DIR] [--tcp ADDRESS] [--self-upgrade]
 *         [--accel auto|kvm|tcg] [--qemu PATH] [--vms-cgroup DIR [--hand-over-vms]] [--clock-max-rtt MS]
 *         [--stop-grace SECONDS] [--suspend-on-stop] [--object-store URL] ...
 * It serves until SIGTERM or SIGINT; the microVMs run on after it ends, or with --suspend-on-stop are
 * suspended for the next feosd.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { createLogger } from '../lib/index.ts';
import { errorMessage } from './api/index.ts';
import { handOverVmsOf, startFeosd } from './daemon.ts';
import { takeListenFds } from './network/index.ts';
import { cgroup2Mount } from './microvm/index.ts';
import { FEOSD_VERSION } from './host/index.ts';
import { openObjectStore } from './store/index.ts';
import { STOP_MARGIN_MS } from './pods/index.ts';
import { splitAddress } from './fleet/index.ts';
import { insecureRegistry } from './registry-flags.ts';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { isIP } from 'node:net';

/** The longest `--stop-grace` (s): Node.js's timers hold at most 2^31 - 1 ms (24.8 days). */
export const MAX_STOP_GRACE_S = Math.floor((2 ** 31 - 1) / 1000);

/**
 * `--s3-endpoint`: an http(s) URL.
 * @throws InvalidArgumentError naming the value and the form wanted
 */
function s3Endpoint(v: string): string {
  let u: URL | undefined;
  try {
    u = new URL(v);
  } catch {}
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) throw new InvalidArgumentError(`--s3-endpoint ${JSON.stringify(v)}: want an http:// or https:// URL (such as http://127.0.0.1:8080)`);
  return v;
}

function positive(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${name}: want a positive number, got ${JSON.stringify(v)}`);
    return n;
  };
}

/** A flag's number of 0 or more (0 turns its feature off). */
function nonNegative(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${name}: want a number of seconds, 0 or more, got ${JSON.stringify(v)}`);
    return n;
  };
}

/**
 * `--registry-forward`'s value: `host:port` or `[IPv6]:port`, a host name or an address (each microVM's
 * guestfwd runs `busybox nc host port`) and a port from 1 to 65535.
 * @throws InvalidArgumentError naming the flag and the value
 */
export function registryForward(v: string, prev: string[] = []): string[] {
  const m = /^(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$/.exec(v);
  const port = m ? Number(m[1]) : 0;
  if (!m || port < 1 || port > 65535 || (v.startsWith('[') && isIP(v.slice(1, v.lastIndexOf(']'))) !== 6)) {
    throw new InvalidArgumentError(`--registry-forward ${JSON.stringify(v)}: want host:port or [IPv6]:port with a port from 1 to 65535 (such as 127.0.0.1:5000)`);
  }
  return [...prev, v];
}

/**
 * `--vms-cgroup`'s value: a cgroup v2 directory (it has `cgroup.controllers`), where each microVM gets
 * `vms/<id>`; without one, each microVM only logged that it was not placed.
 * @throws InvalidArgumentError naming the flag, the directory and what it lacks
 */
export function vmsCgroup(v: string): string {
  if (!existsSync(join(v, 'cgroup.controllers'))) {
    throw new InvalidArgumentError(`--vms-cgroup ${JSON.stringify(v)}: not a cgroup v2 directory (no cgroup.controllers there)${vmsCgroupHint(v, cgroup2Mount())}; leave it out for no cgroups`);
  }
  return v;
}

/**
 * What `--vms-cgroup`'s error adds where this host's cgroup v2 is elsewhere: on a hybrid host (v2 at
 * /sys/fs/cgroup/unified, as systemd's hybrid mode mounts it) the same path below that mount, which
 * FEOSD_ARGS can give (the package's unit names /sys/fs/cgroup/system.slice/feos-vms.service); where no
 * cgroup v2 is mounted, that. `mount` is {@link cgroup2Mount}'s answer.
 */
export function vmsCgroupHint(v: string, mount: string | undefined): string {
  if (mount === undefined) return '; no cgroup v2 hierarchy is mounted on this host';
  const base = '/sys/fs/cgroup';
  if (mount === base || mount === v || v.startsWith(`${mount}/`) || !(v === base || v.startsWith(`${base}/`))) return '';
  return `; cgroup v2 is at ${mount} on this host: give --vms-cgroup ${join(mount, v.slice(base.length))} (in FEOSD_ARGS of /etc/default/feosd: the last one given counts)`;
}

/**
 * `--control-plane`'s value: `host:port` or `[IPv6]:port`, a port from 1 to 65535.
 * @throws InvalidArgumentError naming the flag and the value
 */
export function controlPlane(v: string): string {
  try {
    splitAddress(v);
  } catch (err: unknown) {
    throw new InvalidArgumentError(`--control-plane ${errorMessage(err)}`);
  }
  return v;
}

/** `--mesh-port`: a UDP port, 1 to 65535. @throws InvalidArgumentError naming the value */
export function meshPort(v: string): number {
  const n = Number(v);
  if (!/^\d{1,5}$/.test(v) || n < 1 || n > 65535) throw new InvalidArgumentError(`--mesh-port ${JSON.stringify(v)}: want a UDP port from 1 to 65535 (the default is 51820)`);
  return n;
}

/** `--mesh-address`: an IPv4 or IPv6 address, without a port. @throws InvalidArgumentError naming the value */
export function meshAddress(v: string): string {
  if (isIP(v) === 0) throw new InvalidArgumentError(`--mesh-address ${JSON.stringify(v)}: want an IP address without a port (such as 192.0.2.10); the port is --mesh-port`);
  return v;
}

/** `--mesh-device`: a network device name, 1 to 15 characters. @throws InvalidArgumentError naming the value */
export function meshDevice(v: string): string {
  if (!/^[A-Za-z0-9_.=+-]{1,15}$/.test(v)) throw new InvalidArgumentError(`--mesh-device ${JSON.stringify(v)}: want a device name of 1 to 15 letters, digits and _.=+- (the default is feos-mesh)`);
  return v;
}

/**
 * `--node-name`'s value, lowercased: a DNS-1123 subdomain (at most 253 characters of [a-z0-9.-], each
 * label starting and ending with a letter or digit), as a Kubernetes Node's name.
 * @throws InvalidArgumentError naming the flag and the value
 */
export function nodeName(v: string): string {
  const n = v.toLowerCase();
  if (n.length > 253 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(n)) {
    throw new InvalidArgumentError(`--node-name ${JSON.stringify(v)}: want a DNS-1123 subdomain (letters, digits, '-' and '.', at most 253 characters, such as node-1)`);
  }
  return n;
}

/** Runs feosd with `argv` (process.argv: node, script, flags...). */
export async function main(argv: string[]): Promise<void> {
  // The resolver's sockets systemd (feosd.socket), feos-host-init or a self-upgrade handed over, taken
  // before anything else runs, and their variables out of the environment that QEMU inherits (seed "DNS").
  const listenFds = takeListenFds('dns');
  if (listenFds.problem) {
    // A socket unit that hands other sockets than feosd.socket's: the resolver's own would collide with them.
    process.stderr.write(`feosd: ${listenFds.problem}\n`);
    process.exit(1);
  }
  const program = new Command('feosd')
    .description('FeOS node agent: pods as microVMs, served over gRPC')
    .version(FEOSD_VERSION)
    .option('--state-dir <dir>', 'records, disks, microVM directories, the lock', '/var/lib/feos')
    .option('--run-dir <dir>', 'the API socket api.sock', '/run/feos')
    .option('--guest-dir <dir>', 'installed guest versions', '/usr/lib/feos/guest')
    .option('--tcp <address>', 'also serve on TCP, host:port (port 0 asks the OS)')
    .option('--self-upgrade', 'allow HostService.UpgradeFeosBinary', false)
    .addOption(new Option('--accel <accel>', 'the VMM accelerator').choices(['auto', 'kvm', 'tcg']).default('auto'))
    .option('--qemu <path>', 'the QEMU binary', 'qemu-system-x86_64')
    // Checked once parsed (vmsCgroup, below): the last one given counts, as FEOSD_ARGS' after the unit's.
    .option('--vms-cgroup <dir>', 'a cgroup v2 directory for the microVMs (vms/<id>); the last one given counts')
    .option('--hand-over-vms', "move the microVMs below feosd's own cgroup to --vms-cgroup, then exit (feosd.service's ExecStopPost=)", false)
    .option('--clock-max-rtt <ms>', 'drop guest clock measurements whose round trip is longer', positive('--clock-max-rtt'), 10)
    .option('--pod-prefix <prefix>', "the IPv6 prefix routed to the node (runs the pods' network)")
    .option('--pod-ipv4-range <prefix>', "the pods' IPv4 addresses (default 169.254.16.0/20)")
    .option('--dns-address <address>', "the pods' resolver (default 169.254.0.53)")
    .option('--otlp-address <address>', 'where pods send spans (default 169.254.169.1)')
    .option('--dns-upstream <address>', 'an upstream of pods that name none (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .option('--deny-prefix <prefix>', 'what no pod reaches (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .option('--stop-grace <seconds>', 'how long a stop may take; the calls in flight get a tenth of it, 30 s at most', positive('--stop-grace'), 300)
    .option('--suspend-on-stop', 'on SIGTERM, suspend the running pods for the next feosd (suspended-for-stop.json)', false)
    .option('--object-store <url>', 'where pods hibernate: file:///absolute/path or s3://BUCKET/PREFIX', (v: string) => {
      let store: ReturnType<typeof openObjectStore>;
      try {
        store = openObjectStore(v);
      } catch (err: unknown) {
        throw new InvalidArgumentError(errorMessage(err));
      }
      // A local directory's path that exists must be a directory (one that does not exist is made).
      const root = (store as { root?: string }).root;
      if (root !== undefined && existsSync(root) && !statSync(root).isDirectory()) throw new InvalidArgumentError(`${root} exists and is not a directory`);
      return v;
    })
    .option('--s3-endpoint <url>', "the S3 server of an s3:// object store (default AWS's for the region)", s3Endpoint)
    .option('--s3-region <region>', 'the region of an s3:// object store (default $AWS_REGION, else us-east-1)')
    .option('--guest-attach-timeout <seconds>', "how long a boot's guest has to attach (default 60, 180 under TCG)", positive('--guest-attach-timeout'))
    .option('--registry-forward <host:port>', "a registry on the node that every pod reaches through its microVM's own link (repeatable)", registryForward)
    .option('--insecure-registry <host:port>', 'a registry the guest pulls from over plain HTTP, not HTTPS (repeatable)', insecureRegistry)
    .option('--control-plane <host:port>', "join the control plane at its port for nodes (Kube32's --feos-listen)", controlPlane)
    .option('--control-plane-name <name>', "the DNS name the control plane's certificate is checked for (default: the host of --control-plane)")
    .option('--trust-domain <name>', "the control plane's SPIFFE trust domain", 'feos.local')
    .option('--join-token-file <path>', 'the join token, feos-join-<token-id>-<token-secret>.<pin> as kube32-cli feos token create prints it, read while the node has not joined', '/etc/feos/join-token')
    .option('--node-dir <dir>', "the node's identity for the control plane (default: STATE-DIR/node, /var/lib/feos/node)")
    .option('--node-name <name>', "the node's name in the cluster (default: the hostname, lowercased)", nodeName)
    .option('--mesh-port <port>', "the UDP port of the mesh's WireGuard device, on a node without --pod-prefix", meshPort, 51820)
    .option('--mesh-address <address>', "where the other nodes reach the node's mesh (default: the address from which the node reaches the control plane)", meshAddress)
    .option('--mesh-device <name>', "the mesh's WireGuard device (distinct names for nodes side by side on one machine)", meshDevice, 'feos-mesh')
    .option('--wireguard-go <path>', "the wireguard-go that makes the mesh's device without kernel WireGuard (a path, or a name looked up in PATH)", 'wireguard-go')
    .option('--fence-after <seconds>', "with --control-plane: suspend the cluster's pods once no report reached it for this long, as it may restore them elsewhere (0: never)", nonNegative('--fence-after'), 40)
    .allowExcessArguments(false);
  program.parse(argv);
  const opts = program.opts<{
    stateDir: string;
    runDir: string;
    guestDir: string;
    tcp?: string;
    selfUpgrade: boolean;
    accel: 'auto' | 'kvm' | 'tcg';
    qemu: string;
    vmsCgroup?: string;
    handOverVms: boolean;
    clockMaxRtt: number;
    guestAttachTimeout?: number;
    stopGrace: number;
    suspendOnStop: boolean;
    objectStore?: string;
    s3Endpoint?: string;
    s3Region?: string;
    podPrefix?: string;
    podIpv4Range?: string;
    dnsAddress?: string;
    otlpAddress?: string;
    dnsUpstream?: string[];
    denyPrefix?: string[];
    registryForward?: string[];
    controlPlane?: string;
    controlPlaneName?: string;
    trustDomain: string;
    joinTokenFile: string;
    nodeDir?: string;
    nodeName?: string;
    fenceAfter: number;
    insecureRegistry?: string[];
    meshPort: number;
    meshAddress?: string;
    meshDevice: string;
    wireguardGo: string;
  }>();
  if (opts.vmsCgroup !== undefined) {
    try {
      vmsCgroup(opts.vmsCgroup);
    } catch (err: unknown) {
      program.error(`error: option '--vms-cgroup <dir>' argument '${opts.vmsCgroup}' is invalid. ${errorMessage(err)}`);
    }
  }
  if ((opts.s3Endpoint || opts.s3Region) && !opts.objectStore?.startsWith('s3:')) {
    program.error(`error: ${opts.s3Endpoint ? '--s3-endpoint' : '--s3-region'} is for an S3 object store: give --object-store s3://BUCKET/PREFIX too`);
  }
  if (opts.stopGrace > MAX_STOP_GRACE_S) {
    program.error(`error: option '--stop-grace <seconds>' argument '${opts.stopGrace}' is invalid. at most ${MAX_STOP_GRACE_S} s (24.8 days, the longest timer Node.js keeps)`);
  }
  if (opts.suspendOnStop && opts.stopGrace * 1000 <= STOP_MARGIN_MS) {
    program.error(
      `error: --stop-grace ${opts.stopGrace} with --suspend-on-stop: the suspends end ${STOP_MARGIN_MS / 1000} s before the grace does, so none would be made; give more than ${STOP_MARGIN_MS / 1000} s (the default is 300)`,
    );
  }
  const log = createLogger('feosd');
  if (opts.handOverVms) {
    const to = opts.vmsCgroup;
    if (!to) return program.error('error: --hand-over-vms needs --vms-cgroup DIR: where the microVMs go (such as /sys/fs/cgroup/system.slice/feos-vms.service)');
    try {
      const moved = await handOverVmsOf(to);
      log.info({ to: opts.vmsCgroup, microVms: moved }, `handed ${moved.length} microVM(s) over to --vms-cgroup`);
      return;
    } catch (err: unknown) {
      log.fatal({ err: errorMessage(err) }, 'feosd --hand-over-vms failed');
      process.exit(1);
    }
  }
  const ac = new AbortController();
  let feosd: Awaited<ReturnType<typeof startFeosd>> | undefined;
  let stopping = false;
  const stop = (sig: string) => {
    if (stopping) return;
    stopping = true;
    const graceEndsAt = Date.now() + opts.stopGrace * 1000;
    log.info({ signal: sig, suspendOnStop: opts.suspendOnStop }, opts.suspendOnStop ? 'feosd stopping; the running pods are suspended' : 'feosd stopping; the microVMs run on');
    ac.abort();
    void (
      feosd?.close({ callsGraceMs: Math.min(30_000, (opts.stopGrace * 1000) / 10), suspendOnStop: opts.suspendOnStop, graceEndsAt }) ?? Promise.resolve()
    )
      .catch((err: unknown) => log.error({ err: errorMessage(err) }, 'feosd stop'))
      .finally(() => process.exit(0));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  try {
    feosd = await startFeosd(
      {
        stateDir: opts.stateDir,
        runDir: opts.runDir,
        guestDir: opts.guestDir,
        tcp: opts.tcp,
        selfUpgrade: opts.selfUpgrade,
        accelerator: opts.accel,
        qemu: opts.qemu,
        vmsCgroup: opts.vmsCgroup,
        listenFds,
        clockMaxRttMs: opts.clockMaxRtt,
        guestAttachMs: opts.guestAttachTimeout === undefined ? undefined : opts.guestAttachTimeout * 1000,
        networkFlags: {
          podPrefix: opts.podPrefix,
          podIpv4Range: opts.podIpv4Range,
          dnsAddress: opts.dnsAddress,
          otlpAddress: opts.otlpAddress,
          dnsUpstreams: opts.dnsUpstream,
          denyPrefixes: opts.denyPrefix,
        },
        registryForwards: opts.registryForward,
        insecureRegistries: opts.insecureRegistry,
        objectStore: opts.objectStore && openObjectStore(opts.objectStore, { endpoint: opts.s3Endpoint, region: opts.s3Region }),
        fleet: opts.controlPlane
          ? { controlPlane: opts.controlPlane, controlPlaneName: opts.controlPlaneName, trustDomain: opts.trustDomain, joinTokenFile: opts.joinTokenFile, nodeDir: opts.nodeDir ?? join(opts.stateDir, 'node'), nodeName: opts.nodeName, fenceAfterMs: opts.fenceAfter * 1000 }
          : undefined,
        mesh: { port: opts.meshPort, address: opts.meshAddress, device: opts.meshDevice, wireguardGo: opts.wireguardGo },
        log,
      },
      ac.signal,
    );
    if (feosd.tcpPort !== undefined) process.stdout.write(`feosd: serving on TCP port ${feosd.tcpPort}\n`);
  } catch (err: unknown) {
    if (stopping) return;
    log.fatal({ err: errorMessage(err) }, 'feosd could not start');
    process.exit(1);
  }
}
