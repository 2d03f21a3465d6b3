/**
 * What every cluster has, made at start: the system namespaces, a `default` ServiceAccount in each
 * namespace, and the `kubernetes` Service and Endpoints in `default` naming this server.
 */
import type { Logger } from '../lib/index.ts';
import { ApiError } from './errors.ts';
import { KUBERNETES_SERVICE_IP, endpoints, serviceaccounts, services } from './registry/core/index.ts';
import { namespaces } from './registry/nodes/index.ts';
import type { Registry } from './registry/store.ts';
import { rec } from './registry/util.ts';

/** The namespaces every cluster has. */
export const SYSTEM_NAMESPACES = ['default', 'kube-system', 'kube-public', 'kube-node-lease'] as const;

/** Makes the system namespaces and their default service accounts. */
export function bootstrap(registry: Registry, log: Logger): void {
  for (const name of SYSTEM_NAMESPACES) {
    if (!registry.find(namespaces, '', name)) {
      registry.create(namespaces, '', { metadata: { name } });
      log.info({ namespace: name }, 'created system namespace');
    }
    ensureDefaultServiceAccount(registry, name);
  }
}

/**
 * The `kubernetes` service in `default` (cluster IP 10.96.0.1, port 443) and its Endpoints naming
 * this server's address and port, as Kubernetes' API server keeps them.
 */
export function ensureKubernetesService(registry: Registry, bind: string, port: number): void {
  if (port === 0) return;
  const address = bind === '0.0.0.0' || bind === '::' ? '127.0.0.1' : bind;
  if (!registry.find(services, 'default', 'kubernetes')) {
    registry.create(services, 'default', {
      metadata: { name: 'kubernetes', labels: { component: 'apiserver', provider: 'kubernetes' } },
      spec: { type: 'ClusterIP', clusterIP: KUBERNETES_SERVICE_IP, ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: port }] },
    });
  } else {
    registry.serverUpdate(services, 'default', 'kubernetes', (o) => {
      for (const p of (rec(o.spec).ports as Record<string, unknown>[] | undefined) ?? []) if (p.name === 'https') p.targetPort = port;
      return o;
    });
  }
  const subsets = [{ addresses: [{ ip: address }], ports: [{ name: 'https', port, protocol: 'TCP' }] }];
  if (!registry.find(endpoints, 'default', 'kubernetes')) registry.create(endpoints, 'default', { metadata: { name: 'kubernetes' }, subsets });
  else registry.serverUpdate(endpoints, 'default', 'kubernetes', (o) => ({ ...o, subsets }));
}

/** Makes the `default` ServiceAccount of a namespace, unless it exists or the namespace is going. */
export function ensureDefaultServiceAccount(registry: Registry, namespace: string): void {
  try {
    const ns = registry.find(namespaces, '', namespace);
    if (!ns || ns.metadata.deletionTimestamp) return;
    if (!registry.find(serviceaccounts, namespace, 'default')) registry.create(serviceaccounts, namespace, { metadata: { name: 'default' } });
  } catch (err: unknown) {
    if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
  }
}
