// A feosd SIGKILLed in the middle of a suspend on stop and of a hibernation, with a real microVM (QEMU,
// TCG here), as root (seed 000, "Suspend on stop": a stop that is killed keeps what it did; "Hibernate
// and Restore": the manifest is the commit point; the "takeover" after a restart). The kills wait on
// conditions on disk (the snapshot being written; the manifest in the store), never on a timer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { PodState, startFeosd, tempDir, until, waitForPod, type FeosdProcess } from '../../feos/harness.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'kxhbtest0aa';

function microVmPid(stateDir: string): number {
  try {
    return fromBinary(MicroVmSchema, readFileSync(join(stateDir, 'vms', ID, 'microvm.pb'))).pid;
  } catch {
    return 0;
  }
}

test('SIGKILL during a suspend on stop: the next feosd resumes the pod (same boot); SIGKILL after a hibernation wrote its manifest: the pod is HIBERNATED and restores once', { timeout: 1_200_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const { dir, cleanup } = tempDir('feos-kill-');
  const base = join(dir, 'a');
  mkdirSync(base);
  const state = join(base, 'state');
  const storeDir = join(dir, 'store');
  const flags = ['--object-store', pathToFileURL(storeDir).href, '--stop-grace', '120'];
  let f: FeosdProcess = await startFeosd(base, { guestDir: GUEST_DIR, extra: ['--suspend-on-stop', ...flags] });
  t.after(async () => {
    await f.stop('SIGKILL');
    const pid = microVmPid(state);
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    cleanup();
  });
  const answers = (what: string) =>
    until(
      what,
      async () => {
        const pod = (await f.pods.getPod({ id: ID })).pod!;
        return pod.state === PodState.RUNNING && pod.guest?.answered ? pod : undefined;
      },
      120_000,
    );

  await f.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n } });
  const booted = await waitForPod(f, ID, (p) => p.state !== PodState.PENDING, 300_000);
  assert.equal(booted.state, PodState.RUNNING, booted.reason);
  const first = await answers('the guest answers after its boot');
  const bootId = first.guest!.bootId;

  // 1. SIGTERM (suspend on stop), then SIGKILL as soon as the snapshot is being written.
  const vmstate = join(state, 'vms', ID, 'snapshot', 'vmstate');
  f.child.kill('SIGTERM');
  await until('the snapshot is being written', async () => (existsSync(vmstate) && statSync(vmstate).size > 0 ? true : undefined), 120_000);
  await f.stop('SIGKILL');
  assert.ok(JSON.parse(readFileSync(join(state, 'suspended-for-stop.json'), 'utf8')).pods.includes(ID), 'recorded before its suspend');
  f = await startFeosd(base, { guestDir: GUEST_DIR, extra: flags });
  const back = await answers('the next feosd brings the pod back running');
  assert.equal(back.guest!.bootId, bootId, `the same boot (its memory kept)\n${f.stderr().split('\n').slice(-15).join('\n')}`);
  const found = /QEMU was paused with a whole snapshot/.test(f.stderr())
    ? 'QEMU in postmigrate'
    : /QEMU ended after writing its whole snapshot/.test(f.stderr())
      ? 'QEMU ended with its whole snapshot, before the record said SUSPENDED'
      : 'the suspend done or not begun';
  t.diagnostic(`the kill found ${found}`);

  // 2. HibernatePod, then SIGKILL as soon as its manifest is in the store.
  const hibernation = f.pods.hibernatePod({ id: ID }).catch(() => undefined);
  const checkpoints = join(storeDir, 'pods', ID);
  await until(
    'the manifest is in the store',
    async () => {
      if (!existsSync(checkpoints)) return undefined;
      const ck = execFileSync('ls', [checkpoints], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
      return ck.some((c) => existsSync(join(checkpoints, c, 'manifest.json'))) ? true : undefined;
    },
    300_000,
  );
  await f.stop('SIGKILL');
  await hibernation;
  f = await startFeosd(base, { guestDir: GUEST_DIR, extra: flags });
  const pod = (await f.pods.getPod({ id: ID })).pod!;
  assert.equal(PodState[pod.state], 'HIBERNATED', `${pod.reason}\n${f.stderr().split('\n').slice(-15).join('\n')}`);
  assert.equal(existsSync(join(state, 'vms', ID)), false, 'its microVM went with the release');
  await f.pods.resumePod({ id: ID });
  const restored = await answers('the pod restores from the checkpoint');
  assert.equal(restored.guest!.bootId, bootId, 'the same boot');
});
