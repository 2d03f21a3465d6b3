// K32S benchmark: encode and decode snapshots of 64 KiB, 1 MiB and 16 MiB of linear memory, against
// SHA-256 alone (`crypto.createHash('sha256')`) over the same bytes, measured in the same run.
// The seed's writer and reader stream memory and hash it as they go; the goal is to cost little more
// than the hash itself: within 1.3x of it for 1 MiB and more.
//   node bench/k32s/index.ts            (or: npm run bench k32s)
import { createHash, randomFillSync } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { encodeSnapshot, SnapshotDecoder, type SnapshotState } from '../../src/k32s/index.ts';

const SOCKET_CHUNK = 64 * 1024; // what a socket typically hands a reader at once

function state(bytes: number): SnapshotState {
  const memory = randomFillSync(new Uint8Array(bytes));
  return {
    imageSha256: new Uint8Array(32).fill(1),
    memory,
    memoryPages: bytes / 65536,
    podTimeMs: 123456n,
    unixTimeMs: BigInt(Date.now()),
    globals: Array.from({ length: 16 }, (_, i) => ({ index: i, type: 0x7f as const, bits: BigInt(i) })),
    tables: [{ index: 0, entries: Uint32Array.from({ length: 64 }, (_, i) => i) }],
    channels: [{ handle: 1, name: 'sensors/temp' }],
    events: [{ topic: 'sensors/temp', payload: new Uint8Array(64) }],
  };
}

/**
 * Median times in ms of each of `fns` over `runs` rounds, after a few warm-up rounds. The functions
 * run interleaved, one after the other in each round, so that load from other processes on the
 * machine falls on all of them alike and the ratios hold.
 */
function measure(runs: number, fns: (() => void)[]): number[] {
  for (let i = 0; i < runs / 4 + 1; i++) for (const fn of fns) fn();
  const times: number[][] = fns.map(() => []);
  for (let i = 0; i < runs; i++) {
    fns.forEach((fn, k) => {
      const t0 = performance.now();
      fn();
      times[k]!.push(performance.now() - t0);
    });
  }
  return times.map((t) => t.sort((a, b) => a - b)[Math.floor(t.length / 2)]!);
}

function split(bytes: Uint8Array, size: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
}

const rows: string[][] = [['MEMORY', 'SHA-256 ALONE', 'ENCODE', 'RATIO', 'DECODE', 'RATIO', 'CHECK ONLY', 'RATIO', 'ENCODE MB/s', 'DECODE MB/s']];
let worst = 0;
for (const bytes of [64 * 1024, 1 << 20, 16 << 20]) {
  const s = state(bytes);
  const wire = new Uint8Array(Buffer.concat([...encodeSnapshot(s)]));
  const chunks = split(wire, SOCKET_CHUNK);
  const dest = new Uint8Array(bytes);
  const runs = Math.max(31, Math.min(401, Math.round((512 << 20) / bytes)));
  let sink = 0;

  const [hash, encode, decode, check] = measure(runs, [
    () => {
      sink ^= createHash('sha256').update(s.memory).digest()[0]!;
    },
    () => {
      for (const chunk of encodeSnapshot(s)) sink ^= chunk.length;
    },
    () => {
      const d = new SnapshotDecoder({ memory: () => dest, expectedImageSha256: s.imageSha256, memoryLimitBytes: bytes });
      for (const c of chunks) d.push(c);
      sink ^= d.end().byteLength;
    },
    () => {
      const d = new SnapshotDecoder({ memory: 'discard' });
      for (const c of chunks) d.push(c);
      sink ^= d.end().byteLength;
    },
  ]) as [number, number, number, number];
  if (sink === 0.5) console.log(sink);
  const mbs = (ms: number): string => ((bytes / (1 << 20)) / (ms / 1000)).toFixed(0);
  const label = bytes >= 1 << 20 ? `${bytes >> 20} MiB` : `${bytes >> 10} KiB`;
  rows.push([
    label,
    `${hash.toFixed(3)} ms`,
    `${encode.toFixed(3)} ms`,
    `${(encode / hash).toFixed(2)}x`,
    `${decode.toFixed(3)} ms`,
    `${(decode / hash).toFixed(2)}x`,
    `${check.toFixed(3)} ms`,
    `${(check / hash).toFixed(2)}x`,
    mbs(encode),
    mbs(decode),
  ]);
  if (bytes >= 1 << 20) worst = Math.max(worst, encode / hash, decode / hash);
}

const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
for (const r of rows) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join('   ').trimEnd());
console.log(`\nworst ratio to SHA-256 alone at >= 1 MiB: ${worst.toFixed(2)}x (target: within 1.30x)`);
console.log('encode yields memory as views (no copy); decode writes 64 KiB socket chunks straight into the destination.');
