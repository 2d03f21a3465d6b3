/**
 * What the pods bound to each node take (memory requested, pod count, host ports), kept by the API
 * server from its own storage watch, for the eviction's move-target check (seed 002 "Drain and
 * evictions", {@link moveTargetProblem}). Summing every pod of the cluster for each eviction read all
 * of them from storage: at 10 000 pods a drain of one node with 100 pods read and parsed a million
 * pods on the API server's one thread. This is the scheduler's {@link NodeUsage}, fed by the storage
 * watch instead of an informer (the API server may run without the scheduler: several API servers
 * on one etcd, controllers elsewhere), so one check costs O(nodes).
 *
 * Started on the first use (one list of pods, then a watch from its resourceVersion; listed again when the
 * store ends that watch), per storage.
 * It may be a moment behind the latest write, as the scheduler's cache is: the check is the
 * eviction's early answer; the checkpoint controller picks the move's target itself.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { type NodeUse, NodeUsage } from '../../../api/index.ts';
import { type KubeObject, keepListed, type Storage } from '../../storage/index.ts';

const byStorage = new WeakMap<Storage, Promise<{ usage: NodeUsage }>>();

/**
 * The per-node sums of the pods in `storage`, by node name (no entry for a node without pods).
 * The first call lists every pod once and starts a watch that keeps the sums (listed again when the store
 * ends the watch: {@link keepListed}); later calls, those made while that list is in flight included, wait
 * for it and read the sums (`kubectl drain` evicts every pod of a node at once: at 10 000 pods, 100
 * concurrent first calls each listed every pod, 1.4 GB from etcd). A first list that fails is forgotten, so
 * the next call lists again.
 */
export async function nodeUsageOf(storage: Storage): Promise<ReadonlyMap<string, NodeUse>> {
  let kept = byStorage.get(storage);
  if (!kept) {
    kept = (async () => {
      const box = { usage: new NodeUsage() };
      await keepListed(storage, 'pods', {
        replace(items) {
          const u = new NodeUsage();
          for (const p of items) u.observe('add', p as unknown as V1Pod);
          box.usage = u;
        },
        event: (e) => box.usage.observe(e.type === 'DELETED' ? 'delete' : 'update', e.object as unknown as V1Pod),
      });
      return box;
    })();
    byStorage.set(storage, kept);
    kept.catch(() => {
      if (byStorage.get(storage) === kept) byStorage.delete(storage);
    });
  }
  return (await kept).usage.nodes;
}

const nodesByStorage = new WeakMap<Storage, Promise<{ nodes: Map<string, KubeObject> }>>();

/**
 * The Nodes in `storage`, kept from its watch as {@link nodeUsageOf} keeps the sums (kube's eviction
 * and scheduler read nodes from an informer's cache): a drain's evictions each listed every Node (100
 * evictions at 100 nodes: 10 000 Nodes read from etcd). The first call lists them once (concurrent first
 * calls share that list; a failed one is retried by the next call); later calls read the kept copy,
 * listed again when the store ends its watch.
 */
export async function nodesOf(storage: Storage): Promise<V1Node[]> {
  let kept = nodesByStorage.get(storage);
  if (!kept) {
    kept = (async () => {
      const box = { nodes: new Map<string, KubeObject>() };
      await keepListed(storage, 'nodes', {
        replace(items) {
          box.nodes = new Map(items.map((n) => [n.metadata.name ?? '', n]));
        },
        event(e) {
          if (e.type === 'DELETED') box.nodes.delete(e.object.metadata.name ?? '');
          else box.nodes.set(e.object.metadata.name ?? '', e.object);
        },
      });
      return box;
    })();
    nodesByStorage.set(storage, kept);
    kept.catch(() => {
      if (nodesByStorage.get(storage) === kept) nodesByStorage.delete(storage);
    });
  }
  return [...(await kept).nodes.values()] as unknown as V1Node[];
}
