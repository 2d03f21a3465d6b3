/**
 * The check of a duration flag (`--pod-eviction-timeout 5m`, `--move-timeout 60s`): Go's duration
 * syntax (lib's parseDuration), positive. Light, so that `up` checks the flags it passes to the control
 * plane before it starts anything.
 */
import { parseDuration } from '../lib/index.ts';
import { CliError } from './errors.ts';

/**
 * A positive duration flag in milliseconds.
 * @param flag the flag's name without its dashes (`pod-eviction-timeout`)
 * @throws CliError naming the flag, for a value that does not parse or is not positive
 */
export function durationFlagMs(flag: string, text: string): number {
  try {
    const ms = parseDuration(text);
    if (ms <= 0) throw new RangeError('must be positive');
    return ms;
  } catch (err: unknown) {
    throw new CliError(`--${flag}: ${err instanceof Error ? err.message : String(err)}`);
  }
}
