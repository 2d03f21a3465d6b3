/**
 * Channel messages between pods (pod-abi.md `kube32_channel_open` / `k32_channel_send`; seed "What
 * moves": channels and held events). A message a pod sends on a topic goes to every pod of its
 * namespace subscribed to that topic (annotation `kube32.io/topics`), cluster-wide: to this node's
 * pods directly, and to every other node through the control plane's node proxy
 * (`POST /api/v1/nodes/<node>/proxy/publish/<ns>/<topic>`), in order per node.
 */
import type { V1Node } from '@kubernetes/client-node';
import { Informer, readText } from '../api/index.ts';
import type { Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage } from './client.ts';
import type { PodManager } from './pods.ts';

/** Messages waiting for one node before newer ones are dropped: 1000. */
export const MAX_PENDING_PER_NODE = 1000;

/** Routes channel messages; see the file's comment. */
export class ChannelRouter {
  readonly #cp: ControlPlane;
  readonly #nodeName: string;
  readonly #pods: () => PodManager | undefined;
  readonly #log: Logger;
  readonly #queues = new Map<string, { tail: Promise<void>; pending: number; failing: boolean }>();
  #nodes: Informer<V1Node> | undefined;
  /** Messages dropped because a node's queue was full. */
  dropped = 0;
  /** Messages a node did not take (refused or unreachable). */
  lost = 0;

  constructor(cp: ControlPlane, nodeName: string, pods: () => PodManager | undefined, log: Logger) {
    this.#cp = cp;
    this.#nodeName = nodeName;
    this.#pods = pods;
    this.#log = log;
  }

  /** Starts watching the cluster's nodes (the fan-out list). */
  async start(): Promise<void> {
    // Retries back off (0.5 s doubling to 10 s) while the API server is away, back to 0.5 s once a list
    // succeeds: at a fixed 2 s the warning came every 2 s for as long as the control plane was down.
    const nodes = new Informer<V1Node>({
      rest: this.#cp.rest,
      path: '/api/v1/nodes',
      resource: 'nodes',
      log: this.#log,
      backoff: { initialMs: 500, maxMs: 10_000 },
      retryMessage: 'node watch failed (channel fan-out); retrying',
    });
    this.#nodes = nodes;
    await nodes.start();
  }

  /** Stops the node watch. */
  async stop(): Promise<void> {
    await this.#nodes?.stop();
  }

  /** Delivers a message to this node's pods of `namespace` subscribed to `topic`; answers how many. */
  deliver(namespace: string, topic: string, payload: Uint8Array): number {
    let n = 0;
    for (const w of this.#pods()?.workers.values() ?? []) {
      if (w.pod.metadata?.namespace !== namespace || !w.topics.includes(topic)) continue;
      for (const r of w.runners) {
        if (!r.instance) continue;
        r.instance.event(topic, payload);
        n++;
      }
    }
    return n;
  }

  /** Publishes a message a local pod sent: here at once, and to every other node through the control plane. */
  publish(namespace: string, topic: string, payload: Uint8Array): void {
    this.deliver(namespace, topic, payload);
    for (const node of this.#nodes?.list() ?? []) {
      const name = node.metadata?.name;
      if (!name || name === this.#nodeName) continue;
      let q = this.#queues.get(name);
      if (!q) {
        q = { tail: Promise.resolve(), pending: 0, failing: false };
        this.#queues.set(name, q);
      }
      if (q.pending >= MAX_PENDING_PER_NODE) {
        this.dropped++;
        continue;
      }
      q.pending++;
      const queue = q;
      const path = `/api/v1/nodes/${encodeURIComponent(name)}/proxy/publish/${encodeURIComponent(namespace)}/${encodeURIComponent(topic)}`;
      q.tail = q.tail.then(async () => {
        // A node that keeps failing is logged once, when it starts to fail, and once when it recovers.
        let failure: string | undefined;
        try {
          const res = await this.#cp.request('POST', path, { body: payload, contentType: 'application/octet-stream' });
          const text = await readText(res.body);
          if (res.status >= 300) failure = `${res.status}: ${text.slice(0, 300)}`;
        } catch (err: unknown) {
          failure = errorMessage(err);
        } finally {
          if (failure !== undefined) {
            this.lost++;
            if (!queue.failing) this.#log.warn({ node: name, topic, err: failure }, 'channel messages to this node fail (logged once until it recovers)');
          } else if (queue.failing) {
            this.#log.info({ node: name }, 'channel messages to this node go through again');
          }
          queue.failing = failure !== undefined;
          queue.pending--;
        }
      });
    }
  }
}
