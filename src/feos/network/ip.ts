/**
 * IP addresses and prefixes as numbers (bigint), for the pods' network: parsing, formatting,
 * containment and the subtraction of address blocks (the seed's "Addresses" and "The table").
 */
import { isIPv4, isIPv6 } from 'node:net';

/** An address family: 4 or 6. */
export type Family = 4 | 6;

/** An IP prefix: its family, its first address as a number, and its length in bits. */
export interface Prefix {
  family: Family;
  /** The network address (host bits zero), as a number. */
  address: bigint;
  /** The prefix length, 0 to 32 (IPv4) or 0 to 128 (IPv6). */
  length: number;
}

/** Bits of an address of the family. */
export function familyBits(family: Family): number {
  return family === 4 ? 32 : 128;
}

/** The family of an address string, or undefined when it is none. */
export function addressFamily(text: string): Family | undefined {
  if (isIPv4(text)) return 4;
  if (isIPv6(text)) return 6;
  return undefined;
}

/**
 * Parses an IPv4 or IPv6 address (no zone, no prefix) into a number.
 * @throws RangeError when `text` is not an IP address
 */
export function parseAddress(text: string): { family: Family; value: bigint } {
  if (isIPv4(text)) {
    let v = 0n;
    for (const part of text.split('.')) v = (v << 8n) | BigInt(Number(part));
    return { family: 4, value: v };
  }
  if (isIPv6(text) && !text.includes('%')) {
    let t = text;
    // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two groups.
    const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(t);
    if (v4) {
      const n = parseAddress(v4[1]).value;
      t = `${t.slice(0, -v4[1].length)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
    }
    const [head, tail] = t.includes('::') ? t.split('::') : [t, undefined];
    const h = head ? head.split(':') : [];
    const tl = tail !== undefined && tail !== '' ? tail.split(':') : [];
    const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - tl.length).fill('0'), ...tl];
    let v = 0n;
    for (const g of groups) v = (v << 16n) | BigInt(Number.parseInt(g, 16));
    return { family: 6, value: v };
  }
  throw new RangeError(`"${text}" is not an IP address`);
}

/** Formats a number as an address of the family (IPv6 in RFC 5952's canonical form). */
export function formatAddress(family: Family, value: bigint): string {
  if (family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => ((value >> s) & 0xffn).toString()).join('.');
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(i * 16)) & 0xffffn));
  // The longest run of two or more zero groups becomes "::" (the first one on a tie).
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/** The canonical text of an address ("2001:DB8:0::1" → "2001:db8::1"). @throws RangeError as {@link parseAddress} */
export function canonicalAddress(text: string): string {
  const a = parseAddress(text);
  return formatAddress(a.family, a.value);
}

/**
 * Parses "ADDRESS/LENGTH" (or a bare address, as its /32 or /128).
 * @param strict when true, host bits must be zero ("10.0.0.1/8" is refused)
 * @throws RangeError naming the text when it is not a prefix
 */
export function parsePrefix(text: string, strict = false): Prefix {
  const slash = text.indexOf('/');
  const addrText = slash < 0 ? text : text.slice(0, slash);
  const { family, value } = parseAddress(addrText);
  const bits = familyBits(family);
  let length = bits;
  if (slash >= 0) {
    const lenText = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(lenText) || Number(lenText) > bits) {
      throw new RangeError(`"${text}" is not a prefix: the length must be 0 to ${bits}`);
    }
    length = Number(lenText);
  }
  const address = value & prefixMask(family, length);
  if (strict && address !== value) throw new RangeError(`"${text}" has host bits set: the prefix is ${formatAddress(family, address)}/${length}`);
  return { family, address, length };
}

/** The netmask of a prefix length as a number. */
export function prefixMask(family: Family, length: number): bigint {
  const bits = BigInt(familyBits(family));
  const all = (1n << bits) - 1n;
  return length === 0 ? 0n : (all >> (bits - BigInt(length))) << (bits - BigInt(length));
}

/** Formats a prefix as "ADDRESS/LENGTH". */
export function formatPrefix(p: Prefix): string {
  return `${formatAddress(p.family, p.address)}/${p.length}`;
}

/** The number of addresses of a prefix. */
export function prefixSize(p: Prefix): bigint {
  return 1n << BigInt(familyBits(p.family) - p.length);
}

/** The last address of a prefix. */
export function prefixLast(p: Prefix): bigint {
  return p.address + prefixSize(p) - 1n;
}

/** Whether `p` holds the address `value` of `family`. */
export function prefixHolds(p: Prefix, family: Family, value: bigint): boolean {
  return p.family === family && (value & prefixMask(family, p.length)) === p.address;
}

/** Whether `outer` holds all of `inner`. */
export function prefixCovers(outer: Prefix, inner: Prefix): boolean {
  return outer.family === inner.family && outer.length <= inner.length && prefixHolds(outer, inner.family, inner.address);
}

/** Whether two prefixes share an address (prefixes either nest or are apart). */
export function prefixesOverlap(a: Prefix, b: Prefix): boolean {
  return prefixCovers(a, b) || prefixCovers(b, a);
}

/**
 * The prefixes of one family without those that another of the list covers, sorted by address:
 * what an nftables interval set takes without "conflicting intervals".
 */
export function normalizePrefixes(prefixes: Prefix[]): Prefix[] {
  const sorted = [...prefixes].sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : a.length - b.length));
  const out: Prefix[] = [];
  for (const p of sorted) {
    const last = out[out.length - 1];
    if (last && prefixCovers(last, p)) continue;
    out.push(p);
  }
  return out;
}

/**
 * A block without its exceptions, as the fewest prefixes: `203.0.113.0/24` without
 * `203.0.113.0/25` is `203.0.113.128/25`. Exceptions outside the block are ignored.
 */
export function subtractPrefixes(block: Prefix, except: Prefix[]): Prefix[] {
  const ex = except.filter((e) => e.family === block.family && prefixesOverlap(block, e));
  if (ex.length === 0) return [block];
  if (ex.some((e) => prefixCovers(e, block))) return [];
  const bits = familyBits(block.family);
  const halfLen = block.length + 1;
  const low: Prefix = { family: block.family, address: block.address, length: halfLen };
  const high: Prefix = { family: block.family, address: block.address | (1n << BigInt(bits - halfLen)), length: halfLen };
  return [...subtractPrefixes(low, ex), ...subtractPrefixes(high, ex)];
}

/** Whether an address is a unique local IPv6 address (fc00::/7). */
export function isUla(text: string): boolean {
  const a = parseAddress(text);
  return a.family === 6 && a.value >> 121n === 0x7en;
}
