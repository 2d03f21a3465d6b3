/**
 * The RuntimeClass admission of a pod's create, as kube-apiserver's plugin (plugin/pkg/admission/runtimeclass)
 * does it: a `runtimeClassName` that names no RuntimeClass (or one being deleted) is 403 Forbidden `pod
 * rejected: RuntimeClass "x" not found`; the class's `overhead.podFixed` becomes the pod's `spec.overhead`
 * (a pod's own overhead that differs is Forbidden; an overhead without a class that defines one is Forbidden);
 * its `scheduling.nodeSelector` is merged into the pod's (a key the pod sets to another value is Forbidden
 * `conflict: ...`), and its tolerations are added to the pod's (those it has already are not repeated).
 *
 * Then the runtime (issue 18 "Bad input"): a pod of the `feos` handler whose image is a Wasm module, or a pod
 * created bound (`spec.nodeName`) to a node of the other runtime, is 422 Invalid with a message that says
 * which runtime runs what (src/api/runtime.ts).
 */
import { isDeepStrictEqual } from 'node:util';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { RUNTIME_FEOS, podRuntime, runtimeMismatch } from '../../../api/index.ts';
import { ApiError, invalid } from '../../errors.ts';
import type { KubeObject, Storage } from '../../storage/index.ts';
import { parseQuantity } from '../../../lib/index.ts';
import { arr, rec } from '../util.ts';
import { runtimeClassTolerations } from './index.ts';

/** 403 Forbidden as kube-apiserver's admission says it: `pods "web" is forbidden: <why>`. */
function forbidden(pod: KubeObject, why: string): ApiError {
  const name = pod.metadata.name ?? '';
  return new ApiError('Forbidden', `pods "${name}" is forbidden: ${why}`, { name, kind: 'pods' });
}

/**
 * Applies the pod's RuntimeClass to a new pod, in place, then checks its runtime against its image and its node.
 * @throws ApiError Forbidden (no such RuntimeClass, an overhead or nodeSelector in conflict), Invalid (a
 *   Wasm image under the `feos` handler, or a node of the other runtime)
 */
export async function admitRuntimeClass(storage: Storage, pod: KubeObject): Promise<void> {
  const spec = rec(pod.spec);
  if (pod.spec === undefined) return;
  const name = spec.runtimeClassName;
  let rc: KubeObject | undefined;
  if (name !== undefined && name !== null && name !== '') {
    rc = typeof name === 'string' ? await storage.get({ resource: 'runtimeclasses.node.k8s.io', namespace: '', name }) : undefined;
    if (!rc || rc.metadata.deletionTimestamp) throw forbidden(pod, `pod rejected: RuntimeClass ${JSON.stringify(String(name))} not found`);
    const podFixed = rec(rc.overhead).podFixed;
    if (podFixed !== undefined && podFixed !== null) {
      const own = spec.overhead;
      if (own !== undefined && own !== null && Object.keys(rec(own)).length > 0 && !sameQuantities(rec(own), rec(podFixed))) {
        throw forbidden(pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead");
      }
      spec.overhead = { ...rec(podFixed) };
    }
    const sched = rec(rc.scheduling);
    const wanted = rec(sched.nodeSelector);
    if (Object.keys(wanted).length > 0) {
      const selector = { ...rec(spec.nodeSelector) };
      for (const [k, want] of Object.entries(wanted)) {
        const have = selector[k];
        if (have !== undefined && have !== want) throw forbidden(pod, `conflict: runtimeClass.scheduling.nodeSelector[${k}] = ${String(want)}; pod.spec.nodeSelector[${k}] = ${String(have)}`);
        selector[k] = want;
      }
      spec.nodeSelector = selector;
    }
    const extra = runtimeClassTolerations(rc);
    if (extra.length > 0 && (spec.tolerations === undefined || Array.isArray(spec.tolerations))) {
      const tol = arr(spec.tolerations);
      for (const t of extra) if (!tol.some((x) => isDeepStrictEqual(x, t))) tol.push({ ...t });
      spec.tolerations = tol;
    }
  }
  if (spec.overhead !== undefined && spec.overhead !== null && Object.keys(rec(spec.overhead)).length > 0 && rec(rc?.overhead).podFixed === undefined) {
    throw forbidden(pod, 'pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead');
  }
  const kind = podRuntime(pod as V1Pod);
  if (rc && rc.handler === RUNTIME_FEOS && kind?.runtime === 'wasm') {
    const i = (Array.isArray(spec.containers) ? (spec.containers as unknown[]) : []).findIndex((c) => rec(c).image === kind.image);
    throw invalid('Pod', '', pod.metadata.name ?? '', [
      {
        reason: 'FieldValueInvalid',
        field: i >= 0 ? `spec.containers[${i}].image` : 'spec.runtimeClassName',
        message: `Invalid value: ${JSON.stringify(kind.image)}: RuntimeClass ${JSON.stringify(String(name))} runs OCI container images in FeOS microVMs; a Wasm module (wasm://NAME, kube32.io/wasm-sha256:<hex>) runs on Kube32's Wasm workers: drop runtimeClassName, or give an OCI image`,
      },
    ]);
  }
  if (typeof spec.nodeName === 'string' && spec.nodeName !== '') {
    const node = await storage.get({ resource: 'nodes', namespace: '', name: spec.nodeName });
    const why = node ? runtimeMismatch(pod as V1Pod, node as V1Node) : undefined;
    if (why) throw invalid('Pod', '', pod.metadata.name ?? '', [{ reason: 'FieldValueInvalid', field: 'spec.nodeName', message: `Invalid value: ${JSON.stringify(spec.nodeName)}: ${why}` }]);
  }
}

/** Whether two resource lists hold the same quantities (`1` and `1000m` are equal). */
function sameQuantities(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  const q = (v: unknown): number => {
    try {
      return parseQuantity(v as string | number);
    } catch {
      return Number.NaN;
    }
  };
  return isDeepStrictEqual(ka, kb) && ka.every((k) => String(a[k]) === String(b[k]) || q(a[k]) === q(b[k]));
}
