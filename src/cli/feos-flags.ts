/**
 * The port for FeOS nodes in `kube32-cli control-plane` (docs/feos/fleet.md; docs/operations.md): its
 * flags as commander options and the start from them. The fleet code (src/fleet) is loaded only when
 * `--feos-listen` is given.
 */
import { Option } from 'commander';
import type { KubeConfig } from '@kubernetes/client-node';
import type { FeosPodStreams, NodeTunnel } from '../apiserver/index.ts';
import { createLogger, parseDuration } from '../lib/index.ts';
import { CliError } from './errors.ts';

/**
 * `--feos-mesh-node-limit`'s default and bound: src/fleet/mesh's DEFAULT_MESH_NODE_LIMIT and
 * MAX_MESH_NODE_LIMIT, written here again so that the fleet code stays unloaded without --feos-listen.
 */
const DEFAULT_MESH_NODE_LIMIT = 1024;
const MAX_MESH_NODE_LIMIT = 4096;

/** The flags, as commander parses them. */
export interface FeosPortFlags {
  feosListen?: string;
  feosServerName?: string[];
  feosAdvertiseAddress?: string;
  trustDomain?: string;
  feosNodeCertTtl?: string;
  feosMeshNodeLimit?: string;
}

/** The options to add to `control-plane`. */
export function feosPortOptions(): Option[] {
  return [
    new Option('--feos-listen <address:port>', 'listen for FeOS nodes (feosd --control-plane) on this address and port, TLS 1.3 (port 0 picks a free one); off when absent'),
    new Option('--feos-server-name <name...>', "more DNS names or addresses for the port for nodes' certificate (besides localhost, this host's name and the listen address): what nodes pass as --control-plane-name").default([]),
    new Option('--feos-advertise-address <host:port>', 'the address nodes dial this instance at, as listed to them (default: the listen address, or this host\'s name for 0.0.0.0)'),
    new Option('--trust-domain <name>', "the SPIFFE trust domain of the nodes and of the control plane's certificate").default('feos.local'),
    new Option('--feos-node-cert-ttl <duration>', 'life of a node certificate; nodes renew at two thirds of it').default('24h'),
    new Option('--feos-mesh-node-limit <n>', `how many FeOS nodes may hold a /96 of the mesh's ULA /64 (1 to ${MAX_MESH_NODE_LIMIT}); JoinMesh past it is RESOURCE_EXHAUSTED`).default(String(DEFAULT_MESH_NODE_LIMIT)),
  ];
}

/**
 * `host:port` or `[v6]:port` split.
 * @throws CliError (exit code 1, as kubectl's usage errors) naming the flag
 */
export function hostPort(flag: string, v: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(v);
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || port > 65535) throw new CliError(`${flag} ${JSON.stringify(v)}: want ADDRESS:PORT or [IPv6]:PORT with a port from 0 to 65535, e.g. 0.0.0.0:7443`);
  return { host: m[1] ?? m[2]!, port };
}

/**
 * Checks the flags (before anything starts).
 * @throws CliError naming a bad flag
 */
export function checkFeosPortFlags(flags: FeosPortFlags): void {
  // Checked with or without --feos-listen: a wrong value is refused even where the port for nodes is off.
  if (flags.feosListen) hostPort('--feos-listen', flags.feosListen);
  if (flags.feosAdvertiseAddress) hostPort('--feos-advertise-address', flags.feosAdvertiseAddress);
  ttl(flags);
  meshNodeLimit(flags);
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(flags.trustDomain ?? 'feos.local')) throw new CliError(`--trust-domain ${JSON.stringify(flags.trustDomain)}: want a lowercase DNS name such as feos.local`);
}

function ttl(flags: FeosPortFlags): number {
  try {
    const ms = parseDuration(flags.feosNodeCertTtl ?? '24h');
    if (!(ms >= 60_000)) throw new RangeError('must be at least 1m');
    return ms;
  } catch (err: unknown) {
    throw new CliError(`--feos-node-cert-ttl: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** `--feos-mesh-node-limit`, checked. @throws CliError when it is not a whole number from 1 to the maximum */
function meshNodeLimit(flags: FeosPortFlags): number {
  const v = flags.feosMeshNodeLimit ?? String(DEFAULT_MESH_NODE_LIMIT);
  const n = /^\d{1,5}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= MAX_MESH_NODE_LIMIT)) {
    throw new CliError(`--feos-mesh-node-limit ${JSON.stringify(v)}: want a whole number from 1 to ${MAX_MESH_NODE_LIMIT} (the mesh's record is one ConfigMap, about 200 bytes a node)`);
  }
  return n;
}

/** What {@link startFeosPort} started. */
export interface FeosPort {
  /** host:port it listens on. */
  address: string;
  /** Takes a FeOS node's node proxy tunnel (for the API server's `setNodeTunnel`). */
  tunnel: NodeTunnel;
  /** The streams of FeOS pods over the node connections (for the API server's `setFeosPodStreams`). */
  podStreams: FeosPodStreams;
  close(): Promise<void>;
}

/**
 * Starts the port for nodes when `--feos-listen` is given, and the kubelet of the FeOS nodes beside it.
 * @param kubeConfig the admin kubeconfig the API server wrote
 * @param dataDir the API server's data dir (its pki/ holds the cluster CA)
 * @throws Error when the port cannot be bound or the CA read
 */
export async function startFeosPort(flags: FeosPortFlags, kubeConfig: KubeConfig, dataDir: string): Promise<FeosPort | undefined> {
  if (!flags.feosListen) return undefined;
  const { host, port } = hostPort('--feos-listen', flags.feosListen);
  const { startFeosKubelet, startFleetServer } = await import('../fleet/index.ts');
  // The kubelet starts once the port is up; reports before that find none (the next ones do).
  let kubelet: Awaited<ReturnType<typeof startFeosKubelet>> | undefined;
  const server = await startFleetServer({
    onReport: (node, pods, stale) => kubelet?.report(node, pods, stale),
    kubeConfig,
    dataDir,
    host,
    port,
    serverNames: flags.feosServerName ?? [],
    advertiseAddress: flags.feosAdvertiseAddress,
    trustDomain: flags.trustDomain ?? 'feos.local',
    nodeCertTtlMs: ttl(flags),
    meshNodeLimit: meshNodeLimit(flags),
    log: createLogger('fleet'),
  });
  // The kubelet of the FeOS nodes (issue 18): runs the Pods bound to them over their node connections.
  try {
    kubelet = await startFeosKubelet({ kubeConfig, connection: (node) => server.nodeConnection(node), log: createLogger('feos-kubelet') });
  } catch (err: unknown) {
    await server.close();
    throw err;
  }
  const { fleetPodStreams } = await import('../fleet/index.ts');
  return {
    address: server.address,
    tunnel: (node, socket, head) => server.tunnel(node, socket, head),
    podStreams: fleetPodStreams((node) => server.nodeConnection(node)),
    close: async () => {
      await kubelet?.stop();
      await server.close();
    },
  };
}
