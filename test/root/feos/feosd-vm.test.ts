// feosd with real microVMs (QEMU, TCG here), as root: one pod boots RUNNING and its guest answers; it
// suspends and resumes with its guest's uptime going on; feosd SIGKILLed and started again takes the
// running pod over; feosctl stops it, starts it (a second boot), a QEMU killed under it makes it FAILED,
// and delete removes it all. Few boots, one pod reused, 256 MiB: within about ten minutes on 2 cores.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import { MicroVmSchema, MicroVmState } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { VolumeService, VolumeState } from '../../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { makeClient } from '../../../src/feos/api/index.ts';
import { writeFileSync } from 'node:fs';
import { feosctl, PodState, startFeosd, tempDir, until, waitForPod, type FeosdProcess } from '../../feos/harness.ts';
import { alive } from '../../helpers/processes.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'mkvmtest0aa';
const BOOT_MS = 300_000;
const VOLUME = 'cccccccc-2222-4333-8444-555555555555';

function microVm(stateDir: string) {
  return fromBinary(MicroVmSchema, readFileSync(join(stateDir, 'vms', ID, 'microvm.pb')));
}

/** The pod with its guest's answer, once the guest answers GetPod (a takeover attaches in the background). */
function guestAnswers(feosd: FeosdProcess) {
  return until(
    'the guest answers GetPod',
    async () => {
      const pod = (await feosd.pods.getPod({ id: ID })).pod!;
      return pod.guest?.answered ? pod : undefined;
    },
    60_000,
  );
}

test('a pod as a microVM: boot, guest, suspend/resume, takeover, stop/start, crash, delete', { timeout: 900_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const { dir, cleanup } = tempDir('feos-vm-');
  // Each step needs the one before: after a failure the rest are skipped, not run on a broken pod.
  const step = steps(t, () => [
    `feosd's log:\n${feosd.stderr().split('\n').slice(-30).join('\n')}`,
  ]);
  let feosd: FeosdProcess = await startFeosd(dir, { guestDir: GUEST_DIR });
  t.after(async () => {
    await feosd.stop('SIGKILL');
    // QEMU outlives feosd by design: end the test's microVM by its recorded pid.
    try {
      const vm = microVm(feosd.stateDir);
      if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
    } catch {}
    cleanup();
  });

  let bootId = '';
  let uptime = 0n;
  const volumes = () => makeClient(VolumeService, `unix:${feosd.socket}`);
  await step('created with feosctl from a spec file with a volume, the pod boots RUNNING (its bring-up taken up by a new feosd), its guest answers and formats the volume', async () => {
    const v = volumes();
    await v.createVolume({ id: VOLUME, sizeBytes: 64n * 1024n * 1024n });
    v.grpc.close();
    const specFile = join(dir, 'spec.yaml');
    writeFileSync(specFile, `vcpus: 1\nmemoryBytes: "268435456"\nvolumes:\n  - name: data\n    volumeId: ${VOLUME}\nmetadata:\n  role: test\n`);
    const created = await feosctl(feosd.socket, ['pod', 'create', '--id', ID, '-f', specFile, '-o', 'json']);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(JSON.parse(created.stdout).state, 'POD_STATE_PENDING');
    // feosd killed in the middle of the bring-up (QEMU started, the guest not attached yet): the next
    // feosd takes the bring-up up where it ended, with the same QEMU.
    const qemuPid = await until(
      'the bring-up starts QEMU',
      async () => {
        try {
          const vm = microVm(feosd.stateDir);
          return vm.state === MicroVmState.RUNNING && vm.pid > 0 ? vm.pid : undefined;
        } catch {
          return undefined;
        }
      },
      60_000,
    );
    assert.equal((await feosd.pods.getPod({ id: ID })).pod!.state, PodState.PENDING, 'still PENDING when feosd is killed');
    await feosd.stop('SIGKILL');
    feosd = await startFeosd(dir, { guestDir: GUEST_DIR });
    const pod = await waitForPod(feosd, ID, (p) => p.state !== PodState.PENDING, BOOT_MS);
    assert.equal(pod.state, PodState.RUNNING, pod.reason);
    assert.equal(microVm(feosd.stateDir).pid, qemuPid, 'the same QEMU');
    const got = (await feosd.pods.getPod({ id: ID })).pod!;
    assert.equal(got.guest?.answered, true, got.guest?.reason ?? '');
    assert.ok(got.guest!.uptimeMs > 0n);
    bootId = got.guest!.bootId;
    uptime = got.guest!.uptimeMs;
    const vm = microVm(feosd.stateDir);
    assert.equal(vm.state, MicroVmState.RUNNING);
    assert.ok(alive(vm.pid));
    for (const f of ['config.json', 'qmp.sock', 'guest.sock', 'console.sock', 'serial.log', 'snapshot']) {
      assert.ok(existsSync(join(feosd.stateDir, 'vms', ID, f)), f);
    }
    assert.match(readFileSync(join(feosd.stateDir, 'vms', ID, 'serial.log'), 'utf8'), /feos-agent: agent \d+ serving/);
    const vc = volumes();
    const vol = (await vc.getVolume({ id: VOLUME })).volume!;
    vc.grpc.close();
    assert.equal(vol.state, VolumeState.ATTACHED);
    assert.equal(vol.podId, ID);
    assert.equal(vol.formatted, true, 'the guest mounted the volume it formatted');
  });

  await step('suspend writes the snapshot and ends QEMU; resume goes on with the same boot and a later uptime', async () => {
    const pid = microVm(feosd.stateDir).pid;
    const s = await feosd.pods.suspendPod({ id: ID });
    assert.equal(s.pod?.state, PodState.SUSPENDED);
    const vmstate = join(feosd.stateDir, 'vms', ID, 'snapshot', 'vmstate');
    assert.ok(statSync(vmstate).size > 1024 * 1024, 'the migration stream is written');
    assert.equal(alive(pid), false, 'QEMU ended');
    assert.equal(microVm(feosd.stateDir).state, MicroVmState.SUSPENDED);
    const again = await feosd.pods.suspendPod({ id: ID });
    assert.equal(again.pod?.state, PodState.SUSPENDED);
    const r = await feosd.pods.resumePod({ id: ID });
    assert.equal(r.pod?.state, PodState.RUNNING, r.pod?.reason ?? '');
    assert.equal(existsSync(vmstate), false, 'the snapshot is removed after the resume');
    const got = (await feosd.pods.getPod({ id: ID })).pod!;
    assert.equal(got.guest?.answered, true, got.guest?.reason ?? '');
    assert.equal(got.guest!.bootId, bootId, 'the same boot');
    assert.ok(got.guest!.uptimeMs > uptime, `uptime goes on: ${got.guest!.uptimeMs} > ${uptime}`);
    uptime = got.guest!.uptimeMs;
    await assert.rejects(feosd.pods.resumePod({ id: 'mkvmtest0ab' }), (e) => (e as { code: number }).code === status.NOT_FOUND);
  });

  await step('feosd SIGKILLed and started again takes the running pod over', async () => {
    const pid = microVm(feosd.stateDir).pid;
    await feosd.stop('SIGKILL');
    assert.ok(alive(pid), 'QEMU outlives feosd');
    feosd = await startFeosd(dir, { guestDir: GUEST_DIR });
    const got = await guestAnswers(feosd);
    assert.equal(got.state, PodState.RUNNING);
    assert.equal(got.guest!.bootId, bootId);
    assert.ok(got.guest!.uptimeMs > uptime);
    assert.equal(microVm(feosd.stateDir).pid, pid);
  });

  await step('feosd ended by SIGTERM exits 0, leaves the microVM running, and the next takes it over', async () => {
    const pid = microVm(feosd.stateDir).pid;
    const exited = new Promise<number | null>((r) => feosd.child.once('exit', (c) => r(c)));
    feosd.child.kill('SIGTERM');
    assert.equal(await exited, 0);
    assert.ok(alive(pid), 'QEMU runs on');
    feosd = await startFeosd(dir, { guestDir: GUEST_DIR });
    const got = await guestAnswers(feosd);
    assert.equal(got.guest!.bootId, bootId);
  });

  await step('feosctl stops it (QEMU ends) and starts it again on its disk (a new boot)', async () => {
    const pid = microVm(feosd.stateDir).pid;
    const stopped = await feosctl(feosd.socket, ['pod', 'stop', ID, '-o', 'json']);
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.equal(JSON.parse(stopped.stdout).state, 'POD_STATE_STOPPED');
    assert.equal(alive(pid), false);
    const started = await feosctl(feosd.socket, ['pod', 'start', ID, '-o', 'json'], BOOT_MS);
    assert.equal(started.code, 0, started.stderr);
    assert.equal(JSON.parse(started.stdout).state, 'POD_STATE_RUNNING', started.stdout);
    const got = (await feosd.pods.getPod({ id: ID })).pod!;
    assert.equal(got.guest?.answered, true, got.guest?.reason ?? '');
    assert.notEqual(got.guest!.bootId, bootId, 'a new boot');
    // RUNNING again: the second boot mounted the volume without formatting it (it is formatted), so its
    // file system was kept; a mount that failed would have failed the bring-up with the reason.
    const busy = await feosctl(feosd.socket, ['pod', 'start', ID]);
    assert.equal(busy.code, 1);
    assert.match(busy.stderr, /FAILED_PRECONDITION/);
  });

  await step('a microVM killed under its pod makes the pod FAILED', async () => {
    const pid = microVm(feosd.stateDir).pid;
    assert.ok(pid > 0, 'the microVM runs');
    const failed = waitForPod(feosd, ID, (p) => p.state === PodState.FAILED, 30_000);
    process.kill(pid, 'SIGKILL');
    const pod = await failed;
    assert.match(pod.reason, /crashed/);
    assert.equal(microVm(feosd.stateDir).state, MicroVmState.CRASHED);
  });

  await step('a microVM that ends while feosd is away makes its pod FAILED when feosd starts again', async () => {
    const started = await feosd.pods.startPod({ id: ID });
    assert.equal(started.pod?.state, PodState.RUNNING, started.pod?.reason ?? '');
    const pid = microVm(feosd.stateDir).pid;
    assert.ok(pid > 0);
    await feosd.stop('SIGKILL');
    process.kill(pid, 'SIGKILL');
    await until('QEMU ends', async () => (alive(pid) ? undefined : true), 10_000);
    feosd = await startFeosd(dir, { guestDir: GUEST_DIR });
    const pod = await waitForPod(feosd, ID, (p) => p.state === PodState.FAILED, 30_000);
    assert.match(pod.reason, /crashed: QEMU ended while feosd was away/);
  });

  await step('delete removes the microVM, the disk and the record', async () => {
    const del = await feosctl(feosd.socket, ['pod', 'delete', ID]);
    assert.equal(del.code, 0, del.stderr);
    await assert.rejects(feosd.pods.getPod({ id: ID }), (e) => (e as { code: number }).code === status.NOT_FOUND);
    assert.equal(existsSync(join(feosd.stateDir, 'vms', ID)), false);
    assert.equal(existsSync(join(feosd.stateDir, 'disks', `${ID}.qcow2`)), false);
    assert.equal(existsSync(join(feosd.stateDir, 'pods', `${ID}.pb`)), false);
    const v = volumes();
    const vol = (await v.getVolume({ id: VOLUME })).volume!;
    assert.equal(vol.state, VolumeState.AVAILABLE, 'the volume outlives its pod');
    assert.equal(vol.formatted, true);
    await v.deleteVolume({ id: VOLUME });
    v.grpc.close();
  });
});

test('Reboot and Shutdown fail with FAILED_PRECONDITION in a PID namespace of its own', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-pidns-');
  t.after(cleanup);
  const { spawn } = await import('node:child_process');
  const { makeClient } = await import('../../../src/feos/api/index.ts');
  const { HostService } = await import('../../../src/feos/gen/feos/host/v1/host_pb.js');
  const child = spawn(
    'unshare',
    ['--pid', '--fork', '--kill-child', '--mount-proc', process.execPath, join(REPO, 'bin/feosd.js'), '--state-dir', join(dir, 's'), '--run-dir', join(dir, 'r'), '--guest-dir', join(dir, 'g'), '--accel', 'tcg'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  t.after(() => {
    child.kill('SIGKILL');
  });
  let err = '';
  child.stderr!.setEncoding('utf8');
  const deadline = Date.now() + 30_000;
  while (!err.includes('"feosd serving"')) {
    assert.ok(Date.now() < deadline && child.exitCode === null, err);
    err += await new Promise<string>((r) => child.stderr!.once('data', r));
  }
  const host = makeClient(HostService, `unix:${join(dir, 'r', 'api.sock')}`);
  t.after(() => host.grpc.close());
  await assert.rejects(host.reboot({}), (e) => (e as { code: number }).code === status.FAILED_PRECONDITION);
  await assert.rejects(host.shutdown({}), (e) => (e as { code: number }).code === status.FAILED_PRECONDITION);
});

test('--accel auto probes KVM with a short boot once per host boot, and keeps the answer', { timeout: 120_000 }, async (t) => {
  const { chooseAccelerator } = await import('../../../src/feos/microvm/index.ts');
  const { guestVersions } = await import('../../../src/feos/pods/index.ts');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const kernel = join(GUEST_DIR, guestVersions(GUEST_DIR).at(-1)!, 'vmlinuz');
  const { dir, cleanup } = tempDir('feos-accel-');
  t.after(cleanup);
  const first = await chooseAccelerator('auto', dir, 'qemu-system-x86_64', kernel);
  assert.ok(first === 'kvm' || first === 'tcg');
  const kept = JSON.parse(readFileSync(join(dir, 'accelerator.json'), 'utf8'));
  assert.equal(kept.accelerator, first);
  assert.equal(kept.bootId, readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
  const t0 = performance.now();
  assert.equal(await chooseAccelerator('auto', dir, 'qemu-system-x86_64', kernel), first);
  assert.ok(performance.now() - t0 < 1000, 'the second start does not probe again');
  assert.equal(await chooseAccelerator('tcg', dir, 'qemu-system-x86_64', kernel), 'tcg');
});
