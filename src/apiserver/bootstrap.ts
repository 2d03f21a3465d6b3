/**
 * What every cluster has, made at start: the system namespaces, a `default` ServiceAccount in each
 * namespace, and the `kubernetes` Service and Endpoints in `default` naming this API server (one
 * server), or every live one (several on etcd: checkpoint-data-peers.ts keeps them from the identity
 * Leases).
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Logger } from '../lib/index.ts';
import { ApiError } from './errors.ts';
import { KUBERNETES_SERVICE_IP, endpoints, serviceaccounts, services } from './registry/core/index.ts';
import { setKubernetesEndpointSlice } from './registry/discovery/kubernetes-slice.ts';
import { namespaces } from './registry/nodes/index.ts';
import { FEOS_RUNTIME_CLASS, runtimeclasses } from './registry/runtimeclasses/index.ts';
import type { Registry } from './registry/store.ts';
import { rec } from './registry/util.ts';
import type { KubeObject } from './storage/index.ts';

/** The namespaces every cluster has. */
export const SYSTEM_NAMESPACES = ['default', 'kube-system', 'kube-public', 'kube-node-lease'] as const;

/**
 * Makes the system namespaces and their default service accounts. Several API servers starting at once
 * on one etcd may race: what another made first counts as made.
 */
export async function bootstrap(registry: Registry, log: Logger): Promise<void> {
  for (const name of SYSTEM_NAMESPACES) {
    if (!await registry.find(namespaces, '', name)) {
      try {
        await registry.create(namespaces, '', { metadata: { name } });
        log.info({ namespace: name }, 'created system namespace');
      } catch (err: unknown) {
        if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
      }
    }
    await ensureDefaultServiceAccount(registry, name);
  }
  await ensureFeosRuntimeClass(registry, log);
}

/**
 * Makes the RuntimeClass `feos` (issue 18: FeOS microVM pods) unless one of that name exists (an operator's
 * own is kept as it is; a deleted one is made again at the next start).
 */
export async function ensureFeosRuntimeClass(registry: Registry, log: Logger): Promise<void> {
  const name = FEOS_RUNTIME_CLASS.metadata.name!;
  if (await registry.find(runtimeclasses, '', name)) return;
  try {
    await registry.create(runtimeclasses, '', structuredClone(FEOS_RUNTIME_CLASS));
    log.info({ runtimeClass: name }, 'created RuntimeClass');
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
  }
}

/** One API server as the `kubernetes` Endpoints list it: its advertised IP address and secure port. */
export interface ApiServerEndpoint {
  ip: string;
  port: number;
}

/**
 * The address an API server advertises (to other API servers, in the `default/kubernetes` Endpoints,
 * in its identity Lease), as kube-apiserver's `--advertise-address` defaults: the given one, else the
 * bind address, else (bind unspecified: `0.0.0.0`, `::`) the first non-internal IPv4 address of this
 * host (then IPv6), else 127.0.0.1.
 * @throws RangeError when `advertise` is given and is not an IP address (Endpoints hold IPs only)
 */
export function advertiseAddressOf(bind: string, advertise?: string): string {
  if (advertise !== undefined && advertise !== '') {
    if (!isIP(advertise) || advertise === '0.0.0.0' || advertise === '::') throw new RangeError(`the advertise address must be a specified IP address (Endpoints list IPs): current value is ${JSON.stringify(advertise)}`);
    return advertise;
  }
  if (bind !== '0.0.0.0' && bind !== '::' && isIP(bind)) return bind;
  if (bind === 'localhost') return '127.0.0.1';
  if (bind !== '0.0.0.0' && bind !== '::') return bind;
  const all = Object.values(networkInterfaces()).flatMap((l) => l ?? []).filter((a) => !a.internal);
  return all.find((a) => a.family === 'IPv4')?.address ?? all.find((a) => a.family === 'IPv6' && !a.address.startsWith('fe80'))?.address ?? '127.0.0.1';
}

/**
 * Makes the `kubernetes` service in `default` (cluster IP 10.96.0.1, port 443 named `https`, target this
 * server's port) unless it exists, as Kubernetes' API server keeps it. With `endpoints` (one API server:
 * SQLite or memory), also sets its Endpoints to this server alone; with etcd the identity Leases of
 * every live API server set them ({@link setKubernetesEndpoints}).
 */
export async function ensureKubernetesService(registry: Registry, address: string, port: number, opts: { endpoints?: boolean } = {}): Promise<void> {
  if (port === 0) return;
  try {
    if (!await registry.find(services, 'default', 'kubernetes')) {
      await registry.create(services, 'default', {
        metadata: { name: 'kubernetes', labels: { component: 'apiserver', provider: 'kubernetes' } },
        spec: { type: 'ClusterIP', clusterIP: KUBERNETES_SERVICE_IP, ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: port }] },
      });
    } else {
      await registry.serverUpdate(services, 'default', 'kubernetes', (o) => {
        for (const p of (rec(o.spec).ports as Record<string, unknown>[] | undefined) ?? []) if (p.name === 'https') p.targetPort = port;
        return o;
      });
    }
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
  }
  if (opts.endpoints !== false) await setKubernetesEndpoints(registry, [{ ip: address, port }]);
}

/**
 * Sets `default/kubernetes` Endpoints to `servers` (deduplicated, sorted; one subset per port, as
 * Endpoints group addresses that share their ports; none: no subsets), and the `kubernetes` EndpointSlice
 * beside it (registry/discovery/kubernetes-slice.ts). Every API server computes the
 * same object from the same Leases, and a write that changes nothing is skipped.
 */
export async function setKubernetesEndpoints(registry: Registry, servers: ApiServerEndpoint[]): Promise<void> {
  const byPort = new Map<number, Set<string>>();
  for (const s of servers) {
    if (!isIP(s.ip) || !Number.isInteger(s.port) || s.port <= 0) continue;
    byPort.set(s.port, (byPort.get(s.port) ?? new Set()).add(s.ip));
  }
  const subsets = [...byPort.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([port, ips]) => ({ addresses: [...ips].sort().map((ip) => ({ ip })), ports: [{ name: 'https', port, protocol: 'TCP' }] }));
  await setKubernetesEndpointSlice(registry, subsets);
  try {
    if (!await registry.find(endpoints, 'default', 'kubernetes')) {
      await registry.create(endpoints, 'default', { metadata: { name: 'kubernetes', labels: { 'endpointslice.kubernetes.io/skip-mirror': 'true' } }, subsets });
      return;
    }
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
  }
  await registry.serverUpdate(endpoints, 'default', 'kubernetes', (o) => {
    const next: KubeObject = { ...o, subsets };
    if (subsets.length === 0) delete next.subsets;
    return next;
  });
}

/** Makes the `default` ServiceAccount of a namespace, unless it exists or the namespace is going. */
export async function ensureDefaultServiceAccount(registry: Registry, namespace: string): Promise<void> {
  try {
    const ns = await registry.find(namespaces, '', namespace);
    if (!ns || ns.metadata.deletionTimestamp) return;
    if (!await registry.find(serviceaccounts, namespace, 'default')) await registry.create(serviceaccounts, namespace, { metadata: { name: 'default' } });
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
  }
}
