import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1CronJob } from '@kubernetes/client-node';
import { CronScheduleError, parseCronSchedule } from '../../lib/index.ts';
import { jobNameFor, mostRecentScheduleTime, nextScheduleDelayMs, rfc1123z, rfc3339In } from './schedule.ts';

const at = (iso: string) => Date.parse(iso);
const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());

test('parseCronSchedule reads robfig standard specs: fields, names, ?, descriptors, @every, a TZ prefix', () => {
  const from = at('2026-11-29T22:10:30.500Z');
  assert.equal(iso(parseCronSchedule('*/15 * * * *').next(from)), '2026-11-29T22:15:00.000Z');
  assert.equal(iso(parseCronSchedule('0 9 ? JAN-DEC MON-FRI').next(from)), '2026-11-30T09:00:00.000Z');
  assert.equal(iso(parseCronSchedule('@hourly').next(from)), '2026-11-29T23:00:00.000Z');
  assert.equal(iso(parseCronSchedule('@daily').next(from)), '2026-11-30T00:00:00.000Z');
  assert.equal(iso(parseCronSchedule('@every 90s').next(from)), '2026-11-29T22:12:00.000Z');
  assert.equal(iso(parseCronSchedule('@every 100ms').next(from)), '2026-11-29T22:10:31.000Z', 'at least one second');
  assert.equal(iso(parseCronSchedule('@every -5s').next(from)), '2026-11-29T22:10:31.000Z', 'a negative duration runs every second, as robfig');
  assert.equal(iso(parseCronSchedule('@every +90s').next(from)), '2026-11-29T22:12:00.000Z');
  assert.equal(iso(parseCronSchedule('0 9 * * *', 'Europe/Paris').next(from)), '2026-11-30T08:00:00.000Z');
  assert.equal(iso(parseCronSchedule('CRON_TZ=Asia/Tokyo 0 9 * * *').next(from)), '2026-11-30T00:00:00.000Z');
  // Strictly after: a time exactly on the schedule gives the next one.
  assert.equal(iso(parseCronSchedule('*/1 * * * *').next(at('2026-11-29T22:11:00Z'))), '2026-11-29T22:12:00.000Z');
});

test('parseCronSchedule refuses what robfig refuses, in its words', () => {
  const refused = (spec: string, tz?: string) => {
    try {
      parseCronSchedule(spec, tz);
    } catch (err: unknown) {
      assert.ok(err instanceof CronScheduleError);
      return err.message;
    }
    assert.fail(`${spec} was accepted`);
  };
  assert.equal(refused(''), 'empty spec string');
  assert.equal(refused('* * *'), 'expected exactly 5 fields, found 3: [* * *]');
  assert.equal(refused('0 * * * * *'), 'expected exactly 5 fields, found 6: [0 * * * * *]');
  assert.equal(refused('@often'), 'unrecognized descriptor: @often');
  assert.equal(refused('@every soon'), 'failed to parse duration @every soon: time: invalid duration "soon"');
  assert.equal(refused('0 0 L * *'), 'failed to parse int from L: strconv.Atoi: parsing "L": invalid syntax');
  assert.equal(refused('TZ=Mars/Olympus 0 * * * *'), 'provided bad location Mars/Olympus: unknown time zone Mars/Olympus');
  assert.equal(refused('61 * * * *'), 'end of range (61) above maximum (59): 61');
  assert.equal(refused('0 0 0 * *'), 'beginning of range (0) below minimum (1): 0');
  assert.equal(refused('0 0 * * 7'), 'end of range (7) above maximum (6): 7');
  assert.equal(refused('0 0 * * FRI-MON'), 'beginning of range (5) beyond end of range (1): FRI-MON');
  assert.equal(refused('*/0 * * * *'), 'step of range should be a positive number: */0');
  assert.equal(refused('1-2-3 * * * *'), 'too many hyphens: 1-2-3');
  assert.equal(refused('0 0 30 2 *'), 'Invalid explicit day of month definition', "robfig takes it; cron-parser's words");
});

function cj(created: string, status: V1CronJob['status'] = {}, startingDeadlineSeconds?: number): V1CronJob {
  return { metadata: { name: 'tick', creationTimestamp: created as unknown as Date }, spec: { schedule: '*/1 * * * *', startingDeadlineSeconds, jobTemplate: {} }, status };
}

test('mostRecentScheduleTime: none yet, one due, several missed (the latest), the starting deadline moves the earliest time', () => {
  const every = parseCronSchedule('*/1 * * * *');
  const c = cj('2026-11-29T22:00:30Z');
  assert.deepEqual(mostRecentScheduleTime(c, at('2026-11-29T22:00:50Z'), every, true), { earliestMs: at('2026-11-29T22:00:30Z'), missed: 'none' });
  assert.equal(iso(mostRecentScheduleTime(c, at('2026-11-29T22:01:10Z'), every, true).mostRecentMs), '2026-11-29T22:01:00.000Z');
  const several = mostRecentScheduleTime(c, at('2026-11-29T22:05:10Z'), every, true);
  assert.deepEqual([iso(several.mostRecentMs), several.missed], ['2026-11-29T22:05:00.000Z', 'few']);
  const many = mostRecentScheduleTime(c, at('2026-11-30T02:00:10Z'), every, true);
  assert.deepEqual([iso(many.mostRecentMs), many.missed], ['2026-11-30T02:00:00.000Z', 'many']);
  const done = cj('2026-11-29T22:00:30Z', { lastScheduleTime: '2026-11-29T22:05:00Z' as unknown as Date });
  assert.equal(mostRecentScheduleTime(done, at('2026-11-29T22:05:30Z'), every, true).mostRecentMs, undefined);
  const late = cj('2026-11-29T22:00:30Z', {}, 10);
  assert.equal(mostRecentScheduleTime(late, at('2026-11-29T22:01:30Z'), every, true).mostRecentMs, undefined, 'missed by more than 10 s');
  assert.equal(iso(mostRecentScheduleTime(late, at('2026-11-29T22:01:05Z'), every, true).mostRecentMs), '2026-11-29T22:01:00.000Z');
});

test('nextScheduleDelayMs: until the next time after the most recent, plus 100 ms; names and time formats', () => {
  const every = parseCronSchedule('*/1 * * * *');
  assert.equal(nextScheduleDelayMs(cj('2026-11-29T22:00:30Z'), at('2026-11-29T22:00:50Z'), every), 10_100);
  assert.equal(nextScheduleDelayMs(cj('2026-11-29T22:00:30Z'), at('2026-11-29T22:03:50Z'), every), 10_100);
  assert.equal(jobNameFor('tick', at('2026-11-29T22:01:00Z')), `tick-${at('2026-11-29T22:01:00Z') / 60_000}`);
  assert.equal(rfc3339In(at('2026-11-29T22:01:00Z')), '2026-11-29T22:01:00Z');
  assert.equal(rfc3339In(at('2026-11-29T22:01:00Z'), 'Europe/Paris'), '2026-11-29T23:01:00+01:00');
  assert.equal(rfc3339In(at('2026-07-01T00:00:00Z'), 'America/New_York'), '2026-06-30T20:00:00-04:00');
  assert.equal(rfc1123z(at('2026-11-29T22:01:00Z')), 'Sun, 29 Nov 2026 22:01:00 +0000');
});
