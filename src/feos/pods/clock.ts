/**
 * Keeps a guest's clock (seed 000, "The guest"; ADR 0027): once a minute, four GetTime calls, the one
 * with the shortest round trip taken; the offset is the guest's time against the middle of that call on
 * the host's CLOCK_REALTIME. A measurement whose shortest round trip is over `maxRttMs` is dropped. The
 * offset goes to AdjustTime; a guest that answers UNIMPLEMENTED is set with SetTime when it is off by
 * more than 20 ms. Failures are logged at debug and tried again a minute later.
 */
import type { Logger } from '../../lib/index.ts';
import { errorMessage } from '../api/index.ts';
import { GrpcCode, GrpcError, type GuestClient } from '../guest/index.ts';

/** How often a guest's clock is measured (ms). */
export const CLOCK_PERIOD_MS = 60_000;
/** A step is needed beyond this offset when the guest cannot adjust (ns). */
export const SET_THRESHOLD_NS = 20_000_000n;

/** The host's CLOCK_REALTIME in ns, at Date's millisecond resolution. */
export function hostNowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

/** One measurement: the offset (guest − host, ns) and the shortest round trip (ms). */
export async function measureOffset(guest: GuestClient, samples = 4): Promise<{ offsetNs: bigint; rttMs: number }> {
  let best: { offsetNs: bigint; rttMs: number } | undefined;
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    const h0 = hostNowNs();
    const res = await guest.call('GetTime', {}, 5000);
    const rttMs = performance.now() - t0;
    const mid = h0 + BigInt(Math.round((rttMs * 1e6) / 2));
    if (!best || rttMs < best.rttMs) best = { offsetNs: res.unixNanos - mid, rttMs };
  }
  return best!;
}

/**
 * Measures once and corrects the guest's clock.
 * @returns what was done, for logs and tests
 */
export async function keepClockOnce(guest: GuestClient, maxRttMs: number): Promise<'adjusted' | 'set' | 'dropped' | 'in-sync'> {
  const { offsetNs, rttMs } = await measureOffset(guest);
  if (rttMs > maxRttMs) return 'dropped';
  try {
    await guest.call('AdjustTime', { offsetNanos: -offsetNs }, 5000);
    return 'adjusted';
  } catch (err: unknown) {
    if (!(err instanceof GrpcError) || err.code !== GrpcCode.UNIMPLEMENTED) throw err;
  }
  const abs = offsetNs < 0n ? -offsetNs : offsetNs;
  if (abs <= SET_THRESHOLD_NS) return 'in-sync';
  await guest.call('SetTime', { unixNanos: hostNowNs() }, 5000);
  return 'set';
}

/** Runs `keepClockOnce` for every running pod once a minute. */
export class ClockKeeper {
  readonly #timer: NodeJS.Timeout;
  constructor(running: () => Array<{ id: string; guest: GuestClient }>, maxRttMs: number, log: Logger) {
    this.#timer = setInterval(() => {
      for (const { id, guest } of running()) {
        keepClockOnce(guest, maxRttMs).then(
          (what) => log.debug({ id, what }, 'guest clock'),
          (err: unknown) => log.debug({ id, err: errorMessage(err) }, 'guest clock: measurement failed'),
        );
      }
    }, CLOCK_PERIOD_MS);
    this.#timer.unref();
  }
  stop(): void {
    clearInterval(this.#timer);
  }
}
