// Checkpoints of every manifest version restore through a real feosd (no VM: on the disk alone, so its bring-up ends
// FAILED without a kernel, after the restore): version 2, whose chunks are objects of their own below
// pods/<id>/chunks/ (the format before packs), and version 3, whose chunks are in packs below pods/<id>/packs/. A pack
// whose chunk was changed is DATA_LOSS naming the pack, nothing restored.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { LocalDirObjectStore, PackWriter, putChunked } from '../../src/feos/store/index.ts';
import { PodState, startFeosd, tempDir } from './harness.ts';

const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';

async function* bytesOf(b: Buffer): AsyncIterable<Uint8Array> {
  yield b;
}

test('a version 2 checkpoint (chunks as objects) and a version 3 one (chunks in packs) restore; a damaged pack is DATA_LOSS naming it', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-ckfmt-');
  t.after(cleanup);
  const storeDir = join(dir, 'store');
  const store = new LocalDirObjectStore(pathToFileURL(storeDir).href);
  mkdirSync(join(dir, 'guest', 'g1'), { recursive: true });
  writeFileSync(join(dir, 'guest', 'g1', 'data.qcow2'), '');
  const feosd = await startFeosd(dir, { extra: ['--object-store', pathToFileURL(storeDir).href] });
  t.after(() => feosd.stop('SIGKILL'));
  const diskOf = (id: string) => {
    const f = join(dir, `${id}.qcow2`);
    execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', f, '64M']);
    return readFileSync(f);
  };
  const head = (id: string, checkpoint: string, version: number) => ({
    version,
    podId: id,
    checkpoint,
    createdAt: new Date().toISOString(),
    node: 'elsewhere',
    guestVersion: 'g1',
    memory: false,
    spec: { vcpus: 1, memoryBytes: '268435456' },
  });
  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  const restoredOnItsDisk = async (id: string, checkpoint: string) => {
    const r = await feosd.pods.restorePod({ id });
    assert.ok([PodState.PENDING, PodState.FAILED].includes(r.pod!.state), PodState[r.pod!.state]);
    assert.ok(existsSync(join(feosd.stateDir, 'disks', `${id}.qcow2`)), 'the disk is in its place');
    assert.ok(existsSync(join(storeDir, 'pods', id, checkpoint, 'restored')), 'the checkpoint is claimed');
  };

  // Version 2: pods/<id>/chunks/<sha256>, the manifest naming {sha256, sizeBytes} in order.
  const v2 = 'ckfmtvtw201';
  const ck2 = '20261201T100000Z-0002';
  const disk2 = diskOf(v2);
  const put2 = await putChunked(store, `pods/${v2}/chunks`, bytesOf(disk2), { known: new Set() });
  const m2 = { ...head(v2, ck2, 2), files: [{ name: 'disk.qcow2', sizeBytes: put2.sizeBytes, sha256: put2.sha256, chunks: put2.chunks }], volumes: [] };
  await store.put(`pods/${v2}/${ck2}/manifest.json`, new TextEncoder().encode(JSON.stringify(m2, null, 2)));
  await restoredOnItsDisk(v2, ck2);

  // Version 3: packs named once, each chunk [pack's index, offset, length, sha256].
  const v3 = 'ckfmtvthr01';
  const ck3 = '20261201T100000Z-0003';
  const disk3 = diskOf(v3);
  const w = new PackWriter(store, `pods/${v3}/packs`, new Map());
  const put3 = await w.putFile(bytesOf(disk3));
  await w.finish();
  assert.equal(put3.sha256, sha(disk3));
  const packs = [...new Set(put3.chunks.map((c) => c.pack))];
  const m3 = {
    ...head(v3, ck3, 3),
    packs,
    files: [{ name: 'disk.qcow2', sizeBytes: put3.sizeBytes, sha256: put3.sha256, chunks: put3.chunks.map((c) => [packs.indexOf(c.pack), c.offset, c.sizeBytes, c.sha256]) }],
    volumes: [],
  };
  // First damaged: one byte of the first chunk's pack.
  const first = put3.chunks[0]!;
  const packFile = join(storeDir, 'pods', v3, 'packs', first.pack);
  const good = readFileSync(packFile);
  const bad = Buffer.from(good);
  bad[first.offset + 100] = bad[first.offset + 100]! ^ 0xff;
  writeFileSync(packFile, bad);
  await store.put(`pods/${v3}/${ck3}/manifest.json`, new TextEncoder().encode(JSON.stringify(m3)));
  await assert.rejects(
    feosd.pods.restorePod({ id: v3 }),
    (e) => code(e) === status.DATA_LOSS && details(e).includes(`pack pods/${v3}/packs/${first.pack}: the chunk at bytes ${first.offset}`) && /nothing was restored/.test(details(e)),
  );
  await assert.rejects(feosd.pods.getPod({ id: v3 }), (e) => code(e) === status.NOT_FOUND, 'no pod was recorded');
  assert.ok(!existsSync(join(storeDir, 'pods', v3, ck3, 'restored')), 'the checkpoint is not claimed');
  writeFileSync(packFile, good);
  await restoredOnItsDisk(v3, ck3);
});
