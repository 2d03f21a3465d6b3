// The hash pool (src/feos/store/hash-pool.ts): worker threads whose SHA-256s and content-defined cuts are the
// main thread's, byte for byte, however many calls are in flight; bad sizes and spans refused saying why.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { ChunkCutter, HashPool, PACKED_CHUNKS } from '../../src/feos/store/index.ts';

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
