/**
 * The `default/kubernetes` EndpointSlice, kept by the API server beside the `kubernetes` Endpoints as
 * kube-apiserver's endpoints adapter keeps it (pkg/controlplane/reconcilers/endpointsadapter.go): name
 * `kubernetes`, label `kubernetes.io/service-name: kubernetes` only, the first subset's ports and addresses,
 * every one ready; addressType IPv6 when every address is IPv6, else IPv4.
 */
import { isIPv6 } from 'node:net';
import { ApiError } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { Registry } from '../store.ts';
import { endpointslices, LABEL_SERVICE_NAME } from './index.ts';

/** One subset of the `kubernetes` Endpoints: the API servers' addresses and the ports they share. */
export interface KubernetesSubset {
  addresses: { ip: string }[];
  ports: { name: string; port: number; protocol: string }[];
}

/**
 * Sets `default/kubernetes` EndpointSlice from the subsets of the `kubernetes` Endpoints (the first one, as
 * Kubernetes does; none: no endpoints and no ports). A write that changes nothing is skipped, so every API
 * server of a cluster can call it with the same subsets.
 * @param registry the API server's registry
 * @param subsets the `kubernetes` Endpoints' subsets, in their order
 * @throws ApiError from the registry for a failed write (AlreadyExists from a concurrent create is absorbed)
 */
export async function setKubernetesEndpointSlice(registry: Registry, subsets: readonly KubernetesSubset[]): Promise<void> {
  const first = subsets[0];
  const ips = first?.addresses.map((a) => a.ip) ?? [];
  const addressType = ips.length > 0 && ips.every((ip) => isIPv6(ip)) ? 'IPv6' : 'IPv4';
  const endpoints = ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } }));
  const ports = first?.ports.map((p) => ({ name: p.name, port: p.port, protocol: p.protocol })) ?? [];
  const labels = { [LABEL_SERVICE_NAME]: 'kubernetes' };
  const existing = await registry.find(endpointslices, 'default', 'kubernetes');
  if (!existing) {
    try {
      await registry.create(endpointslices, 'default', { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'kubernetes', labels }, addressType, endpoints, ports });
      return;
    } catch (err: unknown) {
      if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
    }
  }
  if (existing && existing.addressType === addressType && JSON.stringify([existing.endpoints ?? [], existing.ports ?? [], existing.metadata.labels ?? {}]) === JSON.stringify([endpoints, ports, labels])) return;
  if (existing && existing.addressType !== addressType) {
    // addressType is immutable: Kubernetes deletes the slice and creates it again.
    await registry.delete(endpointslices, 'default', 'kubernetes');
    await registry.create(endpointslices, 'default', { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'kubernetes', labels }, addressType, endpoints, ports });
    return;
  }
  await registry.serverUpdate(endpointslices, 'default', 'kubernetes', (o): KubeObject => ({ ...o, metadata: { ...o.metadata, labels }, addressType, endpoints, ports }));
}
