/**
 * The schedule arithmetic of Kubernetes' CronJob controller (`pkg/controller/cronjob/utils.go` in 1.32:
 * `mostRecentScheduleTime`, `nextScheduleTime`, `nextScheduleTimeDuration`, `getJobName`), pure functions of
 * a CronJob, a parsed schedule and the observer's `now` (ms since the epoch), so that tests run them on a
 * fake clock.
 */
import type { V1CronJob } from '@kubernetes/client-node';
import type { CronSchedule } from '../../lib/index.ts';

/** Added to every requeue at the next schedule time, as Kubernetes' `nextScheduleDelta` (clock skew). */
export const NEXT_SCHEDULE_DELTA_MS = 100;

/** More missed start times than this: `TooManyMissedTimes`, and only the latest is started. */
export const MAX_MISSED_SCHEDULES = 100;

/** How many start times were missed since the earliest time considered. */
export type MissedSchedules = 'none' | 'few' | 'many';

/** What {@link mostRecentScheduleTime} finds. */
export interface RecentSchedule {
  /** The time from which schedule times are counted (ms): the last schedule, else the creation, or the deadline. */
  earliestMs: number;
  /** The latest schedule time at or before `now` and after `earliestMs` (ms), if any. */
  mostRecentMs?: number;
  missed: MissedSchedules;
  /** Set when the schedule cannot give two distinct times in a row (`0 0 30 2 *`). */
  error?: string;
}

const timeMs = (t: unknown): number | undefined => {
  if (t === undefined || t === null) return undefined;
  const ms = t instanceof Date ? t.getTime() : Date.parse(String(t));
  return Number.isNaN(ms) ? undefined : ms;
};

/**
 * Kubernetes' `mostRecentScheduleTime`: the latest unmet schedule time of `cj` at `nowMs`, counting from its
 * `status.lastScheduleTime`, else its creation, and with `includeDeadline`, no earlier than `now −
 * startingDeadlineSeconds`. The count of missed times is Kubernetes' approximation (elapsed time over the
 * period between the next two times).
 */
export function mostRecentScheduleTime(cj: V1CronJob, nowMs: number, schedule: CronSchedule, includeDeadline: boolean): RecentSchedule {
  let earliestMs = timeMs(cj.status?.lastScheduleTime) ?? timeMs(cj.metadata?.creationTimestamp) ?? nowMs;
  const deadline = cj.spec?.startingDeadlineSeconds;
  if (includeDeadline && typeof deadline === 'number') {
    const schedulingDeadline = nowMs - deadline * 1000;
    if (schedulingDeadline > earliestMs) earliestMs = schedulingDeadline;
  }
  const t1 = schedule.next(earliestMs);
  if (t1 === undefined || nowMs < t1) return { earliestMs, missed: 'none' };
  const t2 = schedule.next(t1);
  if (t2 === undefined || nowMs < t2) return { earliestMs, mostRecentMs: t1, missed: 'none' };
  const between = Math.round((t2 - t1) / 1000);
  if (between < 1) return { earliestMs, missed: 'none', error: 'time difference between two schedules is less than 1 second' };
  const elapsed = Math.trunc((nowMs - t1) / 1000);
  const missedCount = Math.trunc(elapsed / between) + 1;
  let mostRecentMs: number | undefined;
  const potentialEarliest = t1 + (missedCount - 2) * between * 1000;
  for (let t = schedule.next(potentialEarliest); t !== undefined && t <= nowMs; t = schedule.next(t)) mostRecentMs = t;
  const missed: MissedSchedules = missedCount > MAX_MISSED_SCHEDULES ? 'many' : missedCount > 0 ? 'few' : 'none';
  return mostRecentMs === undefined ? { earliestMs, missed } : { earliestMs, mostRecentMs, missed };
}

/**
 * Kubernetes' `nextScheduleTime`: the schedule time to start a Job for now, if one is due (counting the
 * starting deadline); `missed: 'many'` asks the caller for the `TooManyMissedTimes` event.
 */
export function nextScheduleTime(cj: V1CronJob, nowMs: number, schedule: CronSchedule): { scheduledMs?: number; missed: MissedSchedules; error?: string } {
  const r = mostRecentScheduleTime(cj, nowMs, schedule, true);
  if (r.mostRecentMs === undefined || r.mostRecentMs > nowMs) return { missed: r.missed, ...(r.error ? { error: r.error } : {}) };
  return { scheduledMs: r.mostRecentMs, missed: r.missed };
}

/**
 * Kubernetes' `nextScheduleTimeDuration`: ms from `nowMs` until the next schedule time after the most recent
 * one (or after now, when times were missed or the schedule is broken), plus {@link NEXT_SCHEDULE_DELTA_MS};
 * undefined when the schedule has no next time.
 */
export function nextScheduleDelayMs(cj: V1CronJob, nowMs: number, schedule: CronSchedule): number | undefined {
  const r = mostRecentScheduleTime(cj, nowMs, schedule, false);
  let from: number;
  if (r.error !== undefined) from = nowMs;
  else if (r.mostRecentMs === undefined) from = r.missed === 'none' ? r.earliestMs : nowMs;
  else from = r.mostRecentMs;
  const next = schedule.next(from);
  return next === undefined ? undefined : next + NEXT_SCHEDULE_DELTA_MS - nowMs;
}

/** The name of the Job for a schedule time: `<cronjob>-<minutes since the epoch>` (Kubernetes' `getJobName`). */
export function jobNameFor(cronJobName: string, scheduledMs: number): string {
  return `${cronJobName}-${Math.floor(scheduledMs / 60_000)}`;
}

/**
 * `ms` as Go's `time.RFC3339` in the zone `timeZone` (`2026-11-29T23:30:00+01:00`, `...Z` in UTC), as the
 * `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation carries it.
 */
export function rfc3339In(ms: number, timeZone = 'UTC'): string {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      timeZoneName: 'longOffset',
    })
      .formatToParts(new Date(ms))
      .map((p) => [p.type, p.value]),
  );
  const offset = String(parts.timeZoneName ?? 'GMT').replace(/^GMT/, '');
  const zone = offset === '' || offset === '+00:00' || offset === '-00:00' ? 'Z' : offset;
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}${zone}`;
}

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `ms` in UTC as Go's `time.RFC1123Z` (`Sun, 29 Nov 2026 22:30:00 +0000`), as the `MissSchedule` event says it. */
export function rfc1123z(ms: number): string {
  const d = new Date(ms);
  const p2 = (n: number) => String(n).padStart(2, '0');
  return `${DAYS[d.getUTCDay()]}, ${p2(d.getUTCDate())} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()} ${p2(d.getUTCHours())}:${p2(d.getUTCMinutes())}:${p2(d.getUTCSeconds())} +0000`;
}
