/**
 * feosd's network options (the seed's "The pods' network"): `--pod-prefix`, `--pod-ipv4-range`,
 * `--dns-address`, `--otlp-address`, `--dns-upstream`, `--deny-prefix`, with their defaults and checks.
 */
import { canonicalAddress, formatPrefix, parseAddress, parsePrefix, prefixHolds, prefixSize, type Prefix } from './ip.ts';

/** The pods' IPv4 gateway, answered by proxy ARP on every TAP; the node never holds it. */
export const IPV4_GATEWAY = '169.254.0.1';
/** The pods' IPv6 gateway, fe80::1/64 on every TAP. */
export const IPV6_GATEWAY = 'fe80::1';
/** The metadata service's address (the seed's "Metadata"). */
export const METADATA_ADDRESS = '169.254.169.254';
/** The default upstreams: Google's and Cloudflare's, IPv6 first. */
export const DEFAULT_DNS_UPSTREAMS = ['2001:4860:4860::8888', '2606:4700:4700::1111', '8.8.8.8', '1.1.1.1'] as const;

/** The options as given (flags' strings); every one optional. */
export interface NetworkFlags {
  /** `--pod-prefix`: the IPv6 prefix routed to the node, /1 to /120. @default none (pods with a network fail) */
  podPrefix?: string;
  /** `--pod-ipv4-range`: /1 to /30. @default '169.254.16.0/20' */
  podIpv4Range?: string;
  /** `--dns-address`: the pods' resolver, IPv4. @default '169.254.0.53' */
  dnsAddress?: string;
  /** `--otlp-address`: where pods send spans, IPv4. @default '169.254.169.1' */
  otlpAddress?: string;
  /** `--dns-upstream` (repeatable). @default {@link DEFAULT_DNS_UPSTREAMS} */
  dnsUpstreams?: string[];
  /** `--deny-prefix` (repeatable): what no pod reaches. @default none */
  denyPrefixes?: string[];
}

/** The options checked and parsed. */
export interface NetworkSettings {
  /** The pod prefix, or undefined when the node has none (then pods with a network fail). */
  podPrefix?: Prefix;
  podIpv4Range: Prefix;
  dnsAddress: string;
  otlpAddress: string;
  dnsUpstreams: string[];
  denyPrefixes: Prefix[];
}

function fail(option: string, value: string, why: string): never {
  throw new RangeError(`--${option} ${value}: ${why}`);
}

function ipv4Option(option: string, value: string): string {
  let a: ReturnType<typeof parseAddress>;
  try {
    a = parseAddress(value);
  } catch {
    fail(option, value, 'not an IP address');
  }
  if (a.family !== 4) fail(option, value, 'must be an IPv4 address');
  return canonicalAddress(value);
}

/**
 * Checks the flags and fills in the defaults, as the seed's table of options says.
 * @throws RangeError naming the option and the value: a prefix out of its lengths, the resolver
 *   or 169.254.0.1 in the IPv4 range, OTLP's address on the resolver's, on 169.254.0.1 or
 *   169.254.169.254, in the range or in a denied prefix, an upstream that is not an IP address
 */
export function parseNetworkFlags(flags: NetworkFlags): NetworkSettings {
  let podPrefix: Prefix | undefined;
  if (flags.podPrefix !== undefined && flags.podPrefix !== '') {
    try {
      podPrefix = parsePrefix(flags.podPrefix, true);
    } catch (err: unknown) {
      fail('pod-prefix', flags.podPrefix, (err as Error).message);
    }
    if (podPrefix.family !== 6) fail('pod-prefix', flags.podPrefix, 'must be an IPv6 prefix');
    if (podPrefix.length < 1 || podPrefix.length > 120) fail('pod-prefix', flags.podPrefix, 'the length must be 1 to 120');
  }
  const rangeText = flags.podIpv4Range ?? '169.254.16.0/20';
  let podIpv4Range: Prefix;
  try {
    podIpv4Range = parsePrefix(rangeText, true);
  } catch (err: unknown) {
    fail('pod-ipv4-range', rangeText, (err as Error).message);
  }
  if (podIpv4Range.family !== 4) fail('pod-ipv4-range', rangeText, 'must be an IPv4 prefix');
  if (podIpv4Range.length < 1 || podIpv4Range.length > 30) fail('pod-ipv4-range', rangeText, 'the length must be 1 to 30');
  const dnsAddress = ipv4Option('dns-address', flags.dnsAddress ?? '169.254.0.53');
  const otlpAddress = ipv4Option('otlp-address', flags.otlpAddress ?? '169.254.169.1');
  const inRange = (a: string) => prefixHolds(podIpv4Range, 4, parseAddress(a).value);
  if (inRange(dnsAddress)) fail('pod-ipv4-range', rangeText, `holds the resolver's address ${dnsAddress}`);
  if (inRange(IPV4_GATEWAY)) fail('pod-ipv4-range', rangeText, `holds the pods' gateway ${IPV4_GATEWAY}`);
  if (dnsAddress === IPV4_GATEWAY) fail('dns-address', dnsAddress, `must not be the pods' gateway ${IPV4_GATEWAY}`);
  if (otlpAddress === IPV4_GATEWAY) fail('otlp-address', otlpAddress, `must not be the pods' gateway ${IPV4_GATEWAY}`);
  if (otlpAddress === dnsAddress) fail('otlp-address', otlpAddress, "must not be the resolver's address");
  if (otlpAddress === METADATA_ADDRESS) fail('otlp-address', otlpAddress, "must not be the metadata service's address");
  if (inRange(otlpAddress)) fail('otlp-address', otlpAddress, `is in the pods' IPv4 range ${formatPrefix(podIpv4Range)}`);
  const denyPrefixes: Prefix[] = [];
  for (const d of flags.denyPrefixes ?? []) {
    try {
      denyPrefixes.push(parsePrefix(d, true));
    } catch (err: unknown) {
      fail('deny-prefix', d, (err as Error).message);
    }
  }
  const otlp = parseAddress(otlpAddress);
  for (const d of denyPrefixes) {
    if (prefixHolds(d, 4, otlp.value)) fail('otlp-address', otlpAddress, `is in the denied prefix ${formatPrefix(d)}`);
  }
  const dnsUpstreams: string[] = [];
  for (const u of flags.dnsUpstreams && flags.dnsUpstreams.length > 0 ? flags.dnsUpstreams : DEFAULT_DNS_UPSTREAMS) {
    try {
      dnsUpstreams.push(canonicalAddress(u));
    } catch {
      fail('dns-upstream', u, 'not an IP address');
    }
  }
  if (prefixSize(podIpv4Range) < 4n) fail('pod-ipv4-range', rangeText, 'holds no address for a pod');
  return { podPrefix, podIpv4Range, dnsAddress, otlpAddress, dnsUpstreams, denyPrefixes };
}

/**
 * Checks a pod's DNS upstreams as a create does (the seed's "DNS"): each must be an IP address,
 * and neither the resolver itself, a loopback, link-local or multicast address, in a denied
 * prefix, a pod's (the pod prefix or the IPv4 range) nor one of the node's addresses.
 * @param nodeAddresses the node's own addresses, canonical
 * @returns the upstreams in canonical form
 * @throws RangeError naming the upstream and why
 */
export function checkPodUpstreams(upstreams: string[], s: NetworkSettings, nodeAddresses: string[]): string[] {
  const nonUnicast = ['127.0.0.0/8', '::1/128', '169.254.0.0/16', 'fe80::/10', '224.0.0.0/4', 'ff00::/8', '0.0.0.0/32', '::/128'].map((p) => parsePrefix(p));
  return upstreams.map((u) => {
    let a: ReturnType<typeof parseAddress>;
    try {
      a = parseAddress(u);
    } catch {
      throw new RangeError(`DNS upstream "${u}" is not an IP address`);
    }
    const text = canonicalAddress(u);
    if (text === s.dnsAddress) throw new RangeError(`DNS upstream ${text} is the resolver itself`);
    if (nonUnicast.some((p) => prefixHolds(p, a.family, a.value))) throw new RangeError(`DNS upstream ${text} is a loopback, link-local, multicast or unspecified address`);
    const denied = s.denyPrefixes.find((p) => prefixHolds(p, a.family, a.value));
    if (denied) throw new RangeError(`DNS upstream ${text} is in the denied prefix ${formatPrefix(denied)}`);
    if ((s.podPrefix && prefixHolds(s.podPrefix, a.family, a.value)) || prefixHolds(s.podIpv4Range, a.family, a.value)) {
      throw new RangeError(`DNS upstream ${text} is a pod's address`);
    }
    if (nodeAddresses.includes(text)) throw new RangeError(`DNS upstream ${text} is one of the node's addresses`);
    return text;
  });
}
