/**
 * What the pods' network needs of the node that feosd does not set itself (seed 000, "The pods' network",
 * "Devices and routes"): a route out for each family it serves, and forwarding. Without an IPv4 route out
 * the kernel never answers a pod's ARP for its gateway 169.254.0.1 (a proxy neighbour entry is answered
 * only for an address routed through another device), so the pod's DNS and metadata time out while
 * feosd says the network is up; without an IPv6 one, the pods' IPv6 traffic has nowhere to go.
 *
 * Read from `/proc/net/route`, `/proc/net/ipv6_route` (the main table, of the network namespace of the
 * process) and the forwarding sysctls, without a process: a create with a network checks them at once.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The route flags of `/proc/net/*route`: up, and reject (an `unreachable`, `prohibit`, `blackhole` route). */
const RTF_UP = 0x0001;
const RTF_REJECT = 0x0200;

/** What the node has of what the pods' network needs. */
export interface NodeNetworkState {
  /** A default IPv4 route that is not a reject route, in the main table. */
  ipv4Route: boolean;
  /** A default IPv6 route that is not a reject route (the kernel's own `lo` reject entry is not one). */
  ipv6Route: boolean;
  /** `net.ipv4.ip_forward` is 1. */
  ipv4Forwarding: boolean;
  /** `net.ipv6.conf.all.forwarding` is 1. */
  ipv6Forwarding: boolean;
}

/** Where the state is read (tests give files of their own). */
export interface ProcPaths {
  /** @default "/proc/net" */
  net?: string;
  /** @default "/proc/sys" */
  sys?: string;
}

function read(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** Whether `/proc/net/route`'s text has a default route that is up and not a reject route. */
export function hasIpv4DefaultRoute(text: string): boolean {
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const flags = Number.parseInt(f[3], 16);
    if (f[1] === '00000000' && f[7] === '00000000' && (flags & RTF_UP) !== 0 && (flags & RTF_REJECT) === 0) return true;
  }
  return false;
}

/** Whether `/proc/net/ipv6_route`'s text has a default route (::/0) that is up and not a reject route. */
export function hasIpv6DefaultRoute(text: string): boolean {
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const flags = Number.parseInt(f[8], 16);
    if (/^0{32}$/.test(f[0]) && f[1] === '00' && (flags & RTF_UP) !== 0 && (flags & RTF_REJECT) === 0) return true;
  }
  return false;
}

/** Reads the node's state (of the process's network namespace). Never throws: what cannot be read is missing. */
export function readNodeNetwork(paths: ProcPaths = {}): NodeNetworkState {
  const net = paths.net ?? '/proc/net';
  const sys = paths.sys ?? '/proc/sys';
  return {
    ipv4Route: hasIpv4DefaultRoute(read(join(net, 'route'))),
    ipv6Route: hasIpv6DefaultRoute(read(join(net, 'ipv6_route'))),
    ipv4Forwarding: read(join(sys, 'net/ipv4/ip_forward')).trim() === '1',
    ipv6Forwarding: read(join(sys, 'net/ipv6/conf/all/forwarding')).trim() === '1',
  };
}

/**
 * What is missing, one phrase each, saying what it breaks and how to add it; empty when nothing is.
 * @param state as `readNodeNetwork` reads it
 */
export function missingPreconditions(state: NodeNetworkState): string[] {
  const out: string[] = [];
  if (!state.ipv4Route) {
    out.push("no IPv4 default route (the kernel answers a pod's ARP for its gateway 169.254.0.1 only with a route out, so its DNS and metadata would time out): add one, such as `ip route add default via GATEWAY` or `ip route add default dev DEVICE`");
  }
  if (!state.ipv6Route) {
    out.push("no IPv6 default route (the pods' IPv6 traffic would have nowhere to go): add one, such as `ip -6 route add default via GATEWAY` or `ip -6 route add default dev DEVICE`");
  }
  if (!state.ipv4Forwarding) out.push('IPv4 forwarding is off (net.ipv4.ip_forward is not 1)');
  if (!state.ipv6Forwarding) out.push('IPv6 forwarding is off (net.ipv6.conf.all.forwarding is not 1)');
  return out;
}

/**
 * Why pods with a network cannot run on this node now, as one sentence, or undefined when the node has
 * all they need.
 * @returns `the node lacks what the pods' network needs: <missing>; <missing>`
 */
export function nodeNetworkReason(paths: ProcPaths = {}): string | undefined {
  const missing = missingPreconditions(readNodeNetwork(paths));
  return missing.length === 0 ? undefined : `the node lacks what the pods' network needs: ${missing.join('; ')}`;
}
