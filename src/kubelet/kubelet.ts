/**
 * A whole kube32-sim worker in one object: the kubelet endpoint, the Node and its Lease, the pod
 * sync loop, the module cache and the channel router, wired together. `main.ts` runs one per
 * process; tests and `kube32-cli up` may also start it in-process.
 */
import { mkdir, open, readFile, rm } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { Backoff, createLogger, isProcessAlive, type Logger } from '../lib/index.ts';
import { measureInterpMops } from '../wasm/index.ts';
import { KubeletAuthenticator } from './auth.ts';
import { ChannelRouter } from './channels.ts';
import { ApiError, ControlPlane, errorMessage } from './client.ts';
import { type DrainReport, SELF_DRAIN_TIMEOUT_MS, selfDrain } from './drain.ts';
import { EventRecorder } from './events.ts';
import { NodeFence } from './fence.ts';
import { LoadedModules, ModuleCache } from './modules.ts';
import { loadHolderIdentity, NodeAgent } from './node.ts';
import { type HoldLimits, PodPorts } from './pod-ports.ts';
import { PodManager } from './pods.ts';
import { createKubeletServer } from './server.ts';

/** Options of {@link startKubelet}. */
export interface KubeletOptions {
  /** Who the node is to the API server (`--kubeconfig`). */
  kubeConfig: KubeConfig;
  /** The Node's name (`--name`). */
  nodeName: string;
  /** The address of the node and its pods (`--address`). @default '127.0.0.1' */
  address?: string;
  /** The kubelet endpoint's port; 0 picks a free one. @default 10250 */
  kubeletPort?: number;
  /** The heap pods may hold, bytes (`--heap`). @default 256 MiB */
  heapBytes?: number;
  /** The most pods the node runs. @default 110 */
  maxPods?: number;
  /** Extra Node labels (`--labels`). */
  labels?: Record<string, string>;
  /** Where the node keeps modules and pods' files (`--data-dir`). */
  dataDir: string;
  /** The interpreter speed to report instead of measuring it (MOPS). */
  interpMops?: number;
  /**
   * Bounds of the requests held for a frozen or moving pod, and how long a moved pod's ports forward
   * (`--hold-timeout`, `--hold-requests`, `--hold-bytes`, `--moved-forward`; see pod-ports.ts).
   */
  hold?: Partial<HoldLimits>;
  /**
   * Fence the node's pods (freeze them) once the Lease has not been renewed for this long, ms; 0: never
   * (`--fence-after`, see fence.ts). It must not be longer than the control plane's node monitor grace
   * period. @default 40 000
   */
  fenceAfterMs?: number;
  log?: Logger;
}

/** A running worker. */
export interface Kubelet {
  readonly nodeName: string;
  readonly address: string;
  /** The kubelet endpoint's port (the one chosen when 0 was asked). */
  readonly kubeletPort: number;
  readonly interpMops: number;
  readonly pods: PodManager;
  readonly node: NodeAgent;
  /** Drains the node (cordon, `kube32.io/left`, evictions, wait). */
  drain(timeoutMs?: number): Promise<DrainReport>;
  /** Stops everything: pods, watches, heartbeat (the Node posts NotReady), the endpoint. Files are kept. */
  stop(): Promise<void>;
}

const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const path = join(dir, 'kube32-sim.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(path, 'wx');
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      return () => rm(path, { force: true });
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      const alive = pid > 0 && pid !== process.pid && isProcessAlive(pid);
      if (alive) throw new Error(`data dir ${dir} is in use by kube32-sim process ${pid} (${path})`);
      await rm(path, { force: true });
    }
  }
  throw new Error(`cannot lock the data dir ${dir}`);
}

/**
 * Runs `step` until it succeeds, retrying (0.5 s doubling to 5 s) while the API server cannot be
 * reached or answers 5xx or 429, as a kubelet waits for its control plane; any other error is thrown.
 */
async function untilReachable<T>(step: () => Promise<T>, what: string, log: Logger): Promise<T> {
  const backoff = new Backoff({ initialMs: 500, maxMs: 5000 });
  for (;;) {
    try {
      return await step();
    } catch (err: unknown) {
      if (!(err instanceof ApiError) || !(err.code === 0 || err.code === 429 || err.code >= 500)) throw err;
      log.warn({ err: err.message, retryMs: backoff.peek() }, `${what}: the API server is not reachable; retrying`);
      await backoff.wait();
    }
  }
}

/**
 * Starts a worker: checks the options, locks the data dir, measures the interpreter speed,
 * serves the kubelet endpoint, registers the Node, starts the pods bound to it and the heartbeat.
 * @throws RangeError for a bad option (naming it and the value); Error when the data dir is locked
 *   or the API server refuses the registration; NodeHeldError (node.ts) while another worker renews the
 *   node's Lease
 */
export async function startKubelet(opts: KubeletOptions): Promise<Kubelet> {
  const { nodeName } = opts;
  if (!NAME.test(nodeName) || nodeName.length > 253) throw new RangeError(`node name must be a DNS subdomain (lower case, digits, '-', '.'): current value is "${nodeName}"`);
  const address = opts.address ?? '127.0.0.1';
  const kubeletPort = opts.kubeletPort ?? 10250;
  if (!Number.isInteger(kubeletPort) || kubeletPort < 0 || kubeletPort > 65535) throw new RangeError(`kubelet port must be 0 to 65535: current value is ${kubeletPort}`);
  const heapBytes = opts.heapBytes ?? 256 * 1024 * 1024;
  if (!Number.isFinite(heapBytes) || heapBytes < 1) throw new RangeError(`heap must be a positive number of bytes: current value is ${heapBytes}`);
  const maxPods = opts.maxPods ?? 110;
  if (!Number.isInteger(maxPods) || maxPods < 1) throw new RangeError(`max pods must be a whole number of 1 or more: current value is ${maxPods}`);
  if (opts.fenceAfterMs !== undefined && (!Number.isSafeInteger(opts.fenceAfterMs) || opts.fenceAfterMs < 0)) {
    throw new RangeError(`fence-after must be a duration of 0 or more: current value is ${opts.fenceAfterMs} ms`);
  }
  const dataDir = resolve(opts.dataDir);
  const log = opts.log ?? createLogger('kube32-sim', { node: nodeName });
  await mkdir(join(dataDir, 'pods'), { recursive: true });
  const unlock = await lockDataDir(dataDir);
  const cleanups: Array<() => Promise<void>> = [unlock];
  try {
    const cp = new ControlPlane(opts.kubeConfig);
    // Who holds the node's Lease: one identity per data dir, so that a restart from it is the same holder.
    const holder = await loadHolderIdentity(dataDir);
    let interpMops = opts.interpMops;
    if (interpMops === undefined) {
      try {
        interpMops = await measureInterpMops();
      } catch (err: unknown) {
        log.warn({ err: errorMessage(err) }, 'cannot measure the interpreter speed; reporting 0');
        interpMops = 0;
      }
    }
    const modules = new LoadedModules(new ModuleCache(cp, dataDir, log));
    const events = new EventRecorder(cp, nodeName, log);
    let pods: PodManager | undefined;
    const channels = new ChannelRouter(cp, nodeName, () => pods, log);
    const server: Server = createKubeletServer({
      pods: () => pods,
      auth: new KubeletAuthenticator(cp),
      log,
      deliver: (ns, t, p) => channels.deliver(ns, t, p),
      node: { name: nodeName, startedAtMs: Date.now(), heapBytes },
    });
    await new Promise<void>((res, rej) => {
      server.once('error', rej);
      server.listen(kubeletPort, address, () => res());
    });
    cleanups.push(() => new Promise<void>((res) => {
      server.close(() => res());
      server.closeAllConnections();
    }));
    const port = (server.address() as AddressInfo).port;
    const node = new NodeAgent(cp, { name: nodeName, address, kubeletPort: port, heapBytes, maxPods, labels: opts.labels ?? {}, interpMops, holderIdentity: holder.identity, holderIdentityFile: holder.file }, () => pods?.heldBytes() ?? 0, log);
    let pressure = false;
    const ports = new PodPorts({ cp, nodeName, address, log, ...(opts.hold ? { limits: opts.hold } : {}) });
    cleanups.push(() => ports.stop());
    pods = new PodManager({
      cp, nodeName, address, dataDir, modules, log, ports,
      onChannelSend: (ns, topic, payload) => channels.publish(ns, topic, payload),
      onResourcesChanged: () => {
        if (node.memoryPressure() !== pressure) {
          pressure = !pressure;
          void node.refresh();
          events.record(nodeRef(), 'Normal', pressure ? 'NodeHasInsufficientMemory' : 'NodeHasSufficientMemory',
            `Node ${nodeName} status is now: ${pressure ? 'NodeHasInsufficientMemory' : 'NodeHasSufficientMemory'}`);
        }
      },
      events,
    });
    const nodeRef = () => ({ apiVersion: 'v1', kind: 'Node', name: nodeName, uid: node.uid, namespace: 'default' });
    await untilReachable(() => node.register(), 'registering the node', log);
    events.record(nodeRef(), 'Normal', 'Starting', 'Starting kubelet.');
    events.record(nodeRef(), 'Normal', 'NodeReady', `Node ${nodeName} status is now: NodeReady`);
    await untilReachable(() => pods!.start(), 'listing the node\'s pods', log);
    cleanups.push(() => pods!.stop());
    await channels.start().catch((err: unknown) => log.warn({ err: errorMessage(err) }, 'cannot watch nodes: channel messages stay on this node'));
    cleanups.push(() => channels.stop());
    const fenceAfterMs = opts.fenceAfterMs ?? 40_000;
    const podsForFence = pods;
    const fence = new NodeFence({
      cp, nodeName, pods: podsForFence, log, fenceAfterMs, lastRenewedAt: () => node.lastRenewedAt,
      onChange: (fenced) => {
        podsForFence.fenced = fenced;
      },
    });
    node.onRenewed = () => fence.renewed();
    fence.start();
    cleanups.push(async () => fence.stop());
    node.start();
    log.info({ address, kubeletPort: port, heapBytes, interpMops, fenceAfterMs }, 'node ready');
    let stopped: Promise<void> | undefined;
    const podManager = pods;
    return {
      nodeName, address, kubeletPort: port, interpMops, pods: podManager, node,
      drain: (timeoutMs = SELF_DRAIN_TIMEOUT_MS) => {
        if (node.holdsLease) events.record(nodeRef(), 'Normal', 'NodeNotSchedulable', `Node ${nodeName} status is now: NodeNotSchedulable`);
        return selfDrain(cp, node, podManager, log, timeoutMs);
      },
      stop() {
        stopped ??= (async () => {
          await node.stop({ ready: false });
          await events.flush();
          for (const c of cleanups.reverse()) await c().catch(() => {});
        })();
        return stopped;
      },
    };
  } catch (err: unknown) {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    throw err;
  }
}

