/**
 * A stand-in of a node's feos.network.v1.MeshService for the control plane's mesh tests, built from the
 * proto as feosd's is and keeping its contract (proto/feos/network/v1/network.proto): FAILED_PRECONDITION
 * while the node has no mesh and for an UpdateMeshPeers from another version than the node's,
 * INVALID_ARGUMENT for a peer whose key, endpoint or prefix does not parse or is not a /96 of the
 * cluster's /64, or two peers of one name. Every call is recorded, in order, refused ones too.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { addService, FeosError } from '../../src/feos/api/index.ts';
import { type Mesh, type MeshPeer, MeshSchema, MeshService } from '../../src/feos/gen/feos/network/v1/network_pb.js';

/** One call the stand-in saw. */
export interface MeshCall {
  method: 'put' | 'update' | 'get';
  /** Put: its version; update: its to_version. */
  version?: bigint;
  from?: bigint;
  /** Put: the peers; update: the put ones. */
  peers?: MeshPeer[];
  remove?: string[];
  /** The code name when refused. */
  refused?: string;
}

/** A node's mesh, as feosd keeps it, with the calls it took. */
export class MeshStandIn {
  /** What the node has; the cluster prefix empty while no JoinMesh answer was taken. */
  mesh: Mesh = create(MeshSchema, { device: 'feos-mesh', implementation: 'wireguard-go' });
  readonly calls: MeshCall[] = [];

  /** Takes a JoinMesh answer, as feosd does before the peers can come. */
  joined(clusterPrefix: string, nodePrefix: string, publicKey: string, endpoint: string): void {
    this.mesh = create(MeshSchema, { ...this.mesh, clusterPrefix, nodePrefix, publicKey, endpoint });
  }

  /** The peers by name. */
  peers(): Record<string, { endpoint: string; prefix: string; publicKey: string }> {
    return Object.fromEntries(this.mesh.peers.map((p) => [p.nodeName, { endpoint: p.endpoint, prefix: p.prefix, publicKey: p.publicKey }]));
  }

  #check(peers: MeshPeer[]): void {
    const [net, bits] = this.mesh.clusterPrefix.split('/');
    const ula = new BlockList();
    ula.addSubnet(net!, Number(bits), 'ipv6');
    const names = new Set<string>();
    for (const p of peers) {
      if (names.has(p.nodeName)) throw new FeosError('INVALID_ARGUMENT', `two peers named ${p.nodeName}`);
      names.add(p.nodeName);
      if (Buffer.from(p.publicKey, 'base64').length !== 32) throw new FeosError('INVALID_ARGUMENT', `peer ${p.nodeName}: bad key`);
      const m = /^(?:\[(.+)\]|([\d.]+)):(\d+)$/.exec(p.endpoint);
      if (!m || !(m[1] ? isIPv6(m[1]) : isIPv4(m[2]!))) throw new FeosError('INVALID_ARGUMENT', `peer ${p.nodeName}: bad endpoint ${p.endpoint}`);
      const [a, len] = p.prefix.split('/');
      if (len !== '96' || !isIPv6(a!) || !ula.check(a!, 'ipv6')) throw new FeosError('INVALID_ARGUMENT', `peer ${p.nodeName}: ${p.prefix} is not a /96 of ${this.mesh.clusterPrefix}`);
    }
  }

  /** Adds the MeshService to a grpc-js server (the node connection's). */
  serve(server: grpc.Server): void {
    const refuse = (call: MeshCall, err: FeosError): never => {
      call.refused = err.code;
      throw err;
    };
    addService(server, MeshService, {
      putMeshPeers: async (req) => {
        const call: MeshCall = { method: 'put', version: req.version, peers: req.peers };
        this.calls.push(call);
        if (!this.mesh.clusterPrefix) refuse(call, new FeosError('FAILED_PRECONDITION', 'the node has no mesh: no JoinMesh answer taken'));
        try {
          this.#check(req.peers);
        } catch (err: unknown) {
          refuse(call, err as FeosError);
        }
        this.mesh = create(MeshSchema, { ...this.mesh, version: req.version, peers: req.peers });
        return { mesh: this.mesh };
      },
      updateMeshPeers: async (req) => {
        const call: MeshCall = { method: 'update', version: req.toVersion, from: req.fromVersion, peers: req.put, remove: req.remove };
        this.calls.push(call);
        if (!this.mesh.clusterPrefix) refuse(call, new FeosError('FAILED_PRECONDITION', 'the node has no mesh: no JoinMesh answer taken'));
        if (req.fromVersion !== this.mesh.version) refuse(call, new FeosError('FAILED_PRECONDITION', `the node's peers are at version ${this.mesh.version}, not ${req.fromVersion}`));
        const by = new Map(this.mesh.peers.map((p) => [p.nodeName, p]));
        for (const n of req.remove) by.delete(n);
        for (const p of req.put) by.set(p.nodeName, p);
        try {
          this.#check([...by.values()]);
        } catch (err: unknown) {
          refuse(call, err as FeosError);
        }
        this.mesh = create(MeshSchema, { ...this.mesh, version: req.toVersion, peers: [...by.values()] });
        return { mesh: this.mesh };
      },
      getMesh: async () => {
        this.calls.push({ method: 'get' });
        return { mesh: this.mesh };
      },
    });
  }
}
