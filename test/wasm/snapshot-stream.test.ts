/**
 * The snapshot and restore streams as a user of the runtime sees them (docs/wasm-runtime.md,
 * "Checkpoint, step by step" and "Restore"): a digest known up front without changing a byte, the
 * digest remembered for the freeze, chunks sent ahead of the reader, a restore from pieces of any
 * size that leaves the caller's buffers alone and checks every byte before the pod runs.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { loadModule, PodStartError, PodStateError, type PodInstance, type PodModule } from '../../src/wasm/index.ts';
import { decode, pieces, snapshotBytes, startPod, wat } from './helpers.ts';

/** 40 pages (2.5 MiB: chunks of 1, 1 and 0.5 MiB) filled with pseudo-random bytes by k32_init; events counted in a global. */
const PAGES = 40;
let filled: Promise<PodModule> | undefined;
function fillMod(): Promise<PodModule> {
  filled ??= loadModule(wat(`(module
    (memory (export "memory") ${PAGES})
    (global $events (mut i32) (i32.const 0))
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 16))
    (func (export "k32_event") (param i32 i32 i32 i32) (global.set $events (i32.add (global.get $events) (i32.const 1))))
    (func (export "k32_tick"))
    (func (export "k32_init") (local $i i32) (local $x i32)
      (local.set $x (i32.const 7))
      (loop $l
        (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1103515245)) (i32.const 12345)))
        (i32.store (local.get $i) (local.get $x))
        (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 4))) (i32.const ${PAGES * 65536}))))))`), { memoryLimitBytes: PAGES * 65536 });
  return filled;
}

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const trailer = (b: Uint8Array): string => Buffer.from(b.subarray(b.length - 32)).toString('hex');

async function read(chunks: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const c of chunks) parts.push(c);
  return Buffer.concat(parts);
}

async function started(t: { after: (f: () => unknown) => void }, opts: Parameters<typeof startPod>[1] = {}): Promise<PodInstance> {
  const pod = await startPod(await fillMod(), opts);
  t.after(() => pod.terminate());
  return pod;
}

test('digest: true announces the trailer without changing a byte; the freeze remembers it until its held events change', { timeout: 30_000 }, async (t) => {
  const pod = await started(t);
  await pod.freeze();
  const a = await pod.snapshot({ digest: true });
  const bytesA = await read(a.chunks);
  assert.equal(bytesA.length, a.byteLength);
  assert.equal(a.snapshotSha256, sha(bytesA.subarray(0, -32)), 'the announced digest is the SHA-256 of the bytes before the trailer');
  assert.equal(a.snapshotSha256, trailer(bytesA), 'and the trailer written');

  const b = await pod.snapshot();
  assert.equal(b.snapshotSha256, a.snapshotSha256, 'known for the rest of the freeze without asking');
  assert.deepEqual(await read(b.chunks), bytesA, 'the same frozen pod gives the same bytes, digest or not');

  // A new freeze: nothing is known until a stream is read to its end (or a digest asked for).
  await pod.thaw();
  await pod.freeze();
  const c = await pod.snapshot();
  assert.equal(c.snapshotSha256, undefined);
  const bytesC = await read(c.chunks);
  assert.equal(trailer(bytesC), sha(bytesC.subarray(0, -32)));
  const d = await pod.snapshot();
  assert.equal(d.snapshotSha256, trailer(bytesC), 'a stream read to its end tells the freeze its digest');
  await read(d.chunks);

  // An event held meanwhile is part of the next snapshot: its digest is that of the new bytes.
  pod.event('topic', new TextEncoder().encode('held'));
  assert.equal(pod.heldEvents, 1);
  const e = await pod.snapshot({ digest: true });
  const bytesE = await read(e.chunks);
  assert.notEqual(e.snapshotSha256, d.snapshotSha256);
  assert.equal(e.snapshotSha256, trailer(bytesE));
  assert.equal(e.snapshotSha256, sha(bytesE.subarray(0, -32)));
  assert.deepEqual((await decode(bytesE)).events.map((x) => x.topic), ['topic']);
  const f = await pod.snapshot();
  assert.equal(f.snapshotSha256, e.snapshotSha256);
  assert.deepEqual(await read(f.chunks), bytesE);
});

test('chunks sent ahead wait for a reader that comes late; a thaw ends a stream not read', { timeout: 30_000 }, async (t) => {
  const pod = await started(t);
  await pod.freeze();
  const late = await pod.snapshot();
  const now = await snapshotBytes(pod); // another stream of the same freeze, read at once
  assert.deepEqual(await read(late.chunks), now, 'the stream read late gives every byte');

  const unread = await pod.snapshot();
  await pod.thaw();
  await assert.rejects(read(unread.chunks), (e: unknown) => e instanceof PodStateError && e.code === 'NotFrozen' && /thawed/.test(e.message));
  // The pod runs on, and the next freeze streams as before.
  await pod.freeze();
  const again = await snapshotBytes(pod);
  assert.equal(again.length, now.length);
});

test('a restore takes pieces of any size, leaves the caller\'s buffers as they were, and checks every byte before the pod runs', { timeout: 30_000 }, async (t) => {
  const mod = await fillMod();
  const pod = await started(t);
  pod.event('topic', new TextEncoder().encode('before'));
  await pod.freeze();
  const bytes = await snapshotBytes(pod);
  const original = await decode(bytes);
  const kept = Buffer.from(bytes); // what the caller's buffer must still hold afterwards

  const shapes: Array<[string, () => AsyncIterable<Uint8Array>]> = [
    ['16 KiB pieces (an HTTP body)', () => pieces(bytes, 16 << 10)],
    ['one chunk of the whole snapshot', () => pieces(bytes, bytes.length)],
    ['1 MiB + 3 bytes, then 7 bytes, then the rest', async function* () {
      yield bytes.subarray(0, (1 << 20) + 3);
      yield bytes.subarray((1 << 20) + 3, (1 << 20) + 10);
      yield bytes.subarray((1 << 20) + 10);
    }],
  ];
  for (const [what, source] of shapes) {
    const restored = await startPod(mod, { podName: 'r', restoreFrom: source() });
    t.after(() => restored.terminate());
    await restored.freeze();
    const back = await decode(await snapshotBytes(restored));
    assert.ok(Buffer.from(back.memory!).equals(Buffer.from(original.memory!)), `${what}: the memory restored is the snapshot's`);
    await restored.terminate();
  }
  assert.ok(Buffer.from(bytes).equals(kept), 'the source\'s buffers are not changed or taken');

  // restoreTransfer: chunks of 1 MiB that own their buffers go to the thread as they are (detached here),
  // shorter ones and views are copied; the pod restores the same.
  const given: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += 1 << 20) given.push(Uint8Array.from(bytes.subarray(at, at + (1 << 20))));
  const view = new Uint8Array(new ArrayBuffer(given[0]!.length + 8), 8);
  view.set(given[0]!);
  given[0] = view; // a view into a larger buffer: copied, not taken
  const moved = await startPod(mod, { podName: 'r', restoreFrom: (async function* () { yield* given; })(), restoreTransfer: true });
  t.after(() => moved.terminate());
  await moved.freeze();
  const back = await decode(await snapshotBytes(moved));
  assert.ok(Buffer.from(back.memory!).equals(Buffer.from(original.memory!)), 'restoreTransfer: the memory restored is the snapshot\'s');
  assert.equal(given[0]!.byteLength, 1 << 20, 'a view is copied, its buffer kept');
  assert.equal(given[1]!.byteLength, 0, 'a whole 1 MiB chunk is transferred');
  assert.ok(given[given.length - 1]!.byteLength > 0 && given[given.length - 1]!.byteLength < 1 << 20, 'the short last chunk is copied');
  await moved.terminate();

  // One damaged byte in the middle of the memory, in pieces: refused before the pod runs (the trailer).
  const bad = Buffer.from(bytes);
  bad[(3 << 19) + 100]! ^= 0x01;
  await assert.rejects(
    startPod(mod, { podName: 'bad', restoreFrom: pieces(bad, 16 << 10) }),
    (e: unknown) => e instanceof PodStartError && e.reason === 'RestoreError' && /trailer/i.test(e.message),
  );
});
