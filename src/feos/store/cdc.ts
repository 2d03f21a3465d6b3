/**
 * Content-defined chunking (FastCDC, Xia et al., USENIX ATC 2016, with normalized chunking at level 2): cuts a
 * byte stream where a rolling gear hash of the bytes since the last cut matches a mask, so that a cut depends
 * only on the bytes around it. Bytes inserted into or removed from the middle of a stream move the cuts near
 * them alone: the chunks before and after stay byte for byte the same, and a store keyed by the chunks'
 * SHA-256 keeps them once. That is what lets a second hibernation of a pod upload only what changed
 * (seed 000, "Hibernate and Restore"; docs/feos/object-store.md): QEMU's migration stream of an unchanged
 * guest differs in the pages that changed, and a zero page that turned non-zero shifts everything after it
 * by 4 KiB, which fixed-size chunks would not survive.
 *
 * Our own code, not a library's: the npm registry has no maintained FastCDC for Node's streams, and the
 * cut points are part of the checkpoint format (a change of `GEAR` or the sizes makes new chunks of old
 * bytes: deduplication with checkpoints made before would stop, their restores would not).
 */
import { createHash } from 'node:crypto';

/**
 * No chunk is shorter (but the last), nor longer; cuts aim at `AVG_CHUNK_BYTES`. Measured on two migration
 * streams of a 256 MiB guest hibernated a few seconds apart (1516 of its 65555 pages changed, scattered over
 * its memory; docs/feos/object-store.md): the second upload was 57 % of the stream with chunks of 1 MiB on
 * average, 20 % with 64 KiB, 10 % with 16 KiB and 5 % with 4 KiB (pages alone: 3.3 %). But every chunk is an
 * object: through Swift's s3api here, 2 254 chunks of 64 KiB made a hibernation 21 times as long as uploading
 * the same bytes with the SDK, against 2.3 times with 1 MiB (bench/feos-s3). So 1 MiB, until small chunks go into packs
 * of several MiB (one object each), which would give both.
 */
export const MIN_CHUNK_BYTES = 256 * 1024;
export const AVG_CHUNK_BYTES = 1024 * 1024;
export const MAX_CHUNK_BYTES = 4 * 1024 * 1024;

// Normalized chunking (level 2): a harder mask (22 bits: log2 of the average + 2) before the average size, an
// easier one (18 bits) after. The high bits of the gear hash depend on the last 32 bytes (each step shifts it
// left), the low ones on fewer: the masks take the high bits, the easy one a subset of the hard one's.
const MASK_HARD = 0xffff_fc00 | 0;
const MASK_EASY = 0xffff_c000 | 0;

/** 256 pseudo-random 32-bit words, fixed for ever: SHA-256 of "feos-cdc-gear-<i>", its first four bytes. */
const GEAR: Int32Array = (() => {
  const t = new Int32Array(256);
  for (let i = 0; i < 256; i++) t[i] = createHash('sha256').update(`feos-cdc-gear-${i}`).digest().readInt32LE(0);
  return t;
})();

function popcount(x: number): number {
  let n = 0;
  for (let v = x >>> 0; v; v &= v - 1) n++;
  return n;
}
if (popcount(MASK_HARD) !== 22 || popcount(MASK_EASY) !== 18 || (MASK_HARD & MASK_EASY) !== MASK_EASY) throw new Error('cdc: mask constants are wrong');

/**
 * Cuts a stream into content-defined chunks.
 * @param source the bytes, in pieces of any size
 * @returns the chunks in order, each a new Buffer of `MIN_CHUNK_BYTES` to `MAX_CHUNK_BYTES` (the last may be
 *   shorter); their concatenation is the stream
 */
export async function* contentDefinedChunks(source: AsyncIterable<Uint8Array>): AsyncIterable<Buffer> {
  const buf = Buffer.allocUnsafe(MAX_CHUNK_BYTES);
  let len = 0;
  let fp = 0;
  let scanned = 0;
  /** The end of the next chunk in `buf[0, len)`, or -1 while more bytes are needed. */
  const findCut = (final: boolean): number => {
    let i = Math.max(scanned, MIN_CHUNK_BYTES);
    for (; i < len; i++) {
      fp = ((fp << 1) + GEAR[buf[i] as number]!) | 0;
      if ((fp & (i < AVG_CHUNK_BYTES ? MASK_HARD : MASK_EASY)) === 0) return i + 1;
    }
    scanned = Math.max(len, scanned);
    if (len === MAX_CHUNK_BYTES || (final && len > 0)) return len;
    return -1;
  };
  const take = (cut: number): Buffer => {
    const chunk = Buffer.from(buf.subarray(0, cut));
    buf.copy(buf, 0, cut, len);
    len -= cut;
    fp = 0;
    scanned = 0;
    return chunk;
  };
  for await (const data of source) {
    let off = 0;
    while (off < data.byteLength) {
      const n = Math.min(MAX_CHUNK_BYTES - len, data.byteLength - off);
      buf.set(data.subarray(off, off + n), len);
      len += n;
      off += n;
      for (let cut = findCut(false); cut > 0; cut = findCut(false)) yield take(cut);
    }
  }
  for (let cut = findCut(true); cut > 0; cut = findCut(true)) yield take(cut);
}
