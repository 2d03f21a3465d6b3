// A feosd started on a full state dir (a small tmpfs, as root) with a microVM to take over: it cannot
// write the microVM's record, and it must not end the QEMU for that (it ended it as "QMP unreachable",
// and a trial's pod lost its memory): it refuses to start naming the QEMU and the write, the QEMU runs
// on, and the next start, with room again, takes it over. The QEMU is the stand-in of fake-qemu.ts.
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { create, toBinary } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { MicroVmSchema, MicroVmState } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { PodInfoSchema, PodState } from '../../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { pidStartTicks } from '../../../src/feos/microvm/index.ts';
import { FEOSD, startFeosd, tempDir, until } from '../../feos/harness.ts';

const FAKE = new URL('../../feos/fake-qemu.ts', import.meta.url).pathname;
const ID = 'kfzzpqd0tkv';

test('a full state dir: feosd refuses to start and leaves the QEMU it could not record running; with room, it takes it over', { timeout: 90_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const { dir, cleanup } = tempDir('feos-fulltk-');
  const state = join(dir, 'state');
  mkdirSync(state);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', state]);
  const vmDir = join(state, 'vms', ID);
  mkdirSync(vmDir, { recursive: true });
  const qemu = spawn(process.execPath, [FAKE, join(vmDir, 'qmp.sock'), 'paused', 'none'], { stdio: 'ignore' });
  t.after(() => {
    qemu.kill('SIGKILL');
    execFileSync('umount', ['-l', state]);
    cleanup();
  });
  await until('the stand-in QEMU listens', async () => (existsSync(join(vmDir, 'qmp.sock')) ? true : undefined), 10_000);
  const now = timestampNow();
  const vm = create(MicroVmSchema, {
    id: ID,
    recordVersion: 1,
    state: MicroVmState.RUNNING,
    vcpus: 1,
    memoryBytes: 268435456n,
    pid: qemu.pid!,
    pidStartTicks: pidStartTicks(qemu.pid!)!,
    bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
    createdAt: now,
    stateChangedAt: now,
  });
  writeFileSync(join(vmDir, 'microvm.pb'), toBinary(MicroVmSchema, vm));
  mkdirSync(join(state, 'pods'));
  const pod = create(PodInfoSchema, { id: ID, spec: { vcpus: 1, memoryBytes: 268435456n }, state: PodState.RUNNING, createdAt: now, stateChangedAt: now, recordVersion: 1 });
  writeFileSync(join(state, 'pods', `${ID}.pb`), toBinary(PodInfoSchema, pod));
  for (const d of ['disks', 'volumes', 'in-flight']) mkdirSync(join(state, d));
  // The lock's file is there (feosd rewrites its pid in place); then nothing is left.
  writeFileSync(join(state, 'feosd.lock'), '1\n');
  spawnSync('dd', ['if=/dev/zero', `of=${join(state, 'fill')}`, 'bs=4096'], { stdio: 'ignore' });

  const args = [FEOSD, '--state-dir', state, '--run-dir', join(dir, 'run'), '--guest-dir', join(dir, 'guest'), '--accel', 'tcg'];
  const full = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 60_000 });
  assert.equal(full.status, 1, full.stderr);
  assert.match(full.stderr, new RegExp(`microVM ${ID}: its QEMU \\(pid ${qemu.pid}\\) answers but was not taken over: .*ENOSPC.*; it runs on for the next start of feosd`));
  assert.doesNotMatch(full.stderr, /QMP unreachable; ending it/);
  assert.equal(qemu.exitCode, null, 'the QEMU runs on');
  assert.equal(qemu.signalCode, null);

  execFileSync('mount', ['-o', 'remount,size=64m', state]);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const taken = (await feosd.pods.getPod({ id: ID })).pod!;
  assert.equal(PodState[taken.state], 'RUNNING', taken.reason);
  assert.match(feosd.stderr(), /"microVM taken over"/);
  assert.equal(qemu.exitCode, null, 'its QEMU still runs');
});
