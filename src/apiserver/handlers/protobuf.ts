/**
 * Decoding of the Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`) for the
 * bodies kubectl's generator commands send (`kubectl create namespace|configmap|secret|
 * serviceaccount|service|deployment|job|cronjob|poddisruptionbudget|quota|role|clusterrole|rolebinding|clusterrolebinding|token`,
 * `kubectl autoscale`,
 * `kubectl auth can-i [--list]`): the `k8s\0` magic, the `runtime.Unknown` envelope, then the
 * object by its kind, with the field numbers of Kubernetes' `generated.proto`. Fields this server
 * does not know are skipped; a kind it does not know is refused (415). The wire (varints, lengths,
 * skipping) is read by @bufbuild/protobuf's `BinaryReader`, as FeOS's generated code reads it.
 */
import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';
import { ApiError, badRequest } from '../errors.ts';

type Scalar = 'string' | 'int' | 'int0' | 'bool' | 'bytes' | 'time' | 'quantity' | 'intstr' | 'mapss' | 'mapsb' | 'mapsq';
type Field = [name: string, kind: Scalar | Msg, repeated?: boolean];
type Msg = { [num: number]: Field };

const TYPE_META: Msg = { 1: ['apiVersion', 'string'], 2: ['kind', 'string'] };
const UNKNOWN: Msg = { 1: ['typeMeta', TYPE_META], 2: ['raw', 'bytes'], 3: ['contentEncoding', 'string'], 4: ['contentType', 'string'] };
const OWNER_REF: Msg = { 1: ['kind', 'string'], 3: ['name', 'string'], 4: ['uid', 'string'], 5: ['apiVersion', 'string'], 6: ['controller', 'bool'], 7: ['blockOwnerDeletion', 'bool'] };
const OBJECT_META: Msg = {
  1: ['name', 'string'],
  2: ['generateName', 'string'],
  3: ['namespace', 'string'],
  5: ['uid', 'string'],
  6: ['resourceVersion', 'string'],
  7: ['generation', 'int0'],
  11: ['labels', 'mapss'],
  12: ['annotations', 'mapss'],
  13: ['ownerReferences', OWNER_REF, true],
  14: ['finalizers', 'string', true],
};
const SELECTOR_REQ: Msg = { 1: ['key', 'string'], 2: ['operator', 'string'], 3: ['values', 'string', true] };
const LABEL_SELECTOR: Msg = { 1: ['matchLabels', 'mapss'], 2: ['matchExpressions', SELECTOR_REQ, true] };
const LOCAL_REF: Msg = { 1: ['name', 'string'] };
const OBJECT_REF: Msg = { 1: ['kind', 'string'], 2: ['namespace', 'string'], 3: ['name', 'string'], 4: ['uid', 'string'], 5: ['apiVersion', 'string'] };
const CONTAINER_PORT: Msg = { 1: ['name', 'string'], 2: ['hostPort', 'int0'], 3: ['containerPort', 'int'], 4: ['protocol', 'string'], 5: ['hostIP', 'string'] };
const ENV_VAR: Msg = { 1: ['name', 'string'], 2: ['value', 'string'] };
const RESOURCES: Msg = { 1: ['limits', 'mapsq'], 2: ['requests', 'mapsq'] };
const CONTAINER: Msg = {
  1: ['name', 'string'],
  2: ['image', 'string'],
  3: ['command', 'string', true],
  4: ['args', 'string', true],
  5: ['workingDir', 'string'],
  6: ['ports', CONTAINER_PORT, true],
  7: ['env', ENV_VAR, true],
  8: ['resources', RESOURCES],
  13: ['terminationMessagePath', 'string'],
  14: ['imagePullPolicy', 'string'],
  20: ['terminationMessagePolicy', 'string'],
};
const POD_SPEC: Msg = {
  2: ['containers', CONTAINER, true],
  3: ['restartPolicy', 'string'],
  4: ['terminationGracePeriodSeconds', 'int'],
  6: ['dnsPolicy', 'string'],
  7: ['nodeSelector', 'mapss'],
  8: ['serviceAccountName', 'string'],
  10: ['nodeName', 'string'],
  19: ['schedulerName', 'string'],
  20: ['initContainers', CONTAINER, true],
};
const POD_TEMPLATE: Msg = { 1: ['metadata', OBJECT_META], 2: ['spec', POD_SPEC] };
const ROLLING_UPDATE: Msg = { 1: ['maxUnavailable', 'intstr'], 2: ['maxSurge', 'intstr'] };
const DEPLOYMENT_SPEC: Msg = {
  1: ['replicas', 'int'],
  2: ['selector', LABEL_SELECTOR],
  3: ['template', POD_TEMPLATE],
  4: ['strategy', { 1: ['type', 'string'], 2: ['rollingUpdate', ROLLING_UPDATE] }],
  5: ['minReadySeconds', 'int0'],
  6: ['revisionHistoryLimit', 'int'],
  7: ['paused', 'bool'],
  9: ['progressDeadlineSeconds', 'int'],
};
const JOB_SPEC: Msg = {
  1: ['parallelism', 'int'],
  2: ['completions', 'int'],
  3: ['activeDeadlineSeconds', 'int'],
  4: ['selector', LABEL_SELECTOR],
  5: ['manualSelector', 'bool'],
  6: ['template', POD_TEMPLATE],
  7: ['backoffLimit', 'int'],
  8: ['ttlSecondsAfterFinished', 'int'],
  9: ['completionMode', 'string'],
  10: ['suspend', 'bool'],
};
const JOB_TEMPLATE: Msg = { 1: ['metadata', OBJECT_META], 2: ['spec', JOB_SPEC] };
const CRONJOB_SPEC: Msg = {
  1: ['schedule', 'string'],
  2: ['startingDeadlineSeconds', 'int'],
  3: ['concurrencyPolicy', 'string'],
  4: ['suspend', 'bool'],
  5: ['jobTemplate', JOB_TEMPLATE],
  6: ['successfulJobsHistoryLimit', 'int'],
  7: ['failedJobsHistoryLimit', 'int'],
  8: ['timeZone', 'string'],
};
const SERVICE_PORT: Msg = { 1: ['name', 'string'], 2: ['protocol', 'string'], 3: ['port', 'int'], 4: ['targetPort', 'intstr'], 5: ['nodePort', 'int0'], 6: ['appProtocol', 'string'] };
const SERVICE_SPEC: Msg = {
  1: ['ports', SERVICE_PORT, true],
  2: ['selector', 'mapss'],
  3: ['clusterIP', 'string'],
  4: ['type', 'string'],
  5: ['externalIPs', 'string', true],
  7: ['sessionAffinity', 'string'],
  10: ['externalName', 'string'],
  18: ['clusterIPs', 'string', true],
};

const PDB_SPEC: Msg = { 1: ['minAvailable', 'intstr'], 2: ['selector', LABEL_SELECTOR], 3: ['maxUnavailable', 'intstr'], 4: ['unhealthyPodEvictionPolicy', 'string'] };

const CROSS_VERSION_REF: Msg = { 1: ['kind', 'string'], 2: ['name', 'string'], 3: ['apiVersion', 'string'] };
const HPA_V1_SPEC: Msg = { 1: ['scaleTargetRef', CROSS_VERSION_REF], 2: ['minReplicas', 'int'], 3: ['maxReplicas', 'int'], 4: ['targetCPUUtilizationPercentage', 'int'] };
const POLICY_RULE: Msg = { 1: ['verbs', 'string', true], 2: ['apiGroups', 'string', true], 3: ['resources', 'string', true], 4: ['resourceNames', 'string', true], 5: ['nonResourceURLs', 'string', true] };
const SUBJECT: Msg = { 1: ['kind', 'string'], 2: ['apiGroup', 'string'], 3: ['name', 'string'], 4: ['namespace', 'string'] };
const ROLE_REF: Msg = { 1: ['apiGroup', 'string'], 2: ['kind', 'string'], 3: ['name', 'string'] };
const BINDING: Msg = { 1: ['metadata', OBJECT_META], 2: ['subjects', SUBJECT, true], 3: ['roleRef', ROLE_REF] };
const RESOURCE_ATTRIBUTES: Msg = { 1: ['namespace', 'string'], 2: ['verb', 'string'], 3: ['group', 'string'], 4: ['version', 'string'], 5: ['resource', 'string'], 6: ['subresource', 'string'], 7: ['name', 'string'] };
const NON_RESOURCE_ATTRIBUTES: Msg = { 1: ['path', 'string'], 2: ['verb', 'string'] };
const SUBJECT_ACCESS_REVIEW: Msg = {
  1: ['metadata', OBJECT_META],
  2: ['spec', { 1: ['resourceAttributes', RESOURCE_ATTRIBUTES], 2: ['nonResourceAttributes', NON_RESOURCE_ATTRIBUTES], 3: ['user', 'string'], 4: ['groups', 'string', true], 6: ['uid', 'string'] }],
};

/** The kinds this server decodes, by `apiVersion/kind`. */
const KINDS: Record<string, Msg> = {
  'v1/Namespace': { 1: ['metadata', OBJECT_META], 2: ['spec', { 1: ['finalizers', 'string', true] }] },
  'v1/ConfigMap': { 1: ['metadata', OBJECT_META], 2: ['data', 'mapss'], 3: ['binaryData', 'mapsb'], 4: ['immutable', 'bool'] },
  'v1/Secret': { 1: ['metadata', OBJECT_META], 2: ['data', 'mapsb'], 3: ['type', 'string'], 4: ['stringData', 'mapss'], 5: ['immutable', 'bool'] },
  'v1/ServiceAccount': { 1: ['metadata', OBJECT_META], 2: ['secrets', OBJECT_REF, true], 3: ['imagePullSecrets', LOCAL_REF, true], 4: ['automountServiceAccountToken', 'bool'] },
  'v1/Service': { 1: ['metadata', OBJECT_META], 2: ['spec', SERVICE_SPEC] },
  'v1/Pod': { 1: ['metadata', OBJECT_META], 2: ['spec', POD_SPEC] },
  'v1/ResourceQuota': { 1: ['metadata', OBJECT_META], 2: ['spec', { 1: ['hard', 'mapsq'], 2: ['scopes', 'string', true] }] },
  'apps/v1/Deployment': { 1: ['metadata', OBJECT_META], 2: ['spec', DEPLOYMENT_SPEC] },
  'batch/v1/Job': { 1: ['metadata', OBJECT_META], 2: ['spec', JOB_SPEC] },
  'batch/v1/CronJob': { 1: ['metadata', OBJECT_META], 2: ['spec', CRONJOB_SPEC] },
  'policy/v1/PodDisruptionBudget': { 1: ['metadata', OBJECT_META], 2: ['spec', PDB_SPEC] },
  // kubectl autoscale
  'autoscaling/v1/HorizontalPodAutoscaler': { 1: ['metadata', OBJECT_META], 2: ['spec', HPA_V1_SPEC] },
  'authorization.k8s.io/v1/SelfSubjectAccessReview': { 1: ['metadata', OBJECT_META], 2: ['spec', { 1: ['resourceAttributes', RESOURCE_ATTRIBUTES], 2: ['nonResourceAttributes', NON_RESOURCE_ATTRIBUTES] }] },
  'authorization.k8s.io/v1/SelfSubjectRulesReview': { 1: ['metadata', OBJECT_META], 2: ['spec', { 1: ['namespace', 'string'] }] },
  'authorization.k8s.io/v1/SubjectAccessReview': SUBJECT_ACCESS_REVIEW,
  'authorization.k8s.io/v1/LocalSubjectAccessReview': SUBJECT_ACCESS_REVIEW,
  'authentication.k8s.io/v1/TokenRequest': {
    1: ['metadata', OBJECT_META],
    2: ['spec', { 1: ['audiences', 'string', true], 3: ['boundObjectRef', { 1: ['kind', 'string'], 2: ['apiVersion', 'string'], 3: ['name', 'string'], 4: ['uid', 'string'] }], 4: ['expirationSeconds', 'int'] }],
  },
  'rbac.authorization.k8s.io/v1/Role': { 1: ['metadata', OBJECT_META], 2: ['rules', POLICY_RULE, true] },
  'rbac.authorization.k8s.io/v1/ClusterRole': { 1: ['metadata', OBJECT_META], 2: ['rules', POLICY_RULE, true], 3: ['aggregationRule', { 1: ['clusterRoleSelectors', LABEL_SELECTOR, true] }] },
  'rbac.authorization.k8s.io/v1/RoleBinding': BINDING,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': BINDING,
};

const utf8 = new TextDecoder('utf-8', { fatal: false });

/** The reader of one message: @bufbuild/protobuf's (varints, lengths, skipping), its strings as lenient UTF-8. */
const reader = (bytes: Uint8Array) => new BinaryReader(bytes, (b) => utf8.decode(b));

/** A 64-bit varint as a JavaScript number (kubectl's ints fit in 2^53). */
const int = (r: BinaryReader): number => Number(r.int64());

function decodeMap(bytes: Uint8Array, valueKind: 'string' | 'bytes' | 'quantity'): [string, string] {
  const r = reader(bytes);
  let k = '';
  let v = '';
  while (r.pos < r.len) {
    const [f, wire] = r.tag();
    if (wire !== WireType.LengthDelimited) {
      r.skip(wire);
      continue;
    }
    const b = r.bytes();
    if (f === 1) k = utf8.decode(b);
    else if (f === 2) v = valueKind === 'bytes' ? Buffer.from(b).toString('base64') : valueKind === 'quantity' ? String(decodeMsg(b, { 1: ['string', 'string'] }).string ?? '') : utf8.decode(b);
  }
  return [k, v];
}

function decodeMsg(bytes: Uint8Array, schema: Msg): Record<string, unknown> {
  const r = reader(bytes);
  const out: Record<string, unknown> = {};
  while (r.pos < r.len) {
    const [num, wire] = r.tag();
    const field = schema[num];
    if (!field) {
      r.skip(wire, num);
      continue;
    }
    const [name, kind, repeated] = field;
    let value: unknown;
    if (typeof kind === 'object') value = decodeMsg(r.bytes(), kind);
    else if (kind === 'string') {
      value = utf8.decode(r.bytes());
      // An empty string is how the wire says "unset" (JSON would omit it), so defaults still apply.
      if (value === '' && !repeated) continue;
    }
    else if (kind === 'bytes') value = r.bytes();
    else if (kind === 'int') value = int(r);
    else if (kind === 'int0') {
      // A non-pointer Go number with omitempty: the wire always carries it, 0 included, where JSON
      // would leave it out (a stored `hostPort: 0` would change a template's hash and a pod's port).
      value = int(r);
      if (value === 0 && !repeated) continue;
    }
    else if (kind === 'bool') value = r.bool();
    else if (kind === 'time') {
      const t = decodeMsg(r.bytes(), { 1: ['seconds', 'int'] });
      value = new Date(Number(t.seconds ?? 0) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    } else if (kind === 'quantity') value = decodeMsg(r.bytes(), { 1: ['string', 'string'] }).string ?? '0';
    else if (kind === 'intstr') {
      const v = decodeMsg(r.bytes(), { 1: ['type', 'int'], 2: ['intVal', 'int'], 3: ['strVal', 'string'] });
      value = v.type === 1 ? (v.strVal ?? '') : (v.intVal ?? 0);
    } else {
      const [k, v] = decodeMap(r.bytes(), kind === 'mapsb' ? 'bytes' : kind === 'mapsq' ? 'quantity' : 'string');
      const m = (out[name] as Record<string, string> | undefined) ?? {};
      m[k] = v;
      out[name] = m;
      continue;
    }
    if (repeated) {
      const list = (out[name] as unknown[] | undefined) ?? [];
      list.push(value);
      out[name] = list;
    } else out[name] = value;
  }
  return out;
}

/** {@link decodeMsg}, a malformed body (the reader's RangeError or Error: premature EOF, a bad wire type, a varint too long) a 400. */
function decodeOrRefuse(bytes: Uint8Array, schema: Msg): Record<string, unknown> {
  try {
    return decodeMsg(bytes, schema);
  } catch (err: unknown) {
    if (err instanceof ApiError) throw err;
    throw badRequest(`protobuf: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/**
 * Decodes a Kubernetes protobuf body into the JSON form of the object.
 * @throws ApiError BadRequest for a malformed body; UnsupportedMediaType for a kind this server does not decode
 */
export function decodeKubernetesProtobuf(buf: Uint8Array): Record<string, unknown> {
  if (buf.length < 4 || buf[0] !== 0x6b || buf[1] !== 0x38 || buf[2] !== 0x73 || buf[3] !== 0) throw badRequest('protobuf: the body does not start with the k8s magic');
  const env = decodeOrRefuse(buf.subarray(4), UNKNOWN);
  const tm = (env.typeMeta ?? {}) as { apiVersion?: string; kind?: string };
  const schema = KINDS[`${tm.apiVersion}/${tm.kind}`];
  if (!schema) {
    throw new ApiError('UnsupportedMediaType', `the body of the request was in an unknown format - a protobuf ${tm.apiVersion}/${tm.kind} is not decoded by this server: send application/json`);
  }
  const obj = decodeOrRefuse((env.raw as Uint8Array | undefined) ?? new Uint8Array(), schema);
  return { apiVersion: tm.apiVersion, kind: tm.kind, ...obj, metadata: obj.metadata ?? {} };
}
