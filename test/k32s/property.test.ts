// Property tests of K32S with fast-check: random states round-trip through the writer and the reader
// at any chunk boundaries; damaged snapshots (a flipped byte, a cut, extra bytes, noise) are refused
// with a K32SError and never restored.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  decodeSnapshot,
  encodeSnapshot,
  K32SError,
  SnapshotDecoder,
  snapshotByteLength,
  type DecodedSnapshot,
  type ModuleShape,
  type SnapshotState,
  type ValType,
} from '../../src/k32s/index.ts';

const utf8Length = (s: string): number => Buffer.byteLength(s, 'utf8');

/** Memory of `bytes` bytes filled from `seed` by a cheap generator (fast-check arrays of 64 KiB are slow). */
function memoryOf(bytes: number, seed: number): Uint8Array {
  const m = new Uint8Array(bytes);
  let x = seed | 1;
  for (let i = 0; i < bytes; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    m[i] = x;
    if (i + 1 < bytes) m[i + 1] = x >>> 8;
  }
  return m;
}

const memoryArb = fc.oneof(
  fc.record({ pages: fc.integer({ min: 0, max: 2 }), seed: fc.integer() }).map(({ pages, seed }) => ({ pages, memory: memoryOf(pages * 65536, seed) })),
  fc.record({ bytes: fc.integer({ min: 0, max: 65535 }), seed: fc.integer() }).map(({ bytes, seed }) => ({ pages: 1, memory: memoryOf(bytes, seed) })),
);

const globalArb = fc.oneof(
  fc.record({ type: fc.constantFrom<ValType>(0x7f, 0x7d), bits: fc.bigInt({ min: 0n, max: 0xffffffffn }) }),
  fc.record({ type: fc.constant<ValType>(0x70), bits: fc.oneof(fc.bigInt({ min: 0n, max: 5000n }), fc.constant(0xffffffffn)) }),
  fc.record({ type: fc.constantFrom<ValType>(0x7e, 0x7c), bits: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }) }),
);

const stateArb: fc.Arbitrary<SnapshotState> = fc
  .record({
    image: fc.uint8Array({ minLength: 32, maxLength: 32 }),
    memory: memoryArb,
    podTimeMs: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
    unixTimeMs: fc.oneof(fc.constant(0n), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })),
    globals: fc.uniqueArray(fc.tuple(fc.nat(0xffffffff), globalArb), { selector: ([i]) => i, maxLength: 12 }),
    tables: fc.uniqueArray(fc.tuple(fc.nat(8), fc.array(fc.oneof(fc.nat(5000), fc.constant(0xffffffff)), { maxLength: 40 })), {
      selector: ([i]) => i,
      maxLength: 3,
    }),
    channels: fc.uniqueArray(
      fc.tuple(
        fc.integer({ min: 1, max: 0xffffffff }),
        fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }).filter((s) => utf8Length(s) <= 128),
      ),
      { selector: ([h]) => h, maxLength: 6 },
    ),
    events: fc.array(fc.tuple(fc.string({ unit: 'binary', minLength: 1, maxLength: 30 }), fc.uint8Array({ maxLength: 200 })), { maxLength: 8 }),
  })
  .filter((s) => new Set(s.channels.map(([, n]) => n)).size === s.channels.length)
  .map(
    (s): SnapshotState => ({
      imageSha256: s.image,
      memory: s.memory.memory,
      memoryPages: s.memory.pages,
      podTimeMs: s.podTimeMs,
      unixTimeMs: s.unixTimeMs,
      globals: s.globals.map(([index, g]) => ({ index, ...g })),
      tables: s.tables.map(([index, entries]) => ({ index, entries: Uint32Array.from(entries) })),
      channels: s.channels.map(([handle, name]) => ({ handle, name })),
      events: s.events.map(([topic, payload]) => ({ topic, payload })),
    }),
  );

function moduleOf(state: SnapshotState): ModuleShape {
  return {
    globals: new Map(state.globals.map((g) => [g.index, g.type])),
    tables: new Map(state.tables.map((t) => [t.index, { min: t.entries.length, max: t.entries.length }])),
    functionCount: 5001,
  };
}

function encodeWhole(state: SnapshotState): Uint8Array {
  return new Uint8Array(Buffer.concat([...encodeSnapshot(state, { chunkBytes: 4096 })]));
}

/** Splits `bytes` at the sorted `cuts` (positions taken modulo its length). */
function split(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let from = 0;
  for (const c of [...at, bytes.length]) {
    out.push(bytes.subarray(from, c));
    from = c;
  }
  return out;
}

function assertSameState(d: DecodedSnapshot, s: SnapshotState): void {
  assert.deepEqual(d.header.imageSha256, s.imageSha256);
  assert.equal(d.header.memoryBytes, s.memory.length);
  assert.equal(d.header.memoryPages, s.memoryPages);
  assert.equal(d.header.podTimeMs, s.podTimeMs);
  assert.equal(d.header.unixTimeMs, s.unixTimeMs);
  assert.ok(Buffer.from(d.memory!.subarray(0, s.memory.length)).equals(s.memory));
  assert.deepEqual(d.globals, s.globals);
  assert.deepEqual(d.tables, s.tables);
  assert.deepEqual(d.channels, s.channels);
  assert.deepEqual(d.events, s.events);
}

/** Decodes `chunks`, asserting that only a K32SError can come out; returns it, or undefined on success. */
async function outcome(chunks: Uint8Array[], module?: ModuleShape): Promise<K32SError | undefined> {
  try {
    await decodeSnapshot(chunks, module ? { module } : {});
    return undefined;
  } catch (e: unknown) {
    if (!(e instanceof K32SError)) throw new Error(`the reader threw ${String(e)} instead of a K32SError`, { cause: e });
    return e;
  }
}

describe('K32S properties', { timeout: 120_000 }, () => {
  it('any state round-trips at any chunk boundaries, with its size known up front', async () => {
    await fc.assert(
      fc.asyncProperty(stateArb, fc.array(fc.nat(), { maxLength: 20 }), fc.integer({ min: 1, max: 70_000 }), async (state, cuts, chunkBytes) => {
        const chunks = [...encodeSnapshot(state, { chunkBytes })];
        const bytes = new Uint8Array(Buffer.concat(chunks));
        assert.equal(bytes.length, snapshotByteLength(state));
        const d = await decodeSnapshot(split(bytes, cuts), { module: moduleOf(state), expectedImageSha256: state.imageSha256, memoryLimitBytes: state.memory.length });
        assertSameState(d, state);
        assert.equal(d.byteLength, bytes.length);
      }),
      { numRuns: 300 },
    );
  });

  it('the writer yields memory as views of the live memory, never copies', () => {
    fc.assert(
      fc.property(stateArb, (state) => {
        let memoryBytes = 0;
        for (const chunk of encodeSnapshot(state, { chunkBytes: 10_000 })) {
          if (chunk.buffer === state.memory.buffer) memoryBytes += chunk.length;
        }
        assert.equal(memoryBytes, state.memory.length);
      }),
      { numRuns: 50 },
    );
  });

  it('a flipped byte anywhere is refused with a K32SError, never restored', async () => {
    await fc.assert(
      fc.asyncProperty(stateArb, fc.nat(), fc.integer({ min: 1, max: 255 }), fc.boolean(), fc.boolean(), async (state, where, mask, withModule, outsideMemory) => {
        const bytes = encodeWhole(state);
        // Half the flips land outside linear memory, where the structure is (memory dominates the bytes).
        const memoryEnd = state.memory.length > 0 ? 74 + state.memory.length : 68;
        const structure = bytes.length - (memoryEnd - 68);
        let at = where % bytes.length;
        if (outsideMemory) at = where % structure < 68 ? where % structure : memoryEnd + (where % structure) - 68;
        bytes[at]! ^= mask;
        const err = await outcome([bytes], withModule ? moduleOf(state) : undefined);
        assert.ok(err, `flipping byte ${at} of ${bytes.length} went unnoticed`);
      }),
      { numRuns: 1000 },
    );
  });

  it('a flipped byte outside memory with the trailer recomputed never crashes the reader', async () => {
    // With a valid trailer the structure alone must hold the reader: it either refuses the bytes
    // with a K32SError or reads a snapshot that accounts for every byte.
    await fc.assert(
      fc.asyncProperty(stateArb, fc.nat(), fc.integer({ min: 1, max: 255 }), async (state, where, mask) => {
        const bytes = encodeWhole(state);
        const memoryEnd = state.memory.length > 0 ? 74 + state.memory.length : 68;
        const structure = bytes.length - 32 - (memoryEnd - 68);
        const k = where % structure;
        const at = k < 68 ? k : memoryEnd + k - 68;
        bytes[at]! ^= mask;
        bytes.set(createHash('sha256').update(bytes.subarray(0, bytes.length - 32)).digest(), bytes.length - 32);
        try {
          const d = await decodeSnapshot([bytes], { memory: 'discard', memoryLimitBytes: 1 << 20 });
          assert.equal(d.byteLength, bytes.length);
          assert.equal(d.sections.reduce((n, sec) => n + 6 + sec.length, 68 + 32), bytes.length);
        } catch (e: unknown) {
          if (!(e instanceof K32SError)) throw e;
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('a cut anywhere is refused as Truncated, at any chunk boundaries', async () => {
    await fc.assert(
      fc.asyncProperty(stateArb, fc.nat(), fc.array(fc.nat(), { maxLength: 8 }), async (state, where, cuts) => {
        const bytes = encodeWhole(state);
        const cut = bytes.subarray(0, where % bytes.length);
        const err = await outcome(split(cut, cuts));
        assert.equal(err?.code, 'Truncated');
      }),
      { numRuns: 200 },
    );
  });

  it('bytes after the trailer are refused', async () => {
    await fc.assert(
      fc.asyncProperty(stateArb, fc.uint8Array({ minLength: 1, maxLength: 40 }), async (state, extra) => {
        const err = await outcome([encodeWhole(state), extra]);
        assert.equal(err?.code, 'Malformed');
        assert.match(err.message, /after its trailer/);
      }),
      { numRuns: 100 },
    );
  });

  it('noise, with or without a valid first header, gives only K32SErrors', async () => {
    const prefix = Uint8Array.of(0x4b, 0x33, 0x32, 0x53, 1, 0, 0, 0);
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 600 }), fc.boolean(), fc.array(fc.nat(), { maxLength: 6 }), async (noise, k32s, cuts) => {
        const bytes = k32s ? new Uint8Array(Buffer.concat([prefix, noise])) : noise;
        const err = await outcome(split(bytes, cuts));
        assert.ok(err);
      }),
      { numRuns: 500 },
    );
  });

  it('random header fields over a valid body are refused with a K32SError', async () => {
    await fc.assert(
      fc.asyncProperty(stateArb, fc.uint8Array({ minLength: 60, maxLength: 60 }), async (state, fields) => {
        const bytes = encodeWhole(state);
        bytes.set(fields, 8);
        const decoder = new SnapshotDecoder({ memory: 'discard', memoryLimitBytes: 1 << 20 });
        try {
          decoder.push(bytes);
          decoder.end();
        } catch (e: unknown) {
          assert.ok(e instanceof K32SError, String(e));
          return;
        }
        assert.fail('a random header with the old trailer was accepted');
      }),
      { numRuns: 200 },
    );
  });
});
