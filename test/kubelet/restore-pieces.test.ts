/**
 * The restore's data is handed to the pod runtime in pieces of a fixed size, whatever the network's chunks
 * (`inPiecesOf` in src/kubelet/container.ts): the same bytes in the same order, every piece but the last full.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { inPiecesOf } from '../../src/kubelet/container.ts';

async function* from(chunks: Uint8Array[]): AsyncGenerator<Uint8Array> {
  for (const c of chunks) yield c;
}

test('any chunks come out as the same bytes in full pieces, the last one shorter', { timeout: 30_000 }, async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 20 }), fc.integer({ min: 1, max: 128 }), async (chunks, size) => {
      const pieces: Uint8Array[] = [];
      for await (const p of inPiecesOf(from(chunks), size)) pieces.push(p.slice());
      const want = Buffer.concat(chunks);
      assert.deepEqual(Buffer.concat(pieces), want);
      for (const p of pieces.slice(0, -1)) assert.equal(p.length, size);
      if (pieces.length > 0) assert.ok(pieces.at(-1)!.length > 0 && pieces.at(-1)!.length <= size);
      assert.equal(pieces.length, Math.ceil(want.length / size));
    }),
    { numRuns: 300 },
  );
});

test('a consumer that stops early closes the source', { timeout: 5_000 }, async () => {
  let closed = false;
  async function* source(): AsyncGenerator<Uint8Array> {
    try {
      for (let i = 0; i < 100; i++) yield new Uint8Array(10).fill(i);
    } finally {
      closed = true;
    }
  }
  for await (const p of inPiecesOf(source(), 25)) {
    assert.equal(p.length, 25);
    break;
  }
  assert.ok(closed);
});
