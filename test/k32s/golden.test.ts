// K32S against the golden vectors of ./golden.ts, written by hand from the seed's tables.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decodeSnapshot,
  encodeSnapshot,
  fromHex,
  K32SError,
  SnapshotDecoder,
  snapshotByteLength,
  snapshotSha256,
  toHex,
  type DecodedSnapshot,
  type SnapshotHeader,
  type SnapshotState,
} from '../../src/k32s/index.ts';
import { EMPTY_MODULE_SHA256, GOLDEN_A, GOLDEN_B, GOLDEN_C } from './golden.ts';

const image = fromHex(EMPTY_MODULE_SHA256, 32);

/** The state that vector A holds, as a pod runtime would hand it to the writer. */
function stateA(): SnapshotState {
  const memory = new Uint8Array(16);
  memory.set(new TextEncoder().encode('hello kube32'));
  memory[15] = 0x2a;
  return {
    imageSha256: image,
    memory,
    memoryPages: 1,
    podTimeMs: 1234567n,
    unixTimeMs: BigInt(Date.parse('2026-11-29T14:00:00Z')),
    globals: [
      { index: 0, type: 0x7f, bits: 0xffffffffn },
      { index: 3, type: 0x7c, bits: new DataView(Float64Array.of(1.5).buffer).getBigUint64(0, true) },
    ],
    tables: [{ index: 0, entries: Uint32Array.of(3, 0xffffffff) }],
    channels: [{ handle: 1, name: 'temp' }],
    events: [{ topic: 't', payload: new TextEncoder().encode('hi') }],
  };
}

function concat(chunks: Iterable<Uint8Array>): Uint8Array {
  return new Uint8Array(Buffer.concat([...chunks]));
}

function bytewise(bytes: Uint8Array): Uint8Array[] {
  return Array.from(bytes, (b) => Uint8Array.of(b));
}

function assertStateA(d: DecodedSnapshot): void {
  const want = stateA();
  assert.deepEqual(d.header, {
    version: 1,
    flags: 0,
    imageSha256: image,
    memoryBytes: 16,
    memoryPages: 1,
    podTimeMs: 1234567n,
    unixTimeMs: 1795960800000n,
    sectionCount: 5,
  });
  assert.deepEqual(d.memory?.subarray(0, 16), want.memory);
  assert.deepEqual(d.globals, want.globals);
  assert.deepEqual(d.tables, want.tables);
  assert.deepEqual(d.channels, want.channels);
  assert.deepEqual(d.events, want.events);
  assert.deepEqual(d.unknownSections, []);
  assert.equal(toHex(d.snapshotSha256), '43dcfee7870671193fb6c47917587d17f77d8efcb9f044b2967446035c3e78e1');
  assert.equal(d.trailerOk, true);
  assert.equal(d.byteLength, 207);
  assert.deepEqual(
    d.sections.map((s) => [s.name, s.offset, s.length]),
    [
      ['MEMORY', 68, 16],
      ['GLOBALS', 90, 26],
      ['TABLE', 122, 16],
      ['CHANNELS', 144, 10],
      ['EVENTS', 160, 9],
    ],
  );
}

describe('K32S golden vectors', { timeout: 30_000 }, () => {
  it('vector A decodes to the state it was written from, whole and one byte at a time', async () => {
    assertStateA(await decodeSnapshot([GOLDEN_A]));
    assertStateA(await decodeSnapshot(bytewise(GOLDEN_A)));
  });

  it('the writer produces vector A byte for byte, and its size is known up front', () => {
    const state = stateA();
    assert.equal(snapshotByteLength(state), 207);
    assert.equal(toHex(concat(encodeSnapshot(state))), toHex(GOLDEN_A));
    assert.equal(toHex(concat(encodeSnapshot(state, { chunkBytes: 3 }))), toHex(GOLDEN_A));
    assert.equal(toHex(snapshotSha256(state)), '43dcfee7870671193fb6c47917587d17f77d8efcb9f044b2967446035c3e78e1');
  });

  it('vector A checks against its own module: image, memory limit, globals, tables, functions', async () => {
    const d = await decodeSnapshot([GOLDEN_A], {
      expectedImageSha256: image,
      memoryLimitBytes: 16,
      module: {
        globals: new Map([
          [0, 0x7f],
          [3, 0x7c],
        ]),
        tables: new Map([[0, { min: 2, max: 2 }]]),
        functionCount: 4,
      },
    });
    assertStateA(d);
  });

  it('vector A restores straight into the memory the caller gives, after the header is read', async () => {
    const live = new Uint8Array(65536).fill(0xee);
    let headerSeen = false;
    const d = await decodeSnapshot(bytewise(GOLDEN_A), {
      memory: (h) => {
        headerSeen = h.memoryBytes === 16 && h.memoryPages === 1;
        return live;
      },
    });
    assert.ok(headerSeen);
    assert.equal(d.memory, live);
    assert.equal(new TextDecoder().decode(live.subarray(0, 12)), 'hello kube32');
    assert.equal(live[16], 0xee, 'bytes past memory bytes stay as they were');
  });

  it('vector B, the smallest snapshot, is what the writer makes of an empty module', async () => {
    const state: SnapshotState = {
      imageSha256: image,
      memory: new Uint8Array(0),
      memoryPages: 0,
      podTimeMs: 0n,
      unixTimeMs: 0n,
      globals: [],
      tables: [],
      channels: [],
      events: [],
    };
    assert.equal(GOLDEN_B.length, 100);
    assert.equal(toHex(concat(encodeSnapshot(state))), toHex(GOLDEN_B));
    const d = await decodeSnapshot([GOLDEN_B]);
    assert.equal(d.header.sectionCount, 0);
    assert.equal(d.memory?.length, 0);
    assert.deepEqual([d.globals, d.tables, d.channels, d.events], [[], [], [], []]);
  });

  it('vector C: an unknown section is skipped, sections come in any order', async () => {
    const sections: string[] = [];
    const d = await decodeSnapshot(bytewise(GOLDEN_C), { onSection: (s) => sections.push(`${s.name}@${s.offset}`) });
    assert.deepEqual(sections, ['UNKNOWN@68', 'EVENTS@77', 'MEMORY@96']);
    assert.deepEqual(d.unknownSections, [255]);
    assert.deepEqual(d.events, [{ topic: 'ok', payload: Uint8Array.of(1, 2, 3, 4, 5) }]);
    assert.equal(d.header.podTimeMs, 42n);
    assert.equal(d.byteLength, 134);
  });

  it('the decoder gives the header as soon as its 68 bytes are in', () => {
    const decoder = new SnapshotDecoder({ memory: 'discard' });
    decoder.push(GOLDEN_A.subarray(0, 67));
    const before: SnapshotHeader | undefined = decoder.header;
    assert.equal(before, undefined);
    decoder.push(GOLDEN_A.subarray(67, 68));
    assert.equal(decoder.header?.podTimeMs, 1234567n);
    assert.throws(() => decoder.end(), (e: unknown) => e instanceof K32SError && e.code === 'Truncated');
  });
});
