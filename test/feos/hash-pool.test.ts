// The hash pool (src/feos/store/hash-pool.ts): worker threads whose SHA-256s and content-defined cuts are the
// main thread's, byte for byte, however many calls are in flight; bad sizes and spans refused saying why; a read
// buffer handed over goes without a copy and comes back, and a pack writer reads into its buffers again.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { ChunkCutter, HashPool, LocalDirObjectStore, PACKED_CHUNKS, PackWriter, PIECE_BYTES, PieceBuffers, readPacked } from '../../src/feos/store/index.ts';
import { fileChunks } from '../../src/feos/pods/index.ts';
import { tempDir } from './harness.ts';

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

test('hash pool: the SHA-256s of spans are those of the main thread; a range handed over comes back whole', { timeout: 60_000 }, async (t) => {
  const pool = new HashPool(2);
  t.after(() => pool.close());
  const bytes = randomBytes(3 << 20);
  const copy = Buffer.from(bytes);
  const spans: Array<[number, number]> = [
    [0, 4096],
    [4096, 1],
    [100, 0],
    [(3 << 20) - 32768, 32768],
  ];
  const answers = await Promise.all(Array.from({ length: 6 }, () => pool.digests(Buffer.from(copy), spans)));
  for (const a of answers) {
    assert.deepEqual(a.sha256s, spans.map(([o, n]) => sha(copy.subarray(o, o + n))));
    assert.ok(a.bytes.equals(copy), 'the bytes come back as they went');
  }
  // A view into a larger buffer is copied, not taken: the caller's bytes stay usable.
  const view = bytes.subarray(10, 5000);
  const got = await pool.digests(view, [[0, view.length]]);
  assert.equal(got.sha256s[0], sha(copy.subarray(10, 5000)));
  assert.equal(bytes.length, 3 << 20, "the caller's buffer is not detached");
  await assert.rejects(pool.digests(Buffer.alloc(10), [[5, 6]]), /span \[5, 6\] is outside the 10 bytes/);
});

test('hash pool: a chunker cuts as ChunkCutter does and hashes each chunk and the whole stream', { timeout: 60_000 }, async (t) => {
  const pool = new HashPool(2);
  t.after(() => pool.close());
  const data = randomBytes(6 << 20);
  data.fill(0, 1 << 20, 2 << 20);
  const want = new ChunkCutter(PACKED_CHUNKS);
  const expected = [...want.push(data), ...want.end()];
  const s = pool.chunker(PACKED_CHUNKS);
  const pieces: Array<ReturnType<typeof s.push>> = [];
  for (let i = 0; i < data.length; i += 777_777) pieces.push(s.push(data.subarray(i, i + 777_777)));
  const ended = s.end();
  const cuts = [...(await Promise.all(pieces)), await ended];
  const chunks = cuts.flatMap((c) => c.chunks);
  assert.deepEqual(
    chunks.map((c) => c.length),
    expected.map((c) => c.length),
  );
  assert.deepEqual(
    cuts.flatMap((c) => c.sha256s),
    expected.map(sha),
  );
  assert.ok(Buffer.concat(chunks).equals(data));
  const last = await ended;
  assert.equal(last.sizeBytes, data.length);
  assert.equal(last.sha256, sha(data));
  const bad = pool.chunker({ minBytes: 10, avgBytes: 4096, maxBytes: 8192 });
  await assert.rejects(bad.push(Buffer.alloc(10)), /cdc: sizes .* want 64 <= min < avg < max/);
  await assert.rejects(bad.end(), /cdc: sizes/);
});

test('hash pool: a piece handed over goes to the worker without a copy and comes back with its chunks; a pack writer gives its read buffers back', { timeout: 60_000 }, async (t) => {
  const pool = new HashPool(1);
  t.after(() => pool.close());
  const { dir, cleanup } = tempDir('feos-pieces-');
  t.after(cleanup);
  const data = randomBytes(5 * PIECE_BYTES + 12345);
  const want = new ChunkCutter(PACKED_CHUNKS);
  const expected = [...want.push(data), ...want.end()];
  // Pieces of PieceBuffers, handed over: detached while the worker has them, back whole, cut as ChunkCutter cuts.
  const buffers = new PieceBuffers();
  const s = pool.chunker(PACKED_CHUNKS);
  const cuts = [];
  for (let i = 0; i + PIECE_BYTES <= data.length; i += PIECE_BYTES) {
    const piece = buffers.take();
    data.copy(piece, 0, i, i + PIECE_BYTES);
    assert.ok(buffers.owns(piece));
    const cut = s.push(piece, true);
    assert.equal(piece.byteLength, 0, 'handed over, not copied');
    cuts.push(await cut);
    assert.ok(cuts.at(-1)!.piece!.equals(data.subarray(i, i + PIECE_BYTES)), 'the piece comes back as it went');
  }
  cuts.push(await s.push(data.subarray(5 * PIECE_BYTES)));
  const last = await s.end();
  const chunks = [...cuts.flatMap((c) => c.chunks), ...last.chunks];
  assert.deepEqual(chunks.map(sha), expected.map(sha));
  assert.deepEqual([...cuts.flatMap((c) => c.sha256s), ...last.sha256s], expected.map(sha));
  assert.equal(last.sha256, sha(data));
  // A pack writer reading a file into its pieces stores it whole and keeps the buffers for the next read.
  const path = join(dir, 'file');
  writeFileSync(path, data);
  const store = new LocalDirObjectStore(pathToFileURL(join(dir, 'store')).href);
  const w = new PackWriter(store, 'pods/pieceshash1/packs', new Map(), { pool });
  const put = await w.putFile(fileChunks(path, undefined, w.pieces));
  await w.finish();
  assert.equal(put.sha256, sha(data));
  assert.deepEqual(put.chunks.map((c) => c.sha256), expected.map(sha));
  const again = w.pieces.take();
  assert.ok([0, 1, 2, 3, 4].some((k) => again.equals(data.subarray(k * PIECE_BYTES, (k + 1) * PIECE_BYTES))), 'a buffer read into before is read into again');
  const out = join(dir, 'back');
  const fh = await open(out, 'w');
  try {
    await readPacked(store, 'pods/pieceshash1/packs', put.chunks, fh, { pool });
  } finally {
    await fh.close();
  }
  assert.ok(readFileSync(out).equals(data), 'the packs read back as the file');
});
