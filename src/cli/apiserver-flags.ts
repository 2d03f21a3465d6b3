/**
 * Flags that `apiserver` and `control-plane` share for several API servers on one etcd (issue 11,
 * docs/etcd.md): `--advertise-address`, `--identity-lease-duration-seconds` and
 * `--peer-advertise-port`, named as kube-apiserver names them, and `--reuse-port` (several processes on
 * one port, as `kube32-cli up --apiservers N` runs them). Loaded to build the command tree, so it imports only commander and
 * `node:net`.
 */
import { isIP } from 'node:net';
import { Option } from 'commander';
import { CliError } from './errors.ts';

/** The most API server processes `kube32-cli up --apiservers` runs on one port. */
export const MAX_APISERVERS = 16;

/** The shared flags as commander parses them (strings as typed). */
export interface ApiServerClusterFlags {
  advertiseAddress?: string;
  identityLeaseDurationSeconds: string;
  /** `--reuse-port`: listen on `--port` with SO_REUSEPORT. */
  reusePort?: boolean;
  /** `--peer-advertise-port`: a port of this process's own for the other API servers. */
  peerAdvertisePort?: string;
}

/** The options of `--advertise-address`, `--identity-lease-duration-seconds`, `--reuse-port` and `--peer-advertise-port`, to add to a command. */
export function apiServerClusterOptions(): Option[] {
  return [
    new Option(
      '--advertise-address <ip>',
      'IP address other API servers and the default/kubernetes Endpoints use for this one (default: --bind, or this host\'s first non-internal address when --bind is 0.0.0.0)',
    ),
    new Option('--identity-lease-duration-seconds <s>', "with --storage etcd: duration of this API server's identity Lease; a killed server leaves the kubernetes Endpoints within it").default('30'),
    new Option('--reuse-port', 'listen on --port with SO_REUSEPORT (Linux): several API server processes on one etcd share the port, the kernel spreading connections among them'),
    new Option(
      '--peer-advertise-port <port>',
      'with --storage etcd: a port of this process alone, where the other API servers reach it (checkpoint data); it also listens there, on --bind (0: a free one; default: --port)',
    ),
  ];
}

/**
 * Checks the shared flags.
 * @returns the values for `createApiServer` (`advertiseAddress` undefined: the default)
 * @throws CliError naming the flag and its value
 */
export function parseApiServerClusterFlags(flags: ApiServerClusterFlags): { advertiseAddress?: string; identityLeaseDurationSeconds: number; reusePort: boolean; peerPort?: number } {
  const a = flags.advertiseAddress;
  if (a !== undefined && (!isIP(a) || a === '0.0.0.0' || a === '::')) throw new CliError(`--advertise-address must be a specified IP address (Endpoints list IPs): current value is ${a}`);
  const s = Number(flags.identityLeaseDurationSeconds);
  if (!/^\d+$/.test(flags.identityLeaseDurationSeconds) || s < 3 || s > 3600) {
    throw new CliError(`--identity-lease-duration-seconds must be an integer of 3 to 3600: current value is ${flags.identityLeaseDurationSeconds}`);
  }
  const pp = flags.peerAdvertisePort;
  if (pp !== undefined && (!/^\d+$/.test(pp) || Number(pp) > 65535)) throw new CliError(`--peer-advertise-port must be a TCP port (0-65535): current value is ${JSON.stringify(pp)}`);
  return {
    ...(a !== undefined ? { advertiseAddress: a } : {}),
    identityLeaseDurationSeconds: s,
    reusePort: flags.reusePort === true,
    ...(pp !== undefined ? { peerPort: Number(pp) } : {}),
  };
}
