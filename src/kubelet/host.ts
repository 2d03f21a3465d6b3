/**
 * Several simulated nodes in one kube32-sim process (`kube32-sim --nodes N`, issue 11 "A hundred
 * workers on one machine"). Each node is a whole worker as {@link startKubelet} makes it: its own
 * Node and Lease, its own address (its pods' `podIP` and its kubelet endpoint), its own data dir and
 * its own credentials (a node kubeconfig, user `system:node:<node>`), so that the API server's node
 * authorizer lets each change only its own Node, Lease and pods. What the nodes of one process share
 * on purpose: the pod runtime's spare worker threads (and, with `--pods-per-thread`, the threads
 * pods are packed on), the interpreter speed measured once at start (one computer, one runtime), and
 * the process's standard streams.
 */
import { isIPv4 } from 'node:net';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { createLogger, type Logger } from '../lib/index.ts';
import { measureInterpMops } from '../wasm/index.ts';
import { errorMessage } from './client.ts';
import type { DrainReport } from './drain.ts';
import { type Kubelet, type KubeletOptions, startKubelet } from './kubelet.ts';

/** Most simulated nodes one process runs: 1000 (a /22 of loopback addresses). */
export const MAX_NODES_PER_PROCESS = 1000;

/** How many nodes start at once: registration is a few API calls each, and the API server serves them in turn. */
export const NODE_START_CONCURRENCY = 8;

/** The node of one process's nodes: who it is, where it listens, where it keeps its files. */
export interface NodePlan {
  /** The Node's name: `<name>` for one node, `<name>-1` ... `<name>-N` for several. */
  nodeName: string;
  /** Its InternalIP: the first address for node 1, the next one for node 2, and so on. */
  address: string;
  /** Its kubelet endpoint's port on its own address (0: a free one). */
  kubeletPort: number;
  /** Its data dir: `<data-dir>` for one node, `<data-dir>/<node>` for several. */
  dataDir: string;
  /** Its kubeconfig: `--kubeconfig`, or `<kubeconfig-dir>/<node>.kubeconfig`. */
  kubeconfigPath: string;
}

/** What {@link planNodes} is given: kube32-sim's flags. */
export interface NodePlanOptions {
  /** `--name`: the node's name, or the prefix of the names of several. */
  name: string;
  /** `--nodes`: how many nodes, 1 to {@link MAX_NODES_PER_PROCESS}. */
  count: number;
  /** `--address`: the first node's address; with several nodes an IPv4 address to count from. */
  address: string;
  /** `--kubelet-port`: every node's kubelet port, each on its own address (0: each a free one). */
  kubeletPort: number;
  /** `--data-dir`: the node's data dir, or the parent of several nodes' data dirs. */
  dataDir: string;
  /** `--kubeconfig`: one node's kubeconfig (only with one node). */
  kubeconfig?: string;
  /** `--kubeconfig-dir`: a directory holding `<node>.kubeconfig` for each node. */
  kubeconfigDir?: string;
}

/**
 * The IPv4 address `n` places after `first` (`127.0.0.2` + 3 = `127.0.0.5`; `127.0.0.255` + 1 =
 * `127.0.1.0`).
 * @throws RangeError when `first` is not an IPv4 address or the result would pass 255.255.255.255
 */
export function nextAddress(first: string, n: number): string {
  if (!isIPv4(first)) throw new RangeError(`--address must be an IPv4 address to count several nodes' addresses from: current value is "${first}"`);
  const value = first.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0) + n;
  if (value > 0xffffffff) throw new RangeError(`${n + 1} addresses from ${first} pass 255.255.255.255: choose a lower --address`);
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

/**
 * Names, addresses, ports, data dirs and kubeconfigs of a process's nodes (see {@link NodePlan}).
 * One node is exactly today's single worker; several are `<name>-1..N` on consecutive addresses,
 * all on the same kubelet port (each on its own address, as every kubelet of a cluster listens on
 * 10250 of its own IP), each with `<data-dir>/<node>` and `<kubeconfig-dir>/<node>.kubeconfig`.
 * @throws RangeError naming the flag: a count out of range, an address that cannot be counted from,
 *   `--kubeconfig` with several nodes (each needs its own identity), both or neither of
 *   `--kubeconfig` and `--kubeconfig-dir`, a name that is not a DNS subdomain once numbered
 */
export function planNodes(o: NodePlanOptions): NodePlan[] {
  if (!Number.isInteger(o.count) || o.count < 1 || o.count > MAX_NODES_PER_PROCESS) {
    throw new RangeError(`--nodes must be a whole number from 1 to ${MAX_NODES_PER_PROCESS}: current value is ${o.count}`);
  }
  if (o.kubeconfig !== undefined && o.kubeconfigDir !== undefined) throw new RangeError('--kubeconfig and --kubeconfig-dir exclude each other: give one');
  if (o.count > 1 && o.kubeconfig !== undefined) {
    throw new RangeError(`--nodes ${o.count} needs one identity per node, not one --kubeconfig: pass --kubeconfig-dir DIR holding <node>.kubeconfig for each node (kube32-cli apiserver --data-dir CP --issue-node-kubeconfig <node> writes CP/nodes/<node>.kubeconfig)`);
  }
  if (o.kubeconfig === undefined && o.kubeconfigDir === undefined) throw new RangeError('--kubeconfig (or $KUBECONFIG) or --kubeconfig-dir is required');
  const names = o.count === 1 ? [o.name] : Array.from({ length: o.count }, (_, i) => `${o.name}-${i + 1}`);
  const last = names[names.length - 1]!;
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(last) || last.length > 253) {
    throw new RangeError(`node name must be a DNS subdomain (lower case, digits, '-', '.'): current value is "${last}"`);
  }
  if (o.count > 1) nextAddress(o.address, o.count - 1);
  return names.map((nodeName, i) => ({
    nodeName,
    address: o.count === 1 ? o.address : nextAddress(o.address, i),
    kubeletPort: o.kubeletPort,
    dataDir: o.count === 1 ? o.dataDir : join(o.dataDir, nodeName),
    kubeconfigPath: o.kubeconfig ?? join(o.kubeconfigDir!, `${nodeName}.kubeconfig`),
  }));
}

/** The options every node of a process shares: those of {@link startKubelet} a plan does not give. */
export type SharedNodeOptions = Omit<KubeletOptions, 'kubeConfig' | 'nodeName' | 'address' | 'kubeletPort' | 'dataDir' | 'log'>;

/** The nodes of one process, started. */
export interface NodeHost {
  /** The running nodes, in plan order. */
  readonly kubelets: readonly Kubelet[];
  /** Drains every node at once (each its own self-drain, seed "Drain and evictions"); reports in plan order. */
  drainAll(timeoutMs?: number): Promise<DrainReport[]>;
  /** Stops every node at once (each posts Ready False); files are kept. Never throws. */
  stopAll(): Promise<void>;
}

/** Why the nodes of a process did not all start: every node that failed, with its reason. */
export class NodeStartError extends Error {
  /** Each node that failed and why. */
  readonly failures: { nodeName: string; message: string }[];
  constructor(failures: { nodeName: string; message: string }[], total: number, options?: ErrorOptions) {
    const lines = failures.map((f) => `node ${f.nodeName}: ${f.message}`);
    super(total === 1 ? lines[0]! : `${failures.length} of ${total} nodes could not start, so none runs:\n  ${lines.join('\n  ')}`, options);
    this.name = 'NodeStartError';
    this.failures = failures;
  }
}

/**
 * Starts the planned nodes in one process, {@link NODE_START_CONCURRENCY} at a time. Every
 * kubeconfig is read before any node starts. The interpreter speed is measured once (unless given)
 * and reported by every node. If a node cannot start, no further one is started, those already up
 * are stopped (their Nodes post Ready False), and the error names each node that failed.
 * @param log the process's logger; each node logs through a child naming it (`node`)
 * @throws NodeStartError naming each node that failed (a kubeconfig missing or unreadable, a data dir
 *   in use, an address that cannot be listened on, a registration refused)
 */
export async function startNodes(plans: readonly NodePlan[], shared: SharedNodeOptions, log: Logger = createLogger('kube32-sim')): Promise<NodeHost> {
  const configs: KubeConfig[] = [];
  const unreadable: { nodeName: string; message: string }[] = [];
  for (const p of plans) {
    const kc = new KubeConfig();
    try {
      kc.loadFromFile(p.kubeconfigPath);
      if (!kc.getCurrentCluster()) throw new Error('it names no current cluster');
    } catch (err: unknown) {
      unreadable.push({ nodeName: p.nodeName, message: `kubeconfig ${p.kubeconfigPath}: ${errorMessage(err)}` });
    }
    configs.push(kc);
  }
  if (unreadable.length) throw new NodeStartError(unreadable, plans.length);
  let interpMops = shared.interpMops;
  if (interpMops === undefined && plans.length > 1) {
    try {
      interpMops = await measureInterpMops();
    } catch (err: unknown) {
      log.warn({ err: errorMessage(err) }, 'cannot measure the interpreter speed; reporting 0');
      interpMops = 0;
    }
  }
  const kubelets: (Kubelet | undefined)[] = new Array(plans.length);
  const failures: { nodeName: string; message: string; cause: unknown }[] = [];
  let next = 0;
  const startOne = async (): Promise<void> => {
    while (failures.length === 0 && next < plans.length) {
      const i = next++;
      const p = plans[i]!;
      try {
        kubelets[i] = await startKubelet({
          ...shared, ...(interpMops !== undefined ? { interpMops } : {}),
          kubeConfig: configs[i]!, nodeName: p.nodeName, address: p.address, kubeletPort: p.kubeletPort, dataDir: p.dataDir,
          log: log.child({ node: p.nodeName }),
        });
      } catch (err: unknown) {
        failures.push({ nodeName: p.nodeName, message: errorMessage(err), cause: err });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(NODE_START_CONCURRENCY, plans.length) }, startOne));
  const started = kubelets.filter((k): k is Kubelet => k !== undefined);
  const stopAll = async (): Promise<void> => {
    await Promise.all(started.map((k) => k.stop().catch((err: unknown) => log.warn({ node: k.nodeName, err: errorMessage(err) }, 'stopping the node failed'))));
  };
  if (failures.length) {
    await stopAll();
    throw new NodeStartError(failures.map(({ nodeName, message }) => ({ nodeName, message })), plans.length, { cause: failures[0]!.cause });
  }
  return {
    kubelets: started,
    drainAll: (timeoutMs) => Promise.all(started.map((k) => k.drain(timeoutMs))),
    stopAll,
  };
}
