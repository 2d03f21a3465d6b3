// What the next feosd makes of hibernations and restores that a kill cut (seed 000, "A pod": Hibernate
// and Restore; the manifest is the commit point, a claim is won once), without QEMU: state dirs and a
// store laid out as a SIGKILL leaves them, then a real feosd started on them and asked over gRPC.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { create, toBinary } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { PodInfoSchema, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { isConnectFailure } from '../../src/feos/ctl/index.ts';
import { startFeosd, tempDir } from './harness.ts';

const GUEST = '20261129-test';
const CK = '20261129T170000Z-abcd';
const SHA = 'a'.repeat(64);

function writePod(stateDir: string, id: string, state: PodState, reason: string): void {
  mkdirSync(join(stateDir, 'pods'), { recursive: true });
  const now = timestampNow();
  const pod = create(PodInfoSchema, {
    id,
    spec: { vcpus: 1, memoryBytes: 268435456n },
    state,
    reason,
    guestVersion: GUEST,
    createdAt: now,
    stateChangedAt: now,
    recordVersion: 1,
  });
  writeFileSync(join(stateDir, 'pods', `${id}.pb`), toBinary(PodInfoSchema, pod));
}

function writeManifest(storeDir: string, id: string, checkpoint: string): void {
  const dir = join(storeDir, 'pods', id, checkpoint);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'memory'), 'm');
  writeFileSync(join(dir, 'disk.qcow2'), 'd');
  const m = {
    version: 1,
    podId: id,
    checkpoint,
    createdAt: new Date().toISOString(),
    node: 'here',
    guestVersion: GUEST,
    memory: true,
    spec: { vcpus: 1, memoryBytes: '268435456' },
    files: [
      { name: 'memory', sizeBytes: 1, sha256: SHA },
      { name: 'disk.qcow2', sizeBytes: 1, sha256: SHA },
    ],
  };
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(m));
}

function marker(stateDir: string, id: string, kind: 'hibernate' | 'restore', token = ''): void {
  mkdirSync(join(stateDir, 'in-flight'), { recursive: true });
  writeFileSync(join(stateDir, 'in-flight', `${id}.${kind}`), JSON.stringify({ version: 1, checkpoint: CK, token }));
}

test('a hibernation killed after its manifest ends HIBERNATED; one killed before it is withdrawn and the pod stays; restores cut after their claim are recorded, others leave nothing', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-recov-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const store = join(dir, 'store');
  const disks = join(state, 'disks');
  mkdirSync(disks, { recursive: true });

  // 1. Killed in the release: the manifest is in the store, the pod's record still SUSPENDED, its disk here.
  const committed = 'rcvhbcmmtd1';
  writePod(state, committed, PodState.SUSPENDED, 'suspended to hibernate');
  writeFileSync(join(disks, `${committed}.qcow2`), 'disk');
  writeManifest(store, committed, CK);
  marker(state, committed, 'hibernate');

  // 2. Killed in the upload: no manifest, a whole object and a half one in the store.
  const cut = 'rcvhbxpd001';
  writePod(state, cut, PodState.SUSPENDED, 'suspended to hibernate');
  writeFileSync(join(disks, `${cut}.qcow2`), 'disk');
  mkdirSync(join(store, 'pods', cut, CK), { recursive: true });
  writeFileSync(join(store, 'pods', cut, CK, 'memory'), 'm');
  writeFileSync(join(store, 'pods', cut, CK, '.disk.qcow2.1a2b3c4d.part'), 'd');
  // A pack its upload put, which no manifest names.
  mkdirSync(join(store, 'pods', cut, 'packs'), { recursive: true });
  writeFileSync(join(store, 'pods', cut, 'packs', '0123456789abcdef0123456789abcdef'), 'pack');
  writeFileSync(join(store, 'pods', cut, 'packs', '.fedcba9876543210fedcba9876543210.1a2b3c4d.part'), 'half a pack');
  marker(state, cut, 'hibernate');

  // 3. A restore from another node, killed after its claim: the copied disk waits beside its place.
  const claimed = 'rcvrscxm001';
  writeManifest(store, claimed, CK);
  writeFileSync(join(store, 'pods', claimed, CK, 'restored'), JSON.stringify({ node: 'here', token: 'f00d' }));
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', join(disks, `${claimed}.qcow2.restore`), '1M']);
  writeFileSync(join(disks, `.${claimed}.memory.restore`), 'm');
  marker(state, claimed, 'restore', 'f00d');

  // 4. A restore killed before its claim (another node's claim is there): nothing of it stays.
  const lost = 'rcvrsxst001';
  writeManifest(store, lost, CK);
  writeFileSync(join(store, 'pods', lost, CK, 'restored'), JSON.stringify({ node: 'there', token: 'beef' }));
  writeFileSync(join(disks, `${lost}.qcow2.restore`), 'd');
  writeFileSync(join(disks, `.${lost}.memory.restore`), 'm');
  marker(state, lost, 'restore', 'f00d');

  // 5. A leftover copy with no marker at all.
  writeFileSync(join(disks, '.zzzzzzzzzzz.memory.restore'), 'm');

  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(store).href] });
  t.after(() => feosd.stop('SIGKILL'));
  const get = async (id: string) => (await feosd.pods.getPod({ id })).pod!;

  const p1 = await get(committed);
  assert.equal(PodState[p1.state], 'HIBERNATED', `${p1.reason}\n${feosd.stderr()}`);
  assert.equal(p1.checkpoint, CK);
  assert.equal(existsSync(join(disks, `${committed}.qcow2`)), false, 'its local disk went with the release');
  assert.ok(existsSync(join(store, 'pods', committed, CK, 'manifest.json')), 'the checkpoint stays whole for a restore');

  const p2 = await get(cut);
  assert.notEqual(PodState[p2.state], 'HIBERNATED');
  assert.notEqual(PodState[p2.state], 'SUSPENDED', 'never SUSPENDED without a snapshot');
  assert.match(p2.reason, /StartPod boots its disk/);
  assert.ok(existsSync(join(disks, `${cut}.qcow2`)), 'its disk stays');
  assert.equal(existsSync(join(store, 'pods', cut)), false, 'the half checkpoint left the store, half objects and its packs too');

  const p3 = await get(claimed);
  assert.equal(PodState[p3.state], 'FAILED', p3.reason);
  assert.match(p3.reason, /restored from checkpoint .*StartPod boots its disk/);
  assert.ok(existsSync(join(disks, `${claimed}.qcow2`)), 'the copied disk took its place');
  assert.deepEqual(readdirSync(join(store, 'pods', claimed, CK)).sort(), ['manifest.json', 'restored'], "the claimed checkpoint's data left the store");

  await assert.rejects(get(lost), (e) => (e as { code?: number }).code === 5, 'a restore that did not win records nothing');
  assert.deepEqual(readdirSync(disks).sort(), [`${claimed}.qcow2`, `${cut}.qcow2`].sort(), 'no restore copy stays');
  assert.deepEqual(readdirSync(join(state, 'in-flight')), [], 'every marker is settled');

  // Deleting the restored pod takes its claimed checkpoint's history with it.
  await feosd.pods.deletePod({ id: claimed });
  assert.equal(existsSync(join(store, 'pods', claimed, CK)), false);
});

test('feosd started again on a settled state dir changes nothing (the recovery is idempotent)', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-recov2-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const store = join(dir, 'store');
  writePod(state, 'rcvhbtwc001', PodState.SUSPENDED, 'suspended to hibernate');
  writeManifest(store, 'rcvhbtwc001', CK);
  marker(state, 'rcvhbtwc001', 'hibernate');
  for (let i = 0; i < 2; i++) {
    const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(store).href] });
    t.after(() => feosd.stop('SIGKILL'));
    const p = (await feosd.pods.getPod({ id: 'rcvhbtwc001' })).pod!;
    await feosd.stop('SIGKILL');
    assert.equal(PodState[p.state], 'HIBERNATED', `start ${i + 1}`);
    assert.equal(p.checkpoint, CK);
  }
});

test("feosctl says 'is feosd running?' for a failure to connect only, never for feosd's own UNAVAILABLE", () => {
  assert.ok(isConnectFailure('No connection established. Last error: connect ENOENT /run/feos/api.sock (2026-11-29T17:00:00.000Z)'));
  assert.ok(isConnectFailure('connect ECONNREFUSED /run/feos/api.sock'));
  assert.ok(!isConnectFailure("hibernate pod x: upload: file:///s: put pods/x: mkdir failed: ENOENT: no such file or directory, mkdir '/s/pods'; the pod stays SUSPENDED on the node"));
  assert.ok(!isConnectFailure('object store file:///s: ECONNREFUSED'));
});

test('a cut hibernation whose store does not answer at the start keeps its marker and its pod does not start until a later start settles it', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-recov3-');
  t.after(cleanup);
  const state = join(dir, 'state');
  const store = join(dir, 'store');
  const id = 'rcvhbxnsd01';
  writePod(state, id, PodState.SUSPENDED, 'suspended to hibernate');
  mkdirSync(join(state, 'disks'), { recursive: true });
  writeFileSync(join(state, 'disks', `${id}.qcow2`), 'disk');
  // The manifest cannot be read (a directory: EISDIR), as a store that fails.
  mkdirSync(join(store, 'pods', id, CK, 'manifest.json'), { recursive: true });
  marker(state, id, 'hibernate');
  let feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(store).href] });
  t.after(() => feosd.stop('SIGKILL'));
  assert.match(feosd.stderr(), /recovery: not settled; the marker is kept for the next start/);
  assert.ok(existsSync(join(state, 'in-flight', `${id}.hibernate`)));
  await assert.rejects(feosd.pods.startPod({ id }), (e: { code?: number; details?: string }) => e.code === 9 && /whether the checkpoint is whole is unknown; restart feosd once the store answers/.test(e.details ?? ''));
  await feosd.stop('SIGKILL');
  // The store answers again (no manifest: the hibernation did not commit): withdrawn, and the pod starts.
  execFileSync('rm', ['-r', join(store, 'pods', id, CK, 'manifest.json')]);
  feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(store).href] });
  assert.equal(existsSync(join(state, 'in-flight', `${id}.hibernate`)), false);
  const p = (await feosd.pods.getPod({ id })).pod!;
  assert.equal(PodState[p.state], 'FAILED', p.reason);
  assert.match(p.reason, /StartPod boots its disk/);
});
