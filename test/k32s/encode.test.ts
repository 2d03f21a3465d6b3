// The K32S writer refuses states that version 1 cannot hold, when it is called (before any chunk).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encodeSnapshot, snapshotByteLength, type SnapshotState } from '../../src/k32s/index.ts';

function good(): SnapshotState {
  return {
    imageSha256: new Uint8Array(32),
    memory: new Uint8Array(65536),
    memoryPages: 1,
    podTimeMs: 0n,
    unixTimeMs: 0n,
    globals: [],
    tables: [],
    channels: [],
    events: [],
  };
}

describe('K32S writer checks', { timeout: 10_000 }, () => {
  const cases: [string, (s: SnapshotState) => void, RegExp][] = [
    ['a digest that is not 32 bytes', (s) => (s.imageSha256 = new Uint8Array(31)), /imageSha256 must be 32 bytes/],
    ['memory that disagrees with its pages', (s) => (s.memoryPages = 2), /memory.length \(65536 bytes\) must be memoryPages × 64 KiB/],
    ['a partial page with more than one page', (s) => {
        s.memory = new Uint8Array(70000);
        s.memoryPages = 2;
      }, /must be memoryPages × 64 KiB/],
    ['more pages than wasm32 has', (s) => (s.memoryPages = 65537), /memoryPages must be 0 to 65536/],
    ['a negative pod time', (s) => (s.podTimeMs = -1n), /podTimeMs must be a bigint from 0 to 2\^64-1/],
    ['a Unix time past u64', (s) => (s.unixTimeMs = 1n << 64n), /unixTimeMs must be a bigint/],
    ['a global listed twice', (s) => (s.globals = [{ index: 1, type: 0x7f, bits: 0n }, { index: 1, type: 0x7e, bits: 0n }]), /list global 1 twice/],
    ['an unknown value type', (s) => (s.globals = [{ index: 0, type: 0x7b as 0x7f, bits: 0n }]), /global 0 type must be 0x7F/],
    ['an i32 over 32 bits', (s) => (s.globals = [{ index: 0, type: 0x7f, bits: 1n << 32n }]), /global 0 bits of a 32-bit value must be below 2\^32/],
    ['a table listed twice', (s) => (s.tables = [{ index: 0, entries: new Uint32Array(1) }, { index: 0, entries: new Uint32Array(0) }]), /list table 0 twice/],
    ['a channel handle 0', (s) => (s.channels = [{ handle: 0, name: 'a' }]), /handle must be 1 or more/],
    ['a channel name over 128 bytes', (s) => (s.channels = [{ handle: 1, name: 'é'.repeat(65) }]), /name must be 1 to 128 bytes of UTF-8, got 130/],
    ['an empty event topic', (s) => (s.events = [{ topic: '', payload: new Uint8Array(0) }]), /topic must be 1 to 65535 bytes/],
  ];
  for (const [name, change, message] of cases) {
    it(`refuses ${name} at the call, with a RangeError naming the field`, () => {
      const s = good();
      change(s);
      assert.throws(() => encodeSnapshot(s), (e: unknown) => e instanceof RangeError && message.test(e.message));
      assert.throws(() => snapshotByteLength(s), RangeError);
    });
  }

  it('refuses a chunk size that is not a positive integer', () => {
    assert.throws(() => encodeSnapshot(good(), { chunkBytes: 0 }), /chunkBytes must be a positive integer, got 0/);
  });

  it('stops with an error, not a short stream, when the memory grows while it is written', () => {
    // The project's type libraries leave out WebAssembly's; this is the one constructor used.
    type WasmMemory = { buffer: ArrayBuffer; grow(pages: number): number };
    const { WebAssembly: wasm } = globalThis as unknown as { WebAssembly: { Memory: new (d: { initial: number }) => WasmMemory } };
    const memory = new wasm.Memory({ initial: 2 });
    const s = good();
    s.memory = new Uint8Array(memory.buffer);
    s.memoryPages = 2;
    const chunks = encodeSnapshot(s, { chunkBytes: 65536 });
    chunks.next(); // header
    chunks.next(); // first page
    memory.grow(1);
    assert.throws(() => chunks.next(), /the linear memory changed size while its snapshot was written \(131072 to 0 bytes\)/);
  });

  it('takes a pod whose limit is below one page: one page, only the limit backed', () => {
    const s = good();
    s.memory = new Uint8Array(1000);
    assert.equal(snapshotByteLength(s), 68 + 6 + 1000 + 32);
  });
});
