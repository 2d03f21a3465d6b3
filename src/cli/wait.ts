/** Waiting flags of kube32-cli, as kubectl writes them (`--timeout 2m`, `0` for no limit). */
import { parseTimerDuration } from '../lib/index.ts';
import { CliError } from './errors.ts';

/**
 * Parses a `--timeout` value: a Go duration (`30s`, `2m`, `1m30s`) up to 596h31m23.647s (Node's longest
 * timer), or `0` for no limit.
 * @returns milliseconds, 0 meaning no limit
 * @throws CliError naming the flag and the value when it is not a duration or is longer than that
 */
export function parseWaitTimeout(value: string, flag = '--timeout'): number {
  if (value.trim() === '0') return 0;
  try {
    return Math.ceil(parseTimerDuration(value));
  } catch (err: unknown) {
    throw new CliError(`invalid argument "${value}" for "${flag}" flag: ${(err as Error).message}`, 1, { cause: err });
  }
}
