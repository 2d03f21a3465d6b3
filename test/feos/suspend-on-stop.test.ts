// Suspend on stop without QEMU: the orchestration against a pod service that answers as the seed's
// (four at a time, busy pods tried again after the first pass, each recorded once suspended, a failed
// one left), the record's format, and a real feosd with --suspend-on-stop and a record from before.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { pino } from 'pino';
import { FeosError, vmBusy } from '../../src/feos/api/index.ts';
import { type PodInfo, PodInfoSchema, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { type PodAction, readStopRecord, resumeAfterStop, StopRecordError, suspendForStop, writeStopRecord } from '../../src/feos/pods/index.ts';
import { startFeosd, tempDir, until } from './harness.ts';

const log = pino({ level: 'silent' });

/** A pod service whose suspends take a turn of the event loop, some busy a number of times, one failing. */
function fakePods(ids: string[], behaviour: Record<string, { busyTimes?: number; fails?: boolean; hibernates?: boolean; resumeFails?: boolean }> = {}) {
  const pods = new Map(ids.map((id) => [id, create(PodInfoSchema, { id, state: PodState.RUNNING })]));
  let inFlight = 0;
  let maxInFlight = 0;
  const calls: string[] = [];
  return {
    pods,
    calls,
    maxInFlight: () => maxInFlight,
    list: () => [...pods.values()],
    act: async (id: string, action: PodAction): Promise<PodInfo> => {
      calls.push(`${action.kind} ${id}`);
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        await new Promise((r) => setImmediate(r));
        const p = pods.get(id)!;
        const b = behaviour[id] ?? {};
        if (action.kind === 'suspend') {
          assert.ok(action.deadline !== undefined && action.deadline > Date.now(), 'the stop gives its deadline');
          if (b.fails) throw new FeosError('INTERNAL', 'snapshot: migration failed');
          if (b.hibernates) {
            p.state = PodState.HIBERNATED;
            throw new FeosError('FAILED_PRECONDITION', `pod ${id} is HIBERNATED: only a RUNNING pod suspends`);
          }
          if ((b.busyTimes ?? 0) > 0) {
            b.busyTimes! -= 1;
            throw vmBusy('the snapshot was not written in time');
          }
          p.state = PodState.SUSPENDED;
        } else if (action.kind === 'resume') {
          assert.equal(action.keepSuspendedOnFailure, true);
          if (b.resumeFails) throw new FeosError('INTERNAL', 'resume failed; it stays SUSPENDED');
          p.state = PodState.RUNNING;
        }
        return p;
      } finally {
        inFlight -= 1;
      }
    },
  };
}

test('suspendForStop suspends the running pods four at a time, records each, retries busy ones after the pass, skips one that hibernated, and leaves a failed one', { timeout: 20_000 }, async () => {
  const ids = ['aaaaaaaaaa1', 'aaaaaaaaaa2', 'aaaaaaaaaa3', 'aaaaaaaaaa4', 'aaaaaaaaaa5', 'aaaaaaaaaa6', 'aaaaaaaaaa7'];
  const fake = fakePods(ids, { aaaaaaaaaa2: { busyTimes: 2 }, aaaaaaaaaa5: { fails: true }, aaaaaaaaaa6: { hibernates: true } });
  fake.pods.set('bbbbbbbbbbb', create(PodInfoSchema, { id: 'bbbbbbbbbbb', state: PodState.SUSPENDED }));
  const recorded: string[] = [];
  const result = await suspendForStop(fake, {
    deadline: Date.now() + 15_000,
    retryMs: 10,
    log,
    record: async (id) => {
      // Recorded before its suspend starts: a stop killed mid-suspend keeps it.
      assert.equal(fake.pods.get(id)!.state, PodState.RUNNING, `${id} is recorded before it is suspended`);
      assert.ok(!fake.calls.includes(`suspend ${id}`));
      recorded.push(id);
    },
    unrecord: async (id) => {
      recorded.splice(recorded.indexOf(id), 1);
    },
  });
  assert.equal(fake.maxInFlight(), 4, 'four at a time');
  assert.deepEqual(result.failed, ['aaaaaaaaaa5']);
  assert.deepEqual(result.busy, []);
  assert.deepEqual([...recorded].sort(), [...result.suspended].sort());
  assert.deepEqual([...recorded].sort(), ids.filter((id) => id !== 'aaaaaaaaaa5' && id !== 'aaaaaaaaaa6'), 'a pod that hibernated meanwhile is neither recorded nor failed');
  assert.equal(result.suspended.at(-1), 'aaaaaaaaaa2', 'the busy pod comes after the first pass');
  assert.equal(fake.calls.filter((c) => c === 'suspend aaaaaaaaaa2').length, 3);
  assert.ok(!fake.calls.includes('suspend bbbbbbbbbbb'), 'a pod suspended before the stop is not the stop\'s');
});

test('suspendForStop suspends no pod whose record cannot be written: it runs on', { timeout: 20_000 }, async () => {
  const fake = fakePods(['eeeeeeeeee1', 'eeeeeeeeee2']);
  const recorded: string[] = [];
  const result = await suspendForStop(fake, {
    deadline: Date.now() + 15_000,
    retryMs: 10,
    log,
    record: async (id) => {
      if (id === 'eeeeeeeeee1') throw new Error('suspended-for-stop.json: open failed: EISDIR: illegal operation on a directory');
      recorded.push(id);
    },
  });
  assert.deepEqual(result.failed, ['eeeeeeeeee1']);
  assert.deepEqual(result.suspended, ['eeeeeeeeee2']);
  assert.deepEqual(recorded, ['eeeeeeeeee2']);
  assert.ok(!fake.calls.includes('suspend eeeeeeeeee1'), 'never suspended');
  assert.equal(fake.pods.get('eeeeeeeeee1')!.state, PodState.RUNNING);
});

test('suspendForStop gives up on a pod still busy at its deadline', { timeout: 20_000 }, async () => {
  const fake = fakePods(['ccccccccccc'], { ccccccccccc: { busyTimes: 1_000_000 } });
  const t0 = Date.now();
  const recorded = new Set<string>();
  const result = await suspendForStop(fake, {
    deadline: Date.now() + 300,
    retryMs: 20,
    log,
    record: async (id) => {
      recorded.add(id);
    },
    unrecord: async (id) => {
      recorded.delete(id);
    },
  });
  assert.deepEqual(result.busy, ['ccccccccccc']);
  assert.equal(recorded.size, 0, 'a pod busy to the end runs on: taken out of the record');
  assert.deepEqual(result.suspended, []);
  assert.ok(Date.now() - t0 < 2_000, 'it ends by its deadline');
});

test('resumeAfterStop resumes the recorded pods still suspended, skips the others, keeps a failed one suspended, and stops starting on a stop', { timeout: 20_000 }, async () => {
  const ids = ['ddddddddd01', 'ddddddddd02', 'ddddddddd03', 'ddddddddd04', 'ddddddddd05', 'ddddddddd06'];
  const fake = fakePods(ids, { ddddddddd03: { resumeFails: true } });
  for (const p of fake.pods.values()) p.state = PodState.SUSPENDED;
  fake.pods.get('ddddddddd06')!.state = PodState.STOPPED;
  const left = await resumeAfterStop(fake, [...ids, 'dddddddd999'], { log, signal: new AbortController().signal });
  assert.deepEqual(left, []);
  assert.equal(fake.maxInFlight(), 4);
  assert.equal(fake.pods.get('ddddddddd01')!.state, PodState.RUNNING);
  assert.equal(fake.pods.get('ddddddddd03')!.state, PodState.SUSPENDED, 'a failed resume leaves it suspended');
  assert.ok(!fake.calls.includes('resume ddddddddd06'), 'a pod not suspended any more is skipped');
  const stopping = new AbortController();
  const again = fakePods(ids);
  for (const p of again.pods.values()) p.state = PodState.SUSPENDED;
  const first = again.act.bind(again);
  again.act = async (id, a) => {
    stopping.abort();
    return first(id, a);
  };
  const notTried = await resumeAfterStop(again, ids, { log, signal: stopping.signal, concurrency: 1 });
  assert.deepEqual(notTried, ids.slice(1), 'a stop during the resumes keeps the rest');
});

test('the stop record is written whole and read back; a bad one is a named error', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-stoprec-');
  t.after(cleanup);
  const path = join(dir, 'suspended-for-stop.json');
  assert.equal(await readStopRecord(path), undefined);
  await writeStopRecord(path, { stoppedAt: '2026-11-29T16:00:00.000Z', pods: ['abcdefghjkm'] });
  assert.deepEqual(await readStopRecord(path), { version: 1, stoppedAt: '2026-11-29T16:00:00.000Z', pods: ['abcdefghjkm'] });
  for (const [body, want] of [
    ['{', /not JSON/],
    ['{"version":2,"stoppedAt":"2026-11-29T16:00:00Z","pods":[]}', /version 2/],
    ['{"version":1,"stoppedAt":"2026-11-29T16:00:00Z","pods":["NOT A POD"]}', /"NOT A POD" is not a pod ID/],
  ] as const) {
    writeFileSync(path, body);
    await assert.rejects(readStopRecord(path), (e) => e instanceof StopRecordError && want.test(e.message) && e.message.includes(path));
  }
});

test('feosd resumes a recorded stop at its start and removes the record; --suspend-on-stop with no running pods exits 0 with none', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-sos-');
  t.after(cleanup);
  mkdirSync(join(dir, 'state'), { recursive: true });
  const record = join(dir, 'state', 'suspended-for-stop.json');
  // The recorded pod is gone (deleted while feosd was away): skipped, and the record removed.
  writeFileSync(record, JSON.stringify({ version: 1, stoppedAt: new Date().toISOString(), pods: ['ghjkmnpqrst'] }));
  const feosd = await startFeosd(dir, { extra: ['--suspend-on-stop', '--stop-grace', '20'] });
  t.after(() => feosd.stop('SIGKILL'));
  await until('the record is removed, and the skip said', async () => (!existsSync(record) && /not suspended any more; skipped/.test(feosd.stderr()) ? true : undefined), 20_000);
  const exited = once(feosd.child, 'exit');
  feosd.child.kill('SIGTERM');
  const [code] = (await exited) as [number];
  assert.equal(code, 0, feosd.stderr());
  assert.equal(existsSync(record), false, 'no pod was running: no record');
  assert.match(feosd.stderr(), /suspend on stop: done/);
});

test('feosd moves a bad stop record aside and serves on', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-sosbad-');
  t.after(cleanup);
  mkdirSync(join(dir, 'state'), { recursive: true });
  const record = join(dir, 'state', 'suspended-for-stop.json');
  writeFileSync(record, 'not json');
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  // The file is moved before the line that says so is logged: wait for both.
  await until('the bad record is moved aside, and said so', async () => (existsSync(`${record}.bad`) && /the record is not one/.test(feosd.stderr()) ? true : undefined), 20_000);
  assert.equal(readFileSync(`${record}.bad`, 'utf8'), 'not json', 'kept for a look');
  assert.match(feosd.stderr(), /the record is not one; moved to \S+suspended-for-stop\.json\.bad/);
  assert.equal((await feosd.pods.listPods({})).pods.length, 0);
});

test('feosd moves a stop record that is a directory aside too, and says so truly', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-sosdir-');
  t.after(cleanup);
  const record = join(dir, 'state', 'suspended-for-stop.json');
  mkdirSync(record, { recursive: true });
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await until('the record is moved aside', async () => (/the record is not one/.test(feosd.stderr()) ? true : undefined), 20_000);
  assert.equal(existsSync(record), false, 'it is gone from its place');
  assert.ok(existsSync(`${record}.bad`));
  assert.match(feosd.stderr(), /moved to \S+\.bad/);
});
