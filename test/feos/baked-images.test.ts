// CreatePod's image_layers against a real feosd (no VM; seed "Baked images", docs/feos/baked-images.md):
// bad ones are INVALID_ARGUMENT naming the field, a good one is kept in the record and never compared, a
// layer the node cannot fetch (no object store) is passed over and the disk is made on the blank data
// volume, which the record says; feosctl's --bake and --image-layer need one container. A layer sealed on
// the node whose push a restart cut off is put at feosd's start, and its pod's record then names it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { create, toBinary } from '@bufbuild/protobuf';
import { join } from 'node:path';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { PodInfoSchema, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { feosctl, startFeosd, tempDir, until } from './harness.ts';

const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';
const LAYER = 'a'.repeat(64);

test('image_layers: checked, kept and never compared; a layer not to be had is passed over', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-baked-');
  t.after(cleanup);
  // A guest whose kernel is empty (the microVM fails) and whose blank data volume is a real qcow2.
  const guest = join(dir, 'guest', '20260101-000000');
  mkdirSync(guest, { recursive: true });
  for (const f of ['vmlinuz', 'initramfs', 'system.img', 'guest.json']) writeFileSync(join(guest, f), '');
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', join(guest, 'data.qcow2'), '64M']);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const app = (image: string) => ({ name: image.split('/')[1].split(':')[0], image });
  const one = { containers: [app('r.example/app:1')] };

  const bad = async (spec: object, imageLayers: object, want: RegExp) => {
    await assert.rejects(feosd.pods.createPod({ id: 'bkbadpxd0aa', spec, imageLayers }), (e) => code(e) === status.INVALID_ARGUMENT && want.test(details(e)), want.source);
  };
  await bad({ containers: [app('r.example/app:1'), app('r.example/web:1')] }, { image: 'r.example/app:1', bake: true }, /image_layers: the pod must have one container \(it has 2\)/);
  await bad(one, { image: 'r.example/other:1', bake: true }, /image_layers: image "r.example\/other:1" is not the pod's container's image "r.example\/app:1"/);
  await bad(one, { bake: true }, /image_layers: image: empty/);
  await bad(one, { image: 'r.example/app:1', layers: ['sha256:abc'] }, /image_layers: layer "sha256:abc": want a layer ID, 64 lowercase hex digits/);
  await bad(one, { image: 'r.example/app:1', layers: Array.from({ length: 17 }, () => LAYER) }, /image_layers: 17 layers: at most 16/);
  assert.equal((await feosd.pods.listPods({})).pods.length, 0, 'a refused create records nothing');

  const created = (await feosd.pods.createPod({ id: 'bkgxxdpd0aa', spec: one, imageLayers: { image: 'r.example/app:1', layers: [LAYER], bake: true } })).pod!;
  assert.deepEqual([created.imageLayers?.image, created.imageLayers?.layers, created.imageLayers?.bake], ['r.example/app:1', [LAYER], true]);
  const again = (await feosd.pods.createPod({ id: 'bkgxxdpd0aa', spec: one, imageLayers: { image: 'r.example/app:1', layers: [] } })).pod!;
  assert.deepEqual(again.imageLayers?.layers, [LAYER], 'a create again with the same spec returns the pod as it is: image_layers are never compared');

  const failed = await until(
    'the bring-up fails at the microVM',
    async () => {
      const p = (await feosd.pods.getPod({ id: 'bkgxxdpd0aa' })).pod!;
      return p.state === PodState.FAILED ? p : undefined;
    },
    60_000,
  );
  assert.equal(failed.disk?.layer, '', `the record says the disk is on the blank data volume (${failed.reason})`);
  assert.equal(failed.baked, '');
  assert.match(feosd.stderr(), /"layer":"a{64}".*layer passed over|layer passed over.*"layer":"a{64}"/);
  assert.match(feosd.stderr(), /feosd has no object store/);

  const ctl = await feosctl(feosd.socket, ['pod', 'create', '--bake', '--image', 'r.example/a:1', '--image', 'r.example/b:1']);
  assert.equal(ctl.code, 1);
  assert.match(ctl.stderr, /--bake and --image-layer need a pod with one container \(it has 2\)/);
});

test('a layer sealed here whose push a restart cut off is put at the next start, and its pod names it', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-baked-push-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const id = 'bkpxshpd0aa';
  const image = 'r.example/app:1';
  // As a kill after the seal leaves them: the pod's record (STOPPED, on the blank data volume, may
  // bake) and the layer with its manifest in <state>/layers.
  mkdirSync(join(state, 'pods'), { recursive: true });
  const pod = create(PodInfoSchema, {
    id,
    spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n, containers: [{ name: 'app', image }] },
    state: PodState.STOPPED,
    reason: 'stopped by StopPod',
    recordVersion: 1,
    generation: 5n,
    guestVersion: '20260101-000000',
    imageLayers: { image, bake: true },
    disk: { layer: '' },
  });
  writeFileSync(join(state, 'pods', `${id}.pb`), toBinary(PodInfoSchema, pod));
  const bytes = randomBytes(256 * 1024);
  const layer = createHash('sha256').update(bytes).digest('hex');
  mkdirSync(join(state, 'layers', layer), { recursive: true });
  writeFileSync(join(state, 'layers', layer, 'layer.qcow2'), bytes);
  const manifest = { version: 1, layer, guestVersion: '20260101-000000', image, imageDigest: `sha256:${'0'.repeat(64)}`, sizeBytes: bytes.length, sha256: layer, bakedBy: id, bakedAt: new Date().toISOString() };
  writeFileSync(join(state, 'layers', layer, 'manifest.json'), JSON.stringify(manifest));
  const store = join(dir, 'store');
  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(store).href] });
  t.after(() => feosd.stop('SIGKILL'));
  const named = await until(
    "the pod's record names the layer",
    async () => {
      const p = (await feosd.pods.getPod({ id })).pod!;
      return p.baked ? p : undefined;
    },
    60_000,
  );
  assert.equal(named.baked, layer);
  assert.equal(named.state, PodState.STOPPED, 'the pod stays as it was');
  assert.ok(existsSync(join(store, 'layers', layer, 'layer.qcow2')) && existsSync(join(store, 'layers', layer, 'manifest.json')), 'the store has the layer and its manifest');
});
