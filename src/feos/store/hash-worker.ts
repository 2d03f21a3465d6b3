/**
 * The worker thread of hash-pool.ts: SHA-256 of spans of a buffer (a restore's check of a pack's range), and
 * content-defined cutting with each chunk's SHA-256 and the whole stream's (a hibernation's files). It answers
 * every message in the order it came; a buffer it is handed goes back with the answer (transferred both ways).
 *
 * Messages in: `{ id, op: 'digest', buf: ArrayBuffer, spans: Float64Array }` (pairs of offset and length);
 * `{ id, op: 'open', session, params: CdcParams }`; `{ id, op: 'push', session, buf }`; `{ id, op: 'end', session }`.
 * Out: `{ id, buf?, sizes?: Int32Array, digests?: ArrayBuffer (32 bytes each), sha256?, sizeBytes?, error? }`.
 */
import { createHash, type Hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { ChunkCutter, type CdcParams } from './cdc.ts';

interface Session {
  cutter: ChunkCutter;
  whole: Hash;
  sizeBytes: number;
}

/** The open sessions; an Error for one whose parameters were refused (its pushes answer with it). */
const sessions = new Map<number, Session | Error>();

/** The chunks as one buffer, their sizes and their SHA-256s (raw, 32 bytes each). */
function pack(chunks: Buffer[]): { buf: ArrayBuffer; sizes: Int32Array; digests: ArrayBuffer } {
  const total = chunks.reduce((n, c) => n + c.byteLength, 0);
  const out = new Uint8Array(new ArrayBuffer(total));
  const sizes = new Int32Array(chunks.length);
  const digests = new Uint8Array(new ArrayBuffer(32 * chunks.length));
  let at = 0;
  for (const [i, c] of chunks.entries()) {
    out.set(c, at);
    at += c.byteLength;
    sizes[i] = c.byteLength;
    digests.set(createHash('sha256').update(c).digest(), 32 * i);
  }
  return { buf: out.buffer, sizes, digests: digests.buffer };
}

parentPort!.on('message', (m: { id: number; op: string; session?: number; buf?: ArrayBuffer; spans?: Float64Array; params?: CdcParams }) => {
  try {
    if (m.op === 'digest') {
      const bytes = new Uint8Array(m.buf!);
      const spans = m.spans!;
      const digests = new Uint8Array(new ArrayBuffer(16 * spans.length));
      for (let i = 0; i < spans.length; i += 2) {
        digests.set(createHash('sha256').update(bytes.subarray(spans[i]!, spans[i]! + spans[i + 1]!)).digest(), 16 * i);
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
      const bytes = new Uint8Array(m.buf!);
      s.whole.update(bytes);
      s.sizeBytes += bytes.byteLength;
      const r = pack(s.cutter.push(bytes));
      parentPort!.postMessage({ id: m.id, ...r }, [r.buf, r.digests]);
      return;
    }
    if (m.op === 'end') {
      const r = pack(s.cutter.end());
      parentPort!.postMessage({ id: m.id, ...r, sha256: s.whole.digest('hex'), sizeBytes: s.sizeBytes }, [r.buf, r.digests]);
      return;
    }
    throw new Error(`hash worker: no op ${JSON.stringify(m.op)}`);
  } catch (err: unknown) {
    parentPort!.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
