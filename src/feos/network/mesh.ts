/**
 * The node's side of the mesh (the seed's "The mesh", ADR 0017): the private key in
 * `<node dir>/mesh/key` (0600, made once), what the control plane gave and sent in
 * `<node dir>/mesh/mesh.pb` (a feos.network.v1.Mesh, written whole), the WireGuard device and its
 * peers, the mesh's routes, and feos.network.v1.MeshService.
 */
import { mkdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { Logger } from '../../lib/index.ts';
import { writeFileAtomic } from '../../lib/index.ts';
import {
  GetMeshResponseSchema,
  type Mesh,
  type MeshPeer,
  MeshPeerSchema,
  MeshSchema,
  MeshService,
  type PutMeshPeersRequest,
  PutMeshPeersResponseSchema,
  type UpdateMeshPeersRequest,
  UpdateMeshPeersResponseSchema,
} from '../gen/feos/network/v1/network_pb.js';
import * as grpc from '@grpc/grpc-js';
import { NetworkError, errorMessage, networkErrorToGrpc } from './errors.ts';
import { grpcServiceDefinition, type GrpcService } from './grpc.ts';
import { canonicalAddress, formatPrefix, parseAddress, parsePrefix, prefixCovers, prefixHolds, prefixMask, type Prefix } from './ip.ts';
import { ip, ipJson } from './system.ts';
import { MESH_DEVICE, type WireGuardDevice, checkKey, ensureDevice, generatePrivateKey, publicKeyOf, type WireGuardImplementation } from './wireguard.ts';

/** The mesh's UDP port's default. */
export const MESH_PORT = 51820;

/** How the mesh is made: feosd's `--node-dir`, `--mesh-port`, `--mesh-address`, `--mesh-device`, `--wireguard-go`. */
export interface MeshOptions {
  /** `--node-dir`: the key and mesh.pb are in its `mesh/`. */
  nodeDir: string;
  /** `--mesh-port` @default MESH_PORT */
  port?: number;
  /** `--mesh-address`: the address the other nodes reach this one's device at. @default the address from which the node reaches the control plane */
  address?: string;
  /** `--mesh-device` @default 'feos-mesh' */
  device?: string;
  /** @default 'auto' */
  implementation?: 'auto' | WireGuardImplementation;
  /** `--wireguard-go`: wireguard-go's path, or a name looked up in PATH. @default 'wireguard-go' */
  wireguardGo?: string;
  /** wireguard-go's UAPI sockets' directory. @default '/var/run/wireguard' */
  uapiDir?: string;
  log: Logger;
}

/** A JoinMesh request's fields. */
export interface JoinMeshAsk {
  /** base64; '' for a node with --pod-prefix. */
  publicKey: string;
  /** host:port; '' for a node with --pod-prefix. */
  endpoint: string;
}

/** A JoinMesh answer's fields. */
export interface JoinMeshAnswer {
  meshed: boolean;
  clusterPrefix: string;
  nodePrefix: string;
}

/**
 * Parses an endpoint, "192.0.2.1:51820" or "[2001:db8::1]:51820".
 * @returns the address, canonical, and the port
 * @throws RangeError saying what is wrong
 */
export function parseEndpoint(text: string): { address: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  if (!m) throw new RangeError(`endpoint "${text}" is not host:port ("192.0.2.1:51820" or "[2001:db8::1]:51820")`);
  const host = m[1] ?? m[2]!;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) throw new RangeError(`endpoint "${text}": the port must be 1 to 65535`);
  let a: ReturnType<typeof parseAddress>;
  try {
    a = parseAddress(host);
  } catch {
    throw new RangeError(`endpoint "${text}": "${host}" is not an IP address`);
  }
  if ((a.family === 6) !== (m[1] !== undefined)) throw new RangeError(`endpoint "${text}": an IPv6 address goes in brackets, an IPv4 one without`);
  return { address: canonicalAddress(host), port };
}

/** host:port of an address and a port, with brackets for IPv6. */
export function formatEndpoint(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/**
 * Checks peers against the cluster's ULA (PutMeshPeers' and UpdateMeshPeers' rules).
 * @param self the node's own public key and /96, which no peer may have
 * @throws NetworkError INVALID_ARGUMENT naming the peer: a key, endpoint or prefix that does not
 *   parse, a prefix that is not a /96 of the cluster's ULA, two peers of one node name, key or
 *   prefix, or the node's own key or /96
 */
export function checkPeers(peers: MeshPeer[], clusterPrefix: Prefix, self?: { publicKey: string; prefix?: Prefix }): void {
  const names = new Set<string>();
  const keys = new Set<string>();
  const prefixes = new Set<string>();
  for (const p of peers) {
    const who = `peer "${p.nodeName}"`;
    const bad = (why: string): never => {
      throw new NetworkError('INVALID_ARGUMENT', `${who}: ${why}`);
    };
    if (p.nodeName === '') bad('no node name');
    if (names.has(p.nodeName)) bad('two peers of one node name');
    names.add(p.nodeName);
    try {
      checkKey(p.publicKey);
      parseEndpoint(p.endpoint);
    } catch (err: unknown) {
      bad(errorMessage(err));
    }
    if (keys.has(p.publicKey)) bad('two peers of one public key');
    keys.add(p.publicKey);
    if (self && p.publicKey === self.publicKey) bad("the node's own public key");
    let prefix: Prefix;
    try {
      prefix = parsePrefix(p.prefix, true);
    } catch (err: unknown) {
      throw new NetworkError('INVALID_ARGUMENT', `${who}: prefix: ${errorMessage(err)}`);
    }
    if (prefix.family !== 6 || prefix.length !== 96 || !prefixCovers(clusterPrefix, prefix)) bad(`prefix ${p.prefix} is not a /96 of the cluster's ULA ${formatPrefix(clusterPrefix)}`);
    const text = formatPrefix(prefix);
    if (prefixes.has(text)) bad(`two peers of one prefix ${text}`);
    prefixes.add(text);
    if (self?.prefix && formatPrefix(self.prefix) === text) bad(`prefix ${text} is the node's own`);
  }
}

const samePeer = (a: MeshPeer, b: MeshPeer) => a.publicKey === b.publicKey && a.endpoint === b.endpoint && a.prefix === b.prefix;

/**
 * The mesh of one node. {@link NodeMesh.load} first; the network layer then calls
 * {@link NodeMesh.up} once the node has its /96, and the fleet client {@link NodeMesh.joinAsk}
 * and {@link NodeMesh.joined}.
 */
export class NodeMesh {
  readonly dir: string;
  readonly port: number;
  readonly deviceName: string;
  readonly #o: MeshOptions;
  readonly #log: Logger;
  #privateKey = '';
  #publicKey = '';
  #mesh: Mesh = create(MeshSchema, {});
  #device?: WireGuardDevice;
  #chain: Promise<unknown> = Promise.resolve();
  /** Whether the node takes part (no --pod-prefix): it sends its key and takes a /96. */
  readonly keyed: boolean;
  /** Whether the last JoinMesh answer said the cluster is meshed. */
  meshed = false;
  /** Called once the node has a /96 it had not (the first JoinMesh answer that gives one). */
  onPrefix?: (nodePrefix: Prefix, clusterPrefix: Prefix) => void;
  /** Called after the peers changed (the table denies their endpoints). */
  onPeers?: () => void;

  /** @param keyed false for a node with --pod-prefix: no key, no device, only whether the cluster is meshed */
  constructor(o: MeshOptions, keyed: boolean) {
    this.#o = o;
    this.#log = o.log;
    this.dir = join(o.nodeDir, 'mesh');
    this.port = o.port ?? MESH_PORT;
    this.deviceName = o.device ?? MESH_DEVICE;
    this.keyed = keyed;
    if (!Number.isInteger(this.port) || this.port < 1 || this.port > 65535) throw new RangeError(`--mesh-port ${o.port}: must be 1 to 65535`);
    if (o.address !== undefined && o.address !== '') {
      try {
        parseAddress(o.address);
      } catch {
        throw new RangeError(`--mesh-address ${o.address}: not an IP address`);
      }
    }
    if (!/^[A-Za-z0-9_.=+-]{1,15}$/.test(this.deviceName)) throw new RangeError(`--mesh-device ${this.deviceName}: not a device name (1 to 15 characters)`);
  }

  /**
   * Reads or makes the key (0600, 32 random bytes, made once) and reads mesh.pb.
   * @throws Error naming the file that cannot be read or written
   */
  async load(): Promise<void> {
    if (!this.keyed) return;
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const keyFile = join(this.dir, 'key');
    let key: string | undefined;
    try {
      key = (await readFile(keyFile, 'utf8')).trim();
      checkKey(key);
      const mode = (await stat(keyFile)).mode & 0o777;
      if (mode & 0o077) this.#log.warn({ file: keyFile, mode: mode.toString(8) }, 'the mesh key is readable by group or others: chmod 600 it');
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`${keyFile}: ${errorMessage(err)}`, { cause: err });
      key = generatePrivateKey();
      await writeFileAtomic(keyFile, `${key}\n`, 0o600);
      this.#log.info({ file: keyFile }, 'made the mesh key');
    }
    this.#privateKey = key;
    this.#publicKey = publicKeyOf(key);
    try {
      this.#mesh = fromBinary(MeshSchema, await readFile(join(this.dir, 'mesh.pb')));
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`${join(this.dir, 'mesh.pb')}: ${errorMessage(err)}`, { cause: err });
    }
  }

  /** The node's public key (base64), '' before {@link load} or without a key. */
  get publicKey(): string {
    return this.#publicKey;
  }

  /** The /96 kept, if any. */
  get nodePrefix(): Prefix | undefined {
    return this.#mesh.nodePrefix ? parsePrefix(this.#mesh.nodePrefix) : undefined;
  }

  /** The cluster's ULA kept, if any. */
  get clusterPrefix(): Prefix | undefined {
    return this.#mesh.clusterPrefix ? parsePrefix(this.#mesh.clusterPrefix) : undefined;
  }

  /** The peers' endpoints' addresses, which pods are denied. */
  peerAddresses(): string[] {
    return this.#mesh.peers.map((p) => parseEndpoint(p.endpoint).address);
  }

  /**
   * What JoinMesh sends: the key and the endpoint (--mesh-address, else `localAddress`, the
   * address the uplink reaches the control plane from, at --mesh-port); nothing for a node with --pod-prefix.
   */
  joinAsk(localAddress: string): JoinMeshAsk {
    if (!this.keyed) return { publicKey: '', endpoint: '' };
    const address = this.#o.address || localAddress.replace(/^::ffff:/, '');
    return { publicKey: this.#publicKey, endpoint: formatEndpoint(canonicalAddress(address), this.port) };
  }

  /**
   * Takes a JoinMesh answer: the prefixes and the endpoint kept in mesh.pb (written whole); a /96
   * where there was none calls {@link onPrefix}. Another /96 than kept takes effect at the next start.
   * @returns whether the answer was taken: a node with a key takes only one with a /96 (else it asks again)
   * @throws Error when the answer's prefixes do not parse or mesh.pb cannot be written (the answer is not taken)
   */
  joined(ask: JoinMeshAsk, answer: JoinMeshAnswer): Promise<boolean> {
    return this.#serial(async () => {
      this.meshed = answer.meshed;
      if (!this.keyed) return true;
      if (!answer.meshed || answer.nodePrefix === '') return false;
      const cluster = parsePrefix(answer.clusterPrefix, true);
      const node = parsePrefix(answer.nodePrefix, true);
      if (cluster.family !== 6 || node.family !== 6 || !prefixCovers(cluster, node)) {
        throw new Error(`JoinMesh's answer: ${answer.nodePrefix} is not a prefix of the cluster's ${answer.clusterPrefix}`);
      }
      const had = this.#mesh.nodePrefix;
      const next = create(MeshSchema, { ...this.#mesh, clusterPrefix: formatPrefix(cluster), nodePrefix: formatPrefix(node), publicKey: ask.publicKey, endpoint: ask.endpoint, listenPort: this.port });
      if (had && had !== next.nodePrefix) this.#log.warn({ kept: had, given: next.nodePrefix }, 'the control plane gave another /96 than the network was set up with: it takes effect at the next start');
      await this.#write(next);
      if (!had) this.onPrefix?.(node, cluster);
      return true;
    });
  }

  /** One change at a time, each seen once it is kept. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn);
    this.#chain = run.catch(() => {});
    return run;
  }

  async #write(next: Mesh): Promise<void> {
    const bytes = toBinary(MeshSchema, create(MeshSchema, { ...next, implementation: '', device: '' }));
    await writeFileAtomic(join(this.dir, 'mesh.pb'), bytes, 0o600);
    this.#mesh = next;
  }

  /**
   * The device up for the kept prefixes: made (or taken), its key and port set, its peers those
   * kept (the others removed, the same kept with their sessions); the cluster's ULA routed to it;
   * and what an earlier prefix left removed: the main table's routes to the device but the ULA's,
   * the unreachable routes in the ULA's /48 but the node's own prefix.
   * @throws NetworkError naming the step
   */
  up(): Promise<void> {
    return this.#serial(async () => {
      const cluster = this.clusterPrefix;
      const node = this.nodePrefix;
      if (!cluster || !node) throw new NetworkError('FAILED_PRECONDITION', 'the node has no /96 of the mesh yet');
      const dev = await ensureDevice({ name: this.deviceName, implementation: this.#o.implementation, wireguardGo: this.#o.wireguardGo, uapiDir: this.#o.uapiDir });
      this.#device = dev;
      const have = await dev.get();
      const want = new Map(this.#mesh.peers.map((p) => [p.publicKey, p]));
      const set = this.#mesh.peers.filter((p) => {
        const h = have.peers.find((d) => d.publicKey === p.publicKey);
        return !h || h.allowedIps.join(',') !== p.prefix || (h.endpoint !== p.endpoint && h.lastHandshake === 0);
      });
      await dev.set({
        privateKey: have.privateKey === this.#privateKey ? undefined : this.#privateKey,
        listenPort: have.listenPort === this.port ? undefined : this.port,
        remove: have.peers.filter((d) => !want.has(d.publicKey)).map((d) => d.publicKey),
        set: set.map((p) => ({ publicKey: p.publicKey, endpoint: p.endpoint, allowedIps: [p.prefix] })),
      });
      const ula = formatPrefix(cluster);
      await ip('-6', 'route', 'replace', ula, 'dev', this.deviceName);
      const routes = await ipJson<Array<{ dst: string; dev?: string; type?: string }>>('-6', 'route', 'show', 'table', 'main');
      // The /48 of the ULA's Global ID.
      const site: Prefix = { family: 6, address: cluster.address & prefixMask(6, 48), length: 48 };
      for (const r of routes) {
        if (r.dst === 'default') continue;
        if (r.dev === this.deviceName && r.dst !== ula) {
          await ip('-6', 'route', 'del', r.dst, 'dev', this.deviceName);
          this.#log.info({ route: r.dst }, 'removed a route an earlier mesh prefix left');
        } else if (r.type === 'unreachable' && r.dst !== formatPrefix(node)) {
          let p: Prefix;
          try {
            p = parsePrefix(r.dst.includes('/') ? r.dst : `${r.dst}/128`);
          } catch {
            continue;
          }
          if (p.family === 6 && p.length >= 48 && prefixHolds(site, 6, p.address)) {
            await ip('-6', 'route', 'del', 'unreachable', r.dst);
            this.#log.info({ route: r.dst }, 'removed an unreachable route an earlier mesh prefix left');
          }
        }
      }
      this.#log.info({ device: this.deviceName, implementation: dev.implementation, cluster: ula, node: formatPrefix(node), peers: this.#mesh.peers.length }, 'the mesh is up');
    });
  }

  /** The peers applied to the device, from `prev` to the peers kept: a peer that stays keeps its session. */
  async #apply(prev: MeshPeer[]): Promise<void> {
    const dev = this.#device;
    if (!dev) return;
    const next = new Map(this.#mesh.peers.map((p) => [p.publicKey, p]));
    const old = new Map(prev.map((p) => [p.publicKey, p]));
    await dev.set({
      remove: prev.filter((p) => !next.has(p.publicKey)).map((p) => p.publicKey),
      set: this.#mesh.peers.filter((p) => !old.has(p.publicKey) || !samePeer(old.get(p.publicKey)!, p)).map((p) => ({ publicKey: p.publicKey, endpoint: p.endpoint, allowedIps: [p.prefix] })),
    });
  }

  #requireMesh(): Prefix {
    const cluster = this.clusterPrefix;
    if (!this.keyed) throw new NetworkError('FAILED_PRECONDITION', 'the node has --pod-prefix: it is on no mesh');
    if (!cluster || !this.nodePrefix) throw new NetworkError('FAILED_PRECONDITION', 'the node has no mesh yet (no JoinMesh answered)');
    return cluster;
  }

  /**
   * PutMeshPeers: the peers whole, with their version, kept then applied.
   * @throws NetworkError FAILED_PRECONDITION without a mesh, INVALID_ARGUMENT for bad peers (checkPeers)
   */
  putPeers(version: bigint, peers: MeshPeer[]): Promise<Mesh> {
    return this.#serial(async () => {
      checkPeers(peers, this.#requireMesh(), { publicKey: this.#publicKey, prefix: this.nodePrefix });
      const prev = this.#mesh.peers;
      const clean = peers.map((p) => create(MeshPeerSchema, { nodeName: p.nodeName, publicKey: p.publicKey, endpoint: p.endpoint, prefix: formatPrefix(parsePrefix(p.prefix)) }));
      await this.#write(create(MeshSchema, { ...this.#mesh, version, peers: clean }));
      await this.#apply(prev);
      this.onPeers?.();
      return this.view();
    });
  }

  /**
   * UpdateMeshPeers: a delta from the version the node has; `put` adds or replaces by node name,
   * `remove` names peers that go.
   * @throws NetworkError FAILED_PRECONDITION from another version or without a mesh,
   *   INVALID_ARGUMENT for bad peers
   */
  updatePeers(fromVersion: bigint, toVersion: bigint, put: MeshPeer[], remove: string[]): Promise<Mesh> {
    return this.#serial(async () => {
      const cluster = this.#requireMesh();
      if (fromVersion !== this.#mesh.version) {
        throw new NetworkError('FAILED_PRECONDITION', `the node has the peers' version ${this.#mesh.version}, not ${fromVersion}: put them whole`);
      }
      checkPeers(put, cluster, { publicKey: this.#publicKey, prefix: this.nodePrefix });
      const prev = this.#mesh.peers;
      const gone = new Set([...remove, ...put.map((p) => p.nodeName)]);
      const clean = put.map((p) => create(MeshPeerSchema, { nodeName: p.nodeName, publicKey: p.publicKey, endpoint: p.endpoint, prefix: formatPrefix(parsePrefix(p.prefix)) }));
      const peers = [...prev.filter((p) => !gone.has(p.nodeName)), ...clean];
      checkPeers(peers, cluster, { publicKey: this.#publicKey, prefix: this.nodePrefix });
      await this.#write(create(MeshSchema, { ...this.#mesh, version: toVersion, peers }));
      await this.#apply(prev);
      this.onPeers?.();
      return this.view();
    });
  }

  /** The mesh as GetMesh answers it: mesh.pb's with the device's name and what runs it. */
  view(): Mesh {
    return create(MeshSchema, {
      ...this.#mesh,
      publicKey: this.#mesh.publicKey || this.#publicKey,
      listenPort: this.#mesh.listenPort || (this.keyed ? this.port : 0),
      implementation: this.#device?.implementation ?? '',
      device: this.keyed ? this.deviceName : '',
    });
  }

  /** feos.network.v1.MeshService, for `server.addService`. */
  grpcService(): GrpcService {
    const unary =
      <Req>(fn: (req: Req) => Promise<unknown>): grpc.handleUnaryCall<Req, unknown> =>
      (call, callback) => {
        fn(call.request).then(
          (resp) => callback(null, resp),
          (err: unknown) => {
            const s = networkErrorToGrpc(err);
            callback({ code: s.code, details: s.details, metadata: new grpc.Metadata() } as grpc.ServiceError);
          },
        );
      };
    return {
      definition: grpcServiceDefinition(MeshService),
      implementation: {
        PutMeshPeers: unary(async (req: PutMeshPeersRequest) => create(PutMeshPeersResponseSchema, { mesh: await this.putPeers(req.version, req.peers) })),
        UpdateMeshPeers: unary(async (req: UpdateMeshPeersRequest) =>
          create(UpdateMeshPeersResponseSchema, { mesh: await this.updatePeers(req.fromVersion, req.toVersion, req.put, req.remove) }),
        ),
        GetMesh: unary(async () => create(GetMeshResponseSchema, { mesh: this.view() })),
      },
    };
  }
}
