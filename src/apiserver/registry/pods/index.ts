/**
 * Pods (`v1`): defaults as the Kubernetes API server sets them, validation of names, containers
 * and images, the update rules (spec fixed but for images, tolerations, grace and deadlines; a
 * `nodeName` set once), graceful deletion and the Table columns kubectl prints
 * (NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES).
 */
import { isDeepStrictEqual } from 'node:util';
import { ANNOTATIONS } from '../../../api/index.ts';
import { parseQuantity } from '../../../lib/index.ts';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, rec, required, validateLabel, validateMetaMaps, validateSubdomain } from '../util.ts';

/** Defaults of a pod spec (also used for the pod templates of workloads). */
export function defaultPodSpec(spec: Record<string, unknown>): void {
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(spec[list])) defaultContainer(c);
  }
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.securityContext ??= {};
  spec.schedulerName ??= 'default-scheduler';
  spec.enableServiceLinks ??= true;
  spec.preemptionPolicy ??= 'PreemptLowerPriority';
  spec.priority ??= 0;
  if (spec.serviceAccountName === undefined && spec.serviceAccount !== undefined) spec.serviceAccountName = spec.serviceAccount;
}

function defaultContainer(c: Record<string, unknown>): void {
  const image = typeof c.image === 'string' ? c.image : '';
  const tag = image.includes('@') ? 'digest' : (image.split('/').pop()?.split(':')[1] ?? 'latest');
  c.imagePullPolicy ??= tag === 'latest' ? 'Always' : 'IfNotPresent';
  c.terminationMessagePath ??= '/dev/termination-log';
  c.terminationMessagePolicy ??= 'File';
  c.resources ??= {};
  for (const p of arr(c.ports)) p.protocol ??= 'TCP';
  for (const e of arr(c.env)) {
    const ref = rec(rec(e.valueFrom).fieldRef);
    if (ref.fieldPath !== undefined) ref.apiVersion ??= 'v1';
  }
}

/**
 * A limit without a request of the same resource makes the request (Kubernetes' `SetDefaults_Pod`),
 * so `kubectl describe node` counts it and the QoS class sees it. At create only: a pod's resources
 * are immutable, and one stored before this defaulting keeps its spec.
 */
function defaultRequestsToLimits(spec: Record<string, unknown>): void {
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(spec[list])) {
      const limits = rec(rec(c.resources).limits);
      if (Object.keys(limits).length === 0) continue;
      const resources = rec(c.resources);
      const requests = { ...rec(resources.requests) };
      // A limit that is not a quantity is left for validation to name; it makes no request.
      for (const [k, v] of Object.entries(limits)) if (quantityOrNaN(v) >= 0) requests[k] ??= v;
      resources.requests = requests;
    }
  }
}

/** A quantity's value, or NaN when it is not one (so that comparisons with it are false). */
function quantityOrNaN(q: unknown): number {
  try {
    return typeof q === 'string' || typeof q === 'number' ? parseQuantity(q) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** The QoS class of a pod spec: Guaranteed, Burstable or BestEffort. */
export function qosClass(spec: Record<string, unknown>): string {
  const containers = [...arr(spec.containers), ...arr(spec.initContainers)];
  let any = false;
  let guaranteed = containers.length > 0;
  for (const c of containers) {
    const r = rec(c.resources);
    const req = rec(r.requests);
    const lim = rec(r.limits);
    if (Object.keys(req).length || Object.keys(lim).length) any = true;
    for (const k of ['cpu', 'memory']) {
      if (lim[k] === undefined || (req[k] !== undefined && String(req[k]) !== String(lim[k]))) guaranteed = false;
    }
  }
  if (!any) return 'BestEffort';
  return guaranteed ? 'Guaranteed' : 'Burstable';
}

function validateContainers(spec: Record<string, unknown>, list: string, required_: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  const cs = spec[list];
  if (cs === undefined && !required_) return out;
  if (!Array.isArray(cs) || (required_ && cs.length === 0)) return [required(`spec.${list}`)];
  const seen = new Set<string>();
  cs.forEach((c: Record<string, unknown>, i: number) => {
    const f = `spec.${list}[${i}]`;
    if (c === null || typeof c !== 'object') {
      out.push(invalidValue(f, c, 'must be an object'));
      return;
    }
    out.push(...validateLabel(c.name as string | undefined, `${f}.name`));
    if (typeof c.name === 'string') {
      if (seen.has(c.name)) out.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: "${c.name}"`, field: `${f}.name` });
      seen.add(c.name);
    }
    if (typeof c.image !== 'string' || c.image.trim() === '') out.push(required(`${f}.image`));
    out.push(...validateContainerResources(c, f));
    for (const list of ['ports', 'env', 'volumeMounts', 'command', 'args']) {
      if (c[list] !== undefined && !Array.isArray(c[list])) out.push(invalidValue(`${f}.${list}`, c[list], 'must be a list'));
    }
    out.push(...validateContainerPorts(c, f));
    arr(c.ports).forEach((p, j) => {
      if (!['TCP', 'UDP', 'SCTP'].includes(String(p.protocol))) out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: "${String(p.protocol)}": supported values: "SCTP", "TCP", "UDP"`, field: `${f}.ports[${j}].protocol` });
    });
  });
  return out;
}

/**
 * The causes of a container's `resources` as kube-apiserver's ValidateContainerResourceRequirements gives
 * them: a map of quantities each, none negative, no request above its limit. Shared by pods and the pod
 * templates of workloads (a Deployment with `limits.memory: -1Mi` is refused at its create, not at each
 * pod its ReplicaSet tries).
 * @param c the container
 * @param f the container's field path (`spec.containers[0]`, `spec.template.spec.containers[0]`)
 */
export function validateContainerResources(c: Record<string, unknown>, f: string): StatusCause[] {
  const out: StatusCause[] = [];
  if (c.resources !== undefined && (c.resources === null || typeof c.resources !== 'object' || Array.isArray(c.resources))) out.push(invalidValue(`${f}.resources`, c.resources, 'must be an object'));
  for (const kind of ['requests', 'limits']) {
    const r = rec(c.resources)[kind];
    if (r === undefined) continue;
    if (r === null || typeof r !== 'object' || Array.isArray(r)) {
      out.push(invalidValue(`${f}.resources.${kind}`, r, 'must be a map of quantities'));
      continue;
    }
    for (const [name, q] of Object.entries(r)) {
      try {
        if (typeof q !== 'string' && typeof q !== 'number') throw new RangeError('not a quantity');
        if (parseQuantity(q) < 0) out.push(invalidValue(`${f}.resources.${kind}[${name}]`, q, 'must be greater than or equal to 0'));
      } catch {
        out.push(invalidValue(`${f}.resources.${kind}[${name}]`, q, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"));
      }
    }
  }
  // As Kubernetes: a request above its limit is refused.
  const requests = rec(rec(c.resources).requests);
  const limits = rec(rec(c.resources).limits);
  for (const [name, lim] of Object.entries(limits)) {
    const req = requests[name];
    if (req === undefined) continue;
    const [r, l] = [quantityOrNaN(req), quantityOrNaN(lim)];
    if (r > l) out.push(invalidValue(`${f}.resources.requests`, req, `must be less than or equal to ${name} limit of ${String(lim)}`));
  }
  return out;
}

const IS_PORT = 'must be between 1 and 65535, inclusive';
const isPort = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65535;

/**
 * The causes of a container's ports as `validateContainerPorts` gives them: `containerPort` missing (or 0)
 * is required, outside 1 to 65535 invalid; a `hostPort` other than 0 outside it invalid.
 * @param f the container's field path (`spec.containers[0]`, `spec.template.spec.containers[0]`)
 */
export function validateContainerPorts(c: Record<string, unknown>, f: string): StatusCause[] {
  const out: StatusCause[] = [];
  arr(c.ports).forEach((p, j) => {
    const port = p.containerPort;
    if (port === undefined || port === null || port === 0) out.push(required(`${f}.ports[${j}].containerPort`));
    else if (!isPort(port)) out.push(invalidValue(`${f}.ports[${j}].containerPort`, port, IS_PORT));
    const host = p.hostPort;
    if (host !== undefined && host !== null && host !== 0 && !isPort(host)) out.push(invalidValue(`${f}.ports[${j}].hostPort`, host, IS_PORT));
  });
  return out;
}

/** Why a pod with init containers is refused (also said by `kubectl explain pod.spec.initContainers`). */
export const INIT_CONTAINERS_REFUSED = 'Kube32 does not run init containers: do that work in the module (its k32_init runs once, when it starts) or in a Job that runs first';

/** Problems of a pod. */
export function validatePod(obj: KubeObject, old?: KubeObject): StatusCause[] {
  const out: StatusCause[] = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  const spec = rec(obj.spec);
  if (obj.spec === undefined) return [...out, required('spec')];
  out.push(...validateContainers(spec, 'containers', true), ...validateContainers(spec, 'initContainers', false));
  // The kubelet runs a pod's containers, never its init containers: a pod with some would start as if
  // they had run (kept on an update of a pod stored with them before, which already runs).
  if (Array.isArray(spec.initContainers) && spec.initContainers.length > 0 && !(old && Array.isArray(rec(old.spec).initContainers) && arr(rec(old.spec).initContainers).length > 0)) {
    out.push({ reason: 'FieldValueForbidden', message: `Forbidden: ${INIT_CONTAINERS_REFUSED}`, field: 'spec.initContainers' });
  }
  if (!['Always', 'OnFailure', 'Never'].includes(String(spec.restartPolicy))) {
    out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: "${String(spec.restartPolicy)}": supported values: "Always", "OnFailure", "Never"`, field: 'spec.restartPolicy' });
  }
  for (const list of ['tolerations', 'volumes', 'imagePullSecrets', 'readinessGates']) {
    if (spec[list] !== undefined && !Array.isArray(spec[list])) out.push(invalidValue(`spec.${list}`, spec[list], 'must be a list'));
  }
  if (spec.nodeSelector !== undefined && (spec.nodeSelector === null || typeof spec.nodeSelector !== 'object' || Array.isArray(spec.nodeSelector))) out.push(invalidValue('spec.nodeSelector', spec.nodeSelector, 'must be a map of labels'));
  if (spec.nodeName !== undefined && typeof spec.nodeName !== 'string') out.push(invalidValue('spec.nodeName', spec.nodeName, 'must be a string'));
  const grace = spec.terminationGracePeriodSeconds;
  if (typeof grace !== 'number' || grace < 0) out.push(invalidValue('spec.terminationGracePeriodSeconds', grace, 'must be greater than or equal to 0'));
  if (old) {
    const oldSpec = rec(old.spec);
    if (oldSpec.nodeName && spec.nodeName !== oldSpec.nodeName) out.push(immutable('spec.nodeName'));
    out.push(...moduleImageChanges(spec, oldSpec, old));
    if (!isDeepStrictEqual(mutableMasked(spec), mutableMasked(oldSpec))) {
      out.push({
        reason: 'FieldValueForbidden',
        message:
          'Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)',
        field: 'spec',
      });
    }
  }
  return out;
}

/**
 * A WebAssembly pod's module is the one it was created with (its `kube32.io/image-sha256`, which its
 * snapshots name): an update that changes a container's image is refused, Forbidden, naming what to do.
 * Kubernetes restarts the container with the new image; a Kube32 node would go on running the old
 * module, the spec naming another one (a `kubectl set image pod/...` or a patch was taken and nothing
 * changed). Pods without the annotation (FeOS microVM pods, images no module resolved) are left alone.
 */
function moduleImageChanges(spec: Record<string, unknown>, oldSpec: Record<string, unknown>, old: KubeObject): StatusCause[] {
  const pinned = old.metadata.annotations?.[ANNOTATIONS.imageSha256];
  if (!pinned) return [];
  const out: StatusCause[] = [];
  for (const list of ['containers', 'initContainers']) {
    const before = arr(oldSpec[list]);
    arr(spec[list]).forEach((c, i) => {
      const was = before[i]?.image;
      if (was === undefined || c.image === was) return;
      out.push({
        reason: 'FieldValueForbidden',
        message: `Forbidden: a Kube32 pod runs the module it was created with (${JSON.stringify(was)}, sha256:${String(pinned).slice(0, 12)}), and its snapshots name it: create a new pod with ${JSON.stringify(c.image)} (or change the image in the pod's Deployment, StatefulSet or Job template) instead`,
        field: `spec.${list}[${i}].image`,
      });
    });
  }
  return out;
}

/** A pod spec without the fields an update may change, for comparison. */
function mutableMasked(spec: Record<string, unknown>): Record<string, unknown> {
  const s = structuredClone(spec);
  delete s.activeDeadlineSeconds;
  delete s.tolerations;
  delete s.terminationGracePeriodSeconds;
  delete s.nodeName;
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(s[list])) delete c.image;
  }
  return s;
}

/** The STATUS cell of a pod, as kubectl's printer computes it (kubectl-wire §4.1). */
export function podStatusText(pod: KubeObject): string {
  const spec = rec(pod.spec);
  const status = rec(pod.status);
  let reason = String(status.reason ?? status.phase ?? 'Pending');
  for (const c of arr(status.conditions)) {
    if (c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'SchedulingGated') reason = 'SchedulingGated';
  }
  let initializing = false;
  const inits = arr(status.initContainerStatuses);
  for (let i = 0; i < inits.length; i++) {
    const cs = inits[i]!;
    const st = rec(cs.state);
    const term = rec(st.terminated);
    const wait = rec(st.waiting);
    if (st.terminated && term.exitCode === 0) continue;
    if (st.terminated) {
      reason = term.reason ? `Init:${String(term.reason)}` : term.signal ? `Init:Signal:${String(term.signal)}` : `Init:ExitCode:${String(term.exitCode)}`;
    } else if (st.waiting && wait.reason && wait.reason !== 'PodInitializing') {
      reason = `Init:${String(wait.reason)}`;
    } else {
      reason = `Init:${i}/${arr(spec.initContainers).length}`;
    }
    initializing = true;
    break;
  }
  if (!initializing) {
    let hasRunning = false;
    const css = arr(status.containerStatuses);
    for (let i = css.length - 1; i >= 0; i--) {
      const cs = css[i]!;
      const st = rec(cs.state);
      const term = rec(st.terminated);
      const wait = rec(st.waiting);
      if (st.waiting && wait.reason) reason = String(wait.reason);
      else if (st.terminated && term.reason) reason = String(term.reason);
      else if (st.terminated) reason = term.signal ? `Signal:${String(term.signal)}` : `ExitCode:${String(term.exitCode)}`;
      else if (st.running && cs.ready) hasRunning = true;
    }
    if (reason === 'Completed' && hasRunning) {
      const ready = arr(status.conditions).some((c) => c.type === 'Ready' && c.status === 'True');
      reason = ready ? 'Running' : 'NotReady';
    }
  }
  if (pod.metadata.deletionTimestamp && status.phase !== 'Succeeded' && status.phase !== 'Failed') {
    reason = status.reason === 'NodeLost' ? 'Unknown' : 'Terminating';
  }
  return reason;
}

function podCells(pod: KubeObject, now: Date): unknown[] {
  const spec = rec(pod.spec);
  const status = rec(pod.status);
  const css = arr(status.containerStatuses);
  const total = arr(spec.containers).length;
  const ready = css.filter((c) => c.ready === true && rec(c.state).running).length;
  let restarts = 0;
  let lastFinish = 0;
  for (const c of css) {
    restarts += Number(c.restartCount ?? 0);
    const fin = rec(rec(c.lastState).terminated).finishedAt;
    if (typeof fin === 'string') lastFinish = Math.max(lastFinish, Date.parse(fin));
  }
  const restartsText = lastFinish > 0 ? `${restarts} (${age(new Date(lastFinish).toISOString(), now)} ago)` : String(restarts);
  const ips = arr(status.podIPs);
  const ip = (ips[0]?.ip as string | undefined) ?? (status.podIP as string | undefined) ?? '<none>';
  const gates = arr(spec.readinessGates);
  let gatesText = '<none>';
  if (gates.length > 0) {
    const conds = arr(status.conditions);
    const ok = gates.filter((g) => conds.some((c) => c.type === g.conditionType && c.status === 'True')).length;
    gatesText = `${ok}/${gates.length}`;
  }
  return [
    pod.metadata.name,
    `${ready}/${total}`,
    podStatusText(pod),
    restartsText,
    age(pod.metadata.creationTimestamp, now),
    ip,
    (spec.nodeName as string | undefined) || '<none>',
    (status.nominatedNodeName as string | undefined) || '<none>',
    gatesText,
  ];
}

/** Default tolerations the DefaultTolerationSeconds admission plugin adds (300 s for not-ready and unreachable). */
function addDefaultTolerations(spec: Record<string, unknown>): void {
  if (spec.tolerations !== undefined && !Array.isArray(spec.tolerations)) return; // validation reports it
  const tol = Array.isArray(spec.tolerations) ? (spec.tolerations as Record<string, unknown>[]) : [];
  for (const key of ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable']) {
    if (!tol.some((t) => (t.key === key || t.key === undefined) && (t.effect === 'NoExecute' || t.effect === undefined))) {
      tol.push({ key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 });
    }
  }
  spec.tolerations = tol;
}

/** The pods resource. */
export const pods: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Pod',
  listKind: 'PodList',
  plural: 'pods',
  singular: 'pod',
  namespaced: true,
  shortNames: ['po'],
  categories: ['all'],
  subresources: ['status', 'log', 'eviction', 'binding', 'replace', 'proxy'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    defaultPodSpec(spec);
    defaultRequestsToLimits(spec);
    addDefaultTolerations(spec);
    spec.serviceAccountName ??= 'default';
    spec.serviceAccount ??= spec.serviceAccountName;
    obj.status = { phase: 'Pending', qosClass: qosClass(spec) };
  },
  prepareForUpdate(obj, old) {
    const spec = rec(obj.spec);
    if (obj.spec === undefined) return;
    defaultPodSpec(spec);
    const oldSpec = rec(old.spec);
    for (const k of ['serviceAccountName', 'serviceAccount']) if (spec[k] === undefined) spec[k] = oldSpec[k];
    if (spec.tolerations === undefined && oldSpec.tolerations !== undefined) spec.tolerations = oldSpec.tolerations;
  },
  validate: validatePod,
  fieldSelectors: {
    'spec.nodeName': (o) => (rec(o.spec).nodeName as string | undefined) ?? '',
    'spec.restartPolicy': (o) => rec(o.spec).restartPolicy as string | undefined,
    'spec.schedulerName': (o) => rec(o.spec).schedulerName as string | undefined,
    'spec.serviceAccountName': (o) => rec(o.spec).serviceAccountName as string | undefined,
    'spec.hostNetwork': (o) => String(rec(o.spec).hostNetwork ?? false),
    'status.phase': (o) => rec(o.status).phase as string | undefined,
    'status.podIP': (o) => (rec(o.status).podIP as string | undefined) ?? '',
    'status.nominatedNodeName': (o) => (rec(o.status).nominatedNodeName as string | undefined) ?? '',
  },
  columns: [
    NAME_COLUMN,
    { name: 'Ready', type: 'string', description: 'The aggregate readiness state of this pod for accepting traffic.' },
    { name: 'Status', type: 'string', description: 'The aggregate status of the containers in this pod.' },
    { name: 'Restarts', type: 'string', description: 'The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.' },
    AGE_COLUMN,
    { name: 'IP', type: 'string', priority: 1, description: 'IP address allocated to the pod.' },
    { name: 'Node', type: 'string', priority: 1, description: 'Name of the Node this pod is assigned to.' },
    { name: 'Nominated Node', type: 'string', priority: 1, description: 'Name of the node nominated by the scheduler.' },
    { name: 'Readiness Gates', type: 'string', priority: 1, description: 'Pod readiness gates.' },
  ],
  cells: podCells,
  gracePeriod(obj) {
    // A pod not bound to a node, or already finished, goes at once (no kubelet to confirm).
    const spec = rec(obj.spec);
    const phase = rec(obj.status).phase;
    if (!spec.nodeName || phase === 'Succeeded' || phase === 'Failed') return 0;
    const g = spec.terminationGracePeriodSeconds;
    return typeof g === 'number' ? g : 30;
  },
};
