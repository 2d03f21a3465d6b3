/**
 * The node's fence (issue 26, "Node loss without the five-minute wait"): a kube32-sim worker that has not
 * renewed its Lease for `fenceAfterMs` (the control plane's node monitor grace period, 40 s by default)
 * stops its pods running itself, so that the node lifecycle controller may restore them elsewhere from
 * their periodic checkpoints soon after (5 s after the node turned Unknown) and a pod never runs twice.
 *
 * - **Fence.** Each container is frozen (a call still running gets 2 s to return; past that, or for a
 *   pod that cannot freeze, the pod is stopped). A frozen pod takes no calls: its requests are held, and
 *   answered 503 with `Retry-After: 1` past the hold's bounds (pod-ports.ts).
 * - **Unfence.** Once a renewal succeeds again, and the Node no longer carries the controller's
 *   `node.kubernetes.io/unreachable` taint (the controller removes it in the reconcile that sees the
 *   renewal, after any restore it decided before: so a pod it restored elsewhere is already replaced
 *   when the taint is gone), each fenced pod still bound here with the same uid is thawed and runs on
 *   where it stopped. A pod replaced meanwhile stays frozen until the pod watch tells the node it left
 *   (its port then forwards to the replacement). A pod that was stopped starts afresh if still bound.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../lib/index.ts';
import { type ControlPlane, errorMessage } from './client.ts';
import type { PodManager } from './pods.ts';

/** How long a running call may take to return when the node fences its pods, ms. */
export const FENCE_FREEZE_TIMEOUT_MS = 2000;
/** How often the fence looks at the time since the last renewal, ms. */
const CHECK_MS = 1000;
/** The controller's taint of a node it cannot hear from. */
const UNREACHABLE = 'node.kubernetes.io/unreachable';

/** Options of {@link NodeFence}. */
export interface NodeFenceOptions {
  cp: ControlPlane;
  nodeName: string;
  pods: PodManager;
  log: Logger;
  /** Fence once the Lease has not been renewed for this long, ms; 0: never. */
  fenceAfterMs: number;
  /** When the Lease was last renewed, ms since the epoch. */
  lastRenewedAt(): number;
  /** Told when the node fences its pods (true) and when it lets them run again (false). */
  onChange(fenced: boolean): void;
}

/** See the file's comment. */
export class NodeFence {
  readonly #o: NodeFenceOptions;
  #timer: NodeJS.Timeout | undefined;
  /** Uids of the pods fenced, with the containers frozen. */
  #fenced: Map<string, string[]> | undefined;
  #unfencing = false;

  constructor(opts: NodeFenceOptions) {
    this.#o = opts;
  }

  /** True while the node's pods are fenced. */
  get fenced(): boolean {
    return this.#fenced !== undefined;
  }

  /** Starts watching the renewals (nothing when `fenceAfterMs` is 0). */
  start(): void {
    if (this.#o.fenceAfterMs <= 0) return;
    this.#timer = setInterval(() => this.#check(), CHECK_MS);
    this.#timer.unref();
  }

  /** Stops watching. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** A renewal succeeded: unfence when the controller agrees (see the file's comment). */
  renewed(): void {
    if (this.#fenced && !this.#unfencing) void this.#unfence();
  }

  #check(): void {
    if (this.#fenced || Date.now() - this.#o.lastRenewedAt() < this.#o.fenceAfterMs) return;
    void this.#fence();
  }

  async #fence(): Promise<void> {
    const fenced = new Map<string, string[]>();
    this.#fenced = fenced;
    this.#o.onChange(true);
    const { log } = this.#o;
    log.warn({ silentMs: Date.now() - this.#o.lastRenewedAt(), fenceAfterMs: this.#o.fenceAfterMs }, 'the node could not renew its Lease for the grace period: fencing its pods (frozen until the control plane answers)');
    await Promise.all([...this.#o.pods.workers.values()].map(async (w) => {
      const frozen: string[] = [];
      for (const r of w.runners) {
        const inst = r.instance;
        if (!inst || inst.exit || inst.frozen) continue;
        try {
          await inst.freeze(FENCE_FREEZE_TIMEOUT_MS);
          frozen.push(r.spec.name);
        } catch (err: unknown) {
          log.warn({ pod: w.uid, container: r.spec.name, err: errorMessage(err) }, 'cannot freeze the pod to fence it: stopping it');
          this.#o.pods.fenceStop(w.uid);
          return;
        }
      }
      fenced.set(w.uid, frozen);
    }));
  }

  async #unfence(): Promise<void> {
    this.#unfencing = true;
    const { cp, nodeName, log } = this.#o;
    try {
      const node = await cp.json<V1Node>('GET', `/api/v1/nodes/${encodeURIComponent(nodeName)}`);
      if ((node.spec?.taints ?? []).some((t) => t.key === UNREACHABLE)) return; // the next renewal looks again
      const fenced = this.#fenced ?? new Map<string, string[]>();
      for (const [uid, containers] of fenced) {
        const w = this.#o.pods.workers.get(uid);
        if (!w) continue;
        const ns = w.pod.metadata?.namespace ?? 'default';
        const name = w.pod.metadata?.name ?? '';
        const now = await cp.json<V1Pod>('GET', `/api/v1/namespaces/${ns}/pods/${encodeURIComponent(name)}`).catch(() => undefined);
        if (now?.metadata?.uid !== uid || now.spec?.nodeName !== nodeName) continue; // replaced: the pod watch stops it
        for (const c of containers) await w.container(c)?.instance?.thaw().catch(() => {});
      }
      this.#fenced = undefined;
      this.#o.onChange(false);
      log.info({ pods: fenced.size }, 'the control plane answers again: fenced pods still bound here run on');
    } catch (err: unknown) {
      log.debug({ err: errorMessage(err) }, 'cannot unfence yet');
    } finally {
      this.#unfencing = false;
    }
  }
}
