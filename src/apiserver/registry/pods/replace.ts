/**
 * The one-write replacement of a moved pod (`POST pods/<name>/replace`, Kube32's own: Kubernetes
 * cannot change a uid by update). The body is a Pod of the same name whose `metadata.uid` is the
 * CURRENT uid, as a precondition. In one storage transaction the old object goes and the new one
 * comes: a new uid and creationTimestamp, the body's labels, annotations, ownerReferences,
 * finalizers and spec (its `spec.nodeName` is the target), status reset to Pending with
 * PodScheduled True. Watchers see DELETED (old uid) then ADDED (new uid). No graceful deletion and
 * no garbage collection of the old object's dependents: their owner references are moved to the new
 * uid in the same transaction. The replacement keeps the old pod's module digest
 * (`kube32.io/image-sha256`) when its images are the same, so a restore finds the module it was saved from.
 */
import { randomUUID } from 'node:crypto';
import { ApiError, badRequest, conflict, invalid, notFound } from '../../errors.ts';
import type { KubeObject, ObjectKey } from '../../storage/index.ts';
import { timestamp, withTypeMeta } from '../meta.ts';
import { RESOURCES } from '../catalog.ts';
import type { Registry } from '../store.ts';
import { storageKey } from '../types.ts';
import { IMAGE_SHA_ANNOTATION } from '../modules/images.ts';
import { arr, rec } from '../util.ts';
import { pods } from './index.ts';

/**
 * Replaces a pod in one write.
 * @returns the new Pod
 * @throws ApiError NotFound (no pod of that name), Conflict (uid differs), BadRequest, Invalid
 */
export async function replacePod(reg: Registry, namespace: string, name: string, body: unknown, opts: { dryRun?: boolean } = {}): Promise<KubeObject> {
  const b = rec(body);
  const meta = rec(b.metadata);
  if (b.kind !== undefined && b.kind !== 'Pod') throw badRequest(`the kind of the object (${String(b.kind)}) does not match Pod`);
  if (meta.name !== undefined && meta.name !== name) throw badRequest(`the name of the object (${String(meta.name)}) does not match the name on the URL (${name})`);
  if (meta.namespace !== undefined && meta.namespace !== namespace) throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
  if (typeof meta.uid !== 'string' || !meta.uid) throw invalid('Pod', '', name, [{ reason: 'FieldValueRequired', message: 'Required value: the uid of the pod being replaced', field: 'metadata.uid' }]);
  const key = reg.keyOf(pods, namespace, name);
  return await reg.storage.transaction(async () => {
    const current = await reg.storage.get(key);
    if (!current) throw notFound('pods', '', name);
    if (current.metadata.uid !== meta.uid) {
      throw conflict('pods', '', name, `Precondition failed: UID in precondition: ${String(meta.uid)}, UID in object meta: ${current.metadata.uid}`);
    }
    const now = reg.now();
    const fresh: KubeObject = {
      metadata: {
        name,
        namespace,
        uid: randomUUID(),
        creationTimestamp: timestamp(now),
        generation: 1,
        labels: meta.labels as Record<string, string> | undefined,
        annotations: meta.annotations as Record<string, string> | undefined,
        ownerReferences: meta.ownerReferences as KubeObject['metadata']['ownerReferences'],
        finalizers: meta.finalizers as string[] | undefined,
      },
      spec: structuredClone(b.spec),
    };
    for (const k of Object.keys(fresh.metadata)) if (fresh.metadata[k] === undefined) delete fresh.metadata[k];
    pods.prepareForCreate!(fresh, { now, list: async (r, ns) => (await reg.storage.list(r, ns)).items });
    // The replacement runs the module the pod ran (seed 002, "Moves": the same image, and a restore
    // refuses another module's snapshot): keep its digest rather than resolving `wasm://NAME` again,
    // which a push of another module under the same name would have changed.
    const pinned = current.metadata.annotations?.[IMAGE_SHA_ANNOTATION];
    if (pinned && sameImages(current.spec, fresh.spec)) {
      fresh.metadata.annotations = { ...(fresh.metadata.annotations ?? {}), [IMAGE_SHA_ANNOTATION]: pinned };
    } else {
      await reg.hooks.admitCreate?.(pods, fresh);
    }
    const causes = pods.validate!(fresh);
    if (causes.length) throw invalid('Pod', '', name, causes);
    const status = rec(fresh.status);
    fresh.status = { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'True', lastProbeTime: null, lastTransitionTime: timestamp(now) }], qosClass: status.qosClass };
    if (opts.dryRun) return withTypeMeta(pods, fresh);
    reg.replacedUids.add(current.metadata.uid!);
    try {
      await reg.storage.delete(key, { uid: current.metadata.uid });
      const created = await reg.storage.create(key, fresh);
      // Objects the old pod owned now name the replacement: the move keeps the pod, only its uid changes.
      for (const k of await dependentKeys(reg, namespace, current.metadata.uid!)) {
        const o = await reg.storage.get(k);
        const refs = o?.metadata.ownerReferences ?? [];
        if (!o || !refs.some((r) => r.uid === current.metadata.uid)) continue;
        o.metadata.ownerReferences = refs.map((r) => (r.uid === current.metadata.uid ? { ...r, uid: created.metadata.uid! } : r));
        await reg.storage.update(k, o);
      }
      return withTypeMeta(pods, created);
    } catch (err: unknown) {
      reg.replacedUids.delete(current.metadata.uid!);
      if (err instanceof ApiError) throw err;
      throw err;
    }
  });
}

/** Whether two pod specs name the same images, container by container (init containers included). */
function sameImages(a: unknown, b: unknown): boolean {
  const images = (spec: unknown) => JSON.stringify([...arr(rec(spec).initContainers), ...arr(rec(spec).containers)].map((c) => c.image));
  return images(a) === images(b);
}

/**
 * The keys of the objects in `namespace` that may name `uid` as an owner: from the garbage
 * collector's owner index when the registry has one (a move at 10 000 pods and 40 000 events read
 * every object of the namespace, ~100 MB from etcd, for the few a pod owns), else every namespaced
 * object of the namespace. Candidates only: the caller reads each and checks its references.
 */
async function dependentKeys(reg: Registry, namespace: string, uid: string): Promise<ObjectKey[]> {
  if (reg.ownerIndex) {
    const out: ObjectKey[] = [];
    for (const k of reg.ownerIndex.dependentsOf(uid)) {
      const [resource, ns, name] = k.split('/');
      if (ns === namespace && resource && name) out.push({ resource, namespace, name });
    }
    return out;
  }
  const out: ObjectKey[] = [];
  for (const def of RESOURCES) {
    if (!def.namespaced || def.storedAs) continue;
    for (const o of (await reg.storage.list(storageKey(def), namespace)).items) {
      if ((o.metadata.ownerReferences ?? []).some((r) => r.uid === uid)) out.push({ resource: storageKey(def), namespace, name: o.metadata.name! });
    }
  }
  return out;
}
