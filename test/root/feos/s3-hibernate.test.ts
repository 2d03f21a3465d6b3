// Hibernation through a real S3 server (OpenStack Swift's s3api on loopback, scripts/s3-server.sh) with a real microVM
// (QEMU, TCG here), as root: a pod hibernates on feosd A into s3://BUCKET/PREFIX, feosd B (its own state dir) restores
// it with its memory (its guest's uptime goes on) after a first restore on B was cut by a SIGKILL of feosd B while it
// downloaded (the next feosd B has no pod, no QEMU, no copy, and the checkpoint is not claimed), A's stale record cannot resume it, a second hibernation of the
// unchanged pod uploads only the chunks the store lacks (small content-defined chunks in packs), the packs no
// checkpoint needs are pruned, a disk-only restore on A boots it anew, a store that stops mid-upload leaves the pod on
// its node, suspended, to hibernate once the store is back, and so does a SIGKILL of feosd in the middle of an upload
// (the next feosd withdraws the packs it put); a restore of a checkpoint without its manifest is
// NOT_FOUND naming it, and one whose pack holds a damaged chunk is DATA_LOSS naming the pack, the pod kept HIBERNATED.
// The pod has a volume: CHECKPOINTED in the bucket with the pod, it comes back ATTACHED on the node that restores it.
// The second hibernation's manifest is relative to the first's (runs of its chunks); a restore whose base manifest
// is missing, and one of the node's own HIBERNATED pod whose manifest is missing, are DATA_LOSS naming the manifest.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { fromBinary } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { VolumeService, VolumeState } from '../../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { makeClient } from '../../../src/feos/api/index.ts';
import { processesNaming } from '../../helpers/processes.ts';
import { startS3Server } from '../../helpers/s3-server.ts';
import { feosctl, PodState, startFeosd, tempDir, until, waitForPod, type FeosdProcess } from '../../feos/harness.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'mks3test0aa';
const BOOT_MS = 300_000;
const BUCKET = 'feos-hibernate';
const PREFIX = 'cluster-1';
const VOLUME = 'eeeeeeee-3333-4333-8444-555555555555';

/** A feosd's VolumeService, for one call. */
const volumeClient = (f: FeosdProcess) => makeClient(VolumeService, `unix:${f.socket}`);
async function withVolumes<T>(f: FeosdProcess, fn: (c: ReturnType<typeof volumeClient>) => Promise<T>): Promise<T> {
  const c = volumeClient(f);
  try {
    return await fn(c);
  } finally {
    c.grpc.close();
  }
}
const volumeOf = (f: FeosdProcess) => withVolumes(f, async (c) => (await c.getVolume({ id: VOLUME })).volume!);

const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';

test('hibernate to S3 on one feosd, restore on another with its memory, dedup the next hibernation', { timeout: 1_500_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const s3 = await startS3Server();
  t.after(() => s3.stop());
  await s3.createBucket(BUCKET);
  const client = s3.client();
  t.after(() => client.destroy());
  const { dir, cleanup } = tempDir('feos-s3-');
  const baseA = join(dir, 'a');
  const baseB = join(dir, 'b');
  mkdirSync(baseA);
  mkdirSync(baseB);
  const flags = ['--object-store', `s3://${BUCKET}/${PREFIX}`, '--s3-endpoint', s3.endpoint, '--stop-grace', '120'];
  const env = { ...process.env, ...s3.env };
  let a: FeosdProcess = await startFeosd(baseA, { guestDir: GUEST_DIR, extra: flags, env });
  let b: FeosdProcess = await startFeosd(baseB, { guestDir: GUEST_DIR, extra: flags, env });
  t.after(async () => {
    await a.stop('SIGKILL');
    await b.stop('SIGKILL');
    for (const base of [baseA, baseB]) {
      try {
        const vm = fromBinary(MicroVmSchema, readFileSync(join(base, 'state', 'vms', ID, 'microvm.pb')));
        if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
      } catch {}
    }
    cleanup();
  });
  const step = steps(t, () => [
    `feosd A's log:\n${a.stderr().split('\n').slice(-25).join('\n')}`,
    `feosd B's log:\n${b.stderr().split('\n').slice(-25).join('\n')}`,
  ]);
  const keys = async (below: string) => {
    const out: string[] = [];
    let token: string | undefined;
    do {
      const r = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${PREFIX}/${below}`, ContinuationToken: token }));
      for (const o of r.Contents ?? []) out.push(o.Key!.slice(PREFIX.length + 1));
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out.sort();
  };
  const manifest = async (checkpoint: string) => {
    const r = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: `${PREFIX}/pods/${ID}/${checkpoint}/manifest.json` }));
    const text = await r.Body!.transformToString();
    return {
      ...(JSON.parse(text) as {
        version: number;
        base?: string;
        memory: boolean;
        uploadedBytes: number;
        packs: string[];
        files: Array<{ name: string; sizeBytes: number; chunks: Array<[number, number, number, string] | [number, number]> }>;
        volumes: Array<{ name: string; volumeId: string; key: string; fileSizeBytes: number }>;
      }),
      bytes: Buffer.byteLength(text),
    };
  };
  const guestAnswers = (f: FeosdProcess) =>
    until(
      'the guest answers GetPod',
      async () => {
        const pod = (await f.pods.getPod({ id: ID })).pod!;
        return pod.guest?.answered ? pod : undefined;
      },
      120_000,
    );
  let bootId = '';
  let uptime = 0n;

  await step('a pod with a volume boots RUNNING on feosd A', async () => {
    await withVolumes(a, (c) => c.createVolume({ id: VOLUME, sizeBytes: 64n * 1024n * 1024n, labels: { role: 'data' } }));
    await a.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n, volumes: [{ name: 'data', volumeId: VOLUME }] } });
    const pod = await waitForPod(a, ID, (p) => p.state !== PodState.PENDING, BOOT_MS);
    assert.equal(pod.state, PodState.RUNNING, pod.reason);
    assert.equal((await volumeOf(a)).formatted, true, 'the guest formatted and mounted the volume');
    const got = await guestAnswers(a);
    bootId = got.guest!.bootId;
    uptime = got.guest!.uptimeMs;
  });

  let first = '';
  let second = '';
  let firstTotal = 0;
  await step('feosctl pod hibernate on A puts it into the bucket as packs of chunks and a manifest, written last', async () => {
    const out = await feosctl(a.socket, ['pod', 'hibernate', ID, '-o', 'json'], 600_000);
    assert.equal(out.code, 0, out.stderr);
    const pod = JSON.parse(out.stdout);
    assert.equal(pod.state, 'POD_STATE_HIBERNATED');
    first = pod.checkpoint;
    const m = await manifest(first);
    assert.equal(m.version, 4);
    assert.equal(m.base, undefined, 'the first checkpoint names every chunk');
    assert.equal(m.memory, true);
    assert.deepEqual(m.files.map((f) => f.name).sort(), ['disk.qcow2', 'memory']);
    // The memory and the disk in packs, the volume's disk whole: what uploadedBytes counts.
    firstTotal = m.files.reduce((n, f) => n + f.sizeBytes, 0) + m.volumes.reduce((n, v) => n + v.fileSizeBytes, 0);
    const chunks = m.files.reduce((n, f) => n + f.chunks.length, 0);
    const stored = (await keys(`pods/${ID}/packs/`)).map((k) => k.split('/').at(-1));
    assert.deepEqual(stored.sort(), [...m.packs].sort(), 'the bucket holds the packs the manifest names');
    assert.ok(m.packs.length < chunks / 100, `${chunks} chunks in ${m.packs.length} packs`);
    assert.ok(m.uploadedBytes > 0 && m.uploadedBytes <= firstTotal, `${m.uploadedBytes} of ${firstTotal} bytes uploaded`);
    assert.deepEqual(
      m.volumes.map((v) => [v.name, v.volumeId, v.key]),
      [['data', VOLUME, `volumes/${VOLUME}/${first}/disk.qcow2`]],
    );
    assert.ok((await keys(`volumes/${VOLUME}/`)).includes(`volumes/${VOLUME}/${first}/disk.qcow2`), "the volume's disk is in the bucket");
    const vol = await volumeOf(a);
    assert.equal(vol.state, VolumeState.CHECKPOINTED, 'its data in the bucket alone');
    assert.equal(vol.podId, ID);
    t.diagnostic(`first hibernation: ${firstTotal} bytes in ${chunks} chunks, ${m.packs.length} packs, ${m.uploadedBytes} uploaded`);
  });

  await step('feosd B SIGKILLed while a restore downloads the checkpoint from S3: the next feosd B has no pod, no QEMU, no copy; the checkpoint stays unclaimed', async () => {
    const disks = join(b.stateDir, 'disks');
    const volumes = join(b.stateDir, 'volumes');
    const memoryCopy = join(disks, `.${ID}.memory.restore`);
    const restoring = b.pods.restorePod({ id: ID }).then(
      () => 'the restore ended',
      (e: unknown) => e,
    );
    // Killed once the memory's copy holds bytes read from Swift (the disk's came first): the download is under way.
    await until('the memory is being downloaded', async () => (existsSync(memoryCopy) && statSync(memoryCopy).size > 0 ? true : undefined), 120_000);
    await b.stop('SIGKILL');
    assert.notEqual(await restoring, 'the restore ended', 'the kill came before its end');
    assert.ok(!(await keys(`pods/${ID}/${first}/`)).includes(`pods/${ID}/${first}/restored`), 'the kill came before the claim: the checkpoint is not claimed');
    b = await startFeosd(baseB, { guestDir: GUEST_DIR, extra: flags, env });
    // As recovery.test.ts's restore killed before its claim: nothing of it stays, and no record says it was tried.
    const removed = b
      .stderr()
      .split('\n')
      .filter((l) => l.includes('recovery: a restore copy left by a kill was removed'))
      .map((l) => JSON.parse(l).file as string);
    assert.ok(removed.includes(memoryCopy), `the next feosd removed the memory's partial copy before it served: ${removed.join(', ') || 'nothing removed'}`);
    await assert.rejects(b.pods.getPod({ id: ID }), (e) => code(e) === status.NOT_FOUND, 'B has no pod');
    await assert.rejects(volumeOf(b), (e) => code(e) === status.NOT_FOUND, 'B has no record of the volume');
    const left = [disks, volumes].flatMap((d) => (existsSync(d) ? readdirSync(d).filter((n) => n.includes(ID) || n.includes(VOLUME) || n.endsWith('.restore')) : []));
    assert.deepEqual(left, [], "no copy of the pod's disk, memory or volume is left on B");
    assert.equal(existsSync(join(b.stateDir, 'vms', ID)), false, 'B has no microVM of the pod');
    assert.deepEqual(processesNaming(join(b.stateDir, 'vms', ID)), [], 'no QEMU runs for the pod on B');
    assert.deepEqual(existsSync(join(b.stateDir, 'in-flight')) ? readdirSync(join(b.stateDir, 'in-flight')) : [], [], 'no marker is left');
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.HIBERNATED, "A's record stays HIBERNATED");
    assert.equal(pod.checkpoint, first);
    assert.ok((await keys(`volumes/${VOLUME}/`)).includes(`volumes/${VOLUME}/${first}/disk.qcow2`), "the volume's disk stays in the bucket");
  });

  await step('feosd B restores it from S3 with its memory after the cut restore: the same boot, its uptime goes on', async () => {
    const out = await feosctl(b.socket, ['pod', 'restore', ID, '-o', 'json'], 600_000);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(JSON.parse(out.stdout).state, 'POD_STATE_RUNNING', out.stdout);
    const got = await guestAnswers(b);
    assert.equal(got.guest!.bootId, bootId, 'the same boot');
    assert.ok(got.guest!.uptimeMs > uptime, `uptime goes on: ${got.guest!.uptimeMs} > ${uptime}`);
    uptime = got.guest!.uptimeMs;
    await assert.rejects(a.pods.resumePod({ id: ID }), (e) => code(e) === status.FAILED_PRECONDITION && /restored already/.test(details(e)));
    assert.equal((await a.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED, "A's record stays as it was");
    assert.ok((await keys(`pods/${ID}/${first}/`)).includes(`pods/${ID}/${first}/restored`), 'the claim is in the bucket');
    const vol = await volumeOf(b);
    assert.equal(vol.state, VolumeState.ATTACHED, 'the volume came with it to feosd B');
    assert.equal(vol.podId, ID);
    assert.equal(vol.formatted, true);
    assert.deepEqual(vol.labels, { role: 'data' });
    assert.deepEqual(await keys(`volumes/${VOLUME}/`), [], "the claimed checkpoint's volume disk is B's now");
  });

  await step('a second hibernation of the unchanged pod, from B, uploads only the chunks the store lacks; the unneeded chunks are pruned', async () => {
    // A's stale HIBERNATED record goes first (its checkpoint was claimed: the delete leaves the bucket alone), and
    // its stale CHECKPOINTED record of the volume, whose data B has.
    await a.pods.deletePod({ id: ID });
    await withVolumes(a, (c) => c.deleteVolume({ id: VOLUME }));
    const h = await b.pods.hibernatePod({ id: ID, noAbandon: true });
    assert.equal(h.pod!.state, PodState.HIBERNATED);
    second = h.pod!.checkpoint;
    const m = await manifest(second);
    const total = m.files.reduce((n, f) => n + f.sizeBytes, 0) + m.volumes.reduce((n, v) => n + v.fileSizeBytes, 0);
    t.diagnostic(
      `second hibernation: ${total} bytes, ${m.uploadedBytes} uploaded (${((100 * m.uploadedBytes) / total).toFixed(1)} %), its manifest ${m.bytes} bytes (${((100 * m.bytes) / total).toFixed(2)} %)`,
    );
    assert.equal(m.base, first, "its manifest names runs of the first's chunks");
    // The share depends on what the guest changed (bench/feos-s3 measures it: a few per cent); a fifth at most
    // says the chunks the first left were found and not uploaded again (with the 1 MiB chunks of version 2 it was 60 %).
    assert.ok(m.uploadedBytes + m.bytes < total / 5, `the second hibernation uploaded ${m.uploadedBytes} of ${total} bytes and a manifest of ${m.bytes}: the chunks it shares with the first stay`);
    const stored = (await keys(`pods/${ID}/packs/`)).map((k) => k.split('/').at(-1));
    assert.deepEqual(stored.sort(), [...m.packs].sort(), 'only the packs the newest checkpoint names stay (the first was restored)');
  });

  await step('feosd A restores it on its disk alone: a new boot', async () => {
    const out = await feosctl(a.socket, ['pod', 'restore', ID, '--disk-only', '-o', 'json'], BOOT_MS);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(JSON.parse(out.stdout).state, 'POD_STATE_RUNNING', out.stdout);
    const got = await guestAnswers(a);
    assert.notEqual(got.guest!.bootId, bootId, 'a new boot');
    const vol = await volumeOf(a);
    assert.equal(vol.state, VolumeState.ATTACHED, 'the volume came back to feosd A');
    assert.equal(vol.podId, ID);
  });

  await step('credentials the store refuses fail a hibernation FAILED_PRECONDITION naming the store; the pod stays SUSPENDED on its node and hibernates once they are right', async () => {
    // The server's tempauth key of the user changes under feosd A (a rotated secret): A's requests are refused.
    const conf = join(s3.dir, 'etc', 'proxy-server.conf');
    const good = readFileSync(conf, 'utf8');
    assert.match(good, /^user_test_tester = testing /m);
    const swap = async (text: string) => {
      await s3.pause();
      writeFileSync(conf, text);
      await s3.resume();
    };
    await swap(good.replace(/^user_test_tester = testing /m, 'user_test_tester = rotated '));
    try {
      const err = await a.pods.hibernatePod({ id: ID }).then(
        () => assert.fail('a hibernation with refused credentials succeeded'),
        (e: unknown) => e,
      );
      assert.equal(code(err), status.FAILED_PRECONDITION, details(err));
      assert.match(details(err), new RegExp(`s3://${BUCKET}/${PREFIX}: .*(SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId).*check the bucket ${BUCKET}, --s3-endpoint, --s3-region and the AWS credentials`));
      assert.match(details(err), /the pod stays (RUNNING|SUSPENDED) on the node/);
      const pod = (await a.pods.getPod({ id: ID })).pod!;
      assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    } finally {
      await swap(good);
    }
  });

  await step('feosd A SIGKILLed in the middle of a hibernation to S3: the next feosd withdraws its packs, the pod stays SUSPENDED on A', async () => {
    const kept = new Set(await keys(`pods/${ID}/packs/`));
    const hibernating = a.pods.hibernatePod({ id: ID }).then(
      () => 'the hibernation ended',
      (e: unknown) => e,
    );
    // Killed once a pack of this hibernation is in the bucket (a condition on the store): its upload is under way.
    const checkpoint = await until(
      'a pack of the hibernation is in the bucket',
      async () => {
        const p = (await a.pods.getPod({ id: ID })).pod!;
        const fresh = (await keys(`pods/${ID}/packs/`)).filter((k) => !kept.has(k));
        return p.hibernation?.checkpoint && fresh.length > 0 ? p.hibernation.checkpoint : undefined;
      },
      120_000,
    );
    await a.stop('SIGKILL');
    assert.notEqual(await hibernating, 'the hibernation ended', 'the kill came before its end');
    assert.deepEqual(await keys(`pods/${ID}/${checkpoint}/`), [], 'it wrote no manifest');
    a = await startFeosd(baseA, { guestDir: GUEST_DIR, extra: flags, env });
    const settled = a
      .stderr()
      .split('\n')
      .find((l) => l.includes('recovery: a cut hibernation or restore is settled'));
    assert.ok(settled, 'the next feosd settled the cut hibernation before it served');
    assert.equal(JSON.parse(settled).outcome, 'withdrawn', settled);
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    assert.deepEqual(
      (await keys(`pods/${ID}/packs/`)).filter((k) => !kept.has(k)),
      [],
      'the packs it put are withdrawn',
    );
  });

  await step('a store that stops during a hibernation fails it UNAVAILABLE naming the store; the pod stays SUSPENDED on its node and hibernates once the store is back', async () => {
    let settled = false;
    const hibernating = a.pods.hibernatePod({ id: ID }).then(
      () => undefined,
      (e: unknown) => e,
    );
    void hibernating.finally(() => {
      settled = true;
    });
    await until(
      'the upload runs',
      async () => {
        const p = (await a.pods.getPod({ id: ID })).pod!;
        return settled || p.hibernation?.step === 'upload' || p.state === PodState.HIBERNATED ? true : undefined;
      },
      120_000,
    );
    // A hibernation that failed before the store stopped is a failure of its own, not this step's to wait out.
    if (settled) {
      const early = await hibernating;
      assert.equal(early, undefined, `the hibernation failed before the store stopped: ${details(early)}`);
    }
    await s3.pause();
    const err = await hibernating;
    await s3.resume();
    if (err === undefined) {
      t.diagnostic('the hibernation ended before the store stopped: nothing to check');
      return;
    }
    assert.equal(code(err), status.UNAVAILABLE, details(err));
    assert.match(details(err), new RegExp(`s3://${BUCKET}/${PREFIX}`));
    assert.match(details(err), /the pod stays SUSPENDED on the node/);
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.SUSPENDED, pod.reason);
    const again = await a.pods.hibernatePod({ id: ID });
    assert.equal(again.pod!.state, PodState.HIBERNATED);
  });

  await step('a restore from a bucket that does not exist is FAILED_PRECONDITION naming it; nothing changes', async () => {
    // B's stale HIBERNATED record (of the checkpoint A restored) goes first, and its volume's: B has no pod then.
    await b.pods.deletePod({ id: ID });
    await withVolumes(b, (c) => c.deleteVolume({ id: VOLUME }));
    const baseC = join(dir, 'c');
    mkdirSync(baseC);
    const c = await startFeosd(baseC, { guestDir: GUEST_DIR, extra: ['--object-store', 's3://feos-no-such-bucket/x', '--s3-endpoint', s3.endpoint], env });
    try {
      await assert.rejects(c.pods.restorePod({ id: ID }), (e) => code(e) === status.FAILED_PRECONDITION && /NoSuchBucket \(404\).*check the bucket feos-no-such-bucket/.test(details(e)));
      await assert.rejects(c.pods.getPod({ id: ID }), (e) => code(e) === status.NOT_FOUND, 'C has no pod');
    } finally {
      await c.stop('SIGKILL');
    }
    assert.equal((await a.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED, "A's pod stays HIBERNATED");
  });

  await step('a restore of a checkpoint whose manifest is not in the store is NOT_FOUND naming it; nothing changes', async () => {
    const missing = '20990101T000000Z-dead';
    await assert.rejects(
      b.pods.restorePod({ id: ID, checkpoint: missing }),
      (e) => code(e) === status.NOT_FOUND && details(e).includes(`pods/${ID}/${missing}/manifest.json`) && details(e).includes(`s3://${BUCKET}/${PREFIX}`),
    );
    await assert.rejects(b.pods.getPod({ id: ID }), (e) => code(e) === status.NOT_FOUND, 'B has no pod');
    assert.equal((await a.pods.getPod({ id: ID })).pod!.state, PodState.HIBERNATED, "A's pod stays HIBERNATED");
  });

  await step('a restore whose pack holds a damaged chunk is DATA_LOSS naming the pack; the pod stays HIBERNATED on A, B has nothing', async () => {
    const checkpoint = (await a.pods.getPod({ id: ID })).pod!.checkpoint;
    const m = await manifest(checkpoint);
    // A chunk the manifest names itself (not in a run of its base's chunks).
    const named = m.files.flatMap((f) => f.chunks).find((c) => c.length === 4);
    assert.ok(named, 'the manifest names a chunk of its own');
    const [packIndex, offset, length] = named;
    const pack = m.packs[packIndex]!;
    // Swift keeps an object as a .data file below its device: find the pack's by its bytes, change one, keep its size.
    const r = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: `${PREFIX}/pods/${ID}/packs/${pack}` }));
    const bytes = Buffer.from(await r.Body!.transformToByteArray());
    const sha = createHash('sha256').update(bytes).digest('hex');
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(d, e.name));
        else if (e.name.endsWith('.data')) files.push(join(d, e.name));
      }
    };
    walk(join(s3.dir, 'srv', 'd1', 'objects'));
    const file = files.find((f) => statSync(f).size === bytes.length && createHash('sha256').update(readFileSync(f)).digest('hex') === sha);
    assert.ok(file, `the pack's .data file among ${files.length}`);
    const damaged = Buffer.from(bytes);
    damaged[offset + Math.floor(length / 2)] = damaged[offset + Math.floor(length / 2)]! ^ 0xff;
    writeFileSync(file, damaged);
    await assert.rejects(
      b.pods.restorePod({ id: ID }),
      (e) => code(e) === status.DATA_LOSS && details(e).includes(`pack pods/${ID}/packs/${pack}`) && /nothing was restored/.test(details(e)),
    );
    await assert.rejects(b.pods.getPod({ id: ID }), (e) => code(e) === status.NOT_FOUND, 'B has no pod');
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.HIBERNATED, "A's pod stays HIBERNATED");
    assert.equal(pod.checkpoint, checkpoint);
    assert.ok(!(await keys(`pods/${ID}/${checkpoint}/`)).includes(`pods/${ID}/${checkpoint}/restored`), 'the checkpoint is not claimed');
  });

  await step("a restore whose manifest's base is missing is DATA_LOSS naming the base's manifest; a restore of the node's own HIBERNATED pod whose manifest is missing is DATA_LOSS; the pod stays HIBERNATED", async () => {
    // The second checkpoint stands on the first (A's own newest, after a new boot, names every chunk: its memory
    // is another). A restore reads the manifest, and its base, before it looks at the claim.
    const checkpoint = (await a.pods.getPod({ id: ID })).pod!.checkpoint;
    const m = await manifest(second);
    assert.equal(m.base, first, `checkpoint ${second} stands on ${first}`);
    const baseKey = `pods/${ID}/${first}/manifest.json`;
    await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: `${PREFIX}/${baseKey}` }));
    await assert.rejects(
      b.pods.restorePod({ id: ID, checkpoint: second }),
      (e) => code(e) === status.DATA_LOSS && details(e).includes(`is relative to checkpoint ${first}`) && details(e).includes(baseKey) && /nothing was restored/.test(details(e)),
    );
    await assert.rejects(b.pods.getPod({ id: ID }), (e) => code(e) === status.NOT_FOUND, 'B has no pod');
    await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: `${PREFIX}/pods/${ID}/${checkpoint}/manifest.json` }));
    await assert.rejects(
      a.pods.restorePod({ id: ID }),
      (e) => code(e) === status.DATA_LOSS && details(e).includes(`pods/${ID}/${checkpoint}/manifest.json`) && /the pod stays HIBERNATED/.test(details(e)),
    );
    const pod = (await a.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.HIBERNATED, "A's pod stays HIBERNATED");
    assert.equal(pod.checkpoint, checkpoint);
  });
});
