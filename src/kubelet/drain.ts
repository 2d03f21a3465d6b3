/**
 * The self-drain of a kube32-sim worker stopped with Ctrl-C or SIGTERM (seed "Drain and
 * evictions"): cordon the Node, annotate it `kube32.io/left: "true"`, evict every pod but
 * DaemonSet pods through the Eviction API (the control plane moves those that can move), and wait
 * up to 20 s for them to leave.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage, isApiError } from './client.ts';
import type { NodeAgent } from './node.ts';
import type { PodManager } from './pods.ts';

/** How long the worker waits for its pods to leave: 20 s (seed). */
export const SELF_DRAIN_TIMEOUT_MS = 20_000;

/** The outcome of a self-drain. */
export interface DrainReport {
  /** `namespace/name` of each pod an eviction was accepted for. */
  evicted: string[];
  /** `namespace/name` of each pod still on the node when the wait ended. */
  remaining: string[];
  /** Time the drain took, ms. */
  durationMs: number;
}

/** Whether a DaemonSet owns the pod (such pods are left alone, as `kubectl drain --ignore-daemonsets` does). */
export function isDaemonSetPod(pod: V1Pod): boolean {
  return (pod.metadata?.ownerReferences ?? []).some((o) => o.kind === 'DaemonSet' && o.controller !== false);
}

function key(p: V1Pod): string {
  return `${p.metadata?.namespace}/${p.metadata?.name}`;
}

function leaving(pods: PodManager): V1Pod[] {
  return pods.boundPods().filter((p) => !isDaemonSetPod(p) && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed');
}

/**
 * Drains the node; see the file's comment. A worker that does not hold the node's Lease (another
 * took it, or it cannot be read) changes nothing and reports every pod as remaining. Evictions refused with 429 (a disruption budget) are
 * retried every second until the deadline. Never throws: failures are logged and the pods they
 * concern are reported as remaining.
 * @param timeoutMs how long to wait for the pods to leave @default 20000
 */
export async function selfDrain(cp: ControlPlane, node: NodeAgent, pods: PodManager, log: Logger, timeoutMs = SELF_DRAIN_TIMEOUT_MS): Promise<DrainReport> {
  const started = Date.now();
  const deadline = started + timeoutMs;
  // Only the Lease's holder drains the node: a worker another one took the node from (its Lease names
  // another holder) would cordon that one's node and evict its pods. Unconfirmed (no answer): left alone too.
  const held = await node.confirmLease().catch((err: unknown) => {
    log.warn({ err: errorMessage(err) }, 'cannot read the node\'s Lease');
    return false;
  });
  if (!held) {
    const remaining = leaving(pods).map(key);
    log.error({ remaining }, 'this worker does not hold the node\'s Lease: not cordoning the node nor evicting its pods');
    return { evicted: [], remaining, durationMs: Date.now() - started };
  }
  try {
    await node.cordonAndMarkLeft();
    log.info('node cordoned and marked left');
  } catch (err: unknown) {
    log.warn({ err: errorMessage(err) }, 'cannot cordon the node');
  }
  const evicted: string[] = [];
  const todo = new Map(leaving(pods).filter((p) => !p.metadata?.deletionTimestamp).map((p) => [p.metadata?.uid ?? '', p]));
  while (todo.size > 0 && Date.now() < deadline) {
    for (const [uid, p] of todo) {
      const { name, namespace } = p.metadata ?? {};
      try {
        await cp.json('POST', `/api/v1/namespaces/${namespace}/pods/${encodeURIComponent(name ?? '')}/eviction`, {
          body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace }, deleteOptions: { preconditions: { uid } } },
        });
        evicted.push(key(p));
        todo.delete(uid);
        log.info({ pod: key(p) }, 'evicted');
      } catch (err: unknown) {
        if (isApiError(err, 404, 409)) todo.delete(uid); // gone or replaced already
        else if (!isApiError(err, 429)) {
          log.warn({ pod: key(p), err: errorMessage(err) }, 'eviction failed');
          todo.delete(uid);
        }
      }
    }
    if (todo.size > 0) await new Promise((r) => setTimeout(r, Math.min(1000, Math.max(0, deadline - Date.now()))));
  }
  // Wait for the pods to leave: moved (replaced, so no longer bound here) or deleted.
  while (leaving(pods).length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
  }
  const remaining = leaving(pods).map(key);
  const report = { evicted, remaining, durationMs: Date.now() - started };
  log.info(report, remaining.length ? 'self-drain ended with pods still on the node' : 'self-drain complete');
  return report;
}
