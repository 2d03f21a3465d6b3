/** Where pods hibernate: the object store interface and its implementations. */
export { type ObjectStore, type ObjectStoreFailure, type PutOptions, type PutResult, type RangeOptions, type StoreCallOptions, ObjectStoreError, ObjectNotFoundError, checkKey, storeFailureCode } from './store.ts';
export { LocalDirObjectStore } from './local-dir.ts';
export { type ChunkSession, type CutChunks, HASH_WORKERS, HashPool, hashPool } from './hash-pool.ts';
export { type ChunkRef, type ChunkedFile, chunkKey, getChunked, listChunks, pruneChunks, putChunked } from './chunked.ts';
export { contentDefinedChunks, ChunkCutter, type CdcParams, AVG_CHUNK_BYTES, LARGE_CHUNKS, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, PACKED_CHUNKS } from './cdc.ts';
export { type ChunkIndex, type PackedChunk, type PackedFile, PackWriter, PACK_BYTES, PIECE_BYTES, PieceBuffers, PIECES_AT_ONCE, RangeBuffers, isPackName, listPacks, packKey, prunePacks, readPacked } from './packs.ts';
export { S3ObjectStore, type S3StoreOptions, parseS3Url, describeS3Error } from './s3.ts';
import { LocalDirObjectStore } from './local-dir.ts';
import { S3ObjectStore, type S3StoreOptions } from './s3.ts';
import type { ObjectStore } from './store.ts';

/**
 * The object store that `--object-store URL` names: `file:///absolute/path` (a local directory; made
 * when missing at the first put) or `s3://BUCKET/PREFIX` (an S3 bucket, reached as `s3` says).
 * @throws RangeError naming the URL and the forms taken
 */
export function openObjectStore(url: string, s3: S3StoreOptions = {}): ObjectStore {
  if (url.startsWith('file:')) return new LocalDirObjectStore(url);
  if (url.startsWith('s3:')) return new S3ObjectStore(url, s3);
  throw new RangeError(`--object-store ${JSON.stringify(url)}: want file:///absolute/path or s3://BUCKET/PREFIX`);
}
