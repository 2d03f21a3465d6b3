// Relative manifests (checkpoint.ts, version 4): a checkpoint of a pod whose files changed little names runs of its
// base's chunks, is a small part of a whole manifest, and reads back to the very chunks a whole one names; a chain of
// bases is read through and cut at MAX_BASE_DEPTH; a base whose manifest is missing is DATA_LOSS naming it; the bases
// a checkpoint not restored yet stands on are the ones a delete of claimed checkpoints leaves. A manifest keeps the
// pod's creation time (podCreatedAt), which a restore on another node keeps.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { create, toJson } from '@bufbuild/protobuf';
import { TimestampSchema } from '@bufbuild/protobuf/wkt';
import { PodSpecSchema } from '../gen/feos/pod/v1/pod_pb.js';
import { FeosError } from '../api/index.ts';
import { LocalDirObjectStore, PackWriter } from '../store/index.ts';
import { type CheckpointManifest, checkpointKey, manifestBytes, MANIFEST_VERSION, MAX_BASE_DEPTH, neededBases, packPrefix, readManifest, restoredCreatedAt } from './checkpoint.ts';
import { tempDir } from '../../../test/feos/harness.ts';

const ID = 'relmanif0aa';

async function* once(b: Buffer): AsyncIterable<Uint8Array> {
  for (let i = 0; i < b.length; i += 1 << 20) yield b.subarray(i, i + (1 << 20));
}

test('relative manifests: a few runs of the base for an unchanged file, read back whole; a missing base is DATA_LOSS naming it', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-relman-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const spec = create(PodSpecSchema, { vcpus: 1, memoryBytes: 256n << 20n });
  let memory = randomBytes(8 << 20);
  const disk = randomBytes(1 << 20);
  const put = async (checkpoint: string, base?: CheckpointManifest) => {
    const w = new PackWriter(store, packPrefix(ID), new Map(base?.files.flatMap((f) => (f.packed ?? []).map((c) => [c.sha256, c] as const)) ?? []));
    const mem = await w.putFile(once(memory));
    const dsk = await w.putFile(once(disk));
    await w.finish();
    const m: CheckpointManifest = {
      version: MANIFEST_VERSION,
      podId: ID,
      checkpoint,
      createdAt: new Date().toISOString(),
      node: 'here',
      guestVersion: 'g1',
      memory: true,
      spec,
      files: [
        { name: 'memory', sizeBytes: mem.sizeBytes, sha256: mem.sha256, packed: mem.chunks },
        { name: 'disk.qcow2', sizeBytes: dsk.sizeBytes, sha256: dsk.sha256, packed: dsk.chunks },
      ],
      volumes: [],
    };
    const body = manifestBytes(m, base);
    await store.put(checkpointKey(ID, checkpoint, 'manifest.json'), body);
    return { m, body, whole: manifestBytes(m) };
  };
  const first = await put('20261202T100000Z-0001');
  assert.equal(JSON.parse(Buffer.from(first.body).toString()).base, undefined, 'the first names every chunk');
  const base1 = await readManifest(store, ID, '20261202T100000Z-0001');
  // A page changed in the middle of the memory: the second manifest is runs of the first's chunks and the few new ones.
  memory = Buffer.from(memory);
  randomBytes(4096).copy(memory, 3 << 20);
  const second = await put('20261202T100100Z-0002', base1);
  const doc = JSON.parse(Buffer.from(second.body).toString());
  assert.equal(doc.version, 4);
  assert.equal(doc.base, '20261202T100000Z-0001');
  assert.ok(second.body.byteLength < second.whole.byteLength / 20, `relative ${second.body.byteLength} bytes, whole ${second.whole.byteLength}`);
  const read2 = await readManifest(store, ID, '20261202T100100Z-0002');
  for (const f of second.m.files) {
    assert.deepEqual(
      read2.files.find((x) => x.name === f.name)!.packed!.map((c) => c.sha256),
      f.packed!.map((c) => c.sha256),
      `${f.name}: the same chunks in the same order`,
    );
  }
  assert.equal(read2.baseDepth, 1);
  const packsNamed = new Set(read2.files.flatMap((f) => f.packed!.map((c) => c.pack)));
  assert.deepEqual(new Set(doc.packs), packsNamed, 'packs lists every pack the checkpoint needs');

  // A chain: each stands on the one before, until MAX_BASE_DEPTH; the next names every chunk again.
  let base = read2;
  for (let i = 3; i <= MAX_BASE_DEPTH + 2; i++) {
    const name = `20261202T1002${String(i).padStart(2, '0')}Z-000${i % 10}`;
    await put(name, base);
    base = await readManifest(store, ID, name);
  }
  assert.equal(base.baseDepth, 0, `after ${MAX_BASE_DEPTH} relative manifests a whole one`);
  assert.deepEqual(await neededBases(store, ID), new Set(['20261202T100000Z-0001', '20261202T100100Z-0002', ...Array.from({ length: MAX_BASE_DEPTH - 2 }, (_, k) => `20261202T1002${String(k + 3).padStart(2, '0')}Z-000${(k + 3) % 10}`)]));

  // The base's manifest gone: the relative one is DATA_LOSS naming the base's manifest.
  await store.delete(checkpointKey(ID, '20261202T100000Z-0001', 'manifest.json'));
  await assert.rejects(
    readManifest(store, ID, '20261202T100100Z-0002'),
    (e) =>
      e instanceof FeosError &&
      e.code === 'DATA_LOSS' &&
      e.message.includes('is relative to checkpoint 20261202T100000Z-0001') &&
      e.message.includes(`pods/${ID}/20261202T100000Z-0001/manifest.json is not in the object store`),
  );
});

test("a manifest keeps the pod's creation time to the nanosecond; a bad one is DATA_LOSS; an old manifest without it restores with now", { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-podcreated-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const created = create(TimestampSchema, { seconds: 1_796_300_000n, nanos: 123_456_789 });
  const w = new PackWriter(store, packPrefix(ID), new Map());
  const dsk = await w.putFile(once(randomBytes(64 << 10)));
  await w.finish();
  const manifest = (checkpoint: string, podCreatedAt?: string): CheckpointManifest => ({
    version: MANIFEST_VERSION,
    podId: ID,
    checkpoint,
    createdAt: new Date().toISOString(),
    ...(podCreatedAt === undefined ? {} : { podCreatedAt }),
    node: 'here',
    guestVersion: 'g1',
    memory: false,
    spec: create(PodSpecSchema, { vcpus: 1, memoryBytes: 256n << 20n }),
    files: [{ name: 'disk.qcow2', sizeBytes: dsk.sizeBytes, sha256: dsk.sha256, packed: dsk.chunks }],
    volumes: [],
  });
  const put = (m: CheckpointManifest) => store.put(checkpointKey(ID, m.checkpoint, 'manifest.json'), manifestBytes(m));
  await put(manifest('20261203T100000Z-0001', toJson(TimestampSchema, created) as string));
  const m = await readManifest(store, ID, '20261203T100000Z-0001');
  assert.equal(m.podCreatedAt, '2026-12-03T12:13:20.123456789Z');
  const back = restoredCreatedAt(m);
  assert.equal(back.seconds, created.seconds);
  assert.equal(back.nanos, created.nanos);

  await put(manifest('20261203T100100Z-0002', 'yesterday'));
  await assert.rejects(readManifest(store, ID, '20261203T100100Z-0002'), (e) => e instanceof FeosError && e.code === 'DATA_LOSS' && e.message.includes('podCreatedAt "yesterday"'));

  await put(manifest('20261203T100200Z-0003'));
  const old = await readManifest(store, ID, '20261203T100200Z-0003');
  assert.equal(old.podCreatedAt, undefined);
  const before = BigInt(Math.floor(Date.now() / 1000));
  assert.ok(restoredCreatedAt(old).seconds >= before, 'a manifest written before podCreatedAt: the time of the restore');
});
