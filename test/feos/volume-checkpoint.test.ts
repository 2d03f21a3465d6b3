// A volume's hibernation states in its store (seed 000, "Volumes"): CHECKPOINTED keeps its data in the
// object store alone, a claim keeps it so until a boot opens it, a release (its pod deleted) keeps it
// CHECKPOINTED, no empty disk is made in its place, and a restore elsewhere records it anew.
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { pino } from 'pino';
import { VolumeState } from '../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { VolumeStore } from '../../src/feos/volumes/index.ts';
import { tempDir } from './harness.ts';

const log = pino({ level: 'silent' });
const VOL = 'dddddddd-1111-4222-8333-444455556666';
const POD = 'abcdefghjkm';

test('CHECKPOINTED: the disk goes, claims and releases keep it so, no empty disk takes its place, opened makes it ATTACHED', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-volck-');
  t.after(cleanup);
  const store = new VolumeStore(dir, log);
  await store.load();
  await store.create(VOL, 64n * 1024n * 1024n, { tier: 'a' });
  await store.claim(POD, [VOL]);
  writeFileSync(store.diskPath(VOL), 'disk');
  await store.checkpointed(VOL, POD, { key: `volumes/${VOL}/c/disk.qcow2`, sizeBytes: 4, sha256: 'f'.repeat(64) });
  let v = store.get(VOL)!;
  assert.equal(v.state, VolumeState.CHECKPOINTED);
  assert.equal(v.podId, POD);
  assert.equal(v.checkpointKey, `volumes/${VOL}/c/disk.qcow2`);
  assert.equal(existsSync(store.diskPath(VOL)), false, 'its data are in the store alone');
  await assert.rejects(store.ensureDisk(VOL), /CHECKPOINTED: its data are in the object store/);
  await assert.rejects(store.delete(VOL), /checkpointed with pod abcdefghjkm/);
  // Its pod deleted: it stays CHECKPOINTED, with no pod; a new pod's claim keeps it so until its boot opens it.
  await store.release(POD);
  v = store.get(VOL)!;
  assert.equal(v.state, VolumeState.CHECKPOINTED);
  assert.equal(v.podId, '');
  await store.claim('bcdefghjkmn', [VOL]);
  assert.equal(store.get(VOL)!.state, VolumeState.CHECKPOINTED);
  await store.opened(VOL, 'bcdefghjkmn');
  v = store.get(VOL)!;
  assert.equal(v.state, VolumeState.ATTACHED);
  assert.equal(v.checkpointKey, '');
  // Kept across a restart of feosd.
  const again = new VolumeStore(dir, log);
  await again.load();
  assert.equal(again.get(VOL)!.state, VolumeState.ATTACHED);
  assert.equal(again.get(VOL)!.podId, 'bcdefghjkmn');
});

test('a restore on a node without the volume records it ATTACHED; one with it refuses', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-volck-');
  t.after(cleanup);
  const store = new VolumeStore(dir, log);
  await store.load();
  await store.adopt({ id: VOL, sizeBytes: 64n * 1024n * 1024n, labels: { tier: 'a' }, formatted: true }, POD);
  const v = store.get(VOL)!;
  assert.equal(v.state, VolumeState.ATTACHED);
  assert.equal(v.podId, POD);
  assert.equal(v.formatted, true);
  assert.deepEqual(v.labels, { tier: 'a' });
  await assert.rejects(store.adopt({ id: VOL, sizeBytes: 64n * 1024n * 1024n, labels: {}, formatted: false }, POD), /is on the node already/);
  const gone = await store.release(POD).then(() => store.delete(VOL));
  assert.equal(gone.id, VOL);
  assert.equal(existsSync(join(dir, `${VOL}.pb`)), false);
});
