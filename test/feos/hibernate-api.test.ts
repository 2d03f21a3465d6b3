// HibernatePod and RestorePod as a real feosd answers them without a VM: without an object store; with
// one, the refusals a restore makes before it touches anything (no checkpoint, a corrupt manifest, a
// file that differs from its manifest, a guest version not installed, a bad checkpoint name), each
// leaving nothing on the node and the store as it was; and feosctl's `pod hibernate|restore`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { FEOSD, feosctl, PodState, startFeosd, tempDir, waitForPod } from './harness.ts';

const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';

test('without --object-store, HibernatePod and RestorePod are FAILED_PRECONDITION naming the flag; a bad URL stops feosd at its start', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-hbapi-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'hbnxstxre01', spec: {} });
  await waitForPod(feosd, 'hbnxstxre01', (p) => p.state === PodState.FAILED, 30_000);
  await assert.rejects(feosd.pods.hibernatePod({ id: 'hbnxstxre01' }), (e) => code(e) === status.FAILED_PRECONDITION && /--object-store/.test(details(e)));
  await assert.rejects(feosd.pods.restorePod({ id: 'hbnxstxre02' }), (e) => code(e) === status.FAILED_PRECONDITION && /--object-store/.test(details(e)));
  for (const [url, why] of [
    ['s3://B', /want s3:\/\/BUCKET\/PREFIX \(a bucket of 3 to 63 lowercase letters/],
    ['ftp://host/x', /want file:\/\/\/absolute\/path or s3:\/\/BUCKET\/PREFIX/],
  ] as const) {
    const bad = spawnSync(process.execPath, [FEOSD, '--state-dir', join(dir, 's2'), '--object-store', url], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(bad.status, 1, `${url}: ${bad.stderr}`);
    assert.match(bad.stderr, why);
  }
  const endpoint = spawnSync(process.execPath, [FEOSD, '--state-dir', join(dir, 's2'), '--object-store', 's3://bucket/x', '--s3-endpoint', 'localhost:8080'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(endpoint.status, 1, endpoint.stderr);
  assert.match(endpoint.stderr, /--s3-endpoint "localhost:8080": want an http:\/\/ or https:\/\/ URL/);
  const alone = spawnSync(process.execPath, [FEOSD, '--state-dir', join(dir, 's2'), '--s3-endpoint', 'http://127.0.0.1:9'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(alone.status, 1, alone.stderr);
  assert.match(alone.stderr, /--s3-endpoint is for an S3 object store: give --object-store s3:\/\/BUCKET\/PREFIX too/);
});

test('a restore refuses a missing checkpoint, a corrupt manifest, a file that differs and a missing guest version, and changes nothing', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-hbapi-');
  t.after(cleanup);
  const storeDir = join(dir, 'store');
  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(storeDir).href] });
  t.after(() => feosd.stop('SIGKILL'));
  const id = 'hbaptest001';
  await assert.rejects(feosd.pods.restorePod({ id }), (e) => code(e) === status.NOT_FOUND && /no checkpoint in the object store/.test(details(e)));

  // A checkpoint as a hibernation writes it: a disk, and the manifest last.
  const checkpoint = '20261129T160000Z-abcd';
  const ck = join(storeDir, 'pods', id, checkpoint);
  mkdirSync(ck, { recursive: true });
  const disk = Buffer.alloc(64 * 1024, 3);
  writeFileSync(join(ck, 'disk.qcow2'), disk);
  const manifest = {
    version: 1,
    podId: id,
    checkpoint,
    createdAt: new Date().toISOString(),
    node: 'elsewhere',
    guestVersion: 'no-such-guest',
    memory: false,
    spec: { vcpus: 1, memoryBytes: '268435456' },
    files: [{ name: 'disk.qcow2', sizeBytes: disk.length, sha256: createHash('sha256').update(disk).digest('hex') }],
  };
  const disksDir = join(feosd.stateDir, 'disks');
  const nothingOnTheNode = async () => {
    assert.deepEqual(existsSync(disksDir) ? readdirSync(disksDir) : [], [], 'no file of the restore stays');
    await assert.rejects(feosd.pods.getPod({ id }), (e) => code(e) === status.NOT_FOUND);
    assert.deepEqual(readdirSync(ck).sort(), ['disk.qcow2', 'manifest.json'], 'the store is as it was (no claim)');
    assert.deepEqual(readFileSync(join(ck, 'disk.qcow2')), disk);
  };

  writeFileSync(join(ck, 'manifest.json'), '{"version": 1, "podId": "hbaptest001", "files": [ broken');
  await assert.rejects(feosd.pods.restorePod({ id }), (e) => code(e) === status.DATA_LOSS && /manifest\.json is not a manifest: not JSON/.test(details(e)));
  await nothingOnTheNode();

  writeFileSync(join(ck, 'manifest.json'), JSON.stringify({ ...manifest, podId: 'someoneelse' }));
  await assert.rejects(feosd.pods.restorePod({ id, checkpoint }), (e) => code(e) === status.DATA_LOSS && /names pod "someoneelse"/.test(details(e)));
  await nothingOnTheNode();

  writeFileSync(join(ck, 'manifest.json'), JSON.stringify(manifest));
  await assert.rejects(feosd.pods.restorePod({ id }), (e) => code(e) === status.FAILED_PRECONDITION && /needs guest version no-such-guest, which is not installed/.test(details(e)));
  await nothingOnTheNode();

  // The guest version installed (its blank data volume is all a restore needs before the microVM), the
  // disk no longer the one the manifest describes.
  mkdirSync(join(dir, 'guest', 'no-such-guest'), { recursive: true });
  writeFileSync(join(dir, 'guest', 'no-such-guest', 'data.qcow2'), '');
  const other = Buffer.alloc(64 * 1024, 4);
  writeFileSync(join(ck, 'disk.qcow2'), other);
  await assert.rejects(
    feosd.pods.restorePod({ id }),
    (e) => code(e) === status.DATA_LOSS && /disk\.qcow2 is 65536 bytes with SHA-256 [0-9a-f]{64}; its manifest says 65536 bytes with [0-9a-f]{64}; nothing was restored/.test(details(e)),
  );
  writeFileSync(join(ck, 'disk.qcow2'), disk);
  await nothingOnTheNode();

  const badName = await feosctl(feosd.socket, ['pod', 'restore', id, '--checkpoint', 'latest']);
  assert.equal(badName.code, 1);
  assert.match(badName.stderr, /INVALID_ARGUMENT: checkpoint "latest": want a name such as/);
});

test('feosctl pod hibernate of a pod that never booted says why and changes nothing', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-hbapi-');
  t.after(cleanup);
  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(join(dir, 'store')).href] });
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'hbndxsk0001', spec: {} });
  await waitForPod(feosd, 'hbndxsk0001', (p) => p.state === PodState.FAILED, 30_000);
  const out = await feosctl(feosd.socket, ['pod', 'hibernate', 'hbndxsk0001']);
  assert.equal(out.code, 1);
  assert.match(out.stderr, /FAILED_PRECONDITION: pod hbndxsk0001 has no disk yet/);
  assert.equal((await feosd.pods.getPod({ id: 'hbndxsk0001' })).pod!.state, PodState.FAILED, 'as it was');
  assert.deepEqual(existsSync(join(dir, 'store')) ? readdirSync(join(dir, 'store')) : [], [], 'nothing put');
  // A checkpoint that keeps the pod running is of a RUNNING or SUSPENDED pod alone.
  await assert.rejects(
    feosd.pods.hibernatePod({ id: 'hbndxsk0001', keepRunning: true }),
    (e) => code(e) === status.FAILED_PRECONDITION && /pod hbndxsk0001 is FAILED: a checkpoint that keeps the pod running \(keep_running\) is of a RUNNING or SUSPENDED pod/.test(details(e)),
  );
  assert.equal((await feosd.pods.getPod({ id: 'hbndxsk0001' })).pod!.state, PodState.FAILED, 'as it was');
});

test('ResumePod with disk_only on a pod that is not HIBERNATED is INVALID_ARGUMENT, not a resume that ignores it', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-hbdisk-');
  t.after(cleanup);
  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(join(dir, 'store')).href] });
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'hbdskxnmy01', spec: {} });
  await waitForPod(feosd, 'hbdskxnmy01', (p) => p.state === PodState.FAILED, 30_000);
  await assert.rejects(feosd.pods.resumePod({ id: 'hbdskxnmy01', diskOnly: true }), (e) => code(e) === status.INVALID_ARGUMENT && /disk_only applies to a HIBERNATED pod/.test(details(e)));
});
