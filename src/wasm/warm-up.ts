/**
 * A pod thread's warm-up, run once as it boots (before it reports `booted`), off any pod's critical
 * path: V8 compiles a function the first time it runs, in each isolate, and every pod thread is a
 * fresh isolate. Without it, a pod's first snapshot and a restore paid for compiling the K32S
 * writer's and reader's code (and the first SHA-256) in the middle of a move.
 */
import { encodeSnapshot, SnapshotDecoder, snapshotByteLength, snapshotSha256, type SnapshotState } from '../k32s/index.ts';

/**
 * Writes and reads back a small snapshot with every kind of section (memory of one page, a global
 * of each kind, a table, a channel, an event), as a snapshot and a restore do, and checks that it
 * round-trips.
 * @throws Error when the snapshot does not read back (a broken build: better known at boot)
 */
export function warmUpSnapshotCode(): void {
  const state: SnapshotState = {
    imageSha256: new Uint8Array(32),
    memory: new Uint8Array(65536),
    memoryPages: 1,
    podTimeMs: 1n,
    unixTimeMs: 1n,
    globals: [{ index: 0, type: 0x7f, bits: 1n }, { index: 1, type: 0x7e, bits: 2n }, { index: 2, type: 0x7d, bits: 3n }, { index: 3, type: 0x7c, bits: 4n }, { index: 4, type: 0x70, bits: 0n }],
    tables: [{ index: 0, entries: Uint32Array.of(0, 0xffffffff) }],
    channels: [{ handle: 1, name: 'warm-up' }],
    events: [{ topic: 'warm-up', payload: new Uint8Array(1) }],
  };
  const length = snapshotByteLength(state);
  const sha256 = snapshotSha256(state);
  const decoder = new SnapshotDecoder({
    expectedImageSha256: state.imageSha256,
    memoryLimitBytes: 65536,
    module: { globals: new Map(state.globals.map((g) => [g.index, g.type])), tables: new Map([[0, { min: 2 }]]), functionCount: 1 },
    memory: () => new Uint8Array(65536),
  });
  let bytes = 0;
  for (const chunk of encodeSnapshot(state, { chunkBytes: 32768, sha256 })) {
    decoder.push(chunk.slice());
    bytes += chunk.length;
  }
  const back = decoder.end();
  if (bytes !== length || !back.trailerOk || back.globals.length !== 5) throw new Error('the pod thread\'s warm-up snapshot did not read back');
}
