/**
 * The events a kubelet records, as `kubectl describe` shows them (core/v1 Events, source
 * `kubelet` on the node): `Pulling`, `Pulled`, `Created`, `Started`, `Killing`, `BackOff`,
 * `Failed` for pods, and `Restored` instead of `Created` and `Started` for a container restored from a
 * Checkpoint (naming it and the node it was taken on); `Starting`, `NodeReady`, `NodeHasInsufficientMemory`,
 * `NodeHasSufficientMemory` for the node. A repeat of the same event within 10 minutes raises the
 * first one's `count`, as Kubernetes' event correlator does. Recording never throws and never
 * blocks the caller.
 */
import type { V1ObjectReference } from '@kubernetes/client-node';
import type { Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage } from './client.ts';

/** How long a repeated event is folded into the first one: 10 min. */
export const EVENT_AGGREGATION_MS = 600_000;

/** Records events for one node's kubelet. */
export class EventRecorder {
  readonly #cp: ControlPlane;
  readonly #node: string;
  readonly #log: Logger;
  #sequence = 0;
  readonly #seen = new Map<string, { name: string; namespace: string; count: number; first: number; firstTimestamp: string }>();
  #tail: Promise<void> = Promise.resolve();

  constructor(cp: ControlPlane, nodeName: string, log: Logger) {
    this.#cp = cp;
    this.#node = nodeName;
    this.#log = log;
  }

  /**
   * Records one event about `object` (a Pod, with `fieldPath` for a container, or the Node).
   * @param type `Normal` or `Warning`
   */
  record(object: V1ObjectReference, type: 'Normal' | 'Warning', reason: string, message: string): void {
    this.#tail = this.#tail.then(() => this.#send(object, type, reason, message)).catch((err: unknown) => {
      this.#log.debug({ err: errorMessage(err), reason }, 'event not recorded');
    });
  }

  /** Resolves once the events recorded so far were sent (or failed). */
  flush(): Promise<void> {
    return this.#tail;
  }

  async #send(object: V1ObjectReference, type: string, reason: string, message: string): Promise<void> {
    const namespace = object.namespace || 'default';
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const key = `${object.uid}/${object.fieldPath ?? ''}/${type}/${reason}/${message}`;
    const prev = this.#seen.get(key);
    if (prev && Date.now() - prev.first < EVENT_AGGREGATION_MS) {
      prev.count++;
      await this.#cp.json('PATCH', `/api/v1/namespaces/${prev.namespace}/events/${prev.name}`, {
        body: { count: prev.count, lastTimestamp: now }, contentType: 'application/merge-patch+json',
      });
      return;
    }
    if (this.#seen.size > 2000) this.#seen.clear();
    // Names sort by time, as the controllers' do (the milliseconds in hex, then a sequence): kubectl
    // lists events of the same second in name order, so a random suffix would shuffle them.
    const name = `${object.name}.${Date.now().toString(16)}${(++this.#sequence).toString(16).padStart(4, '0')}`;
    await this.#cp.json('POST', `/api/v1/namespaces/${namespace}/events`, {
      body: {
        apiVersion: 'v1', kind: 'Event', metadata: { name, namespace },
        involvedObject: object, reason, message, type, count: 1, firstTimestamp: now, lastTimestamp: now,
        source: { component: 'kubelet', host: this.#node }, reportingComponent: 'kubelet', reportingInstance: this.#node,
      },
    });
    this.#seen.set(key, { name, namespace, count: 1, first: Date.now(), firstTimestamp: now });
  }
}
