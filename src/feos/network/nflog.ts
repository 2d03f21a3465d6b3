/**
 * The packets the table logs to nflog (the seed's "The table" and "Traffic records"), as `tcpdump
 * -i nflog:N -U -w -` streams them: a pcap file of link type NFLOG (239), each packet the nflog
 * header, its TLVs (the rule's prefix, the input and output interfaces, the payload) and, in the
 * payload, the IP packet, whose headers are read here. Pure and total: a malformed packet is
 * skipped, never thrown.
 */
import { formatAddress } from './ip.ts';

/** pcap's link type of nflog. */
export const LINKTYPE_NFLOG = 239;

// The TLVs of an nflog packet (linux/netfilter/nfnetlink_log.h).
const NFULA_IFINDEX_INDEV = 4;
const NFULA_IFINDEX_OUTDEV = 5;
const NFULA_PAYLOAD = 9;
const NFULA_PREFIX = 10;

/** One logged packet. */
export interface NflogPacket {
  /** When it was captured, ms since the epoch. */
  timeMs: number;
  /** The nflog group. */
  group: number;
  /** The rule's prefix ("deny", "no-rule", "spoofed"), or "" when it has none. */
  prefix: string;
  /** Interface indexes, 0 when absent. */
  inIfindex: number;
  outIfindex: number;
  /** The IP packet. */
  payload: Uint8Array;
}

/**
 * An incremental reader of a pcap stream of link type NFLOG: feed it the bytes as they come,
 * and it calls `onPacket` for each whole packet.
 * @throws never: a stream that is not pcap of NFLOG makes `error` say why, and the rest is ignored
 */
export class PcapNflogReader {
  #buf: Buffer = Buffer.alloc(0);
  #le = true;
  #nano = false;
  #header = false;
  /** Why the stream was given up, once it was. */
  error: string | undefined;

  readonly onPacket: (p: NflogPacket) => void;

  constructor(onPacket: (p: NflogPacket) => void) {
    this.onPacket = onPacket;
  }

  push(chunk: Uint8Array): void {
    if (this.error) return;
    this.#buf = this.#buf.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.#buf, chunk]);
    let off = 0;
    if (!this.#header) {
      if (this.#buf.length < 24) return;
      const magic = this.#buf.readUInt32LE(0);
      if (magic === 0xa1b2c3d4 || magic === 0xa1b23c4d) this.#le = true;
      else if (this.#buf.readUInt32BE(0) === 0xa1b2c3d4 || this.#buf.readUInt32BE(0) === 0xa1b23c4d) this.#le = false;
      else {
        this.error = `not a pcap stream (magic ${magic.toString(16)})`;
        return;
      }
      this.#nano = (this.#le ? magic : this.#buf.readUInt32BE(0)) === 0xa1b23c4d;
      const link = (this.#le ? this.#buf.readUInt32LE(20) : this.#buf.readUInt32BE(20)) & 0x0fffffff;
      if (link !== LINKTYPE_NFLOG) {
        this.error = `pcap of link type ${link}, not NFLOG (${LINKTYPE_NFLOG})`;
        return;
      }
      this.#header = true;
      off = 24;
    }
    const u32 = (o: number) => (this.#le ? this.#buf.readUInt32LE(o) : this.#buf.readUInt32BE(o));
    while (this.#buf.length - off >= 16) {
      const sec = u32(off);
      const frac = u32(off + 4);
      const incl = u32(off + 8);
      if (incl > 1 << 20) {
        this.error = `a pcap record of ${incl} bytes`;
        return;
      }
      if (this.#buf.length - off - 16 < incl) break;
      const data = this.#buf.subarray(off + 16, off + 16 + incl);
      off += 16 + incl;
      const timeMs = sec * 1000 + Math.floor(this.#nano ? frac / 1e6 : frac / 1e3);
      const p = parseNflog(data, timeMs);
      if (p) this.onPacket(p);
    }
    this.#buf = off >= this.#buf.length ? Buffer.alloc(0) : Buffer.from(this.#buf.subarray(off));
  }
}

/**
 * One NFLOG link-layer packet: its header (family, version, group) and TLVs, whose lengths and
 * types are in the capturing host's byte order (little-endian here) and values in network order.
 * @returns undefined when it is malformed
 */
export function parseNflog(data: Uint8Array, timeMs: number): NflogPacket | undefined {
  if (data.length < 4) return undefined;
  const b = Buffer.from(data.buffer, data.byteOffset, data.length);
  const group = b.readUInt16BE(2);
  const p: NflogPacket = { timeMs, group, prefix: '', inIfindex: 0, outIfindex: 0, payload: new Uint8Array(0) };
  let off = 4;
  let payload = false;
  while (off + 4 <= b.length) {
    const len = b.readUInt16LE(off);
    const type = b.readUInt16LE(off + 2) & 0x7fff;
    if (len < 4 || off + len > b.length) return undefined;
    const v = b.subarray(off + 4, off + len);
    switch (type) {
      case NFULA_PREFIX: {
        const nul = v.indexOf(0);
        p.prefix = v.subarray(0, nul < 0 ? v.length : nul).toString('latin1');
        break;
      }
      case NFULA_IFINDEX_INDEV:
        if (v.length >= 4) p.inIfindex = v.readUInt32BE(0);
        break;
      case NFULA_IFINDEX_OUTDEV:
        if (v.length >= 4) p.outIfindex = v.readUInt32BE(0);
        break;
      case NFULA_PAYLOAD:
        p.payload = new Uint8Array(v);
        payload = true;
        break;
      default:
        break;
    }
    off += (len + 3) & ~3;
  }
  return payload ? p : undefined;
}

/** The headers of an IP packet that the records name. */
export interface IpPacket {
  family: 4 | 6;
  source: string;
  destination: string;
  /** The transport protocol's number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6). */
  protocol: number;
  /** The IP packet's length, bytes (its header's total length). */
  length: number;
  sourcePort: number;
  destinationPort: number;
  /** TCP's, when the packet is TCP and its header is whole. */
  tcp?: { seq: number; syn: boolean; fin: boolean; rst: boolean; payload: Uint8Array };
}

/** The protocol's name as the records give it: "tcp", "udp", "icmp", "icmpv6", or its number. */
export function protocolName(n: number): string {
  return n === 6 ? 'tcp' : n === 17 ? 'udp' : n === 1 ? 'icmp' : n === 58 ? 'icmpv6' : n === 132 ? 'sctp' : String(n);
}

function ipv4Text(b: Uint8Array, o: number): string {
  return `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`;
}

/** The 16 bytes at `o` as an IPv6 address in RFC 5952's canonical form (ip.ts's formatAddress). */
function ipv6Text(b: Uint8Array, o: number): string {
  let v = 0n;
  for (let i = 0; i < 16; i++) v = (v << 8n) | BigInt(b[o + i]!);
  return formatAddress(6, v);
}

/**
 * Reads an IP packet's headers (IPv4, or IPv6 through its extension headers), and TCP's or UDP's
 * ports; a fragment past the first has no ports.
 * @returns undefined when it is not a whole IP header
 */
export function parseIpPacket(b: Uint8Array): IpPacket | undefined {
  if (b.length < 1) return undefined;
  const version = b[0] >> 4;
  let proto: number;
  let l4: number;
  let length: number;
  let first = true;
  let family: 4 | 6;
  let source: string;
  let destination: string;
  if (version === 4) {
    if (b.length < 20) return undefined;
    const ihl = (b[0] & 0x0f) * 4;
    if (ihl < 20 || b.length < ihl) return undefined;
    family = 4;
    length = (b[2] << 8) | b[3];
    proto = b[9];
    first = (((b[6] & 0x1f) << 8) | b[7]) === 0;
    source = ipv4Text(b, 12);
    destination = ipv4Text(b, 16);
    l4 = ihl;
  } else if (version === 6) {
    if (b.length < 40) return undefined;
    family = 6;
    length = 40 + ((b[4] << 8) | b[5]);
    source = ipv6Text(b, 8);
    destination = ipv6Text(b, 24);
    proto = b[6];
    l4 = 40;
    // Hop-by-hop, routing, destination options, fragment, AH.
    for (let n = 0; n < 8 && [0, 43, 60, 44, 51].includes(proto); n++) {
      if (l4 + 8 > b.length) return { family, source, destination, protocol: proto, length, sourcePort: 0, destinationPort: 0 };
      const next = b[l4];
      if (proto === 44) {
        first = ((((b[l4 + 2] << 8) | b[l4 + 3]) >> 3) & 0x1fff) === 0;
        l4 += 8;
      } else if (proto === 51) l4 += (b[l4 + 1] + 2) * 4;
      else l4 += (b[l4 + 1] + 1) * 8;
      proto = next;
    }
  } else {
    return undefined;
  }
  const p: IpPacket = { family, source, destination, protocol: proto, length, sourcePort: 0, destinationPort: 0 };
  if (!first) return p;
  if ((proto === 6 || proto === 17 || proto === 132) && l4 + 4 <= b.length) {
    p.sourcePort = (b[l4] << 8) | b[l4 + 1];
    p.destinationPort = (b[l4 + 2] << 8) | b[l4 + 3];
  }
  if (proto === 6 && l4 + 20 <= b.length) {
    const dataOff = (b[l4 + 12] >> 4) * 4;
    const flags = b[l4 + 13];
    const seq = ((b[l4 + 4] << 24) | (b[l4 + 5] << 16) | (b[l4 + 6] << 8) | b[l4 + 7]) >>> 0;
    if (dataOff >= 20 && l4 + dataOff <= b.length) {
      const end = Math.min(b.length, Math.max(l4 + dataOff, length));
      p.tcp = { seq, syn: (flags & 0x02) !== 0, fin: (flags & 0x01) !== 0, rst: (flags & 0x04) !== 0, payload: b.subarray(l4 + dataOff, end) };
    }
  }
  return p;
}
