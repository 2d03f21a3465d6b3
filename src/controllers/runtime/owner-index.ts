/**
 * The pods of the informer cache indexed by their controller's uid (client-go's `controllerUIDIndex`), and
 * the pods with no controller by namespace: a ReplicaSet sync reads its own pods, not every pod of its
 * namespace. With 10 000 pods of one namespace the walk over all of them, once per pod event, was most of
 * the control plane's CPU.
 *
 * Fed by the pod informer's events, before any controller's handler sees them (`startControllers`).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { controllerOf } from '../../api/index.ts';

/** Pods by controller uid, and orphans by namespace. */
export class PodsByOwner {
  readonly #byOwner = new Map<string, Map<string, V1Pod>>();
  readonly #orphans = new Map<string, Map<string, V1Pod>>();
  /** Pod key → where it is filed: `o:<uid>` or `n:<namespace>`. */
  readonly #filed = new Map<string, string>();

  /**
   * Takes in an informer event.
   * @param verb `add`, `update` or `delete`
   */
  observe(verb: 'add' | 'update' | 'delete', pod: V1Pod): void {
    const ns = pod.metadata?.namespace ?? '';
    const key = `${ns}/${pod.metadata?.name ?? ''}`;
    const was = this.#filed.get(key);
    if (was !== undefined) {
      const bucket = was.startsWith('o:') ? this.#byOwner : this.#orphans;
      const m = bucket.get(was.slice(2));
      m?.delete(key);
      if (m?.size === 0) bucket.delete(was.slice(2));
      this.#filed.delete(key);
    }
    if (verb === 'delete') return;
    const owner = controllerOf(pod)?.uid;
    const [bucket, id] = owner ? [this.#byOwner, owner] : [this.#orphans, ns];
    let m = bucket.get(id);
    if (!m) {
      m = new Map();
      bucket.set(id, m);
    }
    m.set(key, pod);
    this.#filed.set(key, `${owner ? 'o' : 'n'}:${id}`);
  }

  /** The pods whose controller has `uid`. */
  owned(uid: string): V1Pod[] {
    const m = this.#byOwner.get(uid);
    return m ? Array.from(m.values()) : [];
  }

  /** The pods of `namespace` that have no controller. */
  orphans(namespace: string): V1Pod[] {
    const m = this.#orphans.get(namespace);
    return m ? Array.from(m.values()) : [];
  }
}
