/**
 * feos.network.v1.TrafficService, the seed's "Traffic records": what the pods do on the network.
 *
 * - Flows from connection tracking's events: `conntrack -E` (./conntrack-events.ts), with
 *   nf_conntrack_acct and nf_conntrack_timestamp turned on by the layer once the table has loaded
 *   connection tracking.
 * - Drops from nflog group 2, the reason from the rule's prefix; server names from the copies on
 *   group 3 (./server-names.ts), both read with `tcpdump -i nflog:N -U -w -` (./nflog.ts).
 * - DNS queries from the resolver.
 *
 * Why these tools: the seed reads ctnetlink and nflog itself; Node.js has no well-kept netlink
 * library, and netlink's multipart messages, sequence numbers and ENOBUFS are easy to get subtly
 * wrong. conntrack(8) (conntrack-tools, Debian's `conntrack`, already needed for the deletes of a
 * pod's entries) and tcpdump(8) over libpcap's nflog support (Debian's `tcpdump`) are the
 * netfilter project's and tcpdump.org's own readers: each runs as one child that streams what the
 * kernel reports, needs no configuration file, and ends with feosd. ulogd2 was the other choice:
 * it reads both, but is a daemon with a configuration file of stacks, writes its JSON to a file
 * or socket of its own, gives the packet's bytes only as a hex field, and its JSON output is a
 * package apart (ulogd2-json); a pcap stream of NFLOG is a format of a few fixed headers, read in
 * ./nflog.ts. The TLS and HTTP parsing is ours (./server-names.ts).
 *
 * The collector's readers and the resolver feed one channel, from which every WatchTraffic call
 * streams through a queue of its own, bounded: a caller that reads too slowly loses records,
 * counted in its next record's `missed`, and never holds the others or feosd back. What a reader
 * loses (conntrack's ENOBUFS, a reader that restarts) is counted in every caller's next `missed`.
 *
 * A record names the pod by the event's addresses or its TAP device; a pod that left is known by
 * its addresses for five minutes more, unless another pod holds one of them by then
 * ({@link RecentPods}).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { create } from '@bufbuild/protobuf';
import { status as GrpcStatus } from '@grpc/grpc-js';
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../lib/index.ts';
import {
  DnsQuerySchema,
  DropSchema,
  FlowSchema,
  ServerNameSchema,
  type TrafficRecord,
  TrafficService,
  type WatchTrafficRequest,
  WatchTrafficResponseSchema,
} from '../gen/feos/network/v1/network_pb.js';
import { type ConntrackEvent, parseConntrackLine } from './conntrack-events.ts';
import type { DnsQueryRecord } from './dns.ts';
import { NetworkError, networkErrorToGrpc } from './errors.ts';
import { type GrpcService, grpcServiceDefinition } from './grpc.ts';
import { canonicalAddress } from './ip.ts';
import { type NflogPacket, PcapNflogReader, parseIpPacket, protocolName } from './nflog.ts';
import { TAP_PREFIX, checkPodId } from './pod-link.ts';
import { ServerNameAssembler } from './server-names.ts';
import { ipJson } from './system.ts';
import { NFLOG_COPIES, NFLOG_DROPS } from './table.ts';

/** util-linux's setpriv, which starts the readers with a death signal (see `#run`). */
const SETPRIV = '/usr/bin/setpriv';
const ORPHAN_PROOF = existsSync(SETPRIV);

/** Records a caller may have queued, unsent, before more are dropped and counted as missed. */
export const WATCH_BUFFER_RECORDS = 4096;

/** How long a pod that left is known by its addresses, ms (the seed: five minutes). */
export const LEFT_POD_MEMORY_MS = 5 * 60_000;

/** A record as the channel carries it: a TrafficRecord without `missed`, which each caller counts. */
export type TrafficEntry = Pick<TrafficRecord, 'timeMs' | 'podId' | 'kind'>;

/**
 * The one channel of the records: the collector and the resolver publish, every watcher gets each
 * record through its own bounded queue.
 */
export class TrafficChannel {
  readonly #watchers = new Set<(e: TrafficEntry | undefined, lost: number) => void>();

  /** Hands a record to every watcher, at once (a watcher's queue never waits). */
  publish(e: TrafficEntry): void {
    for (const w of this.#watchers) w(e, 0);
  }

  /** Counts records lost before they reached the channel, in every watcher's next `missed`. */
  lost(n: number): void {
    if (n > 0) for (const w of this.#watchers) w(undefined, n);
  }

  /** Watchers now. */
  get watchers(): number {
    return this.#watchers.size;
  }

  /**
   * Subscribes: `w` is called with each record, or with undefined and a count of records lost.
   * @returns a function that ends the subscription
   */
  subscribe(w: (e: TrafficEntry | undefined, lost: number) => void): () => void {
    this.#watchers.add(w);
    return () => {
      this.#watchers.delete(w);
    };
  }
}

/** A DNS query record as the channel carries it. */
export function dnsQueryEntry(r: DnsQueryRecord): TrafficEntry {
  return {
    timeMs: BigInt(r.time),
    podId: r.podId ?? '',
    kind: {
      case: 'dnsQuery',
      value: create(DnsQuerySchema, { source: r.source, transport: r.transport, name: r.name, type: r.type, rcode: r.rcode, answeredBy: r.answeredBy, addresses: r.addresses }),
    },
  };
}

/**
 * The pods by address, with those that left: a pod that left (deleted or hibernated) is known by
 * its addresses for {@link LEFT_POD_MEMORY_MS} more, unless another pod holds one of them by then.
 */
export class RecentPods {
  readonly #left: Array<{ podId: string; addresses: string[]; until: number }> = [];

  /**
   * @param current the pod that holds an address now (canonical text), if any
   * @param now the clock, ms
   */
  readonly current: (address: string) => string | undefined;
  readonly now: () => number;
  readonly keepMs: number;

  constructor(current: (address: string) => string | undefined, now: () => number = Date.now, keepMs = LEFT_POD_MEMORY_MS) {
    this.current = current;
    this.now = now;
    this.keepMs = keepMs;
  }

  /** A pod left: remembers its addresses. */
  left(podId: string, addresses: string[]): void {
    const canon = addresses.map((a) => canonicalAddress(a));
    this.#left.push({ podId, addresses: canon, until: this.now() + this.keepMs });
  }

  /** The pod an address names: the one that holds it, else one that left within the time and whose addresses nobody holds. */
  podOf(address: string): string | undefined {
    let a: string;
    try {
      a = canonicalAddress(address);
    } catch {
      return undefined;
    }
    const now = this.current(a);
    if (now !== undefined) return now;
    const t = this.now();
    for (let i = this.#left.length - 1; i >= 0; i--) {
      const l = this.#left[i];
      if (l.until <= t || l.addresses.some((x) => this.current(x) !== undefined)) {
        this.#left.splice(i, 1);
        continue;
      }
      if (l.addresses.includes(a)) return l.podId;
    }
    return undefined;
  }

  /** Whether `podId` left within the time (its records may still come: the ends of its connections). */
  knows(podId: string): boolean {
    const t = this.now();
    return this.#left.some((l) => l.podId === podId && l.until > t);
  }
}

/** What the collector reads the pods by. */
export interface TrafficPods {
  /** The pod an address names (now or lately), by {@link RecentPods}. */
  podOf(address: string): string | undefined;
  /** The pod whose TAP device this is. */
  podOfTap(tap: string): string | undefined;
}

/** How the collector is made. */
export interface TrafficCollectorOptions {
  channel: TrafficChannel;
  pods: TrafficPods;
  /** The resolver's address: a pod's queries to it (port 53) are left out of the flows. */
  dnsAddress: string;
  log: Logger;
  /** @default 'conntrack' */
  conntrackPath?: string;
  /** @default 'tcpdump' */
  tcpdumpPath?: string;
  /** A reader that ended starts again after this long, ms. @default 1000 */
  restartMs?: number;
}

interface Reader {
  name: string;
  child?: ChildProcess;
  timer?: NodeJS.Timeout;
  /** Whether it ran before: a start again is a gap, counted as missed. */
  ran: boolean;
}

/**
 * Reads connection tracking's events and nflog groups 2 and 3 through their tools, each a child
 * that starts again a second after it ends, and publishes flows, drops and server names.
 */
export class TrafficCollector {
  readonly #o: TrafficCollectorOptions;
  readonly #readers: Reader[] = [];
  readonly #names = new ServerNameAssembler();
  readonly #ifnames = new Map<number, string>();
  #ifRefresh?: Promise<void>;
  #nflogChain: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(o: TrafficCollectorOptions) {
    this.#o = o;
  }

  /** Starts the three readers. Never throws: a tool that cannot start is logged and tried again. */
  start(): void {
    const ct = this.#o.conntrackPath ?? 'conntrack';
    const td = this.#o.tcpdumpPath ?? 'tcpdump';
    this.#run({ name: 'conntrack', ran: false }, ct, ['-E', '-e', 'NEW,DESTROY', '-o', 'extended,id,timestamp,ktimestamp', '-b', String(8 << 20)], (child) => {
      const rl = createInterface({ input: child.stdout! });
      rl.on('line', (line) => this.#onConntrack(line));
    });
    for (const group of [NFLOG_DROPS, NFLOG_COPIES]) {
      // -Z root: tcpdump keeps its user (Debian's drops to tcpdump), and so the death signal setpriv gave it.
      this.#run({ name: `tcpdump nflog:${group}`, ran: false }, td, ['-i', `nflog:${group}`, '-U', '-B', '4096', '-Z', 'root', '-w', '-'], (child) => {
        const reader = new PcapNflogReader((p) => this.#onNflog(p));
        child.stdout!.on('data', (d: Buffer) => reader.push(d));
      });
    }
  }

  /**
   * Runs a reader, and again when it ends. Each runs under setpriv(1) with PR_SET_PDEATHSIG SIGKILL where
   * util-linux's setpriv exists: a reader ends with feosd even when feosd is SIGKILLed, and none is left
   * reading for a feosd that is gone (the kernel clears the death signal when a process changes its user,
   * hence tcpdump's -Z root).
   */
  #run(r: Reader, file: string, args: string[], wire: (c: ChildProcess) => void): void {
    this.#readers.push(r);
    const base = this.#o.restartMs ?? 1000;
    let delay = base;
    const launch = () => {
      r.timer = undefined;
      if (this.#stopped) return;
      // A reader that ran and starts again left a gap: what it would have read is lost.
      if (r.ran) this.#o.channel.lost(1);
      r.ran = false;
      const startedAt = Date.now();
      const [cmd, argv] = ORPHAN_PROOF ? [SETPRIV, ['--pdeathsig', 'KILL', '--', file, ...args]] : [file, args];
      const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TZ: 'UTC' } });
      r.child = child;
      child.once('spawn', () => {
        r.ran = true;
      });
      let err = '';
      child.stderr!.on('data', (d: Buffer) => {
        const text = d.toString();
        // conntrack: "WARNING: We have hit ENOBUFS! We are losing events." The kernel dropped some.
        if (/ENOBUFS/.test(text)) {
          this.#o.channel.lost(1);
          this.#o.log.warn({ reader: r.name }, 'connection tracking lost events (ENOBUFS): counted in the next records as missed');
        }
        err = (err + text).slice(-2000);
      });
      wire(child);
      let why = '';
      child.once('error', (e) => {
        why = e.message;
      });
      child.once('close', (code, signal) => {
        r.child = undefined;
        if (this.#stopped) return;
        // Again after a second; after one that ended at once, twice as long as before, up to a minute.
        delay = Date.now() - startedAt > 10_000 ? base : Math.min(delay * 2, 60_000);
        const stderr = err.trim().split('\n').slice(-3).join('; ');
        this.#o.log.warn({ reader: r.name, code, signal, err: why || undefined, stderr: stderr || undefined, againInMs: delay }, 'a traffic reader ended; starting it again');
        if (r.name.startsWith('tcpdump')) this.#names.clear();
        r.timer = setTimeout(launch, delay);
        r.timer.unref();
      });
    };
    launch();
  }

  /** Stops the readers (SIGKILL: they keep no state; conntrack waits for an event before it heeds SIGTERM). */
  async stop(): Promise<void> {
    this.#stopped = true;
    const ends: Promise<void>[] = [];
    for (const r of this.#readers) {
      if (r.timer) clearTimeout(r.timer);
      const c = r.child;
      if (c && c.exitCode === null && c.signalCode === null) {
        ends.push(new Promise((resolve) => c.once('close', () => resolve())));
        c.kill('SIGKILL');
      }
    }
    await Promise.all(ends);
  }

  #onConntrack(line: string): void {
    const e = parseConntrackLine(line);
    if (!e) return;
    for (const entry of flowEntries(e, this.#o.pods, this.#o.dnsAddress)) this.#o.channel.publish(entry);
  }

  /** The interface's name by index, from `ip -j link` (read again when an index is new). */
  async #ifname(index: number): Promise<string | undefined> {
    if (index === 0) return undefined;
    if (!this.#ifnames.has(index)) {
      this.#ifRefresh ??= ipJson<Array<{ ifindex: number; ifname: string }>>('link', 'show')
        .then((links) => {
          this.#ifnames.clear();
          for (const l of links) this.#ifnames.set(l.ifindex, l.ifname);
        })
        .catch((err: unknown) => this.#o.log.warn({ err: (err as Error).message }, 'reading the interfaces failed'))
        .finally(() => {
          this.#ifRefresh = undefined;
        });
      await this.#ifRefresh;
    }
    return this.#ifnames.get(index);
  }

  #onNflog(p: NflogPacket): void {
    // In order, each after the interface names it needs.
    this.#nflogChain = this.#nflogChain.then(async () => {
      const inDev = await this.#ifname(p.inIfindex);
      const outDev = await this.#ifname(p.outIfindex);
      for (const e of nflogEntries(p, inDev, outDev, this.#o.pods, this.#names)) this.#o.channel.publish(e);
    }).catch((err: unknown) => this.#o.log.warn({ err: (err as Error).message }, 'a logged packet could not be read'));
  }
}


const isTap = (dev: string | undefined): dev is string => dev?.startsWith(TAP_PREFIX) === true;

/**
 * The records of one connection tracking event: one for each pod at one of its ends (the opener's
 * "out", the other's "in"), none for a connection of no pod or a pod's query to the resolver.
 */
export function flowEntries(e: ConntrackEvent, pods: Pick<TrafficPods, 'podOf'>, dnsAddress: string): TrafficEntry[] {
  const o = e.original;
  const r = e.reply;
  if ((e.protocol === 17 || e.protocol === 6) && o.destinationPort === 53 && sameAddress(o.destination, dnsAddress)) return [];
  const out: TrafficEntry[] = [];
  const ends: Array<{ podId: string | undefined; dir: 'out' | 'in' }> = [
    { podId: pods.podOf(o.source), dir: 'out' },
    { podId: pods.podOf(o.destination), dir: 'in' },
  ];
  for (const end of ends) {
    if (end.podId === undefined) continue;
    const opener = end.dir === 'out';
    const [mine, theirs] = opener ? [o, r] : [r, o];
    out.push({
      timeMs: BigInt(e.event === 'end' && e.stopMs > 0 ? e.stopMs : e.timeMs),
      podId: end.podId,
      kind: {
        case: 'flow',
        value: create(FlowSchema, {
              event: e.event,
              protocol: protocolName(e.protocol),
              direction: end.dir,
              podAddress: opener ? o.source : o.destination,
              podPort: opener ? o.sourcePort : o.destinationPort,
              peerAddress: opener ? o.destination : o.source,
              peerPort: opener ? o.destinationPort : o.sourcePort,
              packetsSent: BigInt(mine.packets),
              bytesSent: BigInt(mine.bytes),
              packetsReceived: BigInt(theirs.packets),
              bytesReceived: BigInt(theirs.bytes),
              startMs: BigInt(e.event === 'new' ? e.timeMs : e.startMs),
              endMs: BigInt(e.event === 'end' ? e.stopMs || e.timeMs : 0),
              conntrackId: e.id >>> 0,
            }),
      },
    });
  }
  return out;
}

function sameAddress(a: string, b: string): boolean {
  try {
    return canonicalAddress(a) === canonicalAddress(b);
  } catch {
    return false;
  }
}

/**
 * The records of one logged packet: a drop (group 2) or, once a connection's first bytes name its
 * server, a server name (group 3); none otherwise. A drop's pod is the TAP's the packet came in
 * through ("out") or went out to ("in"), else the one its addresses name; a packet between two
 * pods of the node is a drop of each. A server name's pod is the TAP's it came in through, else
 * its source's.
 */
export function nflogEntries(p: NflogPacket, inDev: string | undefined, outDev: string | undefined, pods: TrafficPods, names: ServerNameAssembler): TrafficEntry[] {
  const ip = parseIpPacket(p.payload);
  if (!ip) return [];
  const from = isTap(inDev) ? pods.podOfTap(inDev) : undefined;
  const to = isTap(outDev) ? pods.podOfTap(outDev) : undefined;
  if (p.group === NFLOG_DROPS) {
    const ends: Array<{ podId: string; direction: 'out' | 'in' }> = [];
    if (isTap(inDev) || isTap(outDev)) {
      if (isTap(inDev)) ends.push({ podId: from ?? pods.podOf(ip.source) ?? '', direction: 'out' });
      if (isTap(outDev)) ends.push({ podId: to ?? pods.podOf(ip.destination) ?? '', direction: 'in' });
    } else {
      const src = pods.podOf(ip.source);
      ends.push(src !== undefined ? { podId: src, direction: 'out' } : { podId: pods.podOf(ip.destination) ?? '', direction: 'in' });
    }
    return ends.map(({ podId, direction }) => ({
      timeMs: BigInt(p.timeMs),
      podId,
      kind: {
        case: 'drop',
        value: create(DropSchema, {
          reason: p.prefix,
          direction,
          protocol: protocolName(ip.protocol),
          source: ip.source,
          sourcePort: ip.sourcePort,
          destination: ip.destination,
          destinationPort: ip.destinationPort,
          length: ip.length,
        }),
      },
    }));
  }
  if (p.group !== NFLOG_COPIES || !ip.tcp) return [];
  const key = `${ip.source} ${ip.sourcePort} ${ip.destination} ${ip.destinationPort}`;
  const found = names.push({ key, ...ip.tcp });
  if (!found) return [];
  return [
    {
      timeMs: BigInt(p.timeMs),
      podId: from ?? pods.podOf(ip.source) ?? '',
      kind: {
        case: 'serverName',
        value: create(ServerNameSchema, { protocol: found.protocol, name: found.name, source: ip.source, sourcePort: ip.sourcePort, destination: ip.destination, destinationPort: ip.destinationPort }),
      },
    },
  ];
}

/** How a WatchTraffic call is served. */
export interface TrafficServiceOptions {
  /** Records a caller may have queued; more are counted as missed. @default WATCH_BUFFER_RECORDS */
  queueRecords?: number;
  /**
   * Whether the node has records of a pod to give: it holds the pod's network, or the pod left
   * within the five minutes it is known by its addresses. Without it, any well-formed ID is taken.
   */
  podKnown?: (podId: string) => boolean;
  /**
   * Aborted when feosd stops: every watch ends at once with UNAVAILABLE "feosd stops", as the pods'
   * watches do, instead of holding the stop for the calls' grace.
   */
  stopping?: AbortSignal;
}

/**
 * TrafficService over the channel. Each call has its own queue of at most `queueRecords` records,
 * written as fast as the caller reads (grpc-js's own buffer of a stream is 16 messages); a record
 * that finds the queue full is dropped and counted in the next record's `missed`.
 */
export function trafficService(channel: TrafficChannel, o: TrafficServiceOptions = {}): GrpcService {
  const limit = o.queueRecords ?? WATCH_BUFFER_RECORDS;
  const watch: grpc.handleServerStreamingCall<WatchTrafficRequest, unknown> = (call) => {
    // A pod ID that is not one, or a pod the node has no records of, fails the call at once rather
    // than stream nothing: INVALID_ARGUMENT as every call with a bad ID (seed "Pods"), NOT_FOUND.
    for (const id of call.request.podIds) {
      try {
        checkPodId(id);
      } catch (err: unknown) {
        call.emit('error', networkErrorToGrpc(err));
        return;
      }
      if (o.podKnown && !o.podKnown(id)) {
        call.emit('error', networkErrorToGrpc(new NetworkError('NOT_FOUND', `pod ${id} has no network on this node, nor had one in the last ${LEFT_POD_MEMORY_MS / 60_000} minutes`)));
        return;
      }
    }
    const stopped = { code: GrpcStatus.UNAVAILABLE, details: 'feosd stops' };
    if (o.stopping?.aborted) {
      call.emit('error', stopped);
      return;
    }
    const only = new Set(call.request.podIds);
    const queue: unknown[] = [];
    let missed = 0n;
    let waiting = false;
    let ended = false;
    const pump = () => {
      while (!waiting && !ended && queue.length > 0) {
        if (!call.write(queue.shift())) {
          waiting = true;
          call.once('drain', () => {
            waiting = false;
            pump();
          });
        }
      }
    };
    const stop = channel.subscribe((e, lost) => {
      if (!e) {
        missed += BigInt(lost);
        return;
      }
      if (only.size > 0 && !only.has(e.podId)) return;
      if (queue.length >= limit) {
        missed++;
        return;
      }
      queue.push(create(WatchTrafficResponseSchema, { record: { ...e, missed } }));
      missed = 0n;
      pump();
    });
    const end = () => {
      if (ended) return;
      ended = true;
      queue.length = 0;
      stop();
      o.stopping?.removeEventListener('abort', onStop);
    };
    const onStop = () => {
      end();
      call.emit('error', stopped);
    };
    o.stopping?.addEventListener('abort', onStop, { once: true });
    call.on('cancelled', end);
    call.on('close', end);
    call.on('error', end);
  };
  return { definition: grpcServiceDefinition(TrafficService), implementation: { WatchTraffic: watch } };
}
