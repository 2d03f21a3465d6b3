/**
 * What a container gets from its pod spec at every start (pod-abi.md "Pod spec"; seed "What moves":
 * "The environment, event topics, tick interval, assets and limits come from the pod spec, as at
 * any start"): environment, ConfigMap assets, the memory limit, the tick interval and the topics.
 */
import type { V1ConfigMap, V1Container, V1Pod, V1Secret } from '@kubernetes/client-node';
import { parseBytes, parseTimerDuration } from '../lib/index.ts';
import { type ControlPlane, isApiError } from './client.ts';
import { ANNOTATIONS } from '../api/index.ts';

/** Pod annotation with the tick interval (`500ms`, `1s`). */
export const TICK_INTERVAL_ANNOTATION = ANNOTATIONS.tickInterval;
/** Pod annotation with the comma-separated event topics. */
export const TOPICS_ANNOTATION = ANNOTATIONS.topics;
/** Pod annotation naming the Checkpoint a pod restores from. */
export const RESTORE_FROM_ANNOTATION = ANNOTATIONS.restoreFrom;
/** The memory limit when a container sets none: 16 MiB. */
export const DEFAULT_MEMORY_LIMIT_BYTES = 16 * 1024 * 1024;

/** A container's configuration could not be made (Kubernetes' `CreateContainerConfigError`). */
export class ContainerConfigError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ContainerConfigError';
  }
}

/**
 * The tick interval in ms from the pod's annotation (1ms to 596h31m23.647s), or undefined for none.
 * @throws ContainerConfigError for a value that is not a duration, below 1ms or longer than that
 */
export function tickIntervalMs(pod: V1Pod): number | undefined {
  const text = pod.metadata?.annotations?.[TICK_INTERVAL_ANNOTATION];
  if (text === undefined || text.trim() === '') return undefined;
  try {
    const ms = parseTimerDuration(text);
    if (ms < 1) throw new RangeError('below 1ms');
    return ms;
  } catch (err: unknown) {
    throw new ContainerConfigError(`annotation ${TICK_INTERVAL_ANNOTATION}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The topics the pod subscribes to (annotation `kube32.io/topics`), deduplicated, in order. */
export function podTopics(pod: V1Pod): string[] {
  const text = pod.metadata?.annotations?.[TOPICS_ANNOTATION] ?? '';
  return [...new Set(text.split(',').map((t) => t.trim()).filter((t) => t !== ''))];
}

/** The container's memory limit in bytes (`resources.limits.memory`, else 16 MiB). @throws ContainerConfigError */
export function memoryLimitBytes(c: V1Container): number {
  const limit = c.resources?.limits?.memory;
  if (limit === undefined) return DEFAULT_MEMORY_LIMIT_BYTES;
  try {
    const n = parseBytes(limit);
    if (n < 1) throw new RangeError('must be at least 1 byte');
    return n;
  } catch (err: unknown) {
    throw new ContainerConfigError(`container ${c.name}: resources.limits.memory: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** A container's resolved configuration. */
export interface ContainerConfig {
  env: Record<string, string>;
  assets: Record<string, Uint8Array>;
  memoryLimitBytes: number;
  tickIntervalMs: number | undefined;
  topics: string[];
}

function fieldValue(pod: V1Pod, path: string, nodeAddress: string): string | undefined {
  const m = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (m) return (m[1] === 'labels' ? pod.metadata?.labels : pod.metadata?.annotations)?.[m[2]!];
  switch (path) {
    case 'metadata.name': return pod.metadata?.name;
    case 'metadata.namespace': return pod.metadata?.namespace;
    case 'metadata.uid': return pod.metadata?.uid;
    case 'spec.nodeName': return pod.spec?.nodeName;
    case 'spec.serviceAccountName': return pod.spec?.serviceAccountName;
    case 'status.hostIP':
    case 'status.podIP': return nodeAddress;
    default: throw new ContainerConfigError(`env fieldRef "${path}" is not supported`);
  }
}

/**
 * Resolves a container's configuration: `env` (values, `fieldRef`, `configMapKeyRef`,
 * `secretKeyRef`, `envFrom`), the assets (every key of every ConfigMap volume, binary data
 * included; `items` pick and rename keys), the memory limit, tick interval and topics.
 * @throws ContainerConfigError naming what is missing or wrong (a ConfigMap that does not exist, a bad annotation)
 */
export async function resolveContainerConfig(cp: ControlPlane, pod: V1Pod, c: V1Container, nodeAddress: string): Promise<ContainerConfig> {
  const ns = pod.metadata?.namespace ?? 'default';
  const cache = new Map<string, Promise<Record<string, Uint8Array> | undefined>>();
  const source = (kind: 'configmaps' | 'secrets', name: string): Promise<Record<string, Uint8Array> | undefined> => {
    const key = `${kind}/${name}`;
    let p = cache.get(key);
    if (!p) {
      p = cp.json<V1ConfigMap & V1Secret>('GET', `/api/v1/namespaces/${ns}/${kind}/${encodeURIComponent(name)}`).then(
        (o) => {
          const out: Record<string, Uint8Array> = {};
          if (kind === 'configmaps') {
            for (const [k, v] of Object.entries(o.data ?? {})) out[k] = Buffer.from(v, 'utf8');
            for (const [k, v] of Object.entries(o.binaryData ?? {})) out[k] = Buffer.from(v, 'base64');
          } else {
            for (const [k, v] of Object.entries(o.data ?? {})) out[k] = Buffer.from(v, 'base64');
            for (const [k, v] of Object.entries(o.stringData ?? {})) out[k] = Buffer.from(v, 'utf8');
          }
          return out;
        },
        (err: unknown) => {
          if (isApiError(err, 404)) return undefined;
          throw new ContainerConfigError(`${kind === 'configmaps' ? 'configmap' : 'secret'} "${name}": ${err instanceof Error ? err.message : String(err)}`, { cause: err });
        },
      );
      cache.set(key, p);
    }
    return p;
  };
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? []) {
    const ref = from.configMapRef ?? from.secretRef;
    if (!ref?.name) continue;
    const data = await source(from.configMapRef ? 'configmaps' : 'secrets', ref.name);
    if (!data) {
      if (ref.optional) continue;
      throw new ContainerConfigError(`${from.configMapRef ? 'configmap' : 'secret'} "${ref.name}" not found`);
    }
    for (const [k, v] of Object.entries(data)) env[(from.prefix ?? '') + k] = Buffer.from(v).toString('utf8');
  }
  for (const e of c.env ?? []) {
    if (e.value !== undefined || !e.valueFrom) {
      env[e.name] = (e.value ?? '').replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, name: string) => env[name] ?? all);
      continue;
    }
    const vf = e.valueFrom;
    if (vf.fieldRef) {
      const v = fieldValue(pod, vf.fieldRef.fieldPath, nodeAddress);
      if (v !== undefined) env[e.name] = v;
      continue;
    }
    const ref = vf.configMapKeyRef ?? vf.secretKeyRef;
    if (ref) {
      const kind = vf.configMapKeyRef ? 'configmaps' : 'secrets';
      const data = await source(kind, ref.name ?? '');
      const v = data?.[ref.key];
      if (v === undefined) {
        if (ref.optional) continue;
        throw new ContainerConfigError(`env ${e.name}: ${kind === 'configmaps' ? 'configmap' : 'secret'} "${ref.name}" ${data ? `has no key "${ref.key}"` : 'not found'}`);
      }
      env[e.name] = Buffer.from(v).toString('utf8');
      continue;
    }
    throw new ContainerConfigError(`env ${e.name}: only value, fieldRef, configMapKeyRef and secretKeyRef are supported`);
  }
  const assets: Record<string, Uint8Array> = {};
  for (const v of pod.spec?.volumes ?? []) {
    if (!v.configMap?.name) continue;
    const data = await source('configmaps', v.configMap.name);
    if (!data) {
      if (v.configMap.optional) continue;
      throw new ContainerConfigError(`volume ${v.name}: configmap "${v.configMap.name}" not found`);
    }
    if (v.configMap.items?.length) {
      for (const item of v.configMap.items) {
        const bytes = data[item.key];
        if (bytes === undefined) throw new ContainerConfigError(`volume ${v.name}: configmap "${v.configMap.name}" has no key "${item.key}"`);
        assets[item.path] = bytes;
      }
    } else {
      Object.assign(assets, data);
    }
  }
  return { env, assets, memoryLimitBytes: memoryLimitBytes(c), tickIntervalMs: tickIntervalMs(pod), topics: podTopics(pod) };
}
