/**
 * The peers of every connected node (seed 000, "The mesh"; docs/feos/fleet.md, "The mesh"): each node of
 * the mesh is sent every other node's key, endpoint and /96 over its newest node connection with this
 * instance, feos.network.v1.MeshService:
 *
 * - PutMeshPeers whole when the node connects (and whenever what the node has is not known);
 * - UpdateMeshPeers from the version the node has to the record's as nodes join, change and leave;
 *   FAILED_PRECONDITION (the node has another version: another instance moved it, or it lost its
 *   record) is answered by a PutMeshPeers whole;
 * - a node that answers FAILED_PRECONDITION to the put has no mesh yet (it has not taken its JoinMesh
 *   answer): tried again after 1 s, doubling to 30 s, as after any failure.
 *
 * The version is the record's `generation` (./allocation.ts): every instance sends the same peers at the
 * same version, so that the nodes' versions mean the same whoever sent them. Every 30 s each node's
 * GetMesh is compared with what it should have, and a node that is behind is put whole: it mends what
 * two instances sending at once may leave (an older put arriving after a newer update).
 */
import type http2 from 'node:http2';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Backoff, type Logger } from '../../lib/index.ts';
import { type MeshPeerSchema, MeshService } from '../../feos/gen/feos/network/v1/network_pb.js';
import { GrpcCallError, unary } from '../node-client.ts';
import type { MeshRecord } from './allocation.ts';

const FAILED_PRECONDITION = 9;
const UNIMPLEMENTED = 12;
/** The bound of one call to a node, ms. */
const CALL_TIMEOUT_MS = 20_000;
/** How often each node's mesh is compared with the record, ms. */
export const MESH_RESYNC_MS = 30_000;

type PeerInit = MessageInitShape<typeof MeshPeerSchema>;

/** The peers node `node` should have at the record's generation: every other node of the mesh, by name. */
export function peersOf(rec: MeshRecord, node: string): Map<string, PeerInit> {
  const out = new Map<string, PeerInit>();
  for (const name of Object.keys(rec.nodes).sort()) {
    if (name === node) continue;
    const e = rec.nodes[name]!;
    out.set(name, { nodeName: name, publicKey: e.publicKey, endpoint: e.endpoint, prefix: e.prefix });
  }
  return out;
}

function same(a: PeerInit | undefined, b: PeerInit | undefined): boolean {
  return a !== undefined && b !== undefined && a.publicKey === b.publicKey && a.endpoint === b.endpoint && a.prefix === b.prefix;
}

/** What this instance knows of one node's peers. */
interface NodeState {
  /** The version the node has, as its last answer said; undefined: not known (put whole). */
  version?: bigint;
  /** The peers it has at that version. */
  peers: Map<string, PeerInit>;
  running: boolean;
  again: boolean;
  /** Compare with GetMesh on the next round (the resync). */
  check: boolean;
  retry?: NodeJS.Timeout;
  backoff: Backoff;
  /** The last failure logged, so that one failing the same way is logged once. */
  logged?: string;
}

/** Options of {@link MeshPeers}. */
export interface MeshPeersOptions {
  /** The newest node connection of `node` with this instance. */
  connection(node: string): http2.ClientHttp2Session | undefined;
  /** The record as this instance last read it; undefined until read. */
  record(): MeshRecord | undefined;
  log: Logger;
}

/** Sends each connected node its peers (see the file's comment). */
export class MeshPeers {
  readonly #o: MeshPeersOptions;
  readonly #nodes = new Map<string, NodeState>();
  readonly #resync: NodeJS.Timeout;
  #closed = false;

  constructor(o: MeshPeersOptions) {
    this.#o = o;
    this.#resync = setInterval(() => {
      for (const [name, s] of this.#nodes) {
        s.check = true;
        this.#kick(name);
      }
    }, MESH_RESYNC_MS);
    this.#resync.unref();
  }

  /** A node connection of `node` came up: it is put whole. */
  connected(node: string): void {
    const s = this.#state(node);
    s.version = undefined;
    s.backoff.reset();
    this.#kick(node);
  }

  /** `node` holds no node connection with this instance any more: what it had is forgotten. */
  disconnected(node: string): void {
    const s = this.#nodes.get(node);
    if (!s) return;
    clearTimeout(s.retry);
    this.#nodes.delete(node);
  }

  /** The record changed: every connected node is brought to it. */
  changed(): void {
    for (const name of this.#nodes.keys()) this.#kick(name);
  }

  /** The version `node` has as far as this instance knows (for tests and logs). */
  versionOf(node: string): bigint | undefined {
    return this.#nodes.get(node)?.version;
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#resync);
    for (const s of this.#nodes.values()) clearTimeout(s.retry);
    this.#nodes.clear();
  }

  #state(node: string): NodeState {
    let s = this.#nodes.get(node);
    if (!s) {
      s = { peers: new Map(), running: false, again: false, check: false, backoff: new Backoff({ initialMs: 1000, maxMs: 30_000 }) };
      this.#nodes.set(node, s);
    }
    return s;
  }

  #kick(node: string): void {
    const s = this.#nodes.get(node);
    if (!s || this.#closed) return;
    if (s.running) {
      s.again = true;
      return;
    }
    clearTimeout(s.retry);
    s.retry = undefined;
    s.running = true;
    void this.#sync(node, s).finally(() => {
      s.running = false;
      if (s.again && this.#nodes.get(node) === s) {
        s.again = false;
        this.#kick(node);
      }
    });
  }

  async #sync(node: string, s: NodeState): Promise<void> {
    const log = this.#o.log;
    for (let round = 0; round < 3 && !this.#closed && this.#nodes.get(node) === s; round++) {
      const rec = this.#o.record();
      if (!rec?.nodes[node]) {
        // Not on the mesh (no JoinMesh yet, a --pod-prefix node, or freed): nothing to send.
        s.version = undefined;
        return;
      }
      const session = this.#o.connection(node);
      if (!session) return;
      const version = rec.generation;
      const want = peersOf(rec, node);
      try {
        if (s.check && s.version !== undefined) {
          s.check = false;
          const got = (await unary(session, MeshService.method.getMesh, {}, { timeoutMs: CALL_TIMEOUT_MS })).mesh;
          // A version names one content of the record, whoever sent it: the versions alone are compared.
          if (got && got.version > version) return; // another instance is ahead: this one's record will follow
          if (got?.version !== s.version) {
            log.info({ node, has: String(got?.version ?? 0n), want: String(version) }, 'mesh peers differ from what was sent: putting them whole');
            s.version = undefined;
          }
        }
        if (s.version === version) return;
        if (s.version !== undefined) {
          const put = [...want.values()].filter((p) => !same(p, s.peers.get(p.nodeName!)));
          const remove = [...s.peers.keys()].filter((n) => !want.has(n));
          try {
            const res = await unary(session, MeshService.method.updateMeshPeers, { fromVersion: s.version, toVersion: version, put, remove }, { timeoutMs: CALL_TIMEOUT_MS });
            this.#took(node, s, res.mesh?.version ?? version, want);
            log.debug({ node, from: String(s.version), to: String(version), put: put.length, remove: remove.length }, 'mesh peers updated');
            return;
          } catch (err: unknown) {
            if (!(err instanceof GrpcCallError && err.code === FAILED_PRECONDITION)) throw err;
            log.info({ node, from: String(s.version), err: err.details }, 'the node has another version of the mesh peers: putting them whole');
            s.version = undefined;
            continue; // from a fresh look at the record
          }
        }
        const res = await unary(session, MeshService.method.putMeshPeers, { version, peers: [...want.values()] }, { timeoutMs: CALL_TIMEOUT_MS });
        this.#took(node, s, res.mesh?.version ?? version, want);
        log.info({ node, version: String(version), peers: want.size }, 'mesh peers put');
        return;
      } catch (err: unknown) {
        this.#failed(node, s, err);
        return;
      }
    }
  }

  #took(node: string, s: NodeState, version: bigint, peers: Map<string, PeerInit>): void {
    s.version = version;
    s.peers = peers;
    s.backoff.reset();
    if (s.logged) this.#o.log.info({ node }, 'the node takes its mesh peers again');
    s.logged = undefined;
  }

  #failed(node: string, s: NodeState, err: unknown): void {
    s.version = undefined;
    const code = err instanceof GrpcCallError ? err.code : undefined;
    const why =
      code === FAILED_PRECONDITION
        ? `the node has no mesh yet (${(err as GrpcCallError).details})`
        : code === UNIMPLEMENTED
          ? 'the node serves no MeshService (a feosd without the mesh)'
          : err instanceof Error
            ? err.message
            : String(err);
    if (s.logged !== why) this.#o.log.info({ node, err: why }, 'mesh peers not taken; trying again');
    s.logged = why;
    const delay = code === UNIMPLEMENTED ? 30_000 : s.backoff.next();
    clearTimeout(s.retry);
    s.retry = setTimeout(() => {
      s.retry = undefined;
      this.#kick(node);
    }, delay);
    s.retry.unref();
  }
}
