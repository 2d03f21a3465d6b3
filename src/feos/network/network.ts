/**
 * The pods' network as feosd wires it (the seed's "The pods' network"): one object that sets the
 * node up, hands out addresses, brings pods' links up and down, keeps the table, the resolver
 * and the metadata service, and serves feos.network.v1. See docs/feos/network.md.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { join } from 'node:path';
import type { Logger } from '../../lib/index.ts';
import type { NameTable, SecurityGroup } from '../gen/feos/network/v1/network_pb.js';
import { AddressAllocator, type PodAddresses } from './addresses.ts';
import { deleteConntrack, deletePodLink, ensurePodLink, linkExists, listPodLinks, removeLegacyNetwork, setUpNode } from './devices.ts';
import { Resolver, bindResolverSockets, type DnsQueryRecord, type ResolverPod } from './dns.ts';
import { NetworkError, errorMessage } from './errors.ts';
import { nameService, securityGroupService, type GrpcService } from './grpc.ts';
import { RecentPods, TrafficChannel, TrafficCollector, dnsQueryEntry, trafficService } from './traffic.ts';
import { canonicalAddress, formatPrefix, isUla, parsePrefix, type Prefix } from './ip.ts';
import { takeListenFds, type ListenFds } from './listen-fds.ts';
import { MetadataService, checkMetadata, type PodMetadata } from './metadata.ts';
import { IPV4_GATEWAY, IPV6_GATEWAY, checkPodUpstreams, parseNetworkFlags, type NetworkFlags, type NetworkSettings } from './options.ts';
import { podMac, tapName, checkPodId } from './pod-link.ts';
import { NameTableStore, SecurityGroupStore } from './stores.ts';
import { ipJson, nft, setSysctl } from './system.ts';
import { ALWAYS_DENIED, compileTable, tableUpdate, type CompiledTable } from './table.ts';
import { nodeNetworkReason, type ProcPaths } from './preflight.ts';
import { NodeMesh, type MeshOptions } from './mesh.ts';
import { MESH_MTU } from './wireguard.ts';

/** How often the rules are written again, ms (the seed: every minute). */
export const RULES_INTERVAL_MS = 60_000;

/** How the layer is made: feosd's flags and where its state lives. */
export interface NetworkOptions extends NetworkFlags {
  /** feosd's state root: `pods/` (the address files), `security-groups/`, `name-tables/`. e.g. /var/lib/feos */
  stateDir: string;
  log: Logger;
  /** The resolver's port. @default 53 */
  dnsPort?: number;
  /** The upstreams' port. @default 53 */
  upstreamPort?: number;
  /** The metadata responder's port on the resolver's address; 0 lets the OS pick. @default 0 */
  metadataPort?: number;
  /**
   * The resolver's sockets handed over by systemd's protocol: `true` takes them from the environment
   * here (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES=dns`), an object gives those feosd took at its
   * start (takeListenFds, before anything else ran), `false` binds its own. @default true
   */
  listenFds?: boolean | ListenFds;
  /** @default RULES_INTERVAL_MS */
  rulesIntervalMs?: number;
  /** Where the NAT64 version pinned its BPF maps, removed at start. @default '/sys/fs/bpf/feos/nat64' */
  legacyBpfDir?: string;
  /** Where the node's routes and forwarding are read (preflight.ts). @default /proc/net, /proc/sys */
  procPaths?: ProcPaths;
  /**
   * Record flows, drops and server names (the seed's "Traffic records"): read connection
   * tracking's events with `conntrack -E` and nflog groups 2 and 3 with `tcpdump`. The DNS
   * queries are recorded either way. @default true
   */
  trafficRecords?: boolean;
  /** Records a WatchTraffic caller may have queued before more count as missed. @default WATCH_BUFFER_RECORDS (4096) */
  trafficQueueRecords?: number;
  /**
   * The mesh (the seed's "The mesh"), on a node with `--control-plane`: without `--pod-prefix`
   * the node's /96 of it is the pod prefix; with, the node only learns whether the cluster is
   * meshed (then its pods with a network fail: the two exclude each other). @default none
   */
  mesh?: MeshOptions;
  /**
   * Called when the network comes up after start, once the mesh gave the node its /96, with the
   * kept pods' addresses as {@link PodNetwork.start} returns them (for feosd to record).
   */
  onLateStart?: (addresses: Map<string, PodAddresses>) => void;
}

/** A pod's network as its spec gives it (feos.pod.v1.PodNetwork and PodSpec.metadata). */
export interface PodNetworkSpec {
  securityGroups: string[];
  nameTables: string[];
  dnsUpstreams: string[];
  /** PodSpec.metadata. */
  metadata?: Record<string, string>;
}

/** What the provider reads of a feos.pod.v1.PodInfo. */
export interface PodRecordView {
  id: string;
  ipv6Address: string;
  ipv4Address: string;
  spec?: { network?: { securityGroups: string[]; nameTables: string[]; dnsUpstreams: string[] }; metadata: Record<string, string> };
}

/** A pod kept from before (its record), given at start. */
export interface KeptPod {
  id: string;
  network: PodNetworkSpec;
  ipv6?: string;
  ipv4?: string;
}

/** What the guest is pushed (feos.guest.v1.ConfigureNetworkRequest's fields). */
export interface GuestNetwork {
  macAddress: string;
  /** A /128, gateway fe80::1. */
  ipv6Address: string;
  /** A /32, gateway 169.254.0.1 on the link. */
  ipv4Address: string;
  ipv6Gateway: string;
  ipv4Gateway: string;
  /** The resolver. */
  nameservers: string[];
  /** Routes via the IPv6 gateway instead of a default route: fc00::/7 for a ULA pod. */
  ipv6Routes: string[];
  /** 0: the device's default. */
  mtu: number;
}

/** A pod's link as attachPod made it. */
export interface AttachedPod {
  /** The TAP device, `pod-<ID>`: QEMU's `-netdev tap,ifname=<tap>,script=no,downscript=no`. */
  tap: string;
  /** The guest's MAC address. */
  mac: string;
  guest: GuestNetwork;
}

interface PodState {
  id: string;
  tap: string;
  spec: PodNetworkSpec;
  addresses: PodAddresses;
  attached: boolean;
}

/**
 * The layer. Make it with {@link createNetwork}; call {@link PodNetwork.start} once.
 *
 * Lifecycle of a pod with a network, from feosd:
 * - CreatePod: `createPod(id, spec)` checks the spec, hands out the addresses (kept on disk
 *   before it returns); feosd records them in PodInfo.
 * - Every boot and resume: `attachPod(id)` before QEMU starts; it returns the TAP and what the
 *   guest is pushed. Fails with FAILED_PRECONDITION naming missing groups and tables.
 * - Stop, suspend: `detachPod(id)` after the VM ended.
 * - DeletePod, hibernation: `removePod(id)`.
 */
export class PodNetwork {
  readonly settings: NetworkSettings;
  readonly groups: SecurityGroupStore;
  readonly tables: NameTableStore;
  readonly #o: NetworkOptions;
  readonly #log: Logger;
  readonly #pods = new Map<string, PodState>();
  #alloc?: AddressAllocator;
  #resolver?: Resolver;
  #metadata?: MetadataService;
  #metadataPort?: number;
  #table?: CompiledTable;
  #tableChain: Promise<unknown> = Promise.resolve();
  #timer?: NodeJS.Timeout;
  #unavailable: string | undefined = 'the network has not started';
  #queryListeners = new Set<(r: DnsQueryRecord) => void>();
  #stopped = false;
  #handedOver = false;
  #nodeAddresses: string[] = [];
  readonly #traffic = new TrafficChannel();
  readonly #recent = new RecentPods((a) => this.#podBySource(a)?.id);
  #collector?: TrafficCollector;
  /** The node's mesh, with `mesh` in the options. */
  readonly mesh?: NodeMesh;
  #kept: KeptPod[] = [];

  constructor(opts: NetworkOptions) {
    this.settings = parseNetworkFlags(opts);
    if (opts.mesh) {
      this.mesh = new NodeMesh(opts.mesh, !this.settings.podPrefix);
      this.mesh.onPeers = () => {
        if (this.#alloc && !this.#stopped) this.#writeTable(false).catch((err: unknown) => this.#log.error({ err: errorMessage(err) }, 'writing the table after the mesh peers changed failed'));
      };
    }
    this.#o = opts;
    this.#log = opts.log;
    this.groups = new SecurityGroupStore(join(opts.stateDir, 'security-groups'));
    this.tables = new NameTableStore(join(opts.stateDir, 'name-tables'));
    this.groups.onChange = (id, membersOnly) => this.#onGroupChange(id, membersOnly);
  }

  /** Whether the resolver answers on sockets handed over by systemd's protocol rather than its own. */
  get resolverSocketsHandedOver(): boolean {
    return this.#handedOver;
  }

  /** Why pods with a network cannot be created or booted, or undefined while the network works. */
  get unavailableReason(): string | undefined {
    if (this.mesh && !this.mesh.keyed && this.mesh.meshed) return "the node has --pod-prefix and its cluster is meshed: the two exclude each other (drop --pod-prefix to take the mesh's /96)";
    return this.#unavailable;
  }

  /**
   * Loads the groups and tables, then sets the network up: the earlier versions' leftovers
   * removed, forwarding, the unreachable prefix, `feos-dns`, the addresses reconciled with the
   * kept pods (which get the addresses they lack), TAP devices of pods that are gone removed,
   * the metadata responder, the table, and the resolver, which answers once the pods are known.
   * Never throws for the network: without a prefix, or when a step fails, it keeps the reason in
   * {@link unavailableReason}, which {@link createPod} and {@link attachPod} then fail with
   * (FAILED_PRECONDITION), and which feosd logs once (this layer does not: it was logged twice).
   * @returns the kept pods' addresses, by ID, for feosd to record where they changed
   */
  async start(kept: KeptPod[] = []): Promise<Map<string, PodAddresses>> {
    for (const [store, kind] of [[this.groups, 'security group'], [this.tables, 'name table']] as const) {
      for (const bad of await store.load()) this.#log.error({ file: bad.file, err: bad.error }, `a ${kind} record cannot be read; skipped`);
    }
    const result = new Map<string, PodAddresses>();
    for (const k of kept) {
      this.#pods.set(k.id, { id: k.id, tap: tapName(k.id), spec: k.network, addresses: { ipv6: k.ipv6, ipv4: k.ipv4 }, attached: false });
    }
    this.#kept = kept;
    const mesh = this.mesh;
    if (mesh) {
      try {
        await mesh.load();
      } catch (err: unknown) {
        this.#unavailable = `the mesh cannot be read: ${errorMessage(err)}`;
        return result;
      }
      if (mesh.keyed) {
        if (mesh.nodePrefix) this.settings.podPrefix = mesh.nodePrefix;
        else {
          // The network comes up once the control plane gives the node its /96, as at a start.
          mesh.onPrefix = (prefix) => {
            if (this.#stopped) return;
            this.settings.podPrefix = prefix;
            void this.#bringUp(this.#kept, new Map()).then((addresses) => this.#o.onLateStart?.(addresses));
          };
        }
      }
    }
    if (!this.settings.podPrefix) {
      this.#unavailable = mesh?.keyed ? "the node has no /96 of its cluster's mesh yet (the control plane gives it after the join)" : 'the node has no pod prefix (--pod-prefix)';
      return result;
    }
    return this.#bringUp(kept, result);
  }

  /** The setup of {@link start} once the node has its pod prefix. */
  async #bringUp(kept: KeptPod[], result: Map<string, PodAddresses>): Promise<Map<string, PodAddresses>> {
    if (!this.settings.podPrefix) return result;
    try {
      const podsDir = join(this.#o.stateDir, 'pods');
      await removeLegacyNetwork(podsDir, this.#log, this.#o.legacyBpfDir);
      await setUpNode(this.settings);
      if (this.mesh?.keyed) await this.mesh.up();
      this.#alloc = await AddressAllocator.open({
        podsDir,
        podPrefix: this.settings.podPrefix,
        podIpv4Range: this.settings.podIpv4Range,
        keptPods: kept.map((k) => [k.id, { ipv6: k.ipv6, ipv4: k.ipv4 }] as [string, PodAddresses]),
      });
      for (const k of kept) {
        const p = this.#pods.get(k.id)!;
        p.addresses = await this.#alloc.allocate(k.id, p.addresses);
        result.set(k.id, { ...p.addresses });
      }
      const taps = new Set([...this.#pods.values()].map((p) => p.tap));
      for (const link of await listPodLinks()) {
        if (!taps.has(link)) {
          await deletePodLink(link);
          this.#log.info({ tap: link }, 'removed the TAP device of a pod that is gone');
        }
      }
      // Pods whose links are there run: they stay in the table while feosd takes them over.
      for (const p of this.#pods.values()) p.attached = await linkExists(p.tap);
      this.#metadata = new MetadataService({ podBySource: (a) => this.#metadataOf(a), log: this.#log });
      this.#metadataPort = await this.#metadata.listen(this.settings.dnsAddress, this.#o.metadataPort ?? 0);
      await this.#writeTable(true);
      await this.#startTraffic();
      await this.#startResolver();
      this.#unavailable = undefined;
      const interval = this.#o.rulesIntervalMs ?? RULES_INTERVAL_MS;
      this.#timer = setInterval(() => {
        this.#writeTable(true).catch((err: unknown) => this.#log.error({ err: errorMessage(err) }, 'writing the rules again failed'));
      }, interval);
      this.#timer.unref();
      this.#log.info({ podPrefix: formatPrefix(this.settings.podPrefix), metadataPort: this.#metadataPort }, 'the pods network is up');
      const lacking = nodeNetworkReason(this.#o.procPaths);
      if (lacking !== undefined) this.#log.warn({ reason: lacking }, `${lacking}; until then a create of a pod with a network is FAILED_PRECONDITION`);
    } catch (err: unknown) {
      this.#unavailable = `the pods network could not be set up: ${errorMessage(err)}`;
    }
    return result;
  }

  /**
   * Turns nf_conntrack_acct and nf_conntrack_timestamp on, which the table's first write made
   * there (it loads connection tracking), and starts the collector of the traffic records.
   */
  async #startTraffic(): Promise<void> {
    if (this.#o.trafficRecords === false) return;
    for (const key of ['net/netfilter/nf_conntrack_acct', 'net/netfilter/nf_conntrack_timestamp']) {
      try {
        await setSysctl(key, 1);
      } catch (err: unknown) {
        this.#log.warn({ err: errorMessage(err) }, 'flows will lack their counters or times');
      }
    }
    this.#collector = new TrafficCollector({
      channel: this.#traffic,
      dnsAddress: this.settings.dnsAddress,
      log: this.#log,
      pods: { podOf: (a) => this.#recent.podOf(a), podOfTap: (tap) => [...this.#pods.values()].find((p) => p.tap === tap)?.id },
    });
    this.#collector.start();
  }

  async #startResolver(): Promise<void> {
    const port = this.#o.dnsPort ?? 53;
    let udp: dgram.Socket;
    let tcp: net.Server;
    const fds = this.#o.listenFds === false ? {} : typeof this.#o.listenFds === 'object' ? this.#o.listenFds : takeListenFds('dns');
    if (fds.problem) this.#log.warn(`${fds.problem}; the resolver binds its own sockets`);
    if (fds.udp !== undefined && fds.tcp !== undefined) {
      udp = dgram.createSocket('udp4');
      await new Promise<void>((resolve, reject) => {
        udp.once('error', reject);
        udp.bind({ fd: fds.udp }, () => resolve());
      });
      tcp = net.createServer();
      await new Promise<void>((resolve, reject) => {
        tcp.once('error', reject);
        tcp.listen({ fd: fds.tcp }, () => resolve());
      });
      this.#handedOver = true;
      this.#log.info('the resolver took the sockets it was handed (LISTEN_FDS)');
    } else {
      ({ udp, tcp } = await bindResolverSockets(this.settings.dnsAddress, port));
    }
    this.#resolver = new Resolver({
      podBySource: (a) => this.#resolverPodOf(a),
      tables: () => this.tables.view(),
      defaultUpstreams: () => this.settings.dnsUpstreams,
      upstreamPort: this.#o.upstreamPort,
      onQuery: (r) => {
        this.#traffic.publish(dnsQueryEntry(r));
        for (const l of this.#queryListeners) l(r);
      },
      log: this.#log,
    });
    this.#resolver.serve(udp, tcp);
  }

  #podBySource(address: string): PodState | undefined {
    for (const p of this.#pods.values()) if (p.addresses.ipv4 === address || p.addresses.ipv6 === address) return p;
    return undefined;
  }

  #resolverPodOf(address: string): ResolverPod | undefined {
    const p = this.#podBySource(address);
    return p ? { podId: p.id, nameTables: p.spec.nameTables, upstreams: p.spec.dnsUpstreams } : undefined;
  }

  #metadataOf(address: string): PodMetadata | undefined {
    const p = this.#podBySource(address);
    if (!p?.addresses.ipv4) return undefined;
    return { podId: p.id, ipv6: p.addresses.ipv6, ipv4: p.addresses.ipv4, metadata: p.spec.metadata ?? {} };
  }

  #requireUp(): AddressAllocator {
    const why = this.unavailableReason;
    if (why !== undefined || !this.#alloc) {
      throw new NetworkError('FAILED_PRECONDITION', `pods with a network cannot run on this node: ${why ?? 'the network is not set up'}`);
    }
    return this.#alloc;
  }

  /** The node's own addresses, canonical. @throws NetworkError INTERNAL when `ip` fails */
  async nodeAddresses(): Promise<string[]> {
    const links = await ipJson<Array<{ addr_info?: Array<{ local: string }> }>>('addr', 'show');
    const out = new Set<string>();
    for (const l of links) for (const a of l.addr_info ?? []) out.add(canonicalAddress(a.local.split('%')[0]));
    this.#nodeAddresses = [...out];
    return [...out];
  }

  /**
   * Checks a pod's network spec as CreatePod does: its upstreams, its metadata, the IDs it names.
   * @returns the spec with its upstreams canonical
   * @throws NetworkError INVALID_ARGUMENT naming what is wrong
   */
  async checkSpec(spec: PodNetworkSpec): Promise<PodNetworkSpec> {
    try {
      checkMetadata(spec.metadata ?? {});
      const dnsUpstreams = checkPodUpstreams(spec.dnsUpstreams, this.settings, await this.nodeAddresses());
      return { ...spec, dnsUpstreams };
    } catch (err: unknown) {
      if (err instanceof RangeError) throw new NetworkError('INVALID_ARGUMENT', err.message, { cause: err });
      throw err;
    }
  }

  /**
   * CreatePod's part: checks the spec and hands the pod its addresses, kept on disk before they
   * are returned; a pod the layer knows gets its own again (`existing`: its record's).
   * @throws NetworkError FAILED_PRECONDITION while the network is not up, INVALID_ARGUMENT on a
   *   bad ID or spec, RESOURCE_EXHAUSTED when no address is left
   */
  async createPod(podId: string, spec: PodNetworkSpec, existing: PodAddresses = {}): Promise<PodAddresses> {
    try {
      checkPodId(podId);
    } catch (err: unknown) {
      throw new NetworkError('INVALID_ARGUMENT', errorMessage(err));
    }
    const alloc = this.#requireUp();
    const checked = await this.checkSpec(spec);
    const addresses = await alloc.allocate(podId, existing);
    const cur = this.#pods.get(podId);
    this.#pods.set(podId, { id: podId, tap: tapName(podId), spec: checked, addresses, attached: cur?.attached ?? false });
    return { ...addresses };
  }

  /** The groups and tables a pod names that the node does not have. */
  missingFor(podId: string): { groups: string[]; tables: string[] } {
    const p = this.#pods.get(podId);
    if (!p) return { groups: [], tables: [] };
    return { groups: p.spec.securityGroups.filter((g) => !this.groups.has(g)), tables: p.spec.nameTables.filter((t) => !this.tables.has(t)) };
  }

  /**
   * Before a boot or resume: makes the pod's TAP device with every setting, and puts the pod in
   * the table. Can run again (after a restart of feosd, for a running pod).
   * @returns the TAP, the MAC and what the guest is pushed
   * @throws NetworkError FAILED_PRECONDITION while the network is not up or when the pod's
   *   groups or tables are not on the node (the message names them), NOT_FOUND for a pod the
   *   layer does not know, INTERNAL naming the step that failed
   */
  async attachPod(podId: string): Promise<AttachedPod> {
    this.#requireUp();
    const p = this.#pods.get(podId);
    if (!p) throw new NetworkError('NOT_FOUND', `pod ${podId} has no network on this node`);
    const missing = this.missingFor(podId);
    if (missing.groups.length > 0 || missing.tables.length > 0) {
      const parts = [];
      if (missing.groups.length > 0) parts.push(`security group${missing.groups.length > 1 ? 's' : ''} ${missing.groups.join(', ')}`);
      if (missing.tables.length > 0) parts.push(`name table${missing.tables.length > 1 ? 's' : ''} ${missing.tables.join(', ')}`);
      throw new NetworkError('FAILED_PRECONDITION', `pod ${podId}: ${parts.join(' and ')} not on the node`);
    }
    if (!p.addresses.ipv4 || !p.addresses.ipv6) throw new NetworkError('FAILED_PRECONDITION', `pod ${podId} has no addresses of this network`);
    await ensurePodLink({ tap: p.tap, ipv6: p.addresses.ipv6, ipv4: p.addresses.ipv4, dnsAddress: this.settings.dnsAddress, otlpAddress: this.settings.otlpAddress });
    p.attached = true;
    await this.#writeTable(false);
    return { tap: p.tap, mac: podMac(podId), guest: this.guestNetwork(podId)! };
  }

  /** What the pod's guest is pushed, or undefined for a pod the layer does not know. */
  guestNetwork(podId: string): GuestNetwork | undefined {
    const p = this.#pods.get(podId);
    if (!p?.addresses.ipv4 || !p.addresses.ipv6) return undefined;
    const ula = isUla(p.addresses.ipv6);
    const onMesh = ula && this.mesh?.keyed === true && this.mesh.nodePrefix !== undefined;
    return {
      macAddress: podMac(podId),
      ipv6Address: p.addresses.ipv6,
      ipv4Address: p.addresses.ipv4,
      ipv6Gateway: IPV6_GATEWAY,
      ipv4Gateway: IPV4_GATEWAY,
      nameservers: [this.settings.dnsAddress],
      ipv6Routes: ula ? ['fc00::/7'] : [],
      // The mesh's MTU: what WireGuard carries to the other nodes' pods.
      mtu: onMesh ? MESH_MTU : 0,
    };
  }

  /** After a stop or suspend: deletes the TAP device (its routes and proxy entry go with it); the pod keeps its addresses. */
  async detachPod(podId: string): Promise<void> {
    const p = this.#pods.get(podId);
    if (!p) return;
    await deletePodLink(p.tap);
    p.attached = false;
    if (this.#alloc) await this.#writeTable(false);
  }

  /**
   * DeletePod's and a hibernation's part, in the seed's order: the pod leaves the resolver and
   * the metadata service, its TAP device is deleted, then the connection tracking entries of its
   * addresses, then it leaves the table, and its IPv4 address is freed. A pod the layer does not
   * know is nothing to do.
   * @throws NetworkError INTERNAL naming the step; the steps before it are done, and a call again finishes
   */
  async removePod(podId: string): Promise<void> {
    const p = this.#pods.get(podId);
    if (!p) return;
    // Off the resolver and the metadata service: the pod is not known by its addresses any more.
    this.#pods.delete(podId);
    this.#metadata?.forgetPod(podId);
    try {
      await deletePodLink(p.tap);
      const addrs = [p.addresses.ipv4, p.addresses.ipv6].filter((a): a is string => a !== undefined);
      // The ends of the connections the delete ends are read after the pod left: they name it.
      this.#recent.left(podId, addrs);
      await deleteConntrack(addrs);
      if (this.#alloc) {
        await this.#writeTable(false);
        await this.#alloc.release(podId);
      }
    } catch (err: unknown) {
      this.#pods.set(podId, { ...p, attached: false });
      throw err;
    }
  }

  /** The pods that name a group, for the refusal of its deletion. */
  podsNamingGroup(id: string): string[] {
    return [...this.#pods.values()].filter((p) => p.spec.securityGroups.includes(id)).map((p) => p.id);
  }

  /** The pods that name a table. */
  podsNamingTable(id: string): string[] {
    return [...this.#pods.values()].filter((p) => p.spec.nameTables.includes(id)).map((p) => p.id);
  }

  /**
   * feos.network.v1.SecurityGroupService, NameService and TrafficService, for `server.addService`.
   * @param o.stopping aborted when feosd stops: the traffic watches end at once (UNAVAILABLE "feosd stops")
   */
  grpcServices(o: { stopping?: AbortSignal } = {}): GrpcService[] {
    return [
      securityGroupService(this.groups, (id) => this.podsNamingGroup(id)),
      nameService(this.tables, (id) => this.podsNamingTable(id)),
      trafficService(this.#traffic, {
        queueRecords: this.#o.trafficQueueRecords,
        podKnown: (id) => this.#pods.has(id) || this.#recent.knows(id),
        stopping: o.stopping,
      }),
      ...(this.mesh ? [this.mesh.grpcService()] : []),
    ];
  }

  /** Every query the resolver answers (the traffic records' DNS queries). @returns a function that stops the listening */
  onDnsQuery(listener: (r: DnsQueryRecord) => void): () => void {
    this.#queryListeners.add(listener);
    return () => {
      this.#queryListeners.delete(listener);
    };
  }

  /** The pod's addresses, if the layer knows it. */
  addressesOf(podId: string): PodAddresses | undefined {
    const p = this.#pods.get(podId);
    return p ? { ...p.addresses } : undefined;
  }

  #onGroupChange(id: string, membersOnly: boolean): void {
    if (!this.#alloc || this.#stopped) return;
    this.#writeTable(false).catch((err: unknown) =>
      this.#log.error({ group: id, membersOnly, err: errorMessage(err) }, 'writing the table after a group change failed'),
    );
  }

  /**
   * The layer as the pod layer's `PodNetworkProvider` (src/feos/pods) takes it:
   * - `check(network)`: why a pod with this network cannot be made (the network is not up, or
   *   an upstream the seed's DNS section refuses, checked against the node's addresses as last
   *   read), or undefined;
   * - `setUp(pod)`: the pod's addresses (its record's kept, else handed out and kept on disk) and
   *   {@link attachPod};
   * - `tearDown(pod)`: {@link removePod}.
   */
  podNetworkProvider(): {
    check(network: { dnsUpstreams: string[] }): string | undefined;
    setUp(pod: PodRecordView): Promise<{ ipv6Address: string; ipv4Address: string; tap: string; mac: string; guest: GuestNetwork }>;
    tearDown(pod: { id: string }): Promise<void>;
  } {
    return {
      check: (network) => {
        const why = this.unavailableReason;
        if (why !== undefined) return `pods with a network cannot run on this node: ${why}`;
        const lacking = nodeNetworkReason(this.#o.procPaths);
        if (lacking !== undefined) return `pods with a network cannot run on this node: ${lacking}`;
        try {
          checkPodUpstreams(network.dnsUpstreams, this.settings, this.#nodeAddresses);
          return undefined;
        } catch (err: unknown) {
          return errorMessage(err);
        }
      },
      setUp: async (pod) => {
        const n = pod.spec?.network;
        const spec: PodNetworkSpec = {
          securityGroups: n?.securityGroups ?? [],
          nameTables: n?.nameTables ?? [],
          dnsUpstreams: n?.dnsUpstreams ?? [],
          metadata: pod.spec?.metadata ?? {},
        };
        const known = this.#pods.get(pod.id);
        const existing = { ipv6: pod.ipv6Address || undefined, ipv4: pod.ipv4Address || undefined };
        if (!known?.addresses.ipv4 || !known.addresses.ipv6) await this.createPod(pod.id, spec, existing);
        else known.spec = spec;
        const at = await this.attachPod(pod.id);
        return { ipv6Address: at.guest.ipv6Address, ipv4Address: at.guest.ipv4Address, tap: at.tap, mac: at.mac, guest: at.guest };
      },
      tearDown: (pod) => this.removePod(pod.id),
    };
  }

  /** Compiles and writes the table, one write at a time; `replace` writes it whole. */
  #writeTable(replace: boolean): Promise<void> {
    const run = this.#tableChain.then(async () => {
      const node = await this.nodeAddresses();
      // The mesh's peers' endpoints are denied as the node's own addresses are.
      const peers = this.mesh?.keyed ? this.mesh.peerAddresses() : [];
      const denied: Prefix[] = [...this.settings.denyPrefixes, ...ALWAYS_DENIED, ...[...node, ...peers].map((a) => parsePrefix(a))];
      const groups = new Map<string, SecurityGroup>(this.groups.view());
      const next = compileTable({
        podIpv4Range: this.settings.podIpv4Range,
        dnsAddress: this.settings.dnsAddress,
        otlpAddress: this.settings.otlpAddress,
        metadataPort: this.#metadataPort,
        denied,
        meshPrefix: this.mesh?.keyed ? this.mesh.clusterPrefix : undefined,
        groups,
        pods: [...this.#pods.values()].filter((p) => p.attached).map((p) => ({ tap: p.tap, ipv6: p.addresses.ipv6, groups: p.spec.securityGroups })),
      });
      const batch = tableUpdate(this.#table, next, replace);
      if (batch) await nft(batch);
      this.#table = next;
    });
    this.#tableChain = run.catch(() => {});
    return run;
  }

  /** Writes the table again now (what the minute's timer does). */
  rewriteTable(): Promise<void> {
    return this.#writeTable(true);
  }

  /**
   * Stops the resolver, the metadata service, the traffic records' readers and the timer. The
   * devices, routes and the table stay: the pods outlive feosd.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.#collector?.stop();
    await this.#tableChain;
    await this.#resolver?.close();
    await this.#metadata?.close();
  }
}

/** The tables a NameTable map holds (for tests and tools). */
export type NameTables = ReadonlyMap<string, NameTable>;

/**
 * Makes the layer from feosd's options.
 * @throws RangeError naming the option and value when a flag is bad (feosd exits then)
 * @example
 * const network = createNetwork({ stateDir: '/var/lib/feos', podPrefix: '2001:db8:0:1::/64', log });
 * const kept = await network.start(keptPods);            // never throws for the network
 * for (const s of network.grpcServices()) server.addService(s.definition, s.implementation);
 * const addrs = await network.createPod(id, spec);       // record addrs in PodInfo
 * const { tap, mac, guest } = await network.attachPod(id); // before QEMU starts
 */
export function createNetwork(opts: NetworkOptions): PodNetwork {
  return new PodNetwork(opts);
}
