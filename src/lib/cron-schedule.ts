/**
 * Cron schedules as Kubernetes' CronJobs read them (`github.com/robfig/cron/v3`'s `ParseStandard`): five
 * fields (minute, hour, day of month, month, day of week; names such as `JAN` and `MON`, `*`, `?`, ranges,
 * lists, steps), the descriptors `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`,
 * `@hourly` and `@every <duration>`, and a leading `TZ=<zone>` or `CRON_TZ=<zone>`. The field arithmetic is
 * the `cron-parser` package's; this file keeps robfig's grammar (its field count, its descriptors, no `L`,
 * `W`, `#` or seconds field) and its messages where they differ.
 *
 * The API server (CronJob validation) and the CronJob controller (next schedule times) both use it.
 */
import { CronExpressionParser } from 'cron-parser';
import { parseDuration } from './duration.ts';

/** One parsed schedule. */
export interface CronSchedule {
  /**
   * The first activation strictly after `afterMs` (ms since the epoch; sub-second parts are dropped first,
   * as robfig's `Next` does), or undefined when there is none in the next years (`0 0 30 2 *`).
   */
  next(afterMs: number): number | undefined;
}

/** A schedule that does not parse; `message` is robfig's wording where Kube32 knows it. */
export class CronScheduleError extends Error {
  override readonly name = 'CronScheduleError';
}

const DESCRIPTORS: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

const MONTH_NAMES = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DOW_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

/** One robfig field: digits, names, `*`, `?`, ranges, lists and steps. */
const FIELD = /^[0-9A-Za-z*?/,-]+$/;

/**
 * Whether `name` is a time zone Go's `time.LoadLocation` would find in the IANA database (`Europe/Paris`,
 * `UTC`, `Etc/GMT+2`): Node's ICU knows the zone, and it is not a bare offset (`+01:00`), which Go refuses.
 * `Local` is a zone here; CronJob validation refuses it on its own.
 */
export function isTimeZone(name: string): boolean {
  if (name === '' || name.includes(':') || /^[+-]/.test(name)) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/**
 * Parses a cron schedule (Kubernetes' `cron.ParseStandard`).
 * @param spec the schedule, e.g. `*∕5 * * * *`, `@hourly`, `@every 90s`, `TZ=Europe/Paris 0 9 * * *`
 * @param timeZone the zone its fields are read in (a CronJob's `spec.timeZone`), IANA; a `TZ=` prefix wins
 * @default timeZone UTC
 * @throws CronScheduleError naming the problem (`expected exactly 5 fields, found 6: [...]`,
 *   `unrecognized descriptor: @often`, `provided bad location Mars/Olympus: unknown time zone Mars/Olympus`)
 * @example parseCronSchedule('*∕1 * * * *').next(Date.parse('2026-01-01T00:00:30Z')) // 2026-01-01T00:01:00Z
 */
export function parseCronSchedule(spec: string, timeZone = 'UTC'): CronSchedule {
  let text = spec.trim();
  if (text === '') throw new CronScheduleError('empty spec string');
  let tz = timeZone;
  if (text.startsWith('TZ=') || text.startsWith('CRON_TZ=')) {
    const space = text.indexOf(' ');
    const zone = text.slice(text.indexOf('=') + 1, space < 0 ? undefined : space);
    if (!isTimeZone(zone)) throw new CronScheduleError(`provided bad location ${zone}: unknown time zone ${zone}`);
    tz = zone;
    text = space < 0 ? '' : text.slice(space).trim();
  }
  if (!isTimeZone(tz)) throw new CronScheduleError(`provided bad location ${tz}: unknown time zone ${tz}`);
  if (text.startsWith('@every ')) return everySchedule(text);
  if (text.startsWith('@')) {
    const fields = DESCRIPTORS[text];
    if (!fields) throw new CronScheduleError(`unrecognized descriptor: ${text}`);
    text = fields;
  }
  const fields = text.split(/\s+/).filter((f) => f !== '');
  if (fields.length !== 5) throw new CronScheduleError(`expected exactly 5 fields, found ${fields.length}: [${fields.join(' ')}]`);
  fields.forEach((f, i) => {
    // Names only where robfig has them (months, days of the week); anything else must be a number.
    const names = i === 3 ? MONTH_NAMES : i === 4 ? DOW_NAMES : [];
    const bad = FIELD.test(f) ? f.split(/[,/-]/).find((p) => p !== '*' && p !== '?' && !/^\d+$/.test(p) && !names.includes(p.toLowerCase())) : f;
    if (bad !== undefined) throw new CronScheduleError(`failed to parse int from ${bad}: strconv.Atoi: parsing "${bad}": invalid syntax`);
  });
  for (const [i, f] of fields.entries()) checkRanges(f, BOUNDS[i]!, i === 3 ? MONTH_NAMES : i === 4 ? DOW_NAMES : []);
  const expr = fields.map((f) => f.replaceAll('?', '*')).join(' ');
  try {
    // Checked once here, so that a spec that cannot parse is refused at once rather than at first use.
    CronExpressionParser.parse(expr, { currentDate: new Date(0), tz });
  } catch (err: unknown) {
    throw new CronScheduleError(err instanceof Error ? err.message : String(err));
  }
  return {
    next(afterMs: number): number | undefined {
      const from = Math.floor(afterMs / 1000) * 1000;
      try {
        const it = CronExpressionParser.parse(expr, { currentDate: new Date(from), tz });
        const t = it.next().getTime();
        // robfig gives up after five years and answers the zero time.
        return t > from && t - from <= 5 * 366 * 86_400_000 ? t : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

/** Each field's bounds, as robfig's (day of week 0-6: no 7). */
const BOUNDS: readonly (readonly [number, number])[] = [
  [0, 59],
  [0, 23],
  [1, 31],
  [1, 12],
  [0, 6],
];

/** robfig's `getRange` checks of each comma-separated part of a field, with its messages. */
function checkRanges(field: string, [min, max]: readonly [number, number], names: readonly string[]): void {
  const value = (t: string) => (/^\d+$/.test(t) ? Number(t) : names.indexOf(t.toLowerCase()) + (names.length === 12 ? 1 : 0));
  for (const part of field.split(',')) {
    const slash = part.split('/');
    if (slash.length > 2) throw new CronScheduleError(`too many slashes: ${part}`);
    const hyphen = slash[0]!.split('-');
    if (hyphen.length > 2) throw new CronScheduleError(`too many hyphens: ${part}`);
    const all = hyphen[0] === '*' || hyphen[0] === '?';
    const start = all ? min : value(hyphen[0]!);
    const end = all ? max : hyphen.length === 2 ? value(hyphen[1]!) : slash.length === 2 ? max : start;
    if (start < min) throw new CronScheduleError(`beginning of range (${start}) below minimum (${min}): ${part}`);
    if (end > max) throw new CronScheduleError(`end of range (${end}) above maximum (${max}): ${part}`);
    if (start > end) throw new CronScheduleError(`beginning of range (${start}) beyond end of range (${end}): ${part}`);
    if (slash.length === 2 && Number(slash[1]) === 0) throw new CronScheduleError(`step of range should be a positive number: ${part}`);
  }
}

/** `@every <duration>`: robfig's ConstantDelaySchedule (at least 1 s, whole seconds, from the last run). */
function everySchedule(text: string): CronSchedule {
  const d = text.slice('@every '.length).trim();
  let ms: number;
  try {
    // Go's time.ParseDuration takes a sign; robfig then raises anything under a second to one (`@every -5s`: 1 s).
    const sign = /^[-+]/.exec(d)?.[0];
    ms = parseDuration(sign ? d.slice(1) : d) * (sign === '-' ? -1 : 1);
  } catch {
    throw new CronScheduleError(`failed to parse duration ${text}: time: invalid duration "${d}"`);
  }
  const delay = Math.max(1000, Math.floor(ms / 1000) * 1000);
  return { next: (afterMs) => Math.floor(afterMs / 1000) * 1000 + delay };
}
