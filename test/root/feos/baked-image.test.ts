// Baked images (seed 000, "A pod": Baked images, Pull tokens; docs/feos/baked-images.md) with real microVMs
// (QEMU, TCG here), as root, a local registry (test/feos/registry.ts) and the real Swift S3 server
// (scripts/s3-server.sh) as the object store of two feosds, each with its own state dir. Three boots:
//   - on feosd A, pod 1 may bake its image: its disk is on the blank data volume, it pulls, freezes,
//     seals and thaws, runs its container, and once the layer is in the bucket its event and its record
//     name it (baked);
//   - at the same time on feosd B, pod F may bake too, names a layer the store does not have, and its
//     seal fails (B's layers directory cannot be made): the layer is passed over, the image is pulled
//     afresh, and the bring-up is RUNNING as it would have been, nothing baked;
//   - then on feosd B, pod 2 names the missing layer, a layer damaged in the bucket (its bytes are not
//     those its manifest's SHA-256 says) and pod 1's: the first two are passed over, the damaged one as
//     DATA_LOSS naming its object in the pod's record (disk.passed_over) and nothing of it kept on B; it
//     starts on pod 1's layer (fetched from the bucket) and runs its container with no request to the
//     registry, and its pull token goes to no guest.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import type { PodEvent } from '../../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startS3Server } from '../../helpers/s3-server.ts';
import { feosctl, PodState, startFeosd, tempDir, until, waitForPod, type FeosdProcess } from '../../feos/harness.ts';
import { buildBusyboxLayout, push, startRegistry } from '../../feos/registry.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const BOOT_MS = 480_000;
const BUCKET = 'feos-layers';
const PREFIX = 'baked';
const POD1 = 'bakexne1aaa';
const POD2 = 'baketwx2aaa';
const PODF = 'bakefxx3aaa';
const TOKEN = 'bake-token-0c8e11d2';
const MISSING = 'f'.repeat(64);

test('a pod bakes its image into S3, a second pod on another feosd starts on the layer without pulling', { timeout: 1_500_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const { dir, cleanup } = tempDir('feos-bake-');
  const s3 = await startS3Server();
  t.after(() => s3.stop());
  await s3.createBucket(BUCKET);
  const client = s3.client();
  t.after(() => client.destroy());
  const reg = await startRegistry(dir, TOKEN);
  t.after(() => reg.stop());
  const layout = buildBusyboxLayout(dir);
  push(layout, reg.direct, 'public/busybox', '1');
  push(layout, reg.direct, 'public/other', '1');
  const image = `${reg.gated}/public/busybox:1`;
  const other = `${reg.gated}/public/other:1`;
  const baseA = join(dir, 'a');
  const baseB = join(dir, 'b');
  mkdirSync(baseA);
  mkdirSync(baseB);
  // B's seal cannot make its layers directory: a file is in its place.
  mkdirSync(join(baseB, 'state'), { recursive: true });
  writeFileSync(join(baseB, 'state', 'layers'), 'not a directory\n');
  const flags = ['--object-store', `s3://${BUCKET}/${PREFIX}`, '--s3-endpoint', s3.endpoint, '--registry-forward', reg.gated];
  const env = { ...process.env, ...s3.env };
  const a: FeosdProcess = await startFeosd(baseA, { guestDir: GUEST_DIR, extra: flags, env });
  const b: FeosdProcess = await startFeosd(baseB, { guestDir: GUEST_DIR, extra: flags, env });
  t.after(async () => {
    await a.stop('SIGKILL');
    await b.stop('SIGKILL');
    for (const [base, id] of [[baseA, POD1], [baseB, PODF], [baseB, POD2]]) {
      try {
        const vm = fromBinary(MicroVmSchema, readFileSync(join(base, 'state', 'vms', id, 'microvm.pb')));
        if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
      } catch {}
    }
    // Last: the microVMs' records are in it.
    cleanup();
  });
  const step = steps(t, () => [
    `feosd A's log:\n${a.stderr().split('\n').slice(-25).join('\n')}`,
    `feosd B's log:\n${b.stderr().split('\n').slice(-25).join('\n')}`,
  ]);
  const keys = async (below: string) => {
    const r = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${PREFIX}/${below}` }));
    return (r.Contents ?? []).map((o) => o.Key!.slice(PREFIX.length + 1)).sort();
  };
  const spec = (img: string, args: string) => ({ vcpus: 1, memoryBytes: 256n * 1024n * 1024n, containers: [{ name: 'app', image: img, command: ['/bin/sh', '-c'], args: [args] }] });
  const running = async (f: FeosdProcess, id: string) => {
    const got = await until(
      `pod ${id}'s container runs`,
      async () => {
        const p = (await f.pods.getPod({ id })).pod!;
        return p.containers[0]?.state === 'running' ? p : undefined;
      },
      120_000,
    );
    return got;
  };
  const logs = async (f: FeosdProcess, id: string) => (await feosctl(f.socket, ['pod', 'logs', id])).stdout;
  const blobFetches = (repo: string) => reg.seenRequests.filter((r) => r.includes(`/v2/${repo}/blobs/`));

  // A's events, from before pod 1's create (a watch of one pod needs the pod): the one that names the layer.
  const events: PodEvent[] = [];
  const watch = a.pods.watchPodEvents({});
  t.after(() => watch.cancel());
  watch.on('data', (ev: PodEvent) => {
    if (ev.podId === POD1) events.push(ev);
  });
  watch.on('error', () => {});

  let layer = '';
  await step('pod 1 bakes its image on A and pod F on B fails to seal, both RUNNING', async () => {
    await a.pods.createPod({ id: POD1, spec: spec(image, 'echo "pod one $FEOS_IMAGE"; sleep 100000'), imageLayers: { image, bake: true } });
    await b.pods.createPod({ id: PODF, spec: spec(other, 'echo "pod f $FEOS_IMAGE"; sleep 100000'), imageLayers: { image: other, layers: [MISSING], bake: true } });
    const [p1, pf] = await Promise.all([
      waitForPod(a, POD1, (p) => p.state !== PodState.PENDING, BOOT_MS),
      waitForPod(b, PODF, (p) => p.state !== PodState.PENDING, BOOT_MS),
    ]);
    assert.equal(p1.state, PodState.RUNNING, p1.reason);
    assert.equal(pf.state, PodState.RUNNING, `a failed seal leaves the bring-up as it would have been: ${pf.reason}`);
    assert.equal(p1.disk?.layer, '', 'pod 1 is on the blank data volume');
    assert.equal(p1.imageLayers?.bake, true, 'the record keeps what the create named');
    assert.ok(blobFetches('public/busybox').length > 0, 'pod 1 pulled its image');
  });

  await step('the layer is in the bucket, the event and the record name it (baked)', async () => {
    const ev = await until('an event of pod 1 names its baked layer', async () => events.find((e) => e.pod?.baked), 300_000);
    layer = ev.pod!.baked;
    assert.match(layer, /^[0-9a-f]{64}$/);
    assert.equal(ev.pod!.state, PodState.RUNNING);
    assert.equal((await a.pods.getPod({ id: POD1 })).pod!.baked, layer, 'the record names it');
    assert.deepEqual(await keys(`layers/${layer}/`), [`layers/${layer}/layer.qcow2`, `layers/${layer}/manifest.json`]);
    const m = JSON.parse(execFileSync('cat', [join(baseA, 'state', 'layers', layer, 'manifest.json')], { encoding: 'utf8' }));
    assert.equal(m.image, image);
    assert.equal(m.bakedBy, POD1);
    assert.match(m.imageDigest, /^sha256:[0-9a-f]{64}$/);
    // Thawed: the container runs and writes on its disk.
    await running(a, POD1);
    assert.match(await logs(a, POD1), /pod one busybox/);
    const w = await feosctl(a.socket, ['pod', 'exec', POD1, '--', 'sh', '-c', 'echo after > /after && cat /after']);
    assert.deepEqual([w.code, w.stdout], [0, 'after\n'], w.stderr);
  });

  await step('pod F: the missing layer was passed over, the image pulled afresh, nothing baked', async () => {
    const pf = await running(b, PODF);
    assert.equal(pf.disk?.layer, '', 'on the blank data volume');
    assert.equal(pf.baked, '');
    assert.ok(blobFetches('public/other').length > 0, 'pod F pulled its image');
    assert.match(b.stderr(), /layer passed over/);
    assert.match(b.stderr(), /bake: the freeze or the seal failed/);
    assert.match(await logs(b, PODF), /pod f busybox/);
    const w = await feosctl(b.socket, ['pod', 'exec', PODF, '--', 'sh', '-c', 'echo thawed > /t && cat /t']);
    assert.deepEqual([w.code, w.stdout], [0, 'thawed\n'], `its data volume is thawed: ${w.stderr}`);
    assert.deepEqual(await keys('layers/'), [`layers/${layer}/layer.qcow2`, `layers/${layer}/manifest.json`], 'pod F put nothing');
  });

  await step('pod 2 on B passes over a missing layer and a damaged one (DATA_LOSS naming the object), starts on the layer from the bucket, with no request to the registry and no token', async () => {
    rmSync(join(baseB, 'state', 'layers'));
    // A layer damaged in the store: its manifest records the SHA-256 of bytes that differ by one from those in
    // the bucket (pod 1's layer, one byte changed when it was recorded).
    const bytes = readFileSync(join(baseA, 'state', 'layers', layer, 'layer.qcow2'));
    const recorded = Buffer.from(bytes);
    recorded[recorded.length >> 1] = recorded[recorded.length >> 1]! ^ 0xff;
    const damaged = createHash('sha256').update(recorded).digest('hex');
    const m1 = JSON.parse(readFileSync(join(baseA, 'state', 'layers', layer, 'manifest.json'), 'utf8'));
    const put = (key: string, body: Uint8Array) => client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${PREFIX}/layers/${damaged}/${key}`, Body: body }));
    await put('layer.qcow2', bytes);
    await put('manifest.json', Buffer.from(JSON.stringify({ ...m1, layer: damaged, sha256: damaged })));
    const before = reg.seenRequests.length;
    await b.pods.createPod({ id: POD2, spec: spec(image, 'echo "pod two $FEOS_IMAGE"; sleep 100000'), pullToken: TOKEN, imageLayers: { image, layers: [MISSING, damaged, layer] } });
    const p2 = await waitForPod(b, POD2, (p) => p.state !== PodState.PENDING, BOOT_MS);
    assert.equal(p2.state, PodState.RUNNING, p2.reason);
    assert.equal(p2.disk?.layer, layer, 'the record says its disk was made on the layer');
    const over = p2.disk!.passedOver;
    assert.equal(over.length, 2, over.join('\n'));
    assert.match(over[0]!, new RegExp(`^${MISSING}: NOT_FOUND: layer ${MISSING}: the object store s3://${BUCKET}/${PREFIX} has no layers/${MISSING}/manifest.json$`));
    assert.match(over[1]!, new RegExp(`^${damaged}: DATA_LOSS: layer ${damaged} in s3://${BUCKET}/${PREFIX}: layers/${damaged}/layer.qcow2 is ${bytes.length} bytes with SHA-256 ${layer}; its manifest says ${bytes.length} bytes with ${damaged}; the layer is not used$`));
    assert.ok(!existsSync(join(baseB, 'state', 'layers', damaged, 'layer.qcow2')), 'B kept no copy of the damaged layer');
    assert.deepEqual(readdirSync(join(baseB, 'state', 'layers', damaged)), [], 'nor its half-fetched file');
    assert.deepEqual(await keys(`layers/${damaged}/`), [`layers/${damaged}/layer.qcow2`, `layers/${damaged}/manifest.json`], "the store's objects are left for their operator");
    const shown = await feosctl(b.socket, ['pod', 'get', POD2]);
    assert.match(shown.stdout, new RegExp(`Layer passed over: ${damaged}: DATA_LOSS: .*layers/${damaged}/layer.qcow2`), shown.stdout);
    await running(b, POD2);
    assert.match(await logs(b, POD2), /pod two busybox/);
    assert.deepEqual(reg.seenRequests.slice(before), [], 'the registry saw no request');
    assert.ok(!reg.seenAuth.includes(`Bearer ${TOKEN}`), 'the pull token went to no guest');
    assert.ok(!readFileSync(join(baseB, 'state', 'vms', POD2, 'serial.log'), 'utf8').includes(TOKEN));
  });
});
