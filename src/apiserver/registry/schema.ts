/**
 * The known fields of the kinds' specs, for strict field validation (`fieldValidation=Strict`,
 * which kubectl sends): a field not listed here is an unknown field (400 under Strict, a warning
 * under Warn). `true` accepts anything below a field (maps, status, rarely used structures).
 */

/** A field's known shape: anything, an object with known fields, or a list of such. */
export type Known = true | { fields: Record<string, Known> } | { items: Known };

const any = true as const;
const obj = (names: string[], nested: Record<string, Known> = {}): Known => ({ fields: { ...Object.fromEntries(names.map((n) => [n, any])), ...nested } });
const list = (k: Known): Known => ({ items: k });

const CONTAINER = obj([
  'name',
  'image',
  'command',
  'args',
  'workingDir',
  'envFrom',
  'env',
  'resources',
  'resizePolicy',
  'restartPolicy',
  'volumeMounts',
  'volumeDevices',
  'livenessProbe',
  'readinessProbe',
  'startupProbe',
  'lifecycle',
  'terminationMessagePath',
  'terminationMessagePolicy',
  'imagePullPolicy',
  'securityContext',
  'stdin',
  'stdinOnce',
  'tty',
], { ports: list(obj(['name', 'hostPort', 'containerPort', 'protocol', 'hostIP'])) });

/** A pod spec's fields. */
export const POD_SPEC = obj(
  [
    'volumes',
    'restartPolicy',
    'terminationGracePeriodSeconds',
    'activeDeadlineSeconds',
    'dnsPolicy',
    'nodeSelector',
    'serviceAccountName',
    'serviceAccount',
    'automountServiceAccountToken',
    'nodeName',
    'hostNetwork',
    'hostPID',
    'hostIPC',
    'shareProcessNamespace',
    'securityContext',
    'imagePullSecrets',
    'hostname',
    'subdomain',
    'affinity',
    'schedulerName',
    'tolerations',
    'hostAliases',
    'priorityClassName',
    'priority',
    'dnsConfig',
    'readinessGates',
    'runtimeClassName',
    'enableServiceLinks',
    'preemptionPolicy',
    'overhead',
    'topologySpreadConstraints',
    'setHostnameAsFQDN',
    'os',
    'hostUsers',
    'schedulingGates',
    'resourceClaims',
    'resources',
    'ephemeralContainers',
  ],
  { containers: list(CONTAINER), initContainers: list(CONTAINER) },
);

const TEMPLATE = obj(['metadata'], { spec: POD_SPEC });

/** Known spec fields by `group/Kind`; kinds not listed are checked at the top level only. */
export const SPEC_SCHEMAS: Record<string, Known> = {
  '/Pod': POD_SPEC,
  '/Node': obj(['podCIDR', 'podCIDRs', 'providerID', 'unschedulable', 'taints', 'configSource', 'externalID']),
  '/Service': obj([
    'ports',
    'selector',
    'clusterIP',
    'clusterIPs',
    'type',
    'externalIPs',
    'sessionAffinity',
    'loadBalancerIP',
    'loadBalancerSourceRanges',
    'externalName',
    'externalTrafficPolicy',
    'healthCheckNodePort',
    'publishNotReadyAddresses',
    'sessionAffinityConfig',
    'ipFamilies',
    'ipFamilyPolicy',
    'allocateLoadBalancerNodePorts',
    'loadBalancerClass',
    'internalTrafficPolicy',
    'trafficDistribution',
  ]),
  'apps/Deployment': obj(['replicas', 'selector', 'strategy', 'minReadySeconds', 'revisionHistoryLimit', 'paused', 'progressDeadlineSeconds'], { template: TEMPLATE }),
  'apps/ReplicaSet': obj(['replicas', 'minReadySeconds', 'selector'], { template: TEMPLATE }),
  'apps/StatefulSet': obj(
    ['replicas', 'selector', 'volumeClaimTemplates', 'serviceName', 'podManagementPolicy', 'updateStrategy', 'revisionHistoryLimit', 'minReadySeconds', 'persistentVolumeClaimRetentionPolicy', 'ordinals'],
    { template: TEMPLATE },
  ),
  'apps/DaemonSet': obj(['selector', 'updateStrategy', 'minReadySeconds', 'revisionHistoryLimit'], { template: TEMPLATE }),
  'coordination.k8s.io/Lease': obj(['holderIdentity', 'leaseDurationSeconds', 'acquireTime', 'renewTime', 'leaseTransitions', 'strategy', 'preferredHolder']),
  'policy/PodDisruptionBudget': obj(['minAvailable', 'selector', 'maxUnavailable', 'unhealthyPodEvictionPolicy']),
  'kube32.io/Checkpoint': obj(['podName', 'containerName', 'action'], { target: obj(['nodeName', 'nodeSelector']) }),
  'kube32.io/Module': obj(['sha256', 'sizeBytes']),
};

/** The paths of fields in `value` that `known` does not list (`spec.containers[0].imge`). */
export function unknownFields(value: unknown, known: Known, path: string): string[] {
  if (known === true || value === null || typeof value !== 'object') return [];
  if ('items' in known) {
    if (!Array.isArray(value)) return [];
    return value.flatMap((v, i) => unknownFields(v, known.items, `${path}[${i}]`));
  }
  if (Array.isArray(value)) return [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(value)) {
    // `$patch`, `$setElementOrder/...` and the other strategic merge directives are not fields.
    if (k.startsWith('$')) continue;
    const sub = known.fields[k];
    if (sub === undefined) out.push(`${path}.${k}`);
    else out.push(...unknownFields(v, sub, `${path}.${k}`));
  }
  return out;
}
