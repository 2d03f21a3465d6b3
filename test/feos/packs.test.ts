// Small content-defined chunks in packs (src/feos/store/packs.ts) on both stores, the S3 one a real server (OpenStack
// Swift's s3api on loopback): a file read back whole through ranged GETs, a second put of the same bytes uploading
// nothing, a change in the middle uploading about its own size in one pack, a chunk damaged in storage refused as
// damaged naming its pack, a missing pack, prune keeping what is named; and the store's faults as the statuses they
// become (a bucket that does not exist, credentials it refuses, a server stopped mid-upload).
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { S3Client } from '@aws-sdk/client-s3';
import {
  ChunkCutter,
  type ChunkIndex,
  contentDefinedChunks,
  listPacks,
  LocalDirObjectStore,
  ObjectNotFoundError,
  type ObjectStore,
  ObjectStoreError,
  PACK_BYTES,
  PACKED_CHUNKS,
  PIECES_AT_ONCE,
  type PackedChunk,
  PackWriter,
  prunePacks,
  RangeBuffers,
  readPacked,
  S3ObjectStore,
  storeFailureCode,
} from '../../src/feos/store/index.ts';
import { startS3Server, type S3Server } from '../helpers/s3-server.ts';
import { tempDir, until } from './harness.ts';

const SWIFT = '/usr/bin/swift-proxy-server';
const noSwift = existsSync(SWIFT) ? false : `OpenStack Swift is not installed (${SWIFT}): scripts/setup.sh installs it as root`;
const PREFIX = 'pods/abcdefghjkm/packs';

async function* pieces(b: Buffer, size = 1 << 20): AsyncIterable<Uint8Array> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Puts the files with one writer; returns their chunks and what it uploaded. */
async function putAll(store: ObjectStore, index: ChunkIndex, files: Buffer[]): Promise<{ chunks: PackedChunk[][]; uploaded: number; created: string[] }> {
  const w = new PackWriter(store, PREFIX, index);
  const chunks: PackedChunk[][] = [];
  for (const f of files) {
    const put = await w.putFile(pieces(f));
    assert.equal(put.sizeBytes, f.length);
    assert.equal(put.sha256, sha(f));
    chunks.push(put.chunks);
  }
  await w.finish();
  return { chunks, uploaded: w.uploadedBytes, created: w.created };
}

async function readBack(store: ObjectStore, chunks: PackedChunk[], path: string): Promise<Buffer> {
  const fh = await open(path, 'w');
  try {
    const got = await readPacked(store, PREFIX, chunks, fh);
    assert.equal(got.sizeBytes, chunks.reduce((n, c) => n + c.sizeBytes, 0));
    assert.ok(got.requests <= new Set(chunks.map((c) => c.pack)).size * 2, `${got.requests} GETs for ${new Set(chunks.map((c) => c.pack)).size} packs`);
  } finally {
    await fh.close();
  }
  return readFileSync(path);
}

test('packed chunks: 1 KiB to 32 KiB, about 4 KiB on average, the same cuts however the stream is read', { timeout: 60_000 }, async () => {
  const data = randomBytes(8 * 1024 * 1024);
  const cut = async (size: number) => {
    const out: Buffer[] = [];
    for await (const c of contentDefinedChunks(pieces(data, size), PACKED_CHUNKS)) out.push(c);
    return out;
  };
  const a = await cut(1 << 20);
  assert.ok(Buffer.concat(a).equals(data));
  for (const c of a.slice(0, -1)) assert.ok(c.length >= PACKED_CHUNKS.minBytes && c.length <= PACKED_CHUNKS.maxBytes, `a chunk of ${c.length} bytes`);
  const avg = data.length / a.length;
  assert.ok(avg > 3 * 1024 && avg < 6 * 1024, `${avg.toFixed(0)} bytes on average`);
  assert.deepEqual((await cut(4097)).map(sha), a.map(sha));
  assert.throws(() => new ChunkCutter({ minBytes: 1024, avgBytes: 5000, maxBytes: 32768 }), RangeError, 'an average that is not a power of two');
});

let server: S3Server | undefined;
let buckets = 0;
before(async () => {
  if (!noSwift) server = await startS3Server();
}, { timeout: 180_000 });
after(async () => {
  await server?.stop();
});

async function s3Store(): Promise<S3ObjectStore> {
  const bucket = `feos-packs-${process.pid}-${++buckets}`;
  await server!.createBucket(bucket);
  return new S3ObjectStore(`s3://${bucket}/feos`, { client: server!.client() });
}

function localStore(): { store: LocalDirObjectStore; dir: string; cleanup: () => void } {
  const { dir, cleanup } = tempDir('feos-packs-');
  return { store: new LocalDirObjectStore(pathToFileURL(join(dir, 'store')).href), dir, cleanup };
}

for (const kind of ['file://', 's3://'] as const) {
  const skip = kind === 's3://' ? noSwift : false;
  test(`${kind} packs: files of small chunks in a few packs read back whole; the same bytes again upload nothing; a change uploads about its size`, { skip, timeout: 180_000 }, async (t) => {
    const { dir, cleanup } = tempDir('feos-packs-read-');
    t.after(cleanup);
    const store: ObjectStore = kind === 's3://' ? await s3Store() : new LocalDirObjectStore(pathToFileURL(join(dir, 'store')).href);
    t.after(() => (store as Partial<S3ObjectStore>).client?.destroy());
    // 20 MiB of random bytes and a file with runs of zeros (repeated chunks, stored once).
    const memory = randomBytes(20 * 1024 * 1024);
    const disk = Buffer.concat([randomBytes(300_000), Buffer.alloc(2 * 1024 * 1024), randomBytes(5000)]);
    const index: ChunkIndex = new Map();
    const first = await putAll(store, index, [memory, disk]);
    const packs = await listPacks(store, PREFIX);
    assert.equal(packs.size, first.created.length);
    assert.ok(packs.size <= Math.ceil((memory.length + disk.length) / PACK_BYTES) + 1, `${packs.size} packs of about ${PACK_BYTES} bytes`);
    assert.ok(first.chunks[0]!.length > memory.length / PACKED_CHUNKS.maxBytes, `${first.chunks[0]!.length} chunks`);
    assert.ok(first.uploaded < memory.length + disk.length, 'the zeros are one chunk, stored once');
    assert.ok((await readBack(store, first.chunks[0]!, join(dir, 'memory'))).equals(memory));
    assert.ok((await readBack(store, first.chunks[1]!, join(dir, 'disk'))).equals(disk));

    const again = await putAll(store, index, [memory, disk]);
    assert.equal(again.uploaded, 0, 'a second put of the same bytes uploads nothing');
    assert.deepEqual(again.created, []);

    // Pages changed here and there: each costs a chunk or two.
    const changed = Buffer.from(memory);
    for (const at of [1_000_000, 7_777_777, 15_000_000]) randomBytes(4096).copy(changed, at);
    const third = await putAll(store, index, [changed]);
    assert.ok(third.uploaded > 0 && third.uploaded <= 3 * 3 * PACKED_CHUNKS.maxBytes, `${third.uploaded} bytes uploaded for 12 KiB changed`);
    assert.equal(third.created.length, 1, 'in one pack');
    assert.ok((await readBack(store, third.chunks[0]!, join(dir, 'changed'))).equals(changed), 'chunks of old and new packs make the changed file');

    // Prune keeps what the kept files name: the third's and the disk's packs.
    const keep = new Set([...third.chunks[0]!, ...first.chunks[1]!].map((c) => c.pack));
    assert.equal(await prunePacks(store, PREFIX, keep), packs.size + 1 - keep.size);
    assert.deepEqual([...(await listPacks(store, PREFIX))].sort(), [...keep].sort());
    assert.ok((await readBack(store, third.chunks[0]!, join(dir, 'changed2'))).equals(changed));
  });
}

test('packs: a chunk damaged in storage is refused as damaged, naming the pack and the chunk; a missing pack is not found', { timeout: 60_000 }, async (t) => {
  const { store, dir, cleanup } = localStore();
  t.after(cleanup);
  const data = randomBytes(3 * 1024 * 1024);
  const { chunks, created } = await putAll(store, new Map(), [data]);
  const victim = chunks[0]![100]!;
  const file = join(store.root, created[0]!);
  const fh = await open(join(dir, 'out'), 'w');
  t.after(() => fh.close());
  // Read whole once into buffers that are reused: they then hold the right bytes of the very ranges read next.
  const buffers = new RangeBuffers();
  await readPacked(store, PREFIX, chunks[0]!, fh, { buffers });
  assert.ok(readFileSync(join(dir, 'out')).equals(data), 'read back whole');
  const bytes = readFileSync(file);
  // A pack cut short: the range is refused, not completed with what the reused buffer held.
  writeFileSync(file, bytes.subarray(0, bytes.length - 10));
  await assert.rejects(readPacked(store, PREFIX, chunks[0]!, fh, { buffers }), (e: unknown) => e instanceof ObjectStoreError && e.failure === 'damaged' && e.key === created[0]);
  bytes[victim.offset + 7] = bytes[victim.offset + 7]! ^ 0xff;
  writeFileSync(file, bytes);
  const err = await readPacked(store, PREFIX, chunks[0]!, fh, { buffers }).then(
    () => assert.fail('damaged bytes were read'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ObjectStoreError, String(err));
  assert.equal(storeFailureCode(err), 'DATA_LOSS');
  assert.equal(err.key, created[0]);
  assert.match(err.message, new RegExp(`pack ${created[0]}: the chunk at bytes ${victim.offset} to ${victim.offset + victim.sizeBytes - 1} has SHA-256 [0-9a-f]{64}, not ${victim.sha256}`));
  await store.delete(created[0]!);
  await assert.rejects(readPacked(store, PREFIX, chunks[0]!, fh), (e: unknown) => e instanceof ObjectNotFoundError && e.key === created[0]);
});

test('s3:// packs: a chunk damaged in Swift is DATA_LOSS naming its pack', { skip: noSwift, timeout: 120_000 }, async (t) => {
  const store = await s3Store();
  t.after(() => store.client.destroy());
  const { dir, cleanup } = tempDir('feos-packs-');
  t.after(cleanup);
  const data = randomBytes(1024 * 1024);
  const { chunks, created } = await putAll(store, new Map(), [data]);
  // Swift keeps the object as a .data file below its device: change one byte of it, keeping its size.
  const files: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.data')) files.push(join(d, e.name));
    }
  };
  walk(join(server!.dir, 'srv', 'd1', 'objects'));
  const packBytes = chunks[0]!.reduce((n, c) => n + c.sizeBytes, 0);
  const file = files.find((f) => statSync(f).size === packBytes && sha(readFileSync(f)) === sha(data));
  assert.ok(file, `the pack's .data file among ${files.length}`);
  const fh = await open(join(dir, 'out'), 'w');
  t.after(() => fh.close());
  // Read whole first into reused buffers, which then hold the right bytes of the range read again below.
  const buffers = new RangeBuffers();
  await readPacked(store, PREFIX, chunks[0]!, fh, { buffers });
  assert.ok(readFileSync(join(dir, 'out')).equals(data), 'read back whole');
  const damaged = readFileSync(file);
  damaged[5000] = damaged[5000]! ^ 1;
  writeFileSync(file, damaged);
  const err = await readPacked(store, PREFIX, chunks[0]!, fh, { buffers }).then(
    () => assert.fail('damaged bytes were read'),
    (e: unknown) => e,
  );
  assert.equal(storeFailureCode(err), 'DATA_LOSS', String(err));
  assert.match((err as Error).message, new RegExp(`s3://[^ ]+: pack ${created[0]}: the chunk at bytes`));
});

test('s3:// packs: a bucket that does not exist and refused credentials are FAILED_PRECONDITION naming the pack; a server stopped mid-upload is UNAVAILABLE', { skip: noSwift, timeout: 120_000 }, async (t) => {
  const data = randomBytes(20 * 1024 * 1024);
  const missing = new S3ObjectStore('s3://feos-no-such-bucket/feos', { client: server!.client() });
  t.after(() => missing.client.destroy());
  const e1 = await putAll(missing, new Map(), [data]).then(
    () => assert.fail('a put into a missing bucket succeeded'),
    (e: unknown) => e,
  );
  assert.equal(storeFailureCode(e1), 'FAILED_PRECONDITION', String(e1));
  assert.match((e1 as Error).message, new RegExp(`put ${PREFIX}/[0-9a-f]{32}: NoSuchBucket \\(404\\).*check the bucket feos-no-such-bucket`));

  const good = await s3Store();
  t.after(() => good.client.destroy());
  const wrong = new S3ObjectStore(`${good.url}`, {
    client: new S3Client({ endpoint: server!.endpoint, region: server!.region, forcePathStyle: true, credentials: { accessKeyId: server!.accessKeyId, secretAccessKey: 'not-the-secret' } }),
  });
  t.after(() => wrong.client.destroy());
  const e2 = await putAll(wrong, new Map(), [data]).then(
    () => assert.fail('a put with a wrong secret succeeded'),
    (e: unknown) => e,
  );
  assert.equal(storeFailureCode(e2), 'FAILED_PRECONDITION', String(e2));
  assert.match((e2 as Error).message, new RegExp(`put ${PREFIX}/[0-9a-f]{32}: (SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId)`));

  // The server stops once the writer has uploaded a pack (its packs lag the pieces read by those with the hash pool):
  // the next uploads fail.
  const w = new PackWriter(good, PREFIX, new Map());
  let paused = false;
  async function* stopping(): AsyncIterable<Uint8Array> {
    let n = 0;
    for await (const p of pieces(data)) {
      n += p.byteLength;
      if (!paused && n > PACK_BYTES + (PIECES_AT_ONCE + 1) * (1 << 20)) {
        await until('a pack is uploaded', async () => (w.created.length > 0 ? true : undefined), 60_000);
        paused = true;
        await server!.pause();
      }
      yield p;
    }
  }
  let e3: unknown;
  try {
    await w.putFile(stopping());
    await w.finish();
  } catch (e: unknown) {
    e3 = e;
  } finally {
    if (paused) await server!.resume();
  }
  assert.ok(paused && e3, 'the uploads failed once the server stopped');
  assert.equal(storeFailureCode(e3), 'UNAVAILABLE', String(e3));
  assert.match((e3 as Error).message, new RegExp(`${good.url}: put ${PREFIX}/[0-9a-f]{32}: `));
});
