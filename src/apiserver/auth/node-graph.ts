/**
 * The Node authorizer's graph (kube-apiserver's `plugin/pkg/auth/authorizer/node` graph, fed by
 * informers there): for each namespace, which pods are bound to which node, the Secrets and ConfigMaps
 * each names ({@link podReferences}) and the Checkpoint each restores from (`kube32.io/restore-from`),
 * kept by the API server from its own storage watch. A kubelet's read of a Secret, a ConfigMap or a
 * Checkpoint's data is then decided from the pods bound to that node, not from a list of every pod of
 * the namespace (at 10 000 pods in one namespace that list was ~14 MB from etcd per request).
 *
 * Started on the first use (one list of pods, then a watch from its resourceVersion; listed again when the
 * store ends that watch), per storage; concurrent first uses share that list. The watch is one of the storage watch's listeners, as the
 * watch cache is: a pod's binding is in the graph before a kubelet can have seen it through a watch.
 */
import { ANNOTATIONS } from '../../api/index.ts';
import { type KubeObject, keepListed, type Storage } from '../storage/index.ts';
import { rec } from '../registry/util.ts';

/** What the graph keeps of one pod bound to a node. */
export interface PodEdges {
  name: string;
  /** `kube32.io/restore-from`: the Checkpoint it restores from, if any. */
  restoreFrom: string | undefined;
  secrets: Set<string>;
  configMaps: Set<string>;
}

/** The pods bound to each node, by `namespace\0node`, then by pod name. */
export class NodeGraph {
  readonly #byNode = new Map<string, Map<string, PodEdges>>();
  /** Where each pod is, by `namespace\0name`: its `namespace\0node` key. */
  readonly #where = new Map<string, string>();
  readonly #refs: (pod: KubeObject, kind: 'secret' | 'configMap') => Set<string>;

  /** @param refs the Secrets or ConfigMaps a pod names (auth/node.ts's podReferences) */
  constructor(refs: (pod: KubeObject, kind: 'secret' | 'configMap') => Set<string>) {
    this.#refs = refs;
  }

  /** Forgets every pod (before a fresh list). */
  clear(): void {
    this.#byNode.clear();
    this.#where.clear();
  }

  /** Applies a pod as it now is (`deleted`: gone). */
  observe(pod: KubeObject, deleted: boolean): void {
    const ns = pod.metadata.namespace ?? '';
    const name = pod.metadata.name ?? '';
    const id = `${ns}\0${name}`;
    const was = this.#where.get(id);
    if (was !== undefined) {
      const m = this.#byNode.get(was);
      m?.delete(name);
      if (m?.size === 0) this.#byNode.delete(was);
      this.#where.delete(id);
    }
    const node = rec(pod.spec).nodeName;
    if (deleted || typeof node !== 'string' || !node) return;
    const key = `${ns}\0${node}`;
    let m = this.#byNode.get(key);
    if (!m) {
      m = new Map();
      this.#byNode.set(key, m);
    }
    m.set(name, { name, restoreFrom: pod.metadata.annotations?.[ANNOTATIONS.restoreFrom], secrets: this.#refs(pod, 'secret'), configMaps: this.#refs(pod, 'configMap') });
    this.#where.set(id, key);
  }

  /** The pods of `namespace` bound to `node`. */
  podsOn(namespace: string, node: string): Iterable<PodEdges> {
    return this.#byNode.get(`${namespace}\0${node}`)?.values() ?? [];
  }
}

const byStorage = new WeakMap<Storage, Promise<NodeGraph>>();

/**
 * The graph of the pods in `storage`. The first call lists every pod once and starts the watch that
 * keeps it; later calls (those made while that list is in flight included) read it. A first list
 * that fails is forgotten, so the next call lists again.
 * @param refs the Secrets or ConfigMaps a pod names
 */
export function nodeGraphOf(storage: Storage, refs: (pod: KubeObject, kind: 'secret' | 'configMap') => Set<string>): Promise<NodeGraph> {
  let graph = byStorage.get(storage);
  if (!graph) {
    graph = (async () => {
      const g = new NodeGraph(refs);
      // Listed again when the store ends the watch (etcd compacted past it): the graph is rebuilt.
      await keepListed(storage, 'pods', {
        replace(items) {
          g.clear();
          for (const p of items) g.observe(p, false);
        },
        event: (e) => g.observe(e.object, e.type === 'DELETED'),
      });
      return g;
    })();
    byStorage.set(storage, graph);
    graph.catch(() => {
      if (byStorage.get(storage) === graph) byStorage.delete(storage);
    });
  }
  return graph;
}
