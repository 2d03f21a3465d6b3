/**
 * Files kept as content-addressed chunks in an object store: `<prefix>/<sha256>` holds the chunk whose
 * SHA-256 it names, so a chunk that is there already is not uploaded again (cdc.ts cuts the files). A file
 * is its list of chunks, which the caller keeps (a checkpoint's manifest, written last). Used for the pods'
 * memory and disk (seed 000, "Hibernate and Restore"; docs/feos/object-store.md).
 */
import { createHash } from 'node:crypto';
import { contentDefinedChunks } from './cdc.ts';
import { type ObjectStore, ObjectStoreError } from './store.ts';

/** One chunk of a file: its SHA-256 (lowercase hex, its key) and size (bytes). */
export interface ChunkRef {
  sha256: string;
  sizeBytes: number;
}

/** A file as `putChunked` stored it. */
export interface ChunkedFile {
  /** The whole file's size (bytes) and SHA-256. */
  sizeBytes: number;
  sha256: string;
  /** Its chunks, in order. */
  chunks: ChunkRef[];
  /** The bytes of the chunks this put uploaded (the others were in the store). */
  uploadedBytes: number;
  /** The keys this put created (to withdraw them when what names them is never written). */
  created: string[];
}

/** How many chunk uploads run at once. */
export const CHUNK_UPLOADS_AT_ONCE = 4;

const SHA = /^[0-9a-f]{64}$/;

/** The key of a chunk below `prefix`. */
export function chunkKey(prefix: string, sha256: string): string {
  return `${prefix}/${sha256}`;
}

/** The chunks below `prefix`, by SHA-256. @throws ObjectStoreError when the store fails */
export async function listChunks(store: ObjectStore, prefix: string): Promise<Set<string>> {
  const have = new Set<string>();
  for (const k of await store.list(prefix)) {
    const sha = k.slice(prefix.length + 1);
    if (SHA.test(sha)) have.add(sha);
  }
  return have;
}

/**
 * Stores a file as chunks below `prefix`, uploading only those the store does not have (`known`, as
 * `listChunks` found them; this call adds what it uploads).
 * @param onProgress the file's bytes read so far
 * @throws ObjectStoreError from the store; the signal's reason when it aborts (the chunks uploaded so far
 *   stay: `created` of a successful put, or a later prune, removes them)
 */
export async function putChunked(
  store: ObjectStore,
  prefix: string,
  source: AsyncIterable<Uint8Array>,
  options: { known: Set<string>; signal?: AbortSignal; onProgress?: (bytes: number) => void },
): Promise<ChunkedFile> {
  const whole = createHash('sha256');
  const chunks: ChunkRef[] = [];
  const created: string[] = [];
  let size = 0;
  let uploaded = 0;
  const inFlight = new Set<Promise<void>>();
  let failed: unknown;
  for await (const chunk of contentDefinedChunks(source)) {
    options.signal?.throwIfAborted();
    if (failed) throw failed;
    whole.update(chunk);
    size += chunk.byteLength;
    const sha256 = createHash('sha256').update(chunk).digest('hex');
    chunks.push({ sha256, sizeBytes: chunk.byteLength });
    if (!options.known.has(sha256)) {
      options.known.add(sha256);
      const key = chunkKey(prefix, sha256);
      const p = store
        .put(key, chunk, { signal: options.signal })
        .then(() => {
          uploaded += chunk.byteLength;
          created.push(key);
        })
        .catch((err: unknown) => {
          options.known.delete(sha256);
          failed ??= err;
        })
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      if (inFlight.size >= CHUNK_UPLOADS_AT_ONCE) await Promise.race(inFlight);
    }
    options.onProgress?.(size);
  }
  await Promise.all(inFlight);
  if (failed) throw failed;
  options.signal?.throwIfAborted();
  return { sizeBytes: size, sha256: whole.digest('hex'), chunks, uploadedBytes: uploaded, created };
}

/** How many chunks a read fetches ahead, at most (each at most `MAX_CHUNK_BYTES`). */
export const CHUNK_FETCHES_AT_ONCE = 8;

/**
 * A chunked file's bytes, in order, each chunk checked against its SHA-256 and size; up to
 * `CHUNK_FETCHES_AT_ONCE` chunks are fetched ahead.
 * @throws ObjectNotFoundError (store.ts) for a missing chunk; ObjectStoreError (failure `damaged`) naming the chunk
 *   when its bytes differ; ObjectStoreError from the store
 */
export async function* getChunked(store: ObjectStore, prefix: string, chunks: ChunkRef[], options: { signal?: AbortSignal } = {}): AsyncIterable<Uint8Array> {
  const fetchOne = async (c: ChunkRef): Promise<Uint8Array> => {
    const key = chunkKey(prefix, c.sha256);
    const parts: Uint8Array[] = [];
    for await (const piece of store.get(key, options)) parts.push(piece);
    const bytes = Buffer.concat(parts);
    const got = createHash('sha256').update(bytes).digest('hex');
    if (got !== c.sha256 || bytes.byteLength !== c.sizeBytes) {
      throw new ObjectStoreError(key, `${store.url}: chunk ${key} is ${bytes.byteLength} bytes with SHA-256 ${got}, not ${c.sizeBytes} bytes with ${c.sha256} (damaged in storage or transfer)`, {
        failure: 'damaged',
      });
    }
    return bytes;
  };
  const ahead: Promise<Uint8Array>[] = [];
  let next = 0;
  const fill = () => {
    while (next < chunks.length && ahead.length < CHUNK_FETCHES_AT_ONCE) {
      const p = fetchOne(chunks[next++]!);
      // A failure is seen when its turn comes; until then it must not count as unhandled.
      p.catch(() => {});
      ahead.push(p);
    }
  };
  fill();
  while (ahead.length > 0) {
    const bytes = await ahead.shift()!;
    fill();
    yield bytes;
  }
}

/**
 * Removes the chunks below `prefix` that `keep` does not name.
 * @returns how many were removed
 * @throws ObjectStoreError from the store (what was removed stays removed)
 */
export async function pruneChunks(store: ObjectStore, prefix: string, keep: Set<string>): Promise<number> {
  let removed = 0;
  for (const sha of await listChunks(store, prefix)) {
    if (keep.has(sha)) continue;
    await store.delete(chunkKey(prefix, sha));
    removed++;
  }
  return removed;
}

