/**
 * The mesh in the control plane (seed 000, "The mesh"; docs/feos/fleet.md, "The mesh"): JoinMesh's
 * answer (./allocation.ts), the peers sent to the connected nodes (./peers.ts), and the /96s of deleted
 * Nodes freed. Each instance watches the record (the ConfigMap kube-system/feos-mesh) and the FeOS
 * Nodes; what one instance writes the others see through their watch.
 */
import type http2 from 'node:http2';
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import { errorMessage, Informer, isApiError, RestClient } from '../../api/index.ts';
import type { Logger } from '../../lib/index.ts';
import { RUNTIME_FEOS, RUNTIME_LABEL } from '../nodes.ts';
import { DEFAULT_MESH_NODE_LIMIT, joinRecord, MESH_CONFIGMAP, MESH_NAMESPACE, type MeshRecord, MeshStore, recordOf } from './allocation.ts';
import { MeshPeers } from './peers.ts';

/** Options of {@link startMesh}. */
export interface MeshOptions {
  kubeConfig: KubeConfig;
  /** How many nodes may hold a /96. @default {@link DEFAULT_MESH_NODE_LIMIT} */
  nodeLimit?: number;
  /** The newest node connection of `node` with this instance. */
  connection(node: string): http2.ClientHttp2Session | undefined;
  log: Logger;
}

/** JoinMesh's answer (feos.fleet.v1.JoinMeshResponse). */
export interface MeshJoin {
  meshed: boolean;
  clusterPrefix: string;
  nodePrefix: string;
}

/** The mesh of this instance. */
export interface Mesh {
  /**
   * JoinMesh of `node` (its Node, as the revocation check read it): see {@link joinRecord}.
   * @throws MeshArgumentError, MeshExhausted, MeshKeyTaken (./allocation.ts); ApiError when the API fails
   */
  join(node: V1Node, publicKey: string, endpoint: string): Promise<MeshJoin>;
  /** A node connection of `node` came up (its peers are put whole over it). */
  connected(node: string): void;
  /** `node` has no node connection with this instance any more. */
  disconnected(node: string): void;
  /** The record as this instance last saw it. */
  record(): MeshRecord | undefined;
  close(): Promise<void>;
}

/**
 * Starts the mesh's watches and its peers. The watches' first lists are waited for up to 10 s; a failed
 * one goes on trying in the background (the peers then wait for it).
 */
export async function startMesh(o: MeshOptions): Promise<Mesh> {
  const log = o.log;
  const limit = o.nodeLimit ?? DEFAULT_MESH_NODE_LIMIT;
  const rest = new RestClient(o.kubeConfig, { userAgent: 'kube32-fleet-mesh' });
  const store = new MeshStore(rest);
  let current: MeshRecord | undefined;
  const peers = new MeshPeers({ connection: o.connection, record: () => current, log });
  const configMaps = new Informer<{ metadata?: { name?: string }; data?: Record<string, string> }>({
    rest,
    path: `/api/v1/namespaces/${MESH_NAMESPACE}/configmaps`,
    fieldSelector: `metadata.name=${MESH_CONFIGMAP}`,
    resource: 'configmaps (the mesh)',
    log,
  });
  const nodes = new Informer<V1Node>({ rest, path: '/api/v1/nodes', labelSelector: `${RUNTIME_LABEL}=${RUNTIME_FEOS}`, resource: 'nodes (the mesh)', log });

  /** Takes a record seen (by the watch, or written here), if it is newer than the one held. */
  const seen = (rec: MeshRecord): void => {
    if (current && rec.generation <= current.generation && rec.clusterPrefix === current.clusterPrefix) return;
    current = rec;
    peers.changed();
    collect();
  };

  // Frees the /96 of each node whose Node is gone (or made anew: another uid). The record is read
  // first, then the Node: a node that joined after the read makes the write conflict.
  let collecting = false;
  let collectAgain = false;
  const collect = (): void => {
    if (!current || !nodes.synced) return;
    const stale = Object.entries(current.nodes).filter(([n, e]) => nodes.get(n)?.metadata?.uid !== e.uid);
    if (stale.length === 0) return;
    if (collecting) {
      collectAgain = true;
      return;
    }
    collecting = true;
    store
      .update(async (rec) => {
        const gone: string[] = [];
        for (const [name, e] of Object.entries(rec.nodes)) {
          if (nodes.get(name)?.metadata?.uid === e.uid) continue;
          let uid: string | undefined;
          try {
            uid = (await rest.json<V1Node>({ method: 'GET', path: `/api/v1/nodes/${encodeURIComponent(name)}` })).metadata?.uid;
          } catch (err: unknown) {
            if (!isApiError(err, 404)) throw err;
          }
          if (uid !== e.uid) gone.push(name);
        }
        if (gone.length === 0) return { result: gone };
        const left = { ...rec.nodes };
        for (const n of gone) delete left[n];
        return { next: { ...rec, generation: rec.generation + 1n, nodes: left }, result: gone };
      })
      .then(
        (gone) => {
          for (const n of gone) log.info({ node: n, prefix: current?.nodes[n]?.prefix }, 'node deleted: its /96 of the mesh is freed');
        },
        (err: unknown) => log.warn({ err: errorMessage(err) }, 'freeing the /96s of deleted nodes failed; trying again at the next change'),
      )
      .finally(() => {
        collecting = false;
        if (collectAgain) {
          collectAgain = false;
          collect();
        }
      });
  };

  configMaps.on((verb, cm) => {
    if (cm.metadata?.name !== MESH_CONFIGMAP) return;
    if (verb === 'delete') {
      log.warn({}, `ConfigMap ${MESH_NAMESPACE}/${MESH_CONFIGMAP} was deleted: the mesh's /64 and /96s are gone; the next JoinMesh chooses a new /64`);
      current = undefined;
      return;
    }
    try {
      const rec = recordOf(cm);
      // A record made anew (deleted, then made again) has other versions: it replaces the one held.
      if (current && rec.clusterPrefix !== current.clusterPrefix) current = undefined;
      seen(rec);
    } catch (err: unknown) {
      log.error({ err: errorMessage(err) }, 'the mesh record does not parse');
    }
  });
  nodes.on((verb) => {
    if (verb === 'delete' || verb === 'add') collect();
  });
  const wait = (p: Promise<boolean>) => Promise.race([p, new Promise<boolean>((r) => setTimeout(() => r(false), 10_000).unref())]);
  const [okCm, okNodes] = await Promise.all([wait(configMaps.start()), wait(nodes.start())]);
  if (!okCm || !okNodes) log.warn({}, 'the mesh watches have not listed yet; they go on trying');
  if (okCm && !current) {
    // No ConfigMap yet: the empty record (no /64) until the first JoinMesh with a key.
    current = (await store.read().catch(() => undefined))?.record;
  }
  collect();

  return {
    async join(node, publicKey, endpoint) {
      const name = node.metadata?.name ?? '';
      const uid = node.metadata?.uid ?? '';
      const r = await store.update((rec) => {
        const j = joinRecord(rec, name, uid, publicKey, endpoint, limit);
        return { next: j.next, result: { ...j, written: j.next } };
      });
      if (r.written) {
        seen(r.written);
        log.info({ node: name, clusterPrefix: r.clusterPrefix, nodePrefix: r.nodePrefix || undefined, endpoint: publicKey ? endpoint : undefined }, publicKey ? 'node on the mesh' : 'node left the mesh (it sent no key)');
      }
      return { meshed: r.clusterPrefix !== '', clusterPrefix: r.clusterPrefix, nodePrefix: r.nodePrefix };
    },
    connected: (node) => peers.connected(node),
    disconnected: (node) => peers.disconnected(node),
    record: () => current,
    async close() {
      peers.close();
      await Promise.all([configMaps.stop(), nodes.stop()]);
      rest.close();
    },
  };
}
