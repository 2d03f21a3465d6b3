/**
 * A Pod bound to a FeOS node as the FeOS pod the kubelet of FeOS nodes creates (issue 18 "Running microVM
 * pods"; docs/feos/cluster-pods.md): vCPUs from the cpu limits (their sum, rounded up; else the requests;
 * default 1), memory from the memory limits (their sum, rounded up to whole MiB; else the requests; default
 * feosd's 256 MiB), each container's image, command, args and env, a network unless `hostNetwork`, and
 * the pod's labels plus who made it as the pod's metadata. Pure.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { PodSpecSchema } from '../../feos/gen/feos/pod/v1/pod_pb.js';
import { parseQuantity } from '../../lib/index.ts';

const MIB = 1024 * 1024;

/**
 * The metadata keys that say which cluster made a FeOS pod, and for which Pod: the cluster's ID (the uid of
 * its `kube-system` namespace, as Kubernetes tools name a cluster), the Pod's namespace, name and uid. The
 * reconcile after a restart deletes only FeOS pods whose `kube32.cluster-id` is this cluster's.
 */
export const META = {
  cluster: 'kube32.cluster-id',
  namespace: 'kube32.namespace',
  name: 'kube32.pod-name',
  uid: 'kube32.pod-uid',
} as const;

/** A metadata key as feosd takes it: 1 to 128 letters, digits, '-', '_' and '.' (others become '_'). */
export function metadataKey(label: string): string {
  return label.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 128) || '_';
}

function sum(pod: V1Pod, resource: 'cpu' | 'memory'): number | undefined {
  let limits = 0;
  let requests = 0;
  let anyLimit = false;
  let anyRequest = false;
  for (const c of pod.spec?.containers ?? []) {
    const l = c.resources?.limits?.[resource];
    const r = c.resources?.requests?.[resource];
    if (l !== undefined) {
      anyLimit = true;
      limits += parseQuantity(String(l));
    }
    if (r !== undefined) {
      anyRequest = true;
      requests += parseQuantity(String(r));
    }
  }
  return anyLimit ? limits : anyRequest ? requests : undefined;
}

/** The value of an env var's `fieldRef` the kubelet can give before the pod runs, or undefined. */
function fieldValue(pod: V1Pod, path: string, nodeName: string): string | undefined {
  switch (path) {
    case 'metadata.name':
      return pod.metadata?.name;
    case 'metadata.namespace':
      return pod.metadata?.namespace;
    case 'metadata.uid':
      return pod.metadata?.uid;
    case 'spec.nodeName':
      return nodeName;
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName;
    default:
      return undefined;
  }
}

/**
 * The FeOS PodSpec of `pod` on `nodeName`, made by cluster `clusterId`.
 * @throws RangeError when a cpu or memory quantity is not one (the API server's validation lets none through)
 */
export function feosPodSpec(pod: V1Pod, nodeName: string, clusterId: string): MessageInitShape<typeof PodSpecSchema> {
  const cpu = sum(pod, 'cpu');
  const memory = sum(pod, 'memory');
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(pod.metadata?.labels ?? {})) metadata[metadataKey(k)] = v;
  metadata[META.cluster] = clusterId;
  metadata[META.namespace] = pod.metadata?.namespace ?? '';
  metadata[META.name] = pod.metadata?.name ?? '';
  metadata[META.uid] = pod.metadata?.uid ?? '';
  return {
    vcpus: cpu === undefined ? 1 : Math.max(1, Math.ceil(cpu - 1e-9)),
    // 0: feosd's default (256 MiB).
    memoryBytes: memory === undefined ? 0n : BigInt(Math.ceil(memory / MIB) * MIB),
    containers: (pod.spec?.containers ?? []).map((c) => {
      const env: Record<string, string> = {};
      for (const e of c.env ?? []) {
        if (e.value !== undefined) env[e.name] = e.value;
        else if (e.valueFrom?.fieldRef) {
          const v = fieldValue(pod, e.valueFrom.fieldRef.fieldPath, nodeName);
          if (v !== undefined) env[e.name] = v;
        } else if (e.valueFrom === undefined) env[e.name] = '';
      }
      return { name: c.name, image: c.image ?? '', command: c.command ?? [], args: c.args ?? [], env };
    }),
    ...(pod.spec?.hostNetwork ? {} : { network: {} }),
    metadata,
  };
}

/**
 * The pull token of a pod's bring-up from its `imagePullSecrets` (kubernetes.io/dockerconfigjson or
 * kubernetes.io/dockercfg), for the registry of its first container's image: the entry's `registrytoken`,
 * else its `identitytoken`, else its password (`password`, or the one in `auth`). FeOS takes one Bearer
 * token per bring-up. Undefined when no secret has an entry for that registry.
 * @param secrets the Secrets the pod names, in its order (those that exist)
 */
export function pullTokenOf(pod: V1Pod, secrets: ReadonlyArray<{ type?: string; data?: Record<string, string> }>): string | undefined {
  const image = pod.spec?.containers?.[0]?.image ?? '';
  const first = image.split('/')[0] ?? '';
  const registry = image.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost') ? first : 'docker.io';
  const names = registry === 'docker.io' ? ['docker.io', 'index.docker.io', 'https://index.docker.io/v1/', 'registry-1.docker.io'] : [registry, `https://${registry}`, `http://${registry}`];
  for (const s of secrets) {
    const raw = s.data?.['.dockerconfigjson'] ?? s.data?.['.dockercfg'];
    if (!raw) continue;
    let doc: Record<string, unknown>;
    try {
      doc = JSON.parse(Buffer.from(raw, 'base64').toString('utf8')) as Record<string, unknown>;
    } catch {
      continue;
    }
    const auths = (s.data?.['.dockerconfigjson'] ? doc.auths : doc) as Record<string, Record<string, string>> | undefined;
    for (const [key, entry] of Object.entries(auths ?? {})) {
      const host = key.replace(/^https?:\/\//, '').replace(/\/.*$/, '');
      if (!names.includes(key) && !names.includes(host)) continue;
      if (entry.registrytoken) return entry.registrytoken;
      if (entry.identitytoken) return entry.identitytoken;
      if (entry.password) return entry.password;
      if (entry.auth) {
        const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
        const i = decoded.indexOf(':');
        if (i >= 0) return decoded.slice(i + 1);
      }
    }
  }
  return undefined;
}
