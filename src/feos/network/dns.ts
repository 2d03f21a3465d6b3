/**
 * The pods' resolver (the seed's "DNS"): it answers the pods it knows by the source address of a
 * query and refuses everyone else; answers the names of the pod's name tables itself, with
 * authority (AAAA and A, TTL 5 s); forwards every other name to the pod's upstreams or the
 * node's, in order, over UDP with a fallback to TCP; takes `ech` out of HTTPS records; and
 * records every query it answers.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { randomInt } from 'node:crypto';
import packet from 'dns-packet';
import type { Logger } from '../../lib/index.ts';
import type { NameTable } from '../gen/feos/network/v1/network_pb.js';
import { addressFamily } from './ip.ts';

/** The TTL of the resolver's own answers, seconds. */
export const NAME_TTL_SECONDS = 5;
/** How long one upstream gets to answer, ms, before the next is asked. */
export const UPSTREAM_TIMEOUT_MS = 2_000;
/** A TCP client that sends nothing for this long is closed, ms. */
export const TCP_IDLE_MS = 10_000;

const RCODE = { NOERROR: 0, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;
const TYPE_HTTPS = 65;
const SVC_PARAM_ECH = 5;

/** What the resolver knows of a pod. */
export interface ResolverPod {
  podId: string;
  /** Its name tables, in order. */
  nameTables: string[];
  /** Its own upstreams (the spec's); none = the node's. */
  upstreams: string[];
}

/** One query the resolver answered, for the traffic records. */
export interface DnsQueryRecord {
  /** When it was answered, ms since the epoch. */
  time: number;
  /** The pod, or undefined for a refused source. */
  podId?: string;
  source: string;
  transport: 'udp' | 'tcp';
  name: string;
  /** The query type ("A", "AAAA", "UNKNOWN_65", ...). */
  type: string;
  /** The response code's name (NOERROR, NXDOMAIN, REFUSED, SERVFAIL, ...). */
  rcode: string;
  /** Who answered: a name table, an upstream's address, or the resolver itself (refused, failed). */
  answeredBy: string;
  /** The answer's addresses (A and AAAA records). */
  addresses: string[];
}

/** How a resolver is made. */
export interface ResolverOptions {
  /** The pod whose address a query comes from, or undefined (refused). */
  podBySource: (address: string) => ResolverPod | undefined;
  /** The node's name tables. */
  tables: () => ReadonlyMap<string, NameTable>;
  /** `--dns-upstream`, in order. */
  defaultUpstreams: () => string[];
  /** The upstreams' port. @default 53 */
  upstreamPort?: number;
  /** @default UPSTREAM_TIMEOUT_MS */
  upstreamTimeoutMs?: number;
  /** Every query answered. */
  onQuery?: (r: DnsQueryRecord) => void;
  log: Logger;
}

/**
 * Looks a one-label name up in a pod's tables: the first table that holds it answers, a table's
 * own names before those of the tables it includes, in their order; the includes of an
 * included table are not followed, and a table the node does not have holds nothing.
 * @returns the table's ID and the name's addresses, or undefined
 */
export function lookupName(name: string, tableIds: string[], tables: ReadonlyMap<string, NameTable>): { table: string; addresses: string[] } | undefined {
  const label = name.replace(/\.$/, '').toLowerCase();
  if (label === '' || label.includes('.')) return undefined;
  for (const id of tableIds) {
    const t = tables.get(id);
    if (!t) continue;
    for (const holder of [t, ...t.includes.map((i) => tables.get(i))]) {
      const e = holder?.names.find((n) => n.name === label);
      if (e && holder) return { table: holder.id, addresses: e.addresses };
    }
  }
  return undefined;
}

/**
 * Takes `ech` (SvcParamKey 5) out of the HTTPS records of a response; the rest passes as it is.
 * @returns the response, re-encoded only when it held an HTTPS record with `ech`
 */
export function stripEch(response: Buffer): Buffer {
  let msg: packet.Packet;
  try {
    msg = packet.decode(response);
  } catch {
    return response;
  }
  let changed = false;
  for (const section of [msg.answers ?? [], msg.additionals ?? [], msg.authorities ?? []]) {
    for (const rr of section as Array<{ type: string; data?: unknown }>) {
      if (rr.type !== `UNKNOWN_${TYPE_HTTPS}` || !Buffer.isBuffer(rr.data)) continue;
      const stripped = stripEchRdata(rr.data);
      if (stripped) {
        rr.data = stripped;
        changed = true;
      }
    }
  }
  return changed ? packet.encode(msg) : response;
}

/** An HTTPS/SVCB RDATA without `ech`, or undefined when it has none (or cannot be read). */
function stripEchRdata(data: Buffer): Buffer | undefined {
  let off = 2;
  while (off < data.length) {
    const len = data[off];
    off += 1 + len;
    if (len === 0) break;
  }
  if (off > data.length) return undefined;
  const parts: Buffer[] = [data.subarray(0, off)];
  let found = false;
  while (off + 4 <= data.length) {
    const key = data.readUInt16BE(off);
    const len = data.readUInt16BE(off + 2);
    if (off + 4 + len > data.length) return undefined;
    if (key === SVC_PARAM_ECH) found = true;
    else parts.push(data.subarray(off, off + 4 + len));
    off += 4 + len;
  }
  return found ? Buffer.concat(parts) : undefined;
}

const RCODE_NAMES = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN', 'NOTIMP', 'REFUSED', 'YXDOMAIN', 'YXRRSET', 'NXRRSET', 'NOTAUTH', 'NOTZONE'];

function rcodeName(flags: number | undefined): string {
  const code = (flags ?? 0) & 0xf;
  return RCODE_NAMES[code] ?? `RCODE${code}`;
}

function addressesOf(msg: packet.Packet): string[] {
  return (msg.answers ?? []).filter((a) => a.type === 'A' || a.type === 'AAAA').map((a) => String((a as { data: string }).data));
}

/**
 * The resolver. Serve it with {@link Resolver.serve} on sockets of its own or handed over.
 */
export class Resolver {
  readonly #o: ResolverOptions & { upstreamPort: number; upstreamTimeoutMs: number };
  #udp?: dgram.Socket;
  #tcp?: net.Server;
  readonly #conns = new Set<net.Socket>();

  constructor(opts: ResolverOptions) {
    this.#o = { ...opts, upstreamPort: opts.upstreamPort ?? 53, upstreamTimeoutMs: opts.upstreamTimeoutMs ?? UPSTREAM_TIMEOUT_MS };
  }

  /**
   * Answers one query from `source`.
   * @param query the query's wire bytes
   * @param maxSize the largest answer the transport takes (UDP: 512 or the query's EDNS size)
   * @returns the response's wire bytes, or undefined for bytes that are no query
   */
  async answer(query: Buffer, source: string, transport: 'udp' | 'tcp'): Promise<Buffer | undefined> {
    let q: packet.Packet;
    try {
      q = packet.decode(query);
    } catch {
      return undefined;
    }
    if (q.type !== 'query' || !q.questions || q.questions.length === 0) return undefined;
    const question = q.questions[0];
    const pod = this.#o.podBySource(source);
    const record = (rcode: string, answeredBy: string, addresses: string[]) =>
      this.#o.onQuery?.({ time: Date.now(), podId: pod?.podId, source, transport, name: question.name, type: question.type, rcode, answeredBy, addresses });
    if (!pod) {
      record('REFUSED', 'resolver', []);
      return this.#reply(q, RCODE.REFUSED, []);
    }
    const found = lookupName(question.name, pod.nameTables, this.#o.tables());
    if (found) {
      const want = question.type === 'A' ? 4 : question.type === 'AAAA' ? 6 : 0;
      const answers = found.addresses
        .filter((a) => addressFamily(a) === want)
        .map((a) => ({ type: question.type as 'A' | 'AAAA', name: question.name, ttl: NAME_TTL_SECONDS, class: 'IN' as const, data: a }));
      record('NOERROR', `name-table/${found.table}`, answers.map((a) => a.data));
      return this.#reply(q, RCODE.NOERROR, answers, true);
    }
    const upstreams = pod.upstreams.length > 0 ? pod.upstreams : this.#o.defaultUpstreams();
    const maxUdp = transport === 'udp' ? Math.max(512, ((q.additionals ?? []).find((a) => a.type === 'OPT') as { udpPayloadSize?: number } | undefined)?.udpPayloadSize ?? 512) : 65535;
    for (const up of upstreams) {
      try {
        let resp = await this.#forward(query, up, 'udp');
        if (resp.length >= 3 && resp[2] & 0x02) resp = await this.#forward(query, up, 'tcp');
        resp = stripEch(resp);
        // The client's own ID goes back.
        resp.writeUInt16BE(q.id ?? 0, 0);
        const decoded = safeDecode(resp);
        record(rcodeName(decoded?.flags), up, decoded ? addressesOf(decoded) : []);
        if (resp.length > maxUdp) return this.#truncated(q);
        return resp;
      } catch (err: unknown) {
        this.#o.log.debug({ upstream: up, err: (err as Error).message }, 'upstream did not answer');
      }
    }
    record('SERVFAIL', 'resolver', []);
    return this.#reply(q, RCODE.SERVFAIL, []);
  }

  #reply(q: packet.Packet, rcode: number, answers: packet.Answer[], authoritative = false): Buffer {
    const flags = (q.flags ?? 0) & packet.RECURSION_DESIRED;
    return packet.encode({
      type: 'response',
      id: q.id,
      flags: flags | packet.RECURSION_AVAILABLE | (authoritative ? packet.AUTHORITATIVE_ANSWER : 0) | rcode,
      questions: q.questions,
      answers,
    });
  }

  #truncated(q: packet.Packet): Buffer {
    const b = this.#reply(q, RCODE.NOERROR, []);
    b.writeUInt16BE(b.readUInt16BE(2) | 0x0200, 2);
    return b;
  }

  /** Sends a query to one upstream and waits for its answer with the same ID. */
  #forward(query: Buffer, upstream: string, transport: 'udp' | 'tcp'): Promise<Buffer> {
    const id = randomInt(0, 65536);
    const out = Buffer.from(query);
    out.writeUInt16BE(id, 0);
    const port = this.#o.upstreamPort;
    const signal = AbortSignal.timeout(this.#o.upstreamTimeoutMs);
    return new Promise((resolve, reject) => {
      const fail = (err: Error) => {
        cleanup();
        reject(err);
      };
      const onAbort = () => fail(new Error(`${upstream}: no answer within ${this.#o.upstreamTimeoutMs} ms`));
      signal.addEventListener('abort', onAbort);
      let cleanup: () => void;
      if (transport === 'udp') {
        const s = dgram.createSocket(addressFamily(upstream) === 6 ? 'udp6' : 'udp4');
        cleanup = () => {
          signal.removeEventListener('abort', onAbort);
          s.close();
        };
        s.on('error', fail);
        s.on('message', (msg, rinfo) => {
          if (msg.length < 12 || msg.readUInt16BE(0) !== id || rinfo.port !== port) return;
          cleanup();
          resolve(msg);
        });
        s.send(out, port, upstream);
      } else {
        const c = net.connect({ host: upstream, port });
        let buf = Buffer.alloc(0);
        cleanup = () => {
          signal.removeEventListener('abort', onAbort);
          c.destroy();
        };
        c.on('error', fail);
        c.on('connect', () => {
          const len = Buffer.alloc(2);
          len.writeUInt16BE(out.length);
          c.write(Buffer.concat([len, out]));
        });
        c.on('data', (d) => {
          buf = Buffer.concat([buf, d as Buffer]);
          if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
            const msg = buf.subarray(2, 2 + buf.readUInt16BE(0));
            cleanup();
            if (msg.length < 12 || msg.readUInt16BE(0) !== id) reject(new Error(`${upstream}: an answer to another query`));
            else resolve(Buffer.from(msg));
          }
        });
        c.on('end', () => fail(new Error(`${upstream}: closed before it answered`)));
      }
    });
  }

  /**
   * Answers on a UDP socket and a listening TCP server, bound already (by {@link bindResolverSockets}
   * or handed over by systemd's protocol).
   */
  serve(udp: dgram.Socket, tcp: net.Server): void {
    this.#udp = udp;
    this.#tcp = tcp;
    udp.on('message', (msg, rinfo) => {
      this.answer(msg, rinfo.address, 'udp').then(
        (resp) => {
          if (resp) udp.send(resp, rinfo.port, rinfo.address);
        },
        (err: unknown) => this.#o.log.warn({ err }, 'resolver: a query failed'),
      );
    });
    udp.on('error', (err) => this.#o.log.error({ err }, 'resolver: UDP socket'));
    tcp.on('connection', (c) => this.#onTcp(c));
  }

  #onTcp(c: net.Socket): void {
    this.#conns.add(c);
    c.setTimeout(TCP_IDLE_MS, () => c.destroy());
    c.on('close', () => this.#conns.delete(c));
    c.on('error', () => c.destroy());
    let buf = Buffer.alloc(0);
    const source = (c.remoteAddress ?? '').replace(/^::ffff:/, '');
    c.on('data', (d) => {
      buf = Buffer.concat([buf, d as Buffer]);
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const msg = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + msg.length);
        this.answer(Buffer.from(msg), source, 'tcp').then(
          (resp) => {
            if (!resp || c.destroyed) return;
            const len = Buffer.alloc(2);
            len.writeUInt16BE(resp.length);
            c.write(Buffer.concat([len, resp]));
          },
          () => c.destroy(),
        );
      }
    });
  }

  /** Stops answering and closes the sockets. */
  async close(): Promise<void> {
    for (const c of this.#conns) c.destroy();
    await Promise.all([
      new Promise<void>((r) => (this.#udp ? this.#udp.close(() => r()) : r())),
      new Promise<void>((r) => (this.#tcp ? this.#tcp.close(() => r()) : r())),
    ]);
  }
}

function safeDecode(b: Buffer): packet.Packet | undefined {
  try {
    return packet.decode(b);
  } catch {
    return undefined;
  }
}

/**
 * Binds the resolver's UDP socket and listening TCP socket on `address:port`.
 * @throws Error from bind (EADDRNOTAVAIL while the node does not hold the address, EADDRINUSE)
 */
export async function bindResolverSockets(address: string, port: number): Promise<{ udp: dgram.Socket; tcp: net.Server }> {
  // With port 0 the UDP socket picks a free port, and TCP must take the same number: that number
  // can be in use over TCP (another connection's ephemeral port), so try again with another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await bindResolverSocketsOnce(address, port);
    } catch (err: unknown) {
      const inUse = (err as NodeJS.ErrnoException | undefined)?.code === 'EADDRINUSE';
      if (port !== 0 || !inUse || attempt >= 20) throw err;
    }
  }
}

async function bindResolverSocketsOnce(address: string, port: number): Promise<{ udp: dgram.Socket; tcp: net.Server }> {
  const type = addressFamily(address) === 6 ? 'udp6' : 'udp4';
  const udp = dgram.createSocket({ type, reuseAddr: false });
  await new Promise<void>((resolve, reject) => {
    udp.once('error', reject);
    udp.bind({ address, port, exclusive: true }, () => {
      udp.off('error', reject);
      resolve();
    });
  });
  const tcp = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen({ host: address, port: port === 0 ? udp.address().port : port, exclusive: true }, () => {
        tcp.off('error', reject);
        resolve();
      });
    });
  } catch (err: unknown) {
    udp.close();
    throw err;
  }
  return { udp, tcp };
}
