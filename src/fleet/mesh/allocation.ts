/**
 * The mesh's addresses (seed 000, "The mesh"; docs/feos/fleet.md, "The mesh"): the cluster's ULA /64,
 * chosen once (RFC 4193: `fd`, a random 40-bit Global ID and a random 16-bit subnet ID), and a /96 of it
 * for each joined node, with the node's WireGuard key and endpoint.
 *
 * The record is the ConfigMap `kube-system/feos-mesh` ({@link MeshStore}): written with the
 * resourceVersion it was read at (a compare-and-swap, so that several API servers on one etcd agree on
 * the /64 and never give one /96 twice), kept across restarts like any object, and read back by every
 * instance (./peers.ts sends the peers from it). Its data:
 *
 * | key | value |
 * |---|---|
 * | `cluster-prefix` | `fdXX:XXXX:XXXX:YYYY::/64` |
 * | `generation` | the record's version, decimal; +1 at each change (the peers' `version` on the nodes) |
 * | `next-index` | where the search for a free /96 starts (so that a freed /96 is not given again at once) |
 * | `nodes` | JSON: `{ "<node>": { "prefix", "publicKey", "endpoint", "uid" } }`, `uid` the Node's |
 */
import { randomBytes } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import { isApiError, type RestClient } from '../../api/index.ts';

/** The ConfigMap that holds the mesh, in `kube-system`. */
export const MESH_CONFIGMAP = 'feos-mesh';
export const MESH_NAMESPACE = 'kube-system';
/**
 * How many nodes may hold a /96 by default, and at most (`--feos-mesh-node-limit`). A /64 has 2^32 /96s;
 * the bound is the record's: one ConfigMap, at most 1 MiB, about 200 bytes a node.
 */
export const DEFAULT_MESH_NODE_LIMIT = 1024;
export const MAX_MESH_NODE_LIMIT = 4096;

/** One node of the mesh as the record keeps it. */
export interface MeshNode {
  /** Its /96: `fdXX:XXXX:XXXX:YYYY:A:B::/96`. */
  prefix: string;
  /** Its WireGuard public key, base64 (44 characters). */
  publicKey: string;
  /** host:port of its device, as it sent it. */
  endpoint: string;
  /** The uid of the Node it was given to: a Node made anew under the name gets another /96. */
  uid: string;
}

/** The whole record. */
export interface MeshRecord {
  /** The cluster's ULA /64; empty until the first node with a key joined the mesh. */
  clusterPrefix: string;
  /** +1 at each change; starts at the time it was made, ms, so that a record made anew never repeats a version. */
  generation: bigint;
  /** The index the next search for a free /96 starts at (1 when it is past the limit). */
  nextIndex: number;
  nodes: Record<string, MeshNode>;
}

/** The request was malformed: INVALID_ARGUMENT. */
export class MeshArgumentError extends Error {}
/** Every /96 the limit allows is taken: RESOURCE_EXHAUSTED. */
export class MeshExhausted extends Error {}
/** Another node holds the key: ALREADY_EXISTS. */
export class MeshKeyTaken extends Error {}

/** An empty record: no /64 yet. */
export function emptyRecord(): MeshRecord {
  return { clusterPrefix: '', generation: BigInt(Date.now()), nextIndex: 1, nodes: {} };
}

/** The eight 16-bit groups of an IPv6 address (no zone, no embedded IPv4). @throws MeshArgumentError when it is not one */
function groups(address: string): number[] {
  if (!isIPv6(address) || address.includes('.') || address.includes('%')) throw new MeshArgumentError(`${JSON.stringify(address)} is not an IPv6 address`);
  const [head, tail] = address.includes('::') ? address.split('::') : [address, undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : new Array<string>(8 - h.length - t.length).fill('0');
  return [...h, ...fill, ...t].map((g) => Number.parseInt(g, 16));
}

/** The text of eight groups, as RFC 5952 writes it (the WHATWG URL parser's IPv6 serializer, which does). */
function text(g: number[]): string {
  return new URL(`http://[${g.map((x) => x.toString(16)).join(':')}]/`).hostname.slice(1, -1);
}

/**
 * A new cluster ULA /64 (RFC 4193, 3.2): `fd`, 40 random bits (the Global ID), 16 random bits (the subnet).
 * @example newClusterPrefix() // 'fd3a:91c2:5e07:b41d::/64'
 */
export function newClusterPrefix(): string {
  const b = randomBytes(7);
  const g = [0xfd00 | b[0]!, (b[1]! << 8) | b[2]!, (b[3]! << 8) | b[4]!, (b[5]! << 8) | b[6]!, 0, 0, 0, 0];
  return `${text(g)}/64`;
}

/** The /96 number `index` (1 to 2^32 - 1) of the cluster's /64: `fdXX:…:YYYY:<hi>:<lo>::/96`. */
export function nodePrefix(clusterPrefix: string, index: number): string {
  const g = groups(clusterPrefix.replace(/\/64$/, ''));
  return `${text([g[0]!, g[1]!, g[2]!, g[3]!, Math.floor(index / 0x10000), index % 0x10000, 0, 0])}/96`;
}

/** The index of a /96 of the /64 (its bits 64 to 95). */
export function prefixIndex(prefix: string): number {
  const g = groups(prefix.replace(/\/96$/, ''));
  return g[4]! * 0x10000 + g[5]!;
}

/**
 * Checks a WireGuard public key: 32 bytes in standard base64 with its padding (44 characters), as `wg` writes it.
 * @throws MeshArgumentError saying what is wrong
 */
export function checkPublicKey(key: string): void {
  if (!/^[A-Za-z0-9+/]{43}=$/.test(key) || Buffer.from(key, 'base64').length !== 32 || Buffer.from(key, 'base64').toString('base64') !== key) {
    throw new MeshArgumentError(`public_key ${JSON.stringify(key.slice(0, 60))} is not a WireGuard key: want 32 bytes in standard base64 (44 characters, as wg pubkey prints it)`);
  }
}

/**
 * Checks an endpoint: `IPv4:port` or `[IPv6]:port`, port 1 to 65535. WireGuard's peers take addresses,
 * not names, so a name is refused here rather than by every peer.
 * @throws MeshArgumentError saying what is wrong
 */
export function checkEndpoint(endpoint: string): void {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(endpoint);
  const port = m ? Number(m[3]) : 0;
  const ok = m !== null && port >= 1 && port <= 65535 && (m[1] !== undefined ? isIPv6(m[1]) && !m[1].includes('%') : isIPv4(m[2]!));
  if (!ok) throw new MeshArgumentError(`endpoint ${JSON.stringify(endpoint.slice(0, 80))} is not host:port: want IPv4:PORT or [IPv6]:PORT with a port from 1 to 65535, such as 192.0.2.1:51820 (feosd --mesh-address)`);
}

/** What {@link joinRecord} answers. */
export interface JoinResult {
  /** The record to write, or undefined when nothing changes. */
  next?: MeshRecord;
  clusterPrefix: string;
  /** The node's /96; empty when it sent no key. */
  nodePrefix: string;
}

/**
 * The change a JoinMesh makes to the record (pure; the caller writes `next` with a compare-and-swap).
 * With a key: the /64 is chosen when there is none, the node keeps its /96 (its key and endpoint
 * updated) or is given the first free one from `nextIndex`. Without a key: the node leaves the mesh
 * (a node with --pod-prefix) and learns only whether the cluster is meshed.
 * @param uid the uid of the node's Node
 * @param limit how many nodes may hold a /96
 * @throws MeshArgumentError for a bad key or endpoint, MeshExhausted when `limit` nodes hold one, MeshKeyTaken when another node has the key
 */
export function joinRecord(rec: MeshRecord, node: string, uid: string, publicKey: string, endpoint: string, limit: number): JoinResult {
  if (publicKey === '') {
    if (!rec.nodes[node]) return { clusterPrefix: rec.clusterPrefix, nodePrefix: '' };
    const nodes = { ...rec.nodes };
    delete nodes[node];
    return { next: { ...rec, generation: rec.generation + 1n, nodes }, clusterPrefix: rec.clusterPrefix, nodePrefix: '' };
  }
  checkPublicKey(publicKey);
  checkEndpoint(endpoint);
  const other = Object.entries(rec.nodes).find(([n, e]) => n !== node && e.publicKey === publicKey);
  if (other) throw new MeshKeyTaken(`node ${other[0]} holds the mesh key ${publicKey}: each node needs a key of its own (a copied node directory? remove <node dir>/mesh/key on one of them)`);
  const clusterPrefix = rec.clusterPrefix || newClusterPrefix();
  const old = rec.nodes[node];
  if (old && old.uid === uid && rec.clusterPrefix) {
    if (old.publicKey === publicKey && old.endpoint === endpoint) return { clusterPrefix, nodePrefix: old.prefix };
    const nodes = { ...rec.nodes, [node]: { ...old, publicKey, endpoint } };
    return { next: { ...rec, generation: rec.generation + 1n, nodes }, clusterPrefix, nodePrefix: old.prefix };
  }
  // A new node, or a Node made anew under the name (its earlier /96 is freed).
  const nodes = { ...rec.nodes };
  delete nodes[node];
  const count = Object.keys(nodes).length;
  if (count >= limit) throw new MeshExhausted(`every /96 of the mesh is taken: ${count} nodes hold one (--feos-mesh-node-limit ${limit}); delete the Nodes that are gone (kubectl delete node) or raise the limit`);
  const taken = new Set(Object.values(nodes).map((e) => prefixIndex(e.prefix)));
  let index = rec.nextIndex >= 1 && rec.nextIndex <= limit ? rec.nextIndex : 1;
  while (taken.has(index)) index = index >= limit ? 1 : index + 1;
  const prefix = nodePrefix(clusterPrefix, index);
  nodes[node] = { prefix, publicKey, endpoint, uid };
  return { next: { clusterPrefix, generation: rec.generation + 1n, nextIndex: index + 1, nodes }, clusterPrefix, nodePrefix: prefix };
}

/** The ConfigMap's shape, as far as this file reads and writes it. */
interface ConfigMap {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
}

/**
 * The record of a ConfigMap.
 * @throws Error when the ConfigMap's data is not a mesh record (someone edited it)
 */
export function recordOf(cm: ConfigMap): MeshRecord {
  const d = cm.data ?? {};
  try {
    const nodes = JSON.parse(d.nodes || '{}') as Record<string, MeshNode>;
    if (typeof nodes !== 'object' || nodes === null || Array.isArray(nodes)) throw new Error('nodes is not a JSON object');
    const generation = BigInt(d.generation || '0');
    const nextIndex = Number(d['next-index'] || '1');
    if (d['cluster-prefix']) groups(d['cluster-prefix'].replace(/\/64$/, ''));
    return { clusterPrefix: d['cluster-prefix'] ?? '', generation, nextIndex: Number.isInteger(nextIndex) ? nextIndex : 1, nodes };
  } catch (err: unknown) {
    throw new Error(`ConfigMap ${MESH_NAMESPACE}/${MESH_CONFIGMAP} is not a mesh record (${err instanceof Error ? err.message : String(err)}): put back what it held`);
  }
}

function dataOf(rec: MeshRecord): Record<string, string> {
  const names = Object.keys(rec.nodes).sort();
  // One node a line, so that kubectl shows it readably.
  const nodes = names.length === 0 ? '{}' : `{\n${names.map((n) => `${JSON.stringify(n)}: ${JSON.stringify(rec.nodes[n])}`).join(',\n')}\n}\n`;
  return { 'cluster-prefix': rec.clusterPrefix, generation: String(rec.generation), 'next-index': String(rec.nextIndex), nodes };
}

const PATH = `/api/v1/namespaces/${MESH_NAMESPACE}/configmaps`;

/**
 * The mesh record in the Kubernetes API: read, and changed with the resourceVersion it was read at
 * (409 Conflict: read again and change again), so that several instances on one etcd agree. Changes
 * of one instance go one at a time.
 */
export class MeshStore {
  readonly #rest: RestClient;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(rest: RestClient) {
    this.#rest = rest;
  }

  /** The record as the API has it now (an empty one when there is no ConfigMap). @throws ApiError when the API fails */
  async read(): Promise<{ record: MeshRecord; resourceVersion?: string }> {
    try {
      const cm = await this.#rest.json<ConfigMap>({ method: 'GET', path: `${PATH}/${MESH_CONFIGMAP}` });
      return { record: recordOf(cm), resourceVersion: cm.metadata?.resourceVersion };
    } catch (err: unknown) {
      if (isApiError(err, 404)) return { record: emptyRecord() };
      throw err;
    }
  }

  /**
   * Reads the record, hands it to `change`, and writes what it answers (nothing when it answers
   * undefined) with the resourceVersion read; on a conflict, again from a fresh read (up to 30 times).
   * @returns what `change` answered last, with the record it was given
   * @throws what `change` throws; ApiError when the API fails
   */
  update<T>(change: (rec: MeshRecord) => Promise<{ next?: MeshRecord; result: T }> | { next?: MeshRecord; result: T }): Promise<T> {
    const run = async (): Promise<T> => {
      for (let attempt = 0; ; attempt++) {
        const { record, resourceVersion } = await this.read();
        const { next, result } = await change(record);
        if (!next) return result;
        const body: ConfigMap = {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: MESH_CONFIGMAP, namespace: MESH_NAMESPACE, labels: { 'app.kubernetes.io/managed-by': 'kube32-fleet' }, ...(resourceVersion ? { resourceVersion } : {}) },
          data: dataOf(next),
        };
        try {
          if (resourceVersion) await this.#rest.json({ method: 'PUT', path: `${PATH}/${MESH_CONFIGMAP}`, body });
          else await this.#rest.json({ method: 'POST', path: PATH, body });
          return result;
        } catch (err: unknown) {
          // 409: another instance changed it (or made it) since the read.
          if (!isApiError(err, 409) || attempt >= 29) throw err;
          await new Promise((r) => setTimeout(r, 5 + Math.random() * 20 * Math.min(attempt + 1, 5))); // a jitter against a second instance's retry, not a synchronisation
        }
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }
}
