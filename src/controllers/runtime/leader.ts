/**
 * Leader election over a `coordination.k8s.io/v1` Lease, as kube-controller-manager does it, for control
 * planes that run the controllers in more than one process (several API servers on etcd): only the holder
 * of the Lease `kube-system/kube32-controllers` runs the workers; the others keep their caches warm and
 * wait.
 *
 * - A Lease is free when it does not exist, names no holder, or has not changed for `leaseDurationMs` by
 *   this process's own clock (the time it saw the record change, never the holder's timestamps).
 * - Taking it and renewing it are optimistic updates (`resourceVersion`): of two candidates one wins, the
 *   other gets 409 and waits.
 * - The leader renews every `retryPeriodMs`; when no renewal has succeeded for `renewDeadlineMs` it has
 *   lost the Lease and must stop acting (`onLost`).
 * - `release()` on a clean stop empties the holder so that a successor need not wait out the duration.
 */
import type { TimerClock } from '../../lib/index.ts';
import type { ControllerLog } from './controller.ts';
import { errorMessage, isAlreadyExists, isConflict, isNotFound, type RestClient } from '../../api/index.ts';

/** Options of {@link LeaderElector}. */
export interface LeaderElectionOptions {
  /** This candidate's name, unique among candidates. @default `<hostname>_<pid>_<random>` */
  identity: string;
  /** @default 'kube-system' */
  namespace?: string;
  /** @default 'kube32-controllers' */
  name?: string;
  /** How long a Lease holds without renewal. @default 15000 */
  leaseDurationMs?: number;
  /** How long the leader keeps acting without a successful renewal. @default 10000 */
  renewDeadlineMs?: number;
  /** Between two tries (to take or renew). @default 2000 */
  retryPeriodMs?: number;
}

interface LeaseObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; acquireTime?: string; renewTime?: string; leaseTransitions?: number };
}

/** `metav1.MicroTime`: RFC 3339 with microseconds. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** One candidate for the controllers' Lease. */
export class LeaderElector {
  readonly identity: string;
  readonly #rest: RestClient;
  readonly #clock: TimerClock;
  readonly #log: ControllerLog;
  readonly #path: string;
  readonly #ns: string;
  readonly #name: string;
  readonly #durationMs: number;
  readonly #deadlineMs: number;
  readonly #retryMs: number;
  #observed = '';
  #observedAt = 0;
  #lastRenew = 0;
  #leading = false;
  #timer: unknown;
  #wake: (() => void) | undefined;
  #stopped = false;
  /** The try to take or renew the Lease that is running, if any: {@link stop} waits for it before releasing. */
  #inflight: Promise<boolean> | undefined;

  /** @throws RangeError when the timings are not `retryPeriod < renewDeadline < leaseDuration` */
  constructor(rest: RestClient, clock: TimerClock, log: ControllerLog, opts: LeaderElectionOptions) {
    this.identity = opts.identity;
    this.#rest = rest;
    this.#clock = clock;
    this.#log = log;
    this.#ns = opts.namespace ?? 'kube-system';
    this.#name = opts.name ?? 'kube32-controllers';
    this.#path = `/apis/coordination.k8s.io/v1/namespaces/${this.#ns}/leases`;
    this.#durationMs = opts.leaseDurationMs ?? 15_000;
    this.#deadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.#retryMs = opts.retryPeriodMs ?? 2_000;
    if (!(this.#retryMs > 0 && this.#retryMs < this.#deadlineMs && this.#deadlineMs < this.#durationMs)) {
      throw new RangeError(
        `leader election: retryPeriodMs (${this.#retryMs}) < renewDeadlineMs (${this.#deadlineMs}) < leaseDurationMs (${this.#durationMs}) must hold`,
      );
    }
  }

  /** Whether this candidate holds the Lease now. */
  get leading(): boolean {
    return this.#leading;
  }

  /** One try to take or renew the Lease. @returns whether this candidate holds it now */
  async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.#clock.now();
    let lease: LeaseObject | undefined;
    try {
      lease = await this.#rest.json<LeaseObject>({ method: 'GET', path: `${this.#path}/${this.#name}` });
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
    }
    const spec = {
      holderIdentity: this.identity,
      leaseDurationSeconds: Math.ceil(this.#durationMs / 1000),
      acquireTime: microTime(now),
      renewTime: microTime(now),
      leaseTransitions: 0,
    };
    if (!lease) {
      try {
        await this.#rest.json({
          method: 'POST',
          path: this.#path,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.#name, namespace: this.#ns }, spec },
        });
      } catch (err: unknown) {
        if (isAlreadyExists(err) || isConflict(err)) return false;
        throw err;
      }
      return true;
    }
    const held = lease.spec?.holderIdentity ?? '';
    const record = JSON.stringify(lease.spec ?? {});
    if (record !== this.#observed) {
      this.#observed = record;
      this.#observedAt = now;
    }
    const mine = held === this.identity;
    if (!mine && held !== '' && this.#observedAt + this.#durationMs > now) return false; // someone else holds it
    const transitions = lease.spec?.leaseTransitions ?? 0;
    const next = mine
      ? { ...lease.spec, holderIdentity: this.identity, leaseDurationSeconds: spec.leaseDurationSeconds, renewTime: spec.renewTime }
      : { ...spec, leaseTransitions: transitions + 1 };
    try {
      await this.#rest.json({
        method: 'PUT',
        path: `${this.#path}/${this.#name}`,
        body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { ...lease.metadata }, spec: next },
      });
    } catch (err: unknown) {
      if (isConflict(err) || isNotFound(err)) return false;
      throw err;
    }
    return true;
  }

  /**
   * Waits until this candidate holds the Lease (trying every `retryPeriodMs`), then renews it until
   * {@link stop}. Resolves once leading, or once stopped before (then {@link leading} is false).
   */
  async run(onLost: () => void): Promise<void> {
    for (;;) {
      if (this.#stopped) return;
      const ok = await this.#track(this.tryAcquireOrRenew().catch((err: unknown) => {
        this.#log.warn({ err: errorMessage(err) }, 'leader election: cannot reach the Lease');
        return false;
      }));
      // Stopped while taking it: stop() releases a Lease this try took.
      if (this.#stopped) return;
      if (ok) break;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        this.#timer = this.#clock.setTimer(resolve, this.#retryMs);
      });
      this.#wake = undefined;
    }
    this.#leading = true;
    this.#lastRenew = this.#clock.now();
    this.#log.info({ identity: this.identity, lease: `${this.#ns}/${this.#name}` }, 'leader election: leading');
    const renew = async () => {
      if (this.#stopped) return;
      const ok = await this.#track(this.tryAcquireOrRenew().catch(() => false));
      if (this.#stopped) return;
      const now = this.#clock.now();
      if (ok) this.#lastRenew = now;
      else if (now - this.#lastRenew >= this.#deadlineMs) {
        this.#leading = false;
        this.#log.error({ identity: this.identity }, 'leader election: lost the Lease');
        onLost();
        return;
      }
      this.#timer = this.#clock.setTimer(() => void renew(), this.#retryMs);
    };
    this.#timer = this.#clock.setTimer(() => void renew(), this.#retryMs);
  }

  /** Remembers `attempt` as the try in flight until it settles. */
  #track(attempt: Promise<boolean>): Promise<boolean> {
    this.#inflight = attempt;
    return attempt.finally(() => {
      if (this.#inflight === attempt) this.#inflight = undefined;
    });
  }

  /**
   * Stops trying; a Lease this candidate holds is released (empty holder, duration 1 s) so that a successor
   * takes it at once. It first waits for a try in flight: a renewal (or a take) that lands after the release's
   * read made the release a 409, the Lease stayed held, and the successor waited out the whole duration.
   * A release that meets a 409 reads the Lease again (up to 5 times). Never throws: a release that cannot be
   * written is logged, and the successor takes the Lease once it expires.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clock.clearTimer(this.#timer);
    this.#wake?.();
    const attempt = this.#inflight;
    if (attempt) await attempt.catch(() => false);
    const wasLeading = this.#leading;
    this.#leading = false;
    if (!wasLeading && !attempt) return;
    for (let i = 0; i < 5; i++) {
      try {
        const lease = await this.#rest.json<LeaseObject>({ method: 'GET', path: `${this.#path}/${this.#name}` });
        if (lease.spec?.holderIdentity !== this.identity) return;
        await this.#rest.json({
          method: 'PUT',
          path: `${this.#path}/${this.#name}`,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { ...lease.metadata }, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 } },
        });
        return;
      } catch (err: unknown) {
        if (isNotFound(err)) return;
        if (isConflict(err) && i < 4) continue;
        this.#log.warn({ err: errorMessage(err) }, 'leader election: cannot release the Lease');
        return;
      }
    }
  }
}
