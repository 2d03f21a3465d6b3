/** The one error the K32S reader raises on bad input. Seed 002, "Snapshot format". */

/**
 * Why a snapshot was refused, one code per cause that the seed lists, plus `Malformed` for bytes
 * that break the layout:
 * - `BadMagic`: it does not start with `"K32S"`;
 * - `BadVersion`: a version this node does not read;
 * - `ImageMismatch`: taken from another module than the one being deployed;
 * - `MemoryLimit`: holds more linear memory than the pod's limit (or the destination) gives;
 * - `GlobalMismatch`, `TableMismatch`: a global or a table does not match the module;
 * - `TrailerMismatch`: the trailer is not the SHA-256 of the bytes before it;
 * - `Truncated`: the stream ends before the trailer;
 * - `Malformed`: a field or section that version 1 does not allow (wrong lengths, bad UTF-8,
 *   duplicates, bytes after the trailer, ...).
 */
export type K32SErrorCode =
  | 'BadMagic'
  | 'BadVersion'
  | 'ImageMismatch'
  | 'MemoryLimit'
  | 'GlobalMismatch'
  | 'TableMismatch'
  | 'TrailerMismatch'
  | 'Truncated'
  | 'Malformed';

/**
 * A snapshot that the reader refuses. `message` names the cause in words a user can act on (the
 * kubelet reports it as `cannot restore the snapshot: <message>`); `code` is for programs (the API
 * server answers 422 for every code); `offset` is the byte of the stream where it was found.
 */
export class K32SError extends Error {
  /** The cause, see {@link K32SErrorCode}. */
  readonly code: K32SErrorCode;
  /** Byte offset in the snapshot where the reader found the problem. */
  readonly offset: number;
  constructor(code: K32SErrorCode, message: string, offset: number) {
    super(message);
    this.name = 'K32SError';
    this.code = code;
    this.offset = offset;
  }
}
