// Every refusal the seed lists ("Snapshot format": a restore refuses the snapshot with a message that
// names the cause), and the layout errors, from hand-made damage to golden vector A.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { decodeSnapshot, K32SError, SnapshotDecoder, type DecodeOptions, type K32SErrorCode } from '../../src/k32s/index.ts';
import { EMPTY_MODULE_SHA256, GOLDEN_A } from './golden.ts';

const TRAILER_AT = 175;

/** A copy of vector A with `bytes` written at `offset`, its trailer recomputed unless `keepTrailer`. */
function damaged(offset: number, bytes: number[], keepTrailer = false): Uint8Array {
  const out = GOLDEN_A.slice();
  out.set(bytes, offset);
  if (!keepTrailer) out.set(createHash('sha256').update(out.subarray(0, TRAILER_AT)).digest(), TRAILER_AT);
  return out;
}

/** Vector A with the section at `from` (to `to`) replaced by `section`, section count and trailer fixed. */
function withSection(from: number, to: number, section: number[], sectionCountDelta = 0): Uint8Array {
  const body = Buffer.concat([GOLDEN_A.subarray(0, from), Uint8Array.from(section), GOLDEN_A.subarray(to, TRAILER_AT)]);
  body.writeUInt32LE(body.readUInt32LE(64) + sectionCountDelta, 64);
  return new Uint8Array(Buffer.concat([body, createHash('sha256').update(body).digest()]));
}

async function refuse(bytes: Uint8Array, code: K32SErrorCode, message: RegExp, opts: DecodeOptions = {}): Promise<K32SError> {
  for (const chunks of [[bytes], Array.from(bytes, (b) => Uint8Array.of(b))]) {
    const err = await decodeSnapshot(chunks, opts).then(
      () => assert.fail('the snapshot was accepted'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof K32SError, `expected a K32SError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    assert.match(err.message, message);
  }
  return (await decodeSnapshot([bytes], opts).catch((e: unknown) => e)) as K32SError;
}

const moduleA = (): NonNullable<DecodeOptions['module']> => ({
  globals: new Map([
    [0, 0x7f],
    [3, 0x7c],
  ]),
  tables: new Map([[0, { min: 1, max: 10 }]]),
  functionCount: 4,
});

describe('K32S refusals the seed lists', { timeout: 60_000 }, () => {
  it('the magic is not K32S: refused after the first 4 bytes, and a short stranger is not "truncated"', async () => {
    await refuse(damaged(3, [0x58]), 'BadMagic', /not a K32S snapshot: it starts with bytes 4b333258, not the magic "K32S"/);
    const decoder = new SnapshotDecoder();
    assert.throws(() => decoder.push(new TextEncoder().encode('{"kind":')), /not a K32S snapshot/);
    await refuse(new TextEncoder().encode('hi\n'), 'BadMagic', /not a K32S snapshot/);
    await refuse(new Uint8Array(0), 'Truncated', /ends before its trailer: the stream ended after 0 bytes, inside the 68-byte header/);
  });

  it('a version the node does not read', async () => {
    await refuse(damaged(4, [2, 0]), 'BadVersion', /the snapshot is K32S version 2; this node reads version 1/);
  });

  it('an image SHA-256 other than the module being deployed', async () => {
    const other = new Uint8Array(32).fill(0xab);
    const err = await refuse(GOLDEN_A, 'ImageMismatch', new RegExp(`taken from the module sha256:${EMPTY_MODULE_SHA256}, not from the module being deployed \\(sha256:(ab){32}\\)`), {
      expectedImageSha256: other,
    });
    assert.equal(err.offset, 8);
  });

  it('a memory limit below what the snapshot holds, or a destination too small', async () => {
    await refuse(GOLDEN_A, 'MemoryLimit', /holds 16 bytes of linear memory, more than the pod's memory limit of 15 bytes/, { memoryLimitBytes: 15 });
    await refuse(GOLDEN_A, 'MemoryLimit', /the pod's memory has only 8/, { memory: () => new Uint8Array(8) });
  });

  it('a global that does not match the module', async () => {
    const m = moduleA();
    m.globals.set(0, 0x7e);
    await refuse(GOLDEN_A, 'GlobalMismatch', /global 0 is i32 in the snapshot but i64 in the module/, { module: m });
    const fewer = moduleA();
    fewer.globals.delete(3);
    await refuse(GOLDEN_A, 'GlobalMismatch', /holds global 3, which is not a mutable global of the module/, { module: fewer });
    const more = moduleA();
    more.globals.set(5, 0x7d);
    await refuse(GOLDEN_A, 'GlobalMismatch', /the module's mutable global 5 \(f32\) is not in the snapshot/, { module: more });
  });

  it('a table that does not match the module', async () => {
    const small = moduleA();
    small.tables.set(0, { min: 1, max: 1 });
    await refuse(GOLDEN_A, 'TableMismatch', /table 0 has 2 entries in the snapshot; the module's table 0 takes 1 to 1/, { module: small });
    const none = moduleA();
    none.tables.clear();
    await refuse(GOLDEN_A, 'TableMismatch', /holds table 0; the module has no table 0/, { module: none });
    const two = moduleA();
    two.tables.set(1, { min: 0 });
    await refuse(GOLDEN_A, 'TableMismatch', /the module's table 1 is not in the snapshot/, { module: two });
    await refuse(GOLDEN_A, 'TableMismatch', /entry 0 of table 0 names function 3; the module has 3 functions/, { module: { ...moduleA(), functionCount: 3 } });
  });

  it('a trailer that does not match the bytes before it', async () => {
    const seed = /^the snapshot's trailer does not match its contents \(damaged in transfer or storage\)$/;
    await refuse(damaged(80, [0x00], true), 'TrailerMismatch', seed);
    await refuse(damaged(TRAILER_AT + 31, [0x00], true), 'TrailerMismatch', seed);
  });

  it('a stream that ends before the trailer, at every byte', async () => {
    for (let cut = 0; cut < GOLDEN_A.length; cut++) {
      const decoder = new SnapshotDecoder();
      decoder.push(GOLDEN_A.subarray(0, cut));
      assert.throws(
        () => decoder.end(),
        (e: unknown) => e instanceof K32SError && e.code === 'Truncated' && /ends before its trailer/.test(e.message) && e.offset === cut,
        `cut at ${cut}`,
      );
    }
    await refuse(GOLDEN_A.subarray(0, 100), 'Truncated', /after 100 bytes, inside the GLOBALS section at byte 90 \(22 of its 26 bytes missing\)/);
    await refuse(GOLDEN_A.subarray(0, 200), 'Truncated', /after 200 bytes, inside the 32-byte trailer/);
  });
});

describe('K32S layout errors', { timeout: 60_000 }, () => {
  const cases: [string, Uint8Array, RegExp][] = [
    ['bytes after the trailer', new Uint8Array(Buffer.concat([GOLDEN_A, Uint8Array.of(0)])), /1 or more bytes after its trailer/],
    ['flags other than 0', damaged(6, [1, 0]), /flags are 0x0001; K32S version 1 defines none/],
    ['memory bytes that do not fit the pages', damaged(44, [2]), /memory bytes \(16\) do not agree with its memory pages \(2\)/],
    ['more sections than a reader takes', damaged(64, [1, 0, 1, 0]), /the header says 65537 sections; this reader takes at most 65536/],
    ['more pages than wasm32 has', damaged(44, [1, 0, 1, 0]), /65537 memory pages; a wasm32 memory has at most 65536/],
    ['a MEMORY section of another length than the header says', damaged(70, [15]), /MEMORY section is 15 bytes long; the header says memory bytes 16/],
    ['a GLOBALS section that is not whole entries', damaged(92, [25]), /GLOBALS section is 25 bytes long, not a multiple of 13/],
    ['an unknown value type', damaged(100, [0x7b]), /global 0 has value type 0x7b, which K32S does not define/],
    ['a global listed twice', damaged(109, [0]), /lists global 0 twice/],
    ['an i32 with bits above the low 32', damaged(105, [1]), /global 0 is i32 but its value 0x1ffffffff has bits above the low 32/],
    ['a table whose size disagrees with its section', damaged(132, [3]), /table 0 says 3 entries but its section holds 2/],
    ['a TABLE section too short for its fields', damaged(124, [4]), /TABLE section at byte 122 is 4 bytes long; a table takes 8 \+ 4 × size/],
    ['a channel with handle 0', damaged(150, [0]), /a channel has handle 0/],
    ['a channel name of 0 bytes', damaged(154, [0]), /channel 1 has a name of 0 bytes/],
    ['a channel name that is not UTF-8', damaged(156, [0xff]), /the name of channel 1 in the CHANNELS section is not valid UTF-8/],
    ['an event with an empty topic', damaged(166, [0]), /a held event has an empty topic/],
    ['an event payload past its section', damaged(169, [3]), /EVENTS section ends inside the payload of an event on "t"/],
    ['a second GLOBALS section', damaged(122, [2]), /GLOBALS section is 16 bytes long, not a multiple of 13|second GLOBALS section/],
    ['a second MEMORY section', withSection(90, 90, [1, 0, 16, 0, 0, 0, ...new Uint8Array(16)], 1), /a second MEMORY section at byte 90/],
    ['no MEMORY section while the header has memory', withSection(68, 90, [], -1), /says 16 bytes of memory but the snapshot has no MEMORY section/],
    ['a table listed twice', withSection(144, 144, [3, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 1), /the snapshot has table 0 twice/],
  ];
  for (const [name, bytes, message] of cases) {
    it(`refuses ${name}`, async () => {
      await refuse(bytes, 'Malformed', message);
    });
  }

  it('refuses a small section over the reader limit before buffering it', async () => {
    await refuse(GOLDEN_A, 'Malformed', /the GLOBALS section at byte 90 is 26 bytes long, more than this reader takes \(12\)/, { sectionLimitBytes: 12 });
  });

  it('stays failed: every later call throws the same error', () => {
    const decoder = new SnapshotDecoder();
    const bad = damaged(4, [9, 0]);
    assert.throws(() => decoder.push(bad), K32SError);
    let first: unknown;
    try {
      decoder.end();
    } catch (e: unknown) {
      first = e;
    }
    assert.ok(first instanceof K32SError && first.code === 'BadVersion');
    assert.throws(() => decoder.push(GOLDEN_A), (e: unknown) => e === first);
  });

  it('takes no bad options silently', () => {
    assert.throws(() => new SnapshotDecoder({ expectedImageSha256: new Uint8Array(31) }), RangeError);
    assert.throws(() => new SnapshotDecoder({ memoryLimitBytes: -1 }), RangeError);
    assert.throws(() => new SnapshotDecoder({ sectionLimitBytes: 1.5 }), RangeError);
  });
});
