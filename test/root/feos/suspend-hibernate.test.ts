// Suspend on stop and hibernation with a real microVM (QEMU, TCG here), as root, one pod booted once:
// feosd --suspend-on-stop ended by SIGTERM suspends it and records it; the next feosd resumes it (its
// guest's uptime goes on) and removes the record; it hibernates into a local-directory object store and
// another feosd (another state dir, the same store) restores it with its memory and its volume (which
// was CHECKPOINTED meanwhile); a checkpoint restores once; a corrupt manifest is DATA_LOSS with nothing lost; a ResumePod during a hibernation abandons it
// or restores after it; a disk-only restore boots it anew; a ResumePod whose QEMU cannot start (of a
// SUSPENDED pod, and of a HIBERNATED one, after the claim) and a recorded pod whose snapshot does not load
// leave it SUSPENDED with its snapshot; and the pod keeps its creation time through every resume and restore.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fromBinary } from '@bufbuild/protobuf';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { status } from '@grpc/grpc-js';
import { MicroVmSchema, MicroVmState } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { VolumeService, VolumeState } from '../../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { makeClient } from '../../../src/feos/api/index.ts';
import { feosctl, PodState, startFeosd, tempDir, until, waitForPod, type FeosdProcess } from '../../feos/harness.ts';
import { alive } from '../../helpers/processes.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'mkhbtest0aa';
const BOOT_MS = 300_000;
const VOLUME = 'eeeeeeee-2222-4333-8444-555555555555';

/** A volume as a feosd has it. */
async function volumeOf(f: FeosdProcess) {
  const c = makeClient(VolumeService, `unix:${f.socket}`);
  try {
    return (await c.getVolume({ id: VOLUME })).volume!;
  } finally {
    c.grpc.close();
  }
}

function microVm(stateDir: string) {
  return fromBinary(MicroVmSchema, readFileSync(join(stateDir, 'vms', ID, 'microvm.pb')));
}

/** The pod once its guest answers GetPod. */
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

const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';

test('suspend on stop, then hibernate on one feosd and restore on another through the object store', { timeout: 1_200_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const { dir, cleanup } = tempDir('feos-hb-');
  const baseA = join(dir, 'a');
  const baseB = join(dir, 'b');
  mkdirSync(baseA);
  mkdirSync(baseB);
  const storeDir = join(dir, 'store');
  // feosd B's guests: hard links to the built ones, so that a step can take a file of them away from B alone.
  const guestB = join(dir, 'guest-b');
  execFileSync('cp', ['-al', GUEST_DIR, guestB]);
  const flags = ['--object-store', pathToFileURL(storeDir).href, '--stop-grace', '120'];
  let a: FeosdProcess = await startFeosd(baseA, { guestDir: GUEST_DIR, extra: ['--suspend-on-stop', ...flags] });
  let b: FeosdProcess | undefined;
  t.after(async () => {
    await a.stop('SIGKILL');
    await b?.stop('SIGKILL');
    // QEMU outlives feosd by design: end the test's microVMs by their recorded pids.
    for (const base of [baseA, baseB]) {
      try {
        const vm = microVm(join(base, 'state'));
        if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
      } catch {}
    }
    cleanup();
  });
  const step = steps(t, () => [
    `feosd A's log:\n${a.stderr().split('\n').slice(-25).join('\n')}`,
    ...(b ? [`feosd B's log:\n${b.stderr().split('\n').slice(-25).join('\n')}`] : []),
  ]);

  let bootId = '';
  let uptime = 0n;
  let createdAt = '';
  /** The pod's creation time on feosd `f` is the one CreatePod gave it. */
  const sameCreatedAt = async (f: FeosdProcess, what: string) => {
    const pod = (await f.pods.getPod({ id: ID })).pod!;
    assert.ok(pod.createdAt, `${what}: a creation time`);
    assert.equal(timestampDate(pod.createdAt).toISOString(), createdAt, `${what}: the pod keeps its creation time`);
  };
  /** The guest answers with the same boot and a later uptime: its memory came back. */
  const sameBootLater = async (f: FeosdProcess, what: string) => {
    const got = await guestAnswers(f);
    assert.equal(got.state, PodState.RUNNING);
    assert.equal(got.guest!.bootId, bootId, `${what}: the same boot`);
    assert.ok(got.guest!.uptimeMs > uptime, `${what}: uptime goes on: ${got.guest!.uptimeMs} > ${uptime}`);
    uptime = got.guest!.uptimeMs;
  };

  await step('a pod with a volume boots RUNNING on feosd A', async () => {
    const v = makeClient(VolumeService, `unix:${a.socket}`);
    await v.createVolume({ id: VOLUME, sizeBytes: 64n * 1024n * 1024n, labels: { role: 'data' } });
    v.grpc.close();
    await a.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n, volumes: [{ name: 'data', volumeId: VOLUME }] } });
    const pod = await waitForPod(a, ID, (p) => p.state !== PodState.PENDING, BOOT_MS);
    assert.equal(pod.state, PodState.RUNNING, pod.reason);
    const got = await guestAnswers(a);
    bootId = got.guest!.bootId;
    uptime = got.guest!.uptimeMs;
    createdAt = timestampDate(got.createdAt!).toISOString();
    assert.equal((await volumeOf(a)).formatted, true, 'the guest formatted and mounted the volume');
  });

  await step('SIGTERM with --suspend-on-stop suspends it, records it in suspended-for-stop.json, and exits 0', async () => {
    const pid = microVm(a.stateDir).pid;
    const exited = new Promise<number | null>((r) => a.child.once('exit', (c) => r(c)));
    a.child.kill('SIGTERM');
    assert.equal(await exited, 0, a.stderr());
    const record = JSON.parse(readFileSync(join(a.stateDir, 'suspended-for-stop.json'), 'utf8'));
    assert.equal(record.version, 1);
    assert.deepEqual(record.pods, [ID]);
    assert.ok(!Number.isNaN(Date.parse(record.stoppedAt)));
    assert.equal(alive(pid), false, 'QEMU ended');
    assert.equal(microVm(a.stateDir).state, MicroVmState.SUSPENDED);
    assert.ok(existsSync(join(a.stateDir, 'vms', ID, 'snapshot', 'vmstate')));
  });

  await step('the next feosd resumes the recorded pod (same boot, uptime goes on) and removes the record', async () => {
    a = await startFeosd(baseA, { guestDir: GUEST_DIR, extra: flags });
    await until('the record is removed', async () => (existsSync(join(a.stateDir, 'suspended-for-stop.json')) ? undefined : true), 120_000);
    await sameBootLater(a, 'resumed after the stop');
    assert.match((await a.pods.getPod({ id: ID })).pod!.reason, /resumed/);
  });

  await step('a ResumePod whose QEMU cannot start (the disk is gone) fails, the pod SUSPENDED with its snapshot and the reason; the disk put back, the next ResumePod resumes it', async () => {
    assert.equal((await a.pods.suspendPod({ id: ID })).pod!.state, PodState.SUSPENDED);
    const vmstate = join(a.stateDir, 'vms', ID, 'snapshot', 'vmstate');
    const size = readFileSync(vmstate).byteLength;
    const disk = join(a.stateDir, 'disks', `${ID}.qcow2`);
    renameSync(disk, `${disk}.aside`);
    try {
      await assert.rejects(a.pods.resumePod({ id: ID }), (e) => code(e) === status.INTERNAL && /stays SUSPENDED/.test(details(e)) && details(e).includes(disk));
    } finally {
      renameSync(`${disk}.aside`, disk);
    }
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    assert.match(pod.reason, /^resume failed: .*qcow2/, "the reason says the resume's failure");
    assert.equal(microVm(a.stateDir).state, MicroVmState.SUSPENDED, 'the microVM is SUSPENDED with its snapshot');
    assert.equal(readFileSync(vmstate).byteLength, size, 'its snapshot stays whole');
    const out = await feosctl(a.socket, ['pod', 'resume', ID, '-o', 'json'], 120_000);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(JSON.parse(out.stdout).state, 'POD_STATE_RUNNING', out.stdout);
    await sameBootLater(a, 'resumed by the second ResumePod');
    await sameCreatedAt(a, 'resumed');
  });

  let checkpoint = '';
  await step('feosctl pod hibernate puts it into the store and releases it on feosd A: HIBERNATED', async () => {
    const out = await feosctl(a.socket, ['pod', 'hibernate', ID, '-o', 'json'], 300_000);
    assert.equal(out.code, 0, out.stderr);
    const pod = JSON.parse(out.stdout);
    assert.equal(pod.state, 'POD_STATE_HIBERNATED');
    checkpoint = pod.checkpoint;
    assert.match(checkpoint, /^\d{8}T\d{6}Z-[0-9a-f]+$/);
    const ck = join(storeDir, 'pods', ID, checkpoint);
    const manifest = JSON.parse(readFileSync(join(ck, 'manifest.json'), 'utf8'));
    assert.equal(manifest.podId, ID);
    assert.equal(manifest.memory, true);
    assert.deepEqual(manifest.files.map((f: { name: string }) => f.name).sort(), ['disk.qcow2', 'memory']);
    assert.deepEqual(
      manifest.volumes.map((v: { name: string; volumeId: string; key: string }) => [v.name, v.volumeId, v.key]),
      [['data', VOLUME, `volumes/${VOLUME}/${checkpoint}/disk.qcow2`]],
    );
    assert.ok(existsSync(join(storeDir, 'volumes', VOLUME, checkpoint, 'disk.qcow2')));
    const vol = await volumeOf(a);
    assert.equal(vol.state, VolumeState.CHECKPOINTED, 'its data in the store alone');
    assert.equal(vol.podId, ID);
    assert.equal(existsSync(join(a.stateDir, 'volumes', `${VOLUME}.qcow2`)), false, "the volume's disk is released");
    assert.ok(manifest.files.every((f: { sizeBytes: number; sha256: string }) => f.sizeBytes > 0 && /^[0-9a-f]{64}$/.test(f.sha256)));
    assert.equal(existsSync(join(a.stateDir, 'vms', ID)), false, "the microVM's directory is released");
    assert.equal(existsSync(join(a.stateDir, 'disks', `${ID}.qcow2`)), false, 'the disk is released');
    assert.equal((await a.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED);
    // A second hibernate answers as it is; StopPod and SuspendPod are not for a hibernated pod.
    assert.equal((await a.pods.hibernatePod({ id: ID })).pod!.checkpoint, checkpoint);
    await assert.rejects(a.pods.stopPod({ id: ID }), (e) => code(e) === status.FAILED_PRECONDITION);
  });

  await step('feosd B (another state dir, the same store) restores it with its memory; the checkpoint restores once', async () => {
    b = await startFeosd(baseB, { guestDir: guestB, extra: flags });
    const out = await feosctl(b.socket, ['pod', 'restore', ID, '-o', 'json'], 300_000);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(JSON.parse(out.stdout).state, 'POD_STATE_RUNNING', out.stdout);
    await sameCreatedAt(b, 'restored on feosd B, which had no record of it');
    await sameBootLater(b, 'restored on feosd B');
    const vol = await volumeOf(b);
    assert.equal(vol.state, VolumeState.ATTACHED, 'the volume came with it');
    assert.equal(vol.podId, ID);
    assert.equal(vol.formatted, true);
    assert.deepEqual(vol.labels, { role: 'data' });
    await assert.rejects(a.pods.resumePod({ id: ID }), (e) => code(e) === status.FAILED_PRECONDITION && /restored already/.test(details(e)));
    assert.equal((await a.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED, "A's record stays as it was");
    assert.equal(existsSync(join(storeDir, 'pods', ID, checkpoint, 'memory')), false, "the claimed checkpoint's data are B's now");
  });

  await step('a corrupt manifest is DATA_LOSS and loses nothing; put back, the pod resumes', async () => {
    const h = await b!.pods.hibernatePod({ id: ID, noAbandon: true });
    assert.equal(h.pod!.state, PodState.HIBERNATED);
    const ck = join(storeDir, 'pods', ID, h.pod!.checkpoint);
    const manifestPath = join(ck, 'manifest.json');
    const good = readFileSync(manifestPath);
    const before = readdirSync(ck).sort();
    writeFileSync(manifestPath, '{"version": 1, "podId": "mkhbtest0aa", "files": [ broken');
    await assert.rejects(b!.pods.resumePod({ id: ID }), (e) => code(e) === status.DATA_LOSS && /manifest\.json is not a manifest: not JSON/.test(details(e)));
    assert.equal((await b!.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED);
    assert.deepEqual(readdirSync(ck).sort(), before, "the checkpoint's files are all there");
    assert.deepEqual(readdirSync(join(b!.stateDir, 'disks')), [], 'nothing half restored on the node');
    writeFileSync(manifestPath, good);
    const r = await b!.pods.resumePod({ id: ID });
    assert.equal(r.pod!.state, PodState.RUNNING, r.pod!.reason);
    await sameBootLater(b!, 'resumed from the checkpoint on B');
    await sameCreatedAt(b!, 'restored on feosd B from its HIBERNATED record');
  });

  await step("a ResumePod of a HIBERNATED pod whose QEMU cannot start (its guest's system.img gone) leaves it SUSPENDED with the checkpoint's memory; put back, the next ResumePod resumes it", async () => {
    const h = await b!.pods.hibernatePod({ id: ID, noAbandon: true });
    assert.equal(h.pod!.state, PodState.HIBERNATED);
    const system = join(guestB, h.pod!.guestVersion, 'system.img');
    renameSync(system, `${system}.aside`);
    try {
      await assert.rejects(b!.pods.resumePod({ id: ID }), (e) => code(e) === status.INTERNAL && /stays SUSPENDED/.test(details(e)) && details(e).includes(system));
    } finally {
      renameSync(`${system}.aside`, system);
    }
    const pod = (await b!.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    assert.match(pod.reason, /^resume failed: .*system\.img/, "the reason says the resume's failure");
    assert.equal(pod.checkpoint, '', 'the checkpoint is claimed: its memory is the snapshot on the node now');
    assert.equal(microVm(b!.stateDir).state, MicroVmState.SUSPENDED);
    assert.ok(existsSync(join(b!.stateDir, 'vms', ID, 'snapshot', 'vmstate')), 'the snapshot is kept');
    const r = await b!.pods.resumePod({ id: ID });
    assert.equal(r.pod!.state, PodState.RUNNING, r.pod!.reason);
    await sameBootLater(b!, 'resumed by the second ResumePod');
    await sameCreatedAt(b!, 'resumed after a failed restore');
  });

  await step('a ResumePod during a hibernation abandons it (ABORTED) or, past its manifest, restores after it', async () => {
    const hibernating = b!.pods.hibernatePod({ id: ID }).then(
      (r) => ({ pod: r.pod, err: undefined as unknown }),
      (err: unknown) => ({ pod: undefined, err }),
    );
    const seen = await until(
      'GetPod shows the hibernation',
      async () => {
        const p = (await b!.pods.getPod({ id: ID })).pod!;
        return p.hibernation ? p.hibernation.step : p.state === PodState.HIBERNATED ? 'ended' : undefined;
      },
      60_000,
    );
    const resumed = await b!.pods.resumePod({ id: ID });
    const h = await hibernating;
    t.diagnostic(`ResumePod came at step ${seen}; the hibernation ${h.err ? `failed: ${details(h.err)}` : 'ended'}`);
    if (h.err) assert.equal(code(h.err), status.ABORTED, details(h.err));
    assert.equal(resumed.pod!.state, PodState.RUNNING, resumed.pod!.reason);
    await sameBootLater(b!, 'after the ResumePod');
    if (h.err) {
      // Checkpoints only: the pod's chunks and packs (pods/<id>/chunks/, packs/) are shared by its checkpoints.
      for (const c of readdirSync(join(storeDir, 'pods', ID)).filter((d) => d !== 'chunks' && d !== 'packs')) {
        const files = readdirSync(join(storeDir, 'pods', ID, c));
        if (!files.includes('manifest.json')) assert.deepEqual(files, [], `the abandoned checkpoint ${c} leaves no files`);
      }
    }
  });

  await step('a second HibernatePod joins the one in flight; a disk-only restore boots it anew on its disk', async () => {
    const whole = () => readdirSync(join(storeDir, 'pods', ID)).filter((c) => existsSync(join(storeDir, 'pods', ID, c, 'manifest.json'))).length;
    const before = whole();
    const [h, joined] = await Promise.all([b!.pods.hibernatePod({ id: ID }), b!.pods.hibernatePod({ id: ID })]);
    assert.equal(h.pod!.state, PodState.HIBERNATED);
    assert.equal(joined.pod!.checkpoint, h.pod!.checkpoint, 'one hibernation, one checkpoint');
    assert.equal(whole(), before + 1, 'one new checkpoint in the store');
    const out = await feosctl(b!.socket, ['pod', 'restore', ID, '--disk-only', '-o', 'json'], BOOT_MS);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(JSON.parse(out.stdout).state, 'POD_STATE_RUNNING', out.stdout);
    const got = await guestAnswers(b!);
    assert.notEqual(got.guest!.bootId, bootId, 'a new boot');
    // RUNNING after a boot: the volume, opened from the checkpoint, mounted without a format.
    assert.equal((await volumeOf(b!)).state, VolumeState.ATTACHED);
    bootId = got.guest!.bootId;
    uptime = got.guest!.uptimeMs;
    await sameCreatedAt(b!, "booted anew on its checkpoint's disk");
  });

  await step('a recorded pod whose snapshot does not load stays SUSPENDED with it; the record goes; the snapshot put back, it resumes', async () => {
    assert.equal((await b!.pods.suspendPod({ id: ID })).pod!.state, PodState.SUSPENDED);
    await b!.stop('SIGTERM');
    const vmstate = join(b!.stateDir, 'vms', ID, 'snapshot', 'vmstate');
    const whole = readFileSync(vmstate);
    writeFileSync(vmstate, whole.subarray(0, Math.floor(whole.length / 2)));
    const record = join(b!.stateDir, 'suspended-for-stop.json');
    writeFileSync(record, JSON.stringify({ version: 1, stoppedAt: new Date().toISOString(), pods: [ID] }));
    b = await startFeosd(baseB, { guestDir: guestB, extra: flags });
    // The failure is logged before the record goes, but its line reaches this process through a pipe:
    // a poll that finds the record gone may come before the line is read. Wait for both.
    await until('the record is removed, and the failed resume said', async () => (!existsSync(record) && /the resume failed; the pod stays suspended/.test(b!.stderr()) ? true : undefined), 120_000);
    const pod = (await b.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    assert.equal(microVm(b.stateDir).state, MicroVmState.SUSPENDED, 'the microVM is SUSPENDED again, not crashed');
    assert.ok(existsSync(vmstate), 'its snapshot stays');
    writeFileSync(vmstate, whole);
    const r = await b.pods.resumePod({ id: ID });
    assert.equal(r.pod!.state, PodState.RUNNING, r.pod!.reason);
    await sameBootLater(b, 'resumed from the snapshot put back');
  });
});
