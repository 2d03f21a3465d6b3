/**
 * The worker thread of hash-pool.ts: SHA-256 of spans of a buffer (a restore's check of a pack's range), and
 * content-defined cutting with each chunk's SHA-256 and the whole stream's (a hibernation's files). It answers
 * every message in the order it came; a buffer it is handed goes back with the answer (transferred both ways).
 *
 * Messages in: `{ id, op: 'digest', buf: ArrayBuffer, spans: Float64Array }` (pairs of offset and length);
 * `{ id, op: 'open', session, params: CdcParams }`; `{ id, op: 'push', session, buf }`; `{ id, op: 'end', session }`.
 * Out: `{ id, buf?, digests?: ArrayBuffer (32 bytes each), ends?: Int32Array, lastBytes?, sha256?, sizeBytes?, error? }`:
 * a push's piece comes back in `buf`, unchanged, with `ends`, the offsets in it where the chunks it completes end
 * (the first begins with the bytes before it that no cut ended); an end answers the SHA-256 of the last chunk (the
 * `lastBytes` bytes no cut ended: none when 0) and the whole stream's size and SHA-256.
 */
import { createHash, type Hash, hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { ChunkCutter, type CdcParams } from './cdc.ts';

interface Session {
  cutter: ChunkCutter;
  whole: Hash;
  sizeBytes: number;
}

/** The open sessions; an Error for one whose parameters were refused (its pushes answer with it). */
const sessions = new Map<number, Session | Error>();

/**
 * The SHA-256s (raw, 32 bytes each) of the chunks a piece completes: the first begins with `held` (the bytes of the
 * stream before the piece that no cut ended), the others are spans of the piece. Each chunk hashed in one call
 * (crypto.hash), none copied.
 */
function digestsOf(held: Buffer, piece: Uint8Array, ends: number[]): ArrayBuffer {
  const digests = new Uint8Array(new ArrayBuffer(32 * ends.length));
  let from = 0;
  for (const [i, end] of ends.entries()) {
    const d = i === 0 && held.length > 0 ? createHash('sha256').update(held).update(piece.subarray(0, end)).digest() : hash('sha256', piece.subarray(from, end), 'buffer');
    digests.set(d as Buffer, 32 * i);
    from = end;
  }
  return digests.buffer;
}

parentPort!.on('message', (m: { id: number; op: string; session?: number; buf?: ArrayBuffer; spans?: Float64Array; params?: CdcParams }) => {
  try {
    if (m.op === 'digest') {
      const bytes = new Uint8Array(m.buf!);
      const spans = m.spans!;
      const digests = new Uint8Array(new ArrayBuffer(16 * spans.length));
      for (let i = 0; i < spans.length; i += 2) {
        digests.set(hash('sha256', bytes.subarray(spans[i]!, spans[i]! + spans[i + 1]!), 'buffer') as Buffer, 16 * i);
      }
      parentPort!.postMessage({ id: m.id, buf: m.buf, digests: digests.buffer }, [m.buf!, digests.buffer]);
      return;
    }
    if (m.op === 'open') {
      try {
        sessions.set(m.session!, { cutter: new ChunkCutter(m.params), whole: createHash('sha256'), sizeBytes: 0 });
      } catch (err: unknown) {
        sessions.set(m.session!, err instanceof Error ? err : new Error(String(err)));
      }
      return;
    }
    const s = sessions.get(m.session!);
    if (m.op === 'end') sessions.delete(m.session!);
    if (!s) throw new Error(`hash worker: no session ${m.session}`);
    if (s instanceof Error) throw s;
    if (m.op === 'push') {
      // The piece goes back as it came (transferred both ways), with the cuts it completes and their SHA-256s.
      const bytes = new Uint8Array(m.buf!);
      s.whole.update(bytes);
      s.sizeBytes += bytes.byteLength;
      const { held, ends } = s.cutter.cut(bytes);
      const digests = digestsOf(held, bytes, ends);
      const cuts = Int32Array.from(ends);
      parentPort!.postMessage({ id: m.id, buf: m.buf, ends: cuts, digests }, [m.buf!, digests, cuts.buffer]);
      return;
    }
    if (m.op === 'end') {
      const last = s.cutter.finish();
      const digests = last.length > 0 ? hash('sha256', last, 'buffer') : Buffer.alloc(0);
      const raw = new Uint8Array(digests).buffer;
      parentPort!.postMessage({ id: m.id, digests: raw, lastBytes: last.length, sha256: s.whole.digest('hex'), sizeBytes: s.sizeBytes }, [raw]);
      return;
    }
    throw new Error(`hash worker: no op ${JSON.stringify(m.op)}`);
  } catch (err: unknown) {
    parentPort!.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
