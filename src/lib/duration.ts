/**
 * Durations as Kubernetes and the seeds write them: `500ms`, `10s`, `1m30s`, `2h`, `1.5s`.
 * Units: ns, us (µs), ms, s, m, h. A bare number is refused: the unit is always required.
 */

import { MAX_TIMER_DELAY_MS } from './workqueue.ts';

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PART = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;

/**
 * Parses a duration such as `"60s"` or `"1m30s"` into milliseconds.
 * @param text the duration, as Go's `time.ParseDuration` writes it (no sign)
 * @returns milliseconds (may be fractional for sub-millisecond units)
 * @throws RangeError naming the text when it is not a duration
 * @example parseDuration('1m30s') // 90000
 */
export function parseDuration(text: string): number {
  const s = text.trim();
  if (s === '') throw new RangeError(`invalid duration "${text}": empty`);
  let ms = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < s.length) {
    const at = PART.lastIndex;
    const m = PART.exec(s);
    if (!m || m.index !== at) {
      throw new RangeError(`invalid duration "${text}": expected a number and a unit (ns, us, ms, s, m, h), as in "500ms" or "1m30s"`);
    }
    ms += Number(m[1]) * UNIT_MS[m[2]!]!;
  }
  return ms;
}

/**
 * Formats milliseconds the way kubectl prints ages: `45s`, `12m`, `3h`, `2d`, with two units below
 * a threshold as kubectl's `HumanDuration` does (`2m30s`, `5h10m`).
 * @param ms a duration in milliseconds; negative values print as `0s`
 */
export function humanDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  if (d < 8) return h % 24 === 0 ? `${d}d` : `${d}d${h % 24}h`;
  if (d < 365 * 2) return `${d}d`;
  return `${Math.floor(d / 365)}y`;
}

/**
 * Parses a duration a timer will wait (a wait's timeout, a tick interval): as parseDuration, and no
 * longer than MAX_TIMER_DELAY_MS (2^31 - 1 ms, Node's longest timer), since a longer one would fire after 1 ms.
 * @returns milliseconds (may be fractional)
 * @throws RangeError naming the text when it is not a duration or is longer than 596h31m23.647s
 */
export function parseTimerDuration(text: string): number {
  const ms = parseDuration(text);
  if (ms > MAX_TIMER_DELAY_MS) throw new RangeError(`duration "${text.trim()}" is too long: at most 596h31m23.647s (${MAX_TIMER_DELAY_MS} ms)`);
  return ms;
}
