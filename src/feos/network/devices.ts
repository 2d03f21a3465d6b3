/**
 * The node's devices and routes (the seed's "Devices and routes"), each an ensure-and-undo step:
 * the node's setup at start (forwarding, the unreachable pod prefix, the dummy `feos-dns`) and a
 * pod's TAP device with every setting the seed lists.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readdir } from 'node:fs/promises';
import type { Logger } from '../../lib/index.ts';
import { formatPrefix, type Prefix } from './ip.ts';
import { IPV4_GATEWAY } from './options.ts';
import { TAP_PREFIX } from './pod-link.ts';
import { getSysctl, ip, ipJson, isMissing, run, setSysctl } from './system.ts';

/** The dummy device that holds the resolver's and OTLP's addresses (an ifb device where the kernel has no dummy driver). */
export const DNS_DEVICE = 'feos-dns';

interface IpAddrInfo {
  ifname: string;
  addr_info?: Array<{ family: string; local: string; prefixlen: number; scope: string }>;
}

interface IpLink {
  ifname: string;
  link_type?: string;
  linkinfo?: { info_kind?: string };
}

async function ignoreMissing(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err: unknown) {
    if (!isMissing(err)) throw err;
  }
}

/** Whether a link exists. */
export async function linkExists(name: string): Promise<boolean> {
  try {
    await ipJson('link', 'show', 'dev', name);
    return true;
  } catch (err: unknown) {
    if (isMissing(err)) return false;
    throw err;
  }
}

/** Where the NAT64 version pinned its BPF maps. */
export const LEGACY_NAT64_BPF_DIR = '/sys/fs/bpf/feos/nat64';

/**
 * Removes what earlier versions of the network left: the bridge `feos-pods`, the table
 * `bridge feos`, the device `feos-nat64` (its routes and its program go with it), the maps it
 * pinned in `bpfDir` and the NAT64 pool's counter `<podsDir>/next-address`.
 */
export async function removeLegacyNetwork(podsDir: string, log: Logger, bpfDir = LEGACY_NAT64_BPF_DIR): Promise<void> {
  for (const dev of ['feos-pods', 'feos-nat64']) {
    if (await linkExists(dev)) {
      await ip('link', 'del', 'dev', dev);
      log.info({ device: dev }, 'removed an earlier network device');
    }
  }
  try {
    await run('nft', ['delete', 'table', 'bridge', 'feos']);
    log.info('removed the earlier table bridge feos');
  } catch {
    // None, or a kernel without the bridge family.
  }
  await rm(join(podsDir, 'next-address'), { force: true });
  await rm(bpfDir, { recursive: true, force: true });
}

/**
 * The node's side at start: RA-taking interfaces keep taking them (accept_ra 1 → 2), IPv4 and
 * IPv6 forwarding on, the pod prefix routed as unreachable, and `feos-dns` with the resolver's
 * and OTLP's /32s and no other global address, up.
 * @throws NetworkError INTERNAL naming the step that failed
 */
export async function setUpNode(opts: { podPrefix?: Prefix; dnsAddress: string; otlpAddress: string }): Promise<void> {
  for (const dev of await readdir('/proc/sys/net/ipv6/conf')) {
    if ((await getSysctl(`net/ipv6/conf/${dev}/accept_ra`)) === '1') await setSysctl(`net/ipv6/conf/${dev}/accept_ra`, 2);
  }
  await setSysctl('net/ipv4/ip_forward', 1);
  await setSysctl('net/ipv6/conf/all/forwarding', 1);
  if (opts.podPrefix) await ip('-6', 'route', 'replace', 'unreachable', formatPrefix(opts.podPrefix));
  if (!(await linkExists(DNS_DEVICE))) {
    try {
      await ip('link', 'add', DNS_DEVICE, 'type', 'dummy');
    } catch (err: unknown) {
      // A kernel without the dummy driver (such as a microVM's): an ifb device, which sends
      // nothing of its own either, holds the addresses as well.
      if (!/Unknown device type/.test(String((err as { stderr?: string }).stderr))) throw err;
      await ip('link', 'add', DNS_DEVICE, 'type', 'ifb');
    }
  }
  await setSysctl(`net/ipv6/conf/${DNS_DEVICE}/disable_ipv6`, 1).catch(() => {});
  const want = [`${opts.dnsAddress}/32`, `${opts.otlpAddress}/32`];
  const [info] = await ipJson<IpAddrInfo[]>('addr', 'show', 'dev', DNS_DEVICE);
  for (const a of info?.addr_info ?? []) {
    const text = `${a.local}/${a.prefixlen}`;
    if (a.scope === 'global' && !want.includes(text)) await ip('addr', 'del', text, 'dev', DNS_DEVICE);
  }
  for (const w of want) await ip('addr', 'replace', w, 'dev', DNS_DEVICE);
  await ip('link', 'set', 'dev', DNS_DEVICE, 'up');
}

/** The pod TAP devices there are (`pod-*`), such as those a pod left that is gone. */
export async function listPodLinks(): Promise<string[]> {
  const links = await ipJson<IpLink[]>('link', 'show');
  return links.map((l) => l.ifname.split('@')[0]).filter((n) => n.startsWith(TAP_PREFIX));
}

/** What a pod's link gets: its name and its addresses. */
export interface PodLinkSpec {
  /** `pod-<ID>`. */
  tap: string;
  ipv6?: string;
  ipv4: string;
  dnsAddress: string;
  otlpAddress: string;
}

/**
 * Makes (or takes, when it is there, such as a veth of a test) the pod's link and sets it as
 * the seed lists, in order: no router advertisements, no autoconfiguration and no kernel
 * link-local before it goes up; the resolver's /32 first and OTLP's; `arp_ignore 1`,
 * `arp_announce 2`, forwarding; `fe80::1/64` without DAD; the proxy neighbour entry for
 * 169.254.0.1 with `proxy_delay 0`; up; the /128 and /32 routes. Every step can run again.
 * @throws NetworkError INTERNAL naming the command that failed
 */
export async function ensurePodLink(spec: PodLinkSpec): Promise<void> {
  const { tap } = spec;
  if (!(await linkExists(tap))) await ip('tuntap', 'add', 'dev', tap, 'mode', 'tap', 'vnet_hdr');
  await setSysctl(`net/ipv6/conf/${tap}/accept_ra`, 0);
  await setSysctl(`net/ipv6/conf/${tap}/autoconf`, 0);
  await ip('link', 'set', 'dev', tap, 'addrgenmode', 'none');
  await setSysctl(`net/ipv6/conf/${tap}/forwarding`, 1);
  await setSysctl(`net/ipv4/conf/${tap}/arp_ignore`, 1);
  await setSysctl(`net/ipv4/conf/${tap}/arp_announce`, 2);
  await setSysctl(`net/ipv4/conf/${tap}/forwarding`, 1);
  // The resolver's address first: the TAP's primary IPv4 address, what its ARP asks from.
  const [info] = await ipJson<IpAddrInfo[]>('addr', 'show', 'dev', tap);
  const have = new Set((info?.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`));
  const want4 = [`${spec.dnsAddress}/32`, `${spec.otlpAddress}/32`];
  for (const a of info?.addr_info ?? []) {
    const text = `${a.local}/${a.prefixlen}`;
    if (a.family === 'inet' && !want4.includes(text)) await ip('addr', 'del', text, 'dev', tap);
  }
  if (!have.has(want4[0])) {
    // Only an address put first is primary: start over when the resolver's is missing.
    if (have.has(want4[1])) await ip('addr', 'del', want4[1], 'dev', tap);
    await ip('addr', 'add', want4[0], 'dev', tap);
  }
  await ip('addr', 'replace', want4[1], 'dev', tap);
  await ip('-6', 'addr', 'replace', 'fe80::1/64', 'dev', tap, 'nodad');
  await setSysctl(`net/ipv4/neigh/${tap}/proxy_delay`, 0);
  await ip('neigh', 'replace', 'proxy', IPV4_GATEWAY, 'dev', tap);
  await ip('link', 'set', 'dev', tap, 'up');
  if (spec.ipv6) await ip('-6', 'route', 'replace', `${spec.ipv6}/128`, 'dev', tap);
  await ip('route', 'replace', `${spec.ipv4}/32`, 'dev', tap);
}

/** Deletes the pod's link, which takes its routes and its proxy entry with it; a missing one is done. */
export async function deletePodLink(tap: string): Promise<void> {
  await ignoreMissing(ip('link', 'del', 'dev', tap));
}

/**
 * Deletes the connection tracking entries whose original source is one of the addresses
 * (`conntrack -D -s`); none is nothing to do.
 */
export async function deleteConntrack(addresses: string[]): Promise<void> {
  for (const a of addresses) {
    const family = a.includes(':') ? 'ipv6' : 'ipv4';
    for (const dir of ['-s', '-d']) {
      try {
        await run('conntrack', ['-D', '-f', family, dir, a]);
      } catch (err: unknown) {
        // conntrack exits 1 when nothing matched.
        if (!/0 flow entries|have been deleted/.test(String((err as { stderr?: string }).stderr))) throw err;
      }
    }
  }
}
