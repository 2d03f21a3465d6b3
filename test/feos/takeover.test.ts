// The takeover of a microVM whose feosd was killed during a suspend (seed 000, "takeover" after a
// restart; "Suspend on stop": a stop that is killed keeps what it did), without a VM: a stand-in QEMU
// (fake-qemu.ts) answers QMP as QEMU does in `postmigrate` (the snapshot whole) or `paused` (none),
// and a real feosd takes it over. Never RUNNING while its vCPUs do not run.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { MicroVmSchema, MicroVmState } from '../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { PodInfoSchema, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { pidStartTicks } from '../../src/feos/microvm/index.ts';
import { startFeosd, tempDir, until } from './harness.ts';

const FAKE = new URL('./fake-qemu.ts', import.meta.url).pathname;

/** Lays out a RUNNING pod whose microVM is the stand-in QEMU, in `qemuStatus`/`migration`. */
async function frozenPod(state: string, id: string, qemuStatus: string, migration: string, vmstate: boolean, mode = '') {
  const dir = join(state, 'vms', id);
  mkdirSync(join(dir, 'snapshot'), { recursive: true });
  if (vmstate) writeFileSync(join(dir, 'snapshot', 'vmstate'), Buffer.alloc(4096, 7));
  const child = spawn(process.execPath, [FAKE, join(dir, 'qmp.sock'), qemuStatus, migration, ...(mode ? [mode] : [])], { stdio: 'ignore' });
  await until('the stand-in QEMU listens', async () => (existsSync(join(dir, 'qmp.sock')) ? true : undefined), 10_000);
  const now = timestampNow();
  const vm = create(MicroVmSchema, {
    id,
    recordVersion: 1,
    state: MicroVmState.RUNNING,
    vcpus: 1,
    memoryBytes: 268435456n,
    pid: child.pid!,
    pidStartTicks: pidStartTicks(child.pid!)!,
    bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
    createdAt: now,
    stateChangedAt: now,
  });
  writeFileSync(join(dir, 'microvm.pb'), toBinary(MicroVmSchema, vm));
  mkdirSync(join(state, 'pods'), { recursive: true });
  const pod = create(PodInfoSchema, { id, spec: { vcpus: 1, memoryBytes: 268435456n }, state: PodState.RUNNING, createdAt: now, stateChangedAt: now, recordVersion: 1 });
  writeFileSync(join(state, 'pods', `${id}.pb`), toBinary(PodInfoSchema, pod));
  return child;
}

test('a QEMU left in postmigrate with its whole snapshot is SUSPENDED at takeover (it quits, the snapshot stays); one paused without a snapshot runs again', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-takeover-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const frozen = await frozenPod(state, 'tkvrpstmgr1', 'postmigrate', 'completed', true);
  t.after(() => frozen.kill('SIGKILL'));
  const paused = await frozenPod(state, 'tkvrpaxsd01', 'paused', 'none', false);
  t.after(() => paused.kill('SIGKILL'));
  const frozenExit = once(frozen, 'exit');

  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const p1 = await until('the frozen pod is settled', async () => {
    const p = (await feosd.pods.getPod({ id: 'tkvrpstmgr1' })).pod!;
    return p.state === PodState.RUNNING ? undefined : p;
  }, 20_000);
  assert.equal(PodState[p1.state], 'SUSPENDED', p1.reason);
  await frozenExit;
  assert.ok(existsSync(join(state, 'vms', 'tkvrpstmgr1', 'snapshot', 'vmstate')), 'the snapshot is kept for the resume');
  await until('the takeover of the frozen QEMU is logged', async () => (/QEMU was paused with a whole snapshot; the microVM is SUSPENDED/.test(feosd.stderr()) ? true : undefined), 20_000);

  const p2 = (await feosd.pods.getPod({ id: 'tkvrpaxsd01' })).pod!;
  assert.equal(PodState[p2.state], 'RUNNING');
  await until('the takeover of the paused QEMU is logged', async () => (/QEMU was paused without a whole snapshot; its vCPUs run again/.test(feosd.stderr()) ? true : undefined), 20_000);
  assert.equal(paused.exitCode, null, 'its QEMU runs on');
});

test("a microVM that QEMU paused on a full disk: GetPod says so and how to go on, ResumePod lets it run (the pod stayed RUNNING and its guest silent, and nothing said why)", { timeout: 90_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-ioerror-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const qemu = await frozenPod(state, 'kxfzzpqd0ab', 'running', 'none', false, 'ioerror');
  t.after(() => qemu.kill('SIGKILL'));
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await until('the pause is logged', async () => (/"level":50.*microVM paused: QEMU paused it on a failed write of data: No space left on device \(the node's disk is full\)/.test(feosd.stderr()) ? true : undefined), 20_000);
  const paused = (await feosd.pods.getPod({ id: 'kxfzzpqd0ab' })).pod!;
  assert.equal(PodState[paused.state], 'RUNNING');
  assert.equal(paused.guest?.answered, false);
  assert.match(
    paused.guest?.reason ?? '',
    /; its microVM is paused: QEMU paused it on a failed write of data: No space left on device \(the node's disk is full\): free space on the node, then ResumePod \(feosctl pod resume kxfzzpqd0ab\) lets it run$/,
  );
  const resumed = (await feosd.pods.resumePod({ id: 'kxfzzpqd0ab' })).pod!;
  assert.equal(PodState[resumed.state], 'RUNNING');
  await until('the continue is logged', async () => (/microVM continued after its disk error/.test(feosd.stderr()) ? true : undefined), 20_000);
  const after = (await feosd.pods.getPod({ id: 'kxfzzpqd0ab' })).pod!;
  assert.doesNotMatch(after.guest?.reason ?? '', /paused/, 'QEMU sent RESUME: no longer paused');
  assert.equal(qemu.exitCode, null, 'its QEMU runs on');
});

test("a feosd killed after a suspend's QEMU wrote its whole snapshot and ended, before the record said so: the next start has the pod SUSPENDED with its snapshot (it was FAILED, 'QEMU ended while feosd was away', its memory lost)", { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-quitkill-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const id = 'kxqtsnpshxt';
  const qemu = await frozenPod(state, id, 'running', 'none', false, 'suspend');
  t.after(() => qemu.kill('SIGKILL'));
  const qemuExit = once(qemu, 'exit');
  // A stand-in `fallocate` that never ends: feosd's suspend stops where it punches the snapshot's zero
  // pages, after QEMU's end and before the microVM's record says SUSPENDED (a window of the real
  // suspend's fsync and fallocate, which a SIGKILL may hit).
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  const punching = join(dir, 'fallocate.pid');
  writeFileSync(join(bin, 'fallocate'), `#!/bin/sh\necho $$ > '${punching}'\nexec tail -f /dev/null\n`, { mode: 0o755 });
  t.after(() => {
    try {
      process.kill(Number(readFileSync(punching, 'utf8')), 'SIGKILL');
    } catch {}
  });
  let feosd = await startFeosd(dir, { env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
  t.after(() => feosd.stop('SIGKILL'));
  await until('the pod is taken over RUNNING', async () => ((await feosd.pods.getPod({ id })).pod!.state === PodState.RUNNING ? true : undefined), 20_000);
  const suspending = feosd.pods.suspendPod({ id }).catch((err: unknown) => err);
  await until('the suspend punches the snapshot of the QEMU that ended', async () => (existsSync(punching) ? true : undefined), 30_000);
  await qemuExit;
  await feosd.stop('SIGKILL');
  await suspending;
  const vmRecord = () => fromBinary(MicroVmSchema, readFileSync(join(state, 'vms', id, 'microvm.pb')));
  assert.equal(MicroVmState[vmRecord().state], 'RUNNING', 'the kill came before the record said SUSPENDED');

  feosd = await startFeosd(dir);
  const pod = await until('the pod is settled', async () => {
    const p = (await feosd.pods.getPod({ id })).pod!;
    return p.state === PodState.RUNNING ? undefined : p;
  }, 20_000);
  assert.equal(PodState[pod.state], 'SUSPENDED', pod.reason);
  const vm = vmRecord();
  assert.equal(MicroVmState[vm.state], 'SUSPENDED', vm.reason);
  assert.equal(vm.snapshotBytes, 64n * 1024n);
  assert.ok(existsSync(join(state, 'vms', id, 'snapshot', 'vmstate')), 'the snapshot is kept for the resume');
});

test("a feosd killed while a resume's QEMU had not answered QMP yet: the next start ends that QEMU and the pod stays SUSPENDED with its snapshot (that QEMU ran on unseen, and the next ResumePod failed on the disk's write lock and discarded the snapshot)", { timeout: 90_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-unanswered-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const id = 'kxnnswrdqm1';
  // A real suspend through feosd, of the stand-in QEMU: the pod SUSPENDED with a 64 KiB snapshot.
  const qemu = await frozenPod(state, id, 'running', 'none', false, 'suspend');
  t.after(() => qemu.kill('SIGKILL'));
  let feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await until('the pod is taken over RUNNING', async () => ((await feosd.pods.getPod({ id })).pod!.state === PodState.RUNNING ? true : undefined), 20_000);
  await feosd.pods.suspendPod({ id });
  await feosd.stop();
  const vmDir = join(state, 'vms', id);
  writeFileSync(join(vmDir, 'config.json'), JSON.stringify({ dir: vmDir, guestDir: join(dir, 'guest'), disk: join(state, 'disks', `${id}.qcow2`), vcpus: 1, memoryBytes: '268435456', accelerator: 'tcg', volumes: [] }));

  // The resume's QEMU: a stand-in that starts and never serves QMP, as a QEMU still coming up when feosd is killed.
  const launched = join(dir, 'qemu.pid');
  const standIn = join(dir, 'qemu-never-answers');
  writeFileSync(standIn, `#!/bin/sh\necho $$ > '${launched}'\nexec tail -f /dev/null\n`, { mode: 0o755 });
  t.after(() => {
    try {
      process.kill(Number(readFileSync(launched, 'utf8')), 'SIGKILL');
    } catch {}
  });
  feosd = await startFeosd(dir, { extra: ['--qemu', standIn] });
  const resuming = feosd.pods.resumePod({ id }).catch((err: unknown) => err);
  const vmRecord = () => fromBinary(MicroVmSchema, readFileSync(join(vmDir, 'microvm.pb')));
  const pid = await until('the record names the resume QEMU before it answers', async () => {
    const p = existsSync(launched) ? Number(readFileSync(launched, 'utf8')) : 0;
    return p > 0 && vmRecord().pid === p ? p : undefined;
  }, 20_000);
  await feosd.stop('SIGKILL');
  await resuming;
  assert.equal(MicroVmState[vmRecord().state], 'SUSPENDED', 'the kill came before QMP answered');
  assert.ok(pidStartTicks(pid) !== undefined, 'the QEMU outlived the killed feosd');

  feosd = await startFeosd(dir);
  await until('the QEMU that never answered is ended', async () => (pidStartTicks(pid) === undefined ? true : undefined), 20_000);
  assert.match(feosd.stderr(), /a QEMU started before feosd was killed never answered it; ending it/);
  const pod = (await feosd.pods.getPod({ id })).pod!;
  assert.equal(PodState[pod.state], 'SUSPENDED', pod.reason);
  const vm = vmRecord();
  assert.equal(MicroVmState[vm.state], 'SUSPENDED', vm.reason);
  assert.equal(vm.pid, 0, 'the record names no QEMU any more');
  assert.ok(existsSync(join(vmDir, 'snapshot', 'vmstate')), 'the snapshot is kept for the resume');
});
