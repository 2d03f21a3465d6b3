/**
 * `node.k8s.io/v1` RuntimeClasses (cluster-scoped; issue 18 "Running microVM pods"): which runtime runs a
 * pod. The object has no spec: `handler` (a DNS label, immutable), `overhead.podFixed` (what the runtime
 * takes per pod beside the containers) and `scheduling` (`nodeSelector`, `tolerations`), as in Kubernetes.
 * The API server makes `feos` at start ({@link FEOS_RUNTIME_CLASS}); pods name one in `runtimeClassName`
 * and ./admission.ts applies it at their create. `kubectl get runtimeclass` prints NAME HANDLER AGE.
 */
import { parseQuantity } from '../../../lib/index.ts';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, rec, required, validateLabel, validateMetaMaps, validateSubdomain } from '../util.ts';

/** The label, value and taint effect of a FeOS node (docs/feos/fleet.md; src/fleet/nodes.ts sets them). */
export const FEOS_RUNTIME_LABEL = 'kube32.io/runtime';
export const FEOS_RUNTIME = 'feos';

/**
 * The RuntimeClass the control plane makes at start: FeOS microVMs, on FeOS nodes only (their label), the
 * FeOS taint tolerated. No overhead: a FeOS node's allocatable is what its pods' microVMs may take, and a
 * pod's microVM takes its limits (docs/feos/cluster-pods.md).
 */
export const FEOS_RUNTIME_CLASS: KubeObject = {
  metadata: { name: FEOS_RUNTIME, labels: { 'app.kubernetes.io/managed-by': 'kube32' } },
  handler: FEOS_RUNTIME,
  scheduling: {
    nodeSelector: { [FEOS_RUNTIME_LABEL]: FEOS_RUNTIME },
    tolerations: [{ key: FEOS_RUNTIME_LABEL, operator: 'Equal', value: FEOS_RUNTIME, effect: 'NoSchedule' }],
  },
};

function validateRuntimeClass(obj: KubeObject, old?: KubeObject): StatusCause[] {
  const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  if (obj.handler === undefined || obj.handler === '') out.push(required('handler'));
  else if (typeof obj.handler !== 'string') out.push(invalidValue('handler', obj.handler, 'must be a string'));
  else out.push(...validateLabel(obj.handler, 'handler'));
  if (old && obj.handler !== old.handler) out.push(immutable('handler'));
  const podFixed = rec(obj.overhead).podFixed;
  if (podFixed !== undefined) {
    if (podFixed === null || typeof podFixed !== 'object' || Array.isArray(podFixed)) out.push(invalidValue('overhead.podFixed', podFixed, 'must be a map of quantities'));
    else {
      for (const [k, q] of Object.entries(podFixed)) {
        try {
          if ((typeof q !== 'string' && typeof q !== 'number') || parseQuantity(q) < 0) throw new RangeError();
        } catch {
          out.push(invalidValue(`overhead.podFixed[${k}]`, q, 'must be a quantity greater than or equal to 0'));
        }
      }
    }
  }
  const scheduling = obj.scheduling;
  if (scheduling !== undefined && (scheduling === null || typeof scheduling !== 'object' || Array.isArray(scheduling))) out.push(invalidValue('scheduling', scheduling, 'must be an object'));
  const sel = rec(scheduling).nodeSelector;
  if (sel !== undefined && (sel === null || typeof sel !== 'object' || Array.isArray(sel) || Object.values(sel).some((v) => typeof v !== 'string'))) {
    out.push(invalidValue('scheduling.nodeSelector', sel, 'must be a map of label values'));
  }
  const tol = rec(scheduling).tolerations;
  if (tol !== undefined && !Array.isArray(tol)) out.push(invalidValue('scheduling.tolerations', tol, 'must be a list'));
  return out;
}

/** runtime classes */
export const runtimeclasses: ResourceDef = {
  group: 'node.k8s.io',
  version: 'v1',
  kind: 'RuntimeClass',
  listKind: 'RuntimeClassList',
  plural: 'runtimeclasses',
  singular: 'runtimeclass',
  namespaced: false,
  subresources: [],
  hasStatus: false,
  fields: ['handler', 'overhead', 'scheduling'],
  validate: validateRuntimeClass,
  columns: [NAME_COLUMN, { name: 'Handler', type: 'string', description: 'Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.' }, AGE_COLUMN],
  cells(o, now) {
    return [o.metadata.name, o.handler ?? '', age(o.metadata.creationTimestamp, now)];
  },
};

/** The tolerations of a RuntimeClass (for ./admission.ts). */
export function runtimeClassTolerations(rc: KubeObject): Record<string, unknown>[] {
  return arr(rec(rc.scheduling).tolerations);
}
