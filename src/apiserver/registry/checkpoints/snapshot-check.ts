/**
 * A streaming check of a K32S snapshot as its bytes arrive (seed 002 "Snapshot format"): magic
 * `K32S`, version 1, sections that fit, and the trailer (SHA-256 of every byte before it). It reads
 * the header's facts for the Checkpoint's status. The bytes are not copied: the caller keeps them.
 */
import { createHash, type Hash } from 'node:crypto';

/** Size of the K32S header in bytes. */
export const K32S_HEADER_BYTES = 68;
/** Size of the trailer in bytes. */
export const K32S_TRAILER_BYTES = 32;

/** The facts of a checked snapshot. */
export interface SnapshotFacts {
  sizeBytes: number;
  snapshotSha256: string;
  imageSha256: string;
  podTimeMs: number;
  memoryBytes: number;
  sectionCount: number;
}

/** Raised for a snapshot that is not a valid K32S stream; the message names the cause. */
export class SnapshotCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SnapshotCheckError';
  }
}

/**
 * Checks a K32S stream of a known total length chunk by chunk.
 * @example const c = new SnapshotChecker(len); for (const chunk of body) c.update(chunk); const facts = c.finish();
 */
export class SnapshotChecker {
  private readonly total: number;
  private readonly hash: Hash = createHash('sha256');
  private seen = 0;
  private readonly head = Buffer.alloc(K32S_HEADER_BYTES);
  private readonly tail = Buffer.alloc(K32S_TRAILER_BYTES);
  private headerDone = false;

  /**
   * @param total the stream's length in bytes (Content-Length)
   * @throws SnapshotCheckError when shorter than a header and a trailer
   */
  constructor(total: number) {
    if (total < K32S_HEADER_BYTES + K32S_TRAILER_BYTES) {
      throw new SnapshotCheckError(`a K32S snapshot has at least ${K32S_HEADER_BYTES + K32S_TRAILER_BYTES} bytes (header and trailer), this one has ${total}`);
    }
    this.total = total;
  }

  /**
   * Feeds the next bytes.
   * @throws SnapshotCheckError as soon as the header shows a wrong magic or version, or the stream is too long
   */
  update(chunk: Uint8Array): void {
    const start = this.seen;
    if (start + chunk.length > this.total) throw new SnapshotCheckError('the stream is longer than its Content-Length');
    const bodyEnd = this.total - K32S_TRAILER_BYTES;
    // Hash what lies before the trailer; keep the trailer's bytes.
    if (start < bodyEnd) this.hash.update(chunk.subarray(0, Math.min(chunk.length, bodyEnd - start)));
    if (start + chunk.length > bodyEnd) {
      const from = Math.max(0, bodyEnd - start);
      Buffer.from(chunk.buffer, chunk.byteOffset + from, chunk.length - from).copy(this.tail, start + from - bodyEnd);
    }
    if (start < K32S_HEADER_BYTES) {
      Buffer.from(chunk.buffer, chunk.byteOffset, Math.min(chunk.length, K32S_HEADER_BYTES - start)).copy(this.head, start);
    }
    this.seen += chunk.length;
    if (!this.headerDone && this.seen >= K32S_HEADER_BYTES) {
      this.headerDone = true;
      const magic = this.head.subarray(0, 4).toString('latin1');
      if (magic !== 'K32S') throw new SnapshotCheckError(`not a K32S snapshot: the magic is ${JSON.stringify(magic)}, not "K32S"`);
      const version = this.head.readUInt16LE(4);
      if (version !== 1) throw new SnapshotCheckError(`K32S version ${version} is not one this server reads (1)`);
    }
  }

  /**
   * Ends the stream and checks the trailer.
   * @throws SnapshotCheckError when the stream ended early or the trailer does not match
   */
  finish(): SnapshotFacts {
    if (this.seen < this.total) throw new SnapshotCheckError(`the stream ended after ${this.seen} of ${this.total} bytes, before the trailer`);
    const digest = this.hash.digest();
    if (!digest.equals(this.tail)) throw new SnapshotCheckError("the snapshot's trailer does not match its contents (damaged in transfer or storage)");
    return {
      sizeBytes: this.total,
      snapshotSha256: digest.toString('hex'),
      imageSha256: this.head.subarray(8, 40).toString('hex'),
      memoryBytes: this.head.readUInt32LE(40),
      podTimeMs: Number(this.head.readBigUInt64LE(48)),
      sectionCount: this.head.readUInt32LE(64),
    };
  }
}
