/**
 * The Go types of the scalar fields of the specs of the workloads (`PodSpec` and its containers and
 * ports, the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets, ReplicationControllers,
 * Jobs and CronJobs), of Services and of HorizontalPodAutoscalers (autoscaling/v1 and v2), checked when a
 * body is decoded as kube-apiserver's JSON decoder checks them: a value of the wrong JSON type, a
 * fraction or a number out of its Go type's range (an int32 above 2147483647) is a 400 BadRequest with
 * Go's words (`json: cannot unmarshal string into Go struct field CronJobSpec.spec.suspend of type bool`,
 * `json: cannot unmarshal number 99999999999 into Go struct field HorizontalPodAutoscalerSpec.spec.maxReplicas
 * of type int32`), whatever the `fieldValidation`; a value that decodes but is out of the field's range
 * is the kind's validation's 422. Without it `suspend: "true"` (a quoted YAML value) was stored, shown as
 * `<unset>`, and did not suspend anything, and `maxReplicas: 99999999999` was stored and broke `kubectl
 * describe`. IntOrString fields (`targetPort`, `maxSurge`, `minAvailable`) and quantities are not
 * looked at here.
 */

/** A scalar field's Go type. */
export type GoScalar = 'bool' | 'string' | 'int32' | 'int64';

/** A struct: its Go name and its fields (scalars, nested structs, or lists of structs). */
export interface GoStruct {
  name: string;
  fields: Record<string, GoScalar | GoStruct | GoList>;
}

/** A list (`[]T`) of structs: Go's error names its field's path without the index. */
export interface GoList {
  list: GoStruct;
}

const listOf = (s: GoStruct): GoList => ({ list: s });

/** core/v1 `Probe`'s scalar fields. */
const PROBE: GoStruct = {
  name: 'Probe',
  fields: { initialDelaySeconds: 'int32', timeoutSeconds: 'int32', periodSeconds: 'int32', successThreshold: 'int32', failureThreshold: 'int32', terminationGracePeriodSeconds: 'int64' },
};

/** core/v1 `Container`'s scalar fields, its ports and probes. */
const CONTAINER: GoStruct = {
  name: 'Container',
  fields: {
    name: 'string',
    image: 'string',
    imagePullPolicy: 'string',
    workingDir: 'string',
    terminationMessagePath: 'string',
    terminationMessagePolicy: 'string',
    restartPolicy: 'string',
    stdin: 'bool',
    stdinOnce: 'bool',
    tty: 'bool',
    ports: listOf({ name: 'ContainerPort', fields: { name: 'string', hostPort: 'int32', containerPort: 'int32', protocol: 'string', hostIP: 'string' } }),
    livenessProbe: PROBE,
    readinessProbe: PROBE,
    startupProbe: PROBE,
  },
};

/** core/v1 `PodSpec`'s scalar fields and its containers (k8s.io/api/core/v1 types.go, 1.32). */
export const POD_SPEC: GoStruct = {
  name: 'PodSpec',
  fields: {
    containers: listOf(CONTAINER),
    initContainers: listOf(CONTAINER),
    restartPolicy: 'string',
    terminationGracePeriodSeconds: 'int64',
    activeDeadlineSeconds: 'int64',
    dnsPolicy: 'string',
    serviceAccountName: 'string',
    serviceAccount: 'string',
    automountServiceAccountToken: 'bool',
    nodeName: 'string',
    hostNetwork: 'bool',
    hostPID: 'bool',
    hostIPC: 'bool',
    shareProcessNamespace: 'bool',
    hostname: 'string',
    subdomain: 'string',
    schedulerName: 'string',
    priorityClassName: 'string',
    priority: 'int32',
    runtimeClassName: 'string',
    enableServiceLinks: 'bool',
    preemptionPolicy: 'string',
    setHostnameAsFQDN: 'bool',
    hostUsers: 'bool',
  },
};

/** core/v1 `PodTemplateSpec`: its `spec`. */
const POD_TEMPLATE: GoStruct = { name: 'PodTemplateSpec', fields: { spec: POD_SPEC } };

/** batch/v1 JobSpec's scalar fields (k8s.io/api/batch/v1 types.go, 1.32). */
export const JOB_SPEC: GoStruct = {
  name: 'JobSpec',
  fields: {
    parallelism: 'int32',
    completions: 'int32',
    activeDeadlineSeconds: 'int64',
    backoffLimit: 'int32',
    backoffLimitPerIndex: 'int32',
    maxFailedIndexes: 'int32',
    manualSelector: 'bool',
    ttlSecondsAfterFinished: 'int32',
    completionMode: 'string',
    suspend: 'bool',
    podReplacementPolicy: 'string',
    managedBy: 'string',
    template: POD_TEMPLATE,
  },
};

/** batch/v1 CronJobSpec's scalar fields, and its `jobTemplate.spec` (a JobSpec). */
export const CRONJOB_SPEC: GoStruct = {
  name: 'CronJobSpec',
  fields: {
    schedule: 'string',
    timeZone: 'string',
    startingDeadlineSeconds: 'int64',
    concurrencyPolicy: 'string',
    suspend: 'bool',
    successfulJobsHistoryLimit: 'int32',
    failedJobsHistoryLimit: 'int32',
    jobTemplate: { name: 'JobTemplateSpec', fields: { spec: JOB_SPEC } },
  },
};

/** apps/v1 `DeploymentSpec`. */
const DEPLOYMENT_SPEC: GoStruct = {
  name: 'DeploymentSpec',
  fields: {
    replicas: 'int32',
    template: POD_TEMPLATE,
    strategy: { name: 'DeploymentStrategy', fields: { type: 'string' } },
    minReadySeconds: 'int32',
    revisionHistoryLimit: 'int32',
    paused: 'bool',
    progressDeadlineSeconds: 'int32',
  },
};

/** apps/v1 `StatefulSetSpec`. */
const STATEFULSET_SPEC: GoStruct = {
  name: 'StatefulSetSpec',
  fields: {
    replicas: 'int32',
    template: POD_TEMPLATE,
    serviceName: 'string',
    podManagementPolicy: 'string',
    updateStrategy: { name: 'StatefulSetUpdateStrategy', fields: { type: 'string', rollingUpdate: { name: 'RollingUpdateStatefulSetStrategy', fields: { partition: 'int32' } } } },
    revisionHistoryLimit: 'int32',
    minReadySeconds: 'int32',
    ordinals: { name: 'StatefulSetOrdinals', fields: { start: 'int32' } },
  },
};

/** core/v1 `ServiceSpec`'s scalar fields and ports. */
const SERVICE_SPEC: GoStruct = {
  name: 'ServiceSpec',
  fields: {
    ports: listOf({ name: 'ServicePort', fields: { name: 'string', protocol: 'string', appProtocol: 'string', port: 'int32', nodePort: 'int32' } }),
    clusterIP: 'string',
    type: 'string',
    externalName: 'string',
    sessionAffinity: 'string',
    loadBalancerIP: 'string',
    externalTrafficPolicy: 'string',
    internalTrafficPolicy: 'string',
    healthCheckNodePort: 'int32',
    publishNotReadyAddresses: 'bool',
    allocateLoadBalancerNodePorts: 'bool',
  },
};

const TARGET_REF: GoStruct = { name: 'CrossVersionObjectReference', fields: { kind: 'string', name: 'string', apiVersion: 'string' } };
const METRIC_TARGET: GoStruct = { name: 'MetricTarget', fields: { type: 'string', averageUtilization: 'int32' } };
const METRIC_ID: GoStruct = { name: 'MetricIdentifier', fields: { name: 'string' } };
const SCALING_RULES: GoStruct = {
  name: 'HPAScalingRules',
  fields: {
    stabilizationWindowSeconds: 'int32',
    selectPolicy: 'string',
    policies: listOf({ name: 'HPAScalingPolicy', fields: { type: 'string', value: 'int32', periodSeconds: 'int32' } }),
  },
};

/** autoscaling/v2 `HorizontalPodAutoscalerSpec`. */
const HPA_V2_SPEC: GoStruct = {
  name: 'HorizontalPodAutoscalerSpec',
  fields: {
    scaleTargetRef: TARGET_REF,
    minReplicas: 'int32',
    maxReplicas: 'int32',
    metrics: listOf({
      name: 'MetricSpec',
      fields: {
        type: 'string',
        resource: { name: 'ResourceMetricSource', fields: { name: 'string', target: METRIC_TARGET } },
        containerResource: { name: 'ContainerResourceMetricSource', fields: { name: 'string', container: 'string', target: METRIC_TARGET } },
        pods: { name: 'PodsMetricSource', fields: { metric: METRIC_ID, target: METRIC_TARGET } },
        object: { name: 'ObjectMetricSource', fields: { describedObject: TARGET_REF, metric: METRIC_ID, target: METRIC_TARGET } },
        external: { name: 'ExternalMetricSource', fields: { metric: METRIC_ID, target: METRIC_TARGET } },
      },
    }),
    behavior: { name: 'HorizontalPodAutoscalerBehavior', fields: { scaleUp: SCALING_RULES, scaleDown: SCALING_RULES } },
  },
};

/** autoscaling/v1 `HorizontalPodAutoscalerSpec`. */
const HPA_V1_SPEC: GoStruct = {
  name: 'HorizontalPodAutoscalerSpec',
  fields: { scaleTargetRef: TARGET_REF, minReplicas: 'int32', maxReplicas: 'int32', targetCPUUtilizationPercentage: 'int32' },
};

/**
 * The spec struct of each kind whose scalar types are checked, by `group/Kind` (core kinds: `/Pod`), or
 * `group/version/Kind` where the versions differ (autoscaling/v1 and v2).
 */
export const SPEC_TYPES: Readonly<Record<string, GoStruct>> = {
  'batch/Job': JOB_SPEC,
  'batch/CronJob': CRONJOB_SPEC,
  '/Pod': POD_SPEC,
  '/ReplicationController': { name: 'ReplicationControllerSpec', fields: { replicas: 'int32', minReadySeconds: 'int32', template: POD_TEMPLATE } },
  '/Service': SERVICE_SPEC,
  'apps/Deployment': DEPLOYMENT_SPEC,
  'apps/ReplicaSet': { name: 'ReplicaSetSpec', fields: { replicas: 'int32', minReadySeconds: 'int32', template: POD_TEMPLATE } },
  'apps/StatefulSet': STATEFULSET_SPEC,
  'apps/DaemonSet': { name: 'DaemonSetSpec', fields: { template: POD_TEMPLATE, minReadySeconds: 'int32', revisionHistoryLimit: 'int32' } },
  'autoscaling/v2/HorizontalPodAutoscaler': HPA_V2_SPEC,
  'autoscaling/v1/HorizontalPodAutoscaler': HPA_V1_SPEC,
};

/** The spec struct checked for a kind of `group` at `version`, if any. */
export function specTypesOf(group: string, version: string, kind: string): GoStruct | undefined {
  return SPEC_TYPES[`${group}/${version}/${kind}`] ?? SPEC_TYPES[`${group}/${kind}`];
}

const INT_RANGE = { int32: [-(2 ** 31), 2 ** 31 - 1], int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER] } as const;

/** The JSON kind of a value as Go names it in an `UnmarshalTypeError`. */
function jsonKind(v: unknown): string {
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number') return 'number';
  if (typeof v === 'string') return 'string';
  return Array.isArray(v) ? 'array' : 'object';
}

/**
 * Go's message when `v` does not fit `type`, or undefined when it does (null always does: the zero value):
 * `json: cannot unmarshal string into Go struct field ScaleSpec.spec.replicas of type int32`.
 * @param struct the Go struct holding the field (`ScaleSpec`)
 * @param path the field's JSON path without list indices (`spec.replicas`)
 */
export function scalarError(v: unknown, type: GoScalar, struct: string, path: string): string | undefined {
  if (v === null || v === undefined) return undefined;
  const at = `into Go struct field ${struct}.${path} of type ${type}`;
  if (type === 'bool' || type === 'string') {
    const ok = type === 'bool' ? typeof v === 'boolean' : typeof v === 'string';
    return ok ? undefined : `json: cannot unmarshal ${jsonKind(v)} ${at}`;
  }
  if (typeof v !== 'number') return `json: cannot unmarshal ${jsonKind(v)} ${at}`;
  const [min, max] = INT_RANGE[type];
  return Number.isInteger(v) && v >= min && v <= max ? undefined : `json: cannot unmarshal number ${JSON.stringify(v)} ${at}`;
}

/**
 * The first value of `spec` whose JSON type does not fit the Go type of its field, as Go's decoder says
 * it, or undefined. Fields that are not listed, and `$` directives of a patch, are not looked at.
 * @param spec the body's `spec` (of an object, or of a merge patch)
 * @param struct the kind's spec struct ({@link SPEC_TYPES})
 * @param path the JSON path of `spec` (`spec`)
 */
export function specTypeError(spec: unknown, struct: GoStruct, path = 'spec'): string | undefined {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) return undefined;
  for (const [k, v] of Object.entries(spec as Record<string, unknown>)) {
    const type = struct.fields[k];
    if (type === undefined) continue;
    let err: string | undefined;
    if (typeof type === 'string') err = scalarError(v, type, struct.name, `${path}.${k}`);
    else if ('list' in type) {
      // A list's items are each the struct (a patch's `$patch` items and the like are objects too).
      if (Array.isArray(v)) err = v.map((item) => specTypeError(item, type.list, `${path}.${k}`)).find((x) => x !== undefined);
    } else err = specTypeError(v, type, `${path}.${k}`);
    if (err) return err;
  }
  return undefined;
}

/**
 * Go's error decoding `v` as a standard base64 string (encoding/base64's `CorruptInputError`:
 * `illegal base64 data at input byte 3`), or undefined when it decodes.
 */
export function base64Error(v: string): string | undefined {
  const bad = (at: number) => `illegal base64 data at input byte ${at}`;
  const firstBad = v.search(/[^A-Za-z0-9+/=]/);
  const pad = v.indexOf('=');
  if (firstBad >= 0 && (pad < 0 || firstBad < pad)) return bad(firstBad);
  if (pad >= 0) {
    // Padding only at the end of the last quantum, one or two of it.
    const tail = v.slice(pad);
    if (!/^={1,2}$/.test(tail) || v.length % 4 !== 0 || (tail.length === 2 && pad % 4 !== 2) || (tail.length === 1 && pad % 4 !== 3)) return bad(pad);
    return undefined;
  }
  return v.length % 4 === 0 ? undefined : bad(v.length - (v.length % 4));
}

/**
 * Go's error decoding `v` as the map field `field` of `struct` (`map[string]string`, or `map[string][]byte`
 * as base64 strings), or undefined when it decodes (null is the zero value).
 */
export function mapFieldError(v: unknown, struct: string, field: string, values: 'string' | 'bytes'): string | undefined {
  if (v === null || v === undefined) return undefined;
  const goValue = values === 'string' ? 'string' : '[]uint8';
  if (typeof v !== 'object' || Array.isArray(v)) return `json: cannot unmarshal ${jsonKind(v)} into Go struct field ${struct}.${field} of type map[string]${goValue}`;
  for (const x of Object.values(v as Record<string, unknown>)) {
    if (x === null) continue;
    if (typeof x !== 'string') return `json: cannot unmarshal ${jsonKind(x)} into Go struct field ${struct}.${field} of type ${goValue}`;
    if (values === 'bytes') {
      const err = base64Error(x);
      if (err) return err;
    }
  }
  return undefined;
}
