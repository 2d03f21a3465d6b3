// Content-addressed chunks of files in an object store (src/feos/store/cdc.ts, chunked.ts): content-defined cuts that
// survive bytes inserted in the middle, a second put of (nearly) the same file uploading (nearly) nothing, chunks
// checked as they are read back, and a prune that keeps what is named.
import assert from 'node:assert/strict';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import {
  contentDefinedChunks,
  getChunked,
  listChunks,
  LocalDirObjectStore,
  MAX_CHUNK_BYTES,
  MIN_CHUNK_BYTES,
  ObjectStoreError,
  pruneChunks,
  putChunked,
  storeFailureCode,
} from '../../src/feos/store/index.ts';
import { tempDir } from './harness.ts';

async function* pieces(b: Buffer, size: number): AsyncIterable<Uint8Array> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

async function cut(b: Buffer, size: number): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const c of contentDefinedChunks(pieces(b, size))) out.push(c);
  return out;
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

test('content-defined chunks: they make up the stream, keep their bounds, and do not depend on how it was read', { timeout: 60_000 }, async () => {
  const data = randomBytes(24 * 1024 * 1024);
  const a = await cut(data, 1024 * 1024);
  assert.ok(Buffer.concat(a).equals(data));
  assert.ok(a.length >= data.length / MAX_CHUNK_BYTES && a.length <= data.length / MIN_CHUNK_BYTES, `${a.length} chunks`);
  for (const c of a.slice(0, -1)) assert.ok(c.length >= MIN_CHUNK_BYTES && c.length <= MAX_CHUNK_BYTES, `a chunk of ${c.length} bytes`);
  const b = await cut(data, 65_537);
  assert.deepEqual(b.map(sha), a.map(sha));
  // Zeros never match the mask: they are cut at the largest size.
  const zeros = await cut(Buffer.alloc(2 * MAX_CHUNK_BYTES + 1000), 1024 * 1024);
  assert.deepEqual(zeros.map((c) => c.length), [MAX_CHUNK_BYTES, MAX_CHUNK_BYTES, 1000]);
  assert.deepEqual(await cut(Buffer.alloc(0), 1), []);
});

/** `n` pseudo-random bytes, the same for the same seed (AES-128-CTR of zeros): a property checked on them cannot flake. */
function seededBytes(n: number, seed: number): Buffer {
  const key = createHash('sha256').update(`chunked-store ${seed}`).digest().subarray(0, 16);
  return createCipheriv('aes-128-ctr', key, Buffer.alloc(16)).update(Buffer.alloc(n));
}

test('content-defined chunks: 4 KiB inserted in the middle of 24 MiB change the chunks around it alone', { timeout: 60_000 }, async () => {
  // An insert changes the chunk it falls in; a cut point inside the inserted bytes, or an old cut point that the new
  // cut's minimum size skips, splits that change over one more chunk. Beyond those the cuts are the old ones again.
  for (const seed of [1, 2, 3]) {
    const data = seededBytes(24 * 1024 * 1024, seed);
    const before = new Set((await cut(data, 1024 * 1024)).map(sha));
    const at = 11 * 1024 * 1024 + 12_345;
    const after = await cut(Buffer.concat([data.subarray(0, at), seededBytes(4096, seed + 100), data.subarray(at)]), 1024 * 1024);
    const fresh = after.filter((c) => !before.has(sha(c)));
    assert.ok(fresh.length >= 1 && fresh.length <= 3, `seed ${seed}: ${fresh.length} new chunks`);
    assert.ok(
      fresh.reduce((n, c) => n + c.length, 0) <= 2 * MAX_CHUNK_BYTES + 4096,
      `seed ${seed}: what a second upload would send is a chunk or two, not the 13 MiB after the insert`,
    );
  }
});

test('putChunked uploads the chunks the store lacks; a second put of the same file uploads none; getChunked reads it back', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-chunks-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const prefix = 'pods/abcdefghjkm/chunks';
  const data = seededBytes(16 * 1024 * 1024, 4);
  const first = await putChunked(store, prefix, pieces(data, 1 << 20), { known: await listChunks(store, prefix) });
  assert.equal(first.sizeBytes, data.length);
  assert.equal(first.sha256, sha(data));
  assert.equal(first.uploadedBytes, data.length);
  assert.equal((await listChunks(store, prefix)).size, new Set(first.chunks.map((c) => c.sha256)).size);
  const again = await putChunked(store, prefix, pieces(data, 300_000), { known: await listChunks(store, prefix) });
  assert.equal(again.uploadedBytes, 0);
  assert.deepEqual(again.created, []);
  assert.deepEqual(again.chunks, first.chunks);
  // One page changed in the middle: one chunk goes up.
  const changed = Buffer.from(data);
  seededBytes(4096, 5).copy(changed, 8 * 1024 * 1024);
  const third = await putChunked(store, prefix, pieces(changed, 1 << 20), { known: await listChunks(store, prefix) });
  assert.equal(third.created.length, 1);
  assert.ok(third.uploadedBytes <= MAX_CHUNK_BYTES, `${third.uploadedBytes} bytes uploaded`);
  const back: Uint8Array[] = [];
  for await (const c of getChunked(store, prefix, third.chunks)) back.push(c);
  assert.ok(Buffer.concat(back).equals(changed));

  // The prune keeps the chunks named, removes the rest.
  const keep = new Set(third.chunks.map((c) => c.sha256));
  assert.equal(await pruneChunks(store, prefix, keep), 1, "the first file's chunk that the third replaced");
  assert.deepEqual([...(await listChunks(store, prefix))].sort(), [...keep].sort());
});

test('getChunked refuses a chunk whose bytes differ as damaged, naming it', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-chunks-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const prefix = 'pods/p/chunks';
  const put = await putChunked(store, prefix, pieces(randomBytes(3 * 1024 * 1024), 1 << 20), { known: new Set() });
  const victim = put.chunks[0]!.sha256;
  const file = join(dir, 'pods', 'p', 'chunks', victim);
  assert.ok(readdirSync(join(dir, 'pods', 'p', 'chunks')).includes(victim));
  writeFileSync(file, randomBytes(put.chunks[0]!.sizeBytes));
  const err = await (async () => {
    for await (const _ of getChunked(store, prefix, put.chunks)) void _;
  })().then(
    () => assert.fail('a damaged chunk was read'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ObjectStoreError);
  assert.equal(storeFailureCode(err), 'DATA_LOSS');
  assert.match(err.message, new RegExp(`chunk pods/p/chunks/${victim} is \\d+ bytes with SHA-256 [0-9a-f]{64}, not`));
});

test('a put that fails leaves the store knowing only what it holds: the next put uploads the failed chunks', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-chunks-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const prefix = 'pods/p/chunks';
  const data = randomBytes(8 * 1024 * 1024);
  const ac = new AbortController();
  let n = 0;
  async function* cutOff(): AsyncIterable<Uint8Array> {
    for await (const p of pieces(data, 1 << 20)) {
      if (++n === 5) ac.abort(new Error('abandoned'));
      yield p;
    }
  }
  const known = new Set<string>();
  await assert.rejects(putChunked(store, prefix, cutOff(), { known, signal: ac.signal }), /abandoned/);
  const put = await putChunked(store, prefix, pieces(data, 1 << 20), { known: await listChunks(store, prefix) });
  const back: Uint8Array[] = [];
  for await (const c of getChunked(store, prefix, put.chunks)) back.push(c);
  assert.ok(Buffer.concat(back).equals(data));
});
