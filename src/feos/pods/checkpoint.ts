/**
 * A pod's checkpoint in the object store (seed 000, "A pod": Hibernate and Restore; docs/feos/object-store.md):
 * the memory (QEMU's migration stream, when the pod hibernated with it) and the disk (`disk.qcow2`, the pod's
 * overlay) as content-defined chunks in packs below `pods/<pod ID>/packs/` (store/packs.ts: a chunk the store has
 * from an earlier checkpoint of the pod is not uploaded again), and `pods/<pod ID>/<checkpoint>/manifest.json`,
 * written last, naming every chunk, or (version 4, `base`) runs of the chunks of the base checkpoint's manifest
 * and the chunks it lacks: a checkpoint without its manifest is a half upload and never taken for a whole one.
 * (Version 2 put each chunk as an object of its own below `pods/<pod ID>/chunks/`.) (Manifests of version 1 named whole objects `pods/<pod ID>/<checkpoint>/<file>`; they are read
 * still.) A restore writes `restored` (a claim
 * that only one restore wins): a checkpoint is restored once. The pod's volumes go beside, under
 * `volumes/<volume ID>/<checkpoint>/disk.qcow2`, so that a CHECKPOINTED volume outlives its pod's
 * checkpoint (seed "Volumes": a checkpointed volume whose pod was deleted stays checkpointed).
 *
 * ```json
 * { "version": 1, "podId": "abcdefghjkm", "checkpoint": "20261129T162100Z-1a2b", "createdAt": "...",
 *   "podCreatedAt": "2026-11-29T16:02:11.123456789Z",
 *   "node": "host", "guestVersion": "2026...", "memory": true, "spec": { PodSpec as protobuf JSON },
 *   "files": [{ "name": "memory", "sizeBytes": 179306496, "sha256": "..." },
 *             { "name": "disk.qcow2", "sizeBytes": 1966080, "sha256": "..." }],
 *   "volumes": [{ "name": "data", "volumeId": "<uuid>", "sizeBytes": "67108864", "labels": {},
 *                 "formatted": true, "key": "volumes/<uuid>/<checkpoint>/disk.qcow2",
 *                 "fileSizeBytes": 1245184, "sha256": "..." }] }
 * ```
 */
import { createHash, randomBytes } from 'node:crypto';
import { open, rm } from 'node:fs/promises';
import { fromJson, type JsonValue, toJson } from '@bufbuild/protobuf';
import { type Timestamp, TimestampSchema, timestampNow } from '@bufbuild/protobuf/wkt';
import { type PodSpec, PodSpecSchema } from '../gen/feos/pod/v1/pod_pb.js';
import { errorMessage, FeosError } from '../api/index.ts';
import { type ChunkIndex, type ChunkRef, getChunked, isPackName, ObjectNotFoundError, type ObjectStore, PACKED_CHUNKS, type PackedChunk, PIECE_BYTES, type PieceBuffers, pruneChunks, prunePacks, readPacked, storeFailureCode } from '../store/index.ts';

/**
 * The manifest format this code writes: 4, chunks in packs, the chunks a base checkpoint's file has in the same
 * order named as runs of its chunks. It reads 3 (every chunk named), 2 (chunks as objects of their own below
 * `pods/<pod ID>/chunks/`) and 1 (whole files) still.
 */
export const MANIFEST_VERSION = 4;
/**
 * How many manifests a relative one may stand on (its base, the base's base, ...): the next hibernation names
 * every chunk again, so that a restore reads a few small manifests at most.
 */
export const MAX_BASE_DEPTH = 8;
/** The memory file's name in a checkpoint. */
export const MEMORY_FILE = 'memory';
/** The disk file's name in a checkpoint. */
export const DISK_FILE = 'disk.qcow2';
const CHECKPOINT_NAME = /^\d{8}T\d{6}Z-[0-9a-f]{4,}$/;

/** One file of a checkpoint. */
export interface CheckpointFile {
  name: string;
  sizeBytes: number;
  /** Lowercase hex. */
  sha256: string;
  /** Its chunks below `chunkPrefix(podId)`, in order (version 2); none: the whole object of version 1. */
  chunks?: ChunkRef[];
  /** Its chunks in the packs below `packPrefix(podId)`, in order (version 3). */
  packed?: PackedChunk[];
}

/** A volume of the pod, as its checkpoint holds it. */
export interface CheckpointVolume {
  /** The pod's name for it. */
  name: string;
  volumeId: string;
  /** The volume's size (bytes), as a decimal string (protobuf JSON's uint64). */
  sizeBytes: string;
  labels: Record<string, string>;
  formatted: boolean;
  /** The object holding its disk. */
  key: string;
  /** The object's size (bytes) and SHA-256. */
  fileSizeBytes: number;
  sha256: string;
}

/** What `manifest.json` holds. */
export interface CheckpointManifest {
  version: 1 | 2 | 3 | 4;
  podId: string;
  checkpoint: string;
  /** When the manifest was written (ISO 8601). */
  createdAt: string;
  /**
   * When the pod was created (its record's `createdAt`, RFC 3339 as protobuf JSON writes a Timestamp, to the
   * nanosecond), which a restore on any node keeps; absent in a manifest written before it was kept.
   */
  podCreatedAt?: string;
  /** The hibernating node's hostname. */
  node: string;
  /** The guest version the pod's microVM ran (a restore needs it installed). */
  guestVersion: string;
  /** Whether the checkpoint holds the memory (a resume); false: the disk alone (a fresh boot). */
  memory: boolean;
  spec: PodSpec;
  files: CheckpointFile[];
  /** The pod's volumes (none: absent). */
  volumes: CheckpointVolume[];
  /** How many bytes the hibernation uploaded (of the files' sizes: the others' chunks were in the store). */
  uploadedBytes?: number;
  /**
   * Version 4: the checkpoint whose manifest this one's runs of chunks refer to (it sorts before this one), and
   * how many manifests stand below this one (0: none, every chunk named). Read: the files' `packed` are whole.
   */
  base?: string;
  baseDepth?: number;
}

/** A new checkpoint name: the UTC time to the second and random hex, so names sort by time. */
export function newCheckpointName(now = new Date()): string {
  return `${now.toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z')}-${randomBytes(2).toString('hex')}`;
}

/** Checks a checkpoint name's form. @throws FeosError INVALID_ARGUMENT */
export function parseCheckpointName(name: string): string {
  if (!CHECKPOINT_NAME.test(name)) throw new FeosError('INVALID_ARGUMENT', `checkpoint ${JSON.stringify(name)}: want a name such as 20261129T162100Z-1a2b`);
  return name;
}

/** The key of a volume's disk in a checkpoint. */
export function volumeKey(volumeId: string, checkpoint: string): string {
  return `volumes/${volumeId}/${checkpoint}/disk.qcow2`;
}

/** Where a pod's chunks are: `pods/<pod ID>/chunks`. */
export function chunkPrefix(podId: string): string {
  return `pods/${podId}/chunks`;
}

/** Where a pod's packs are: `pods/<pod ID>/packs`. */
export function packPrefix(podId: string): string {
  return `pods/${podId}/packs`;
}

/** The key of a checkpoint's file. */
export function checkpointKey(podId: string, checkpoint: string, file: string): string {
  return `pods/${podId}/${checkpoint}/${file}`;
}

/**
 * The manifest as it is written. Versions 3 and 4 name the packs the files' chunks are in once (`packs`, a list,
 * every pack the checkpoint needs) and each chunk as `[pack's index in packs, offset, length, SHA-256]`, on one
 * line (tens of thousands of chunks). Version 4 with a `base` (its manifest as read, whole) names a run of chunks
 * that the base's file of the same name has in the same order as `[index of the first in the base's file, count]`:
 * a second hibernation of an unchanged pod writes a few hundred entries instead of every chunk again. A relative
 * manifest that would not be under half the whole one's size is written whole (no `base`).
 */
export function manifestBytes(m: CheckpointManifest, base?: CheckpointManifest): Uint8Array {
  if (m.version < 3) {
    const json = { ...m, spec: toJson(PodSpecSchema, m.spec) };
    return new TextEncoder().encode(`${JSON.stringify(json, null, 2)}\n`);
  }
  const encode = (relativeTo?: CheckpointManifest) => {
    const packs: string[] = [];
    const index = new Map<string, number>();
    const packOf = (name: string) => {
      let i = index.get(name);
      if (i === undefined) {
        i = packs.push(name) - 1;
        index.set(name, i);
      }
      return i;
    };
    const runPacks = new Set<string>();
    const files = m.files.map((f) => {
      const mine = f.packed ?? [];
      const theirs = relativeTo?.files.find((x) => x.name === f.name)?.packed ?? [];
      const first = new Map<string, number>();
      for (const [j, c] of theirs.entries()) if (!first.has(c.sha256)) first.set(c.sha256, j);
      const chunks: Array<[number, number] | [number, number, number, string]> = [];
      for (let i = 0; i < mine.length; ) {
        const c = mine[i]!;
        const j = first.get(c.sha256);
        if (j === undefined) {
          chunks.push([packOf(c.pack), c.offset, c.sizeBytes, c.sha256]);
          i++;
          continue;
        }
        let n = 1;
        while (i + n < mine.length && j + n < theirs.length && theirs[j + n]!.sha256 === mine[i + n]!.sha256) n++;
        for (let k = j; k < j + n; k++) runPacks.add(theirs[k]!.pack);
        chunks.push([j, n]);
        i += n;
      }
      return { name: f.name, sizeBytes: f.sizeBytes, sha256: f.sha256, chunks };
    });
    for (const p of runPacks) packOf(p);
    const { base: _b, baseDepth: _d, ...rest } = m;
    const json = { ...rest, ...(relativeTo ? { base: relativeTo.checkpoint } : {}), spec: toJson(PodSpecSchema, m.spec), chunking: PACKED_CHUNKS, packs, files };
    return new TextEncoder().encode(`${JSON.stringify(json)}\n`);
  };
  const whole = encode();
  if (m.version < 4 || !base || (base.baseDepth ?? 0) + 1 > MAX_BASE_DEPTH) return whole;
  const relative = encode(base);
  return relative.byteLength < whole.byteLength / 2 ? relative : whole;
}

/**
 * Reads and checks a checkpoint's manifest; a relative one (version 4 with a `base`) is read with its bases and
 * comes back whole (every file's `packed` lists all its chunks).
 * @param read manifests read already, by checkpoint (this call adds what it reads: several calls share the bases)
 * @throws FeosError NOT_FOUND (no manifest: no checkpoint, or a half upload), DATA_LOSS (not a manifest
 *   of this format and pod, naming what is wrong; a base whose manifest is missing or does not read, naming it),
 *   UNAVAILABLE (the store did not answer)
 */
export async function readManifest(store: ObjectStore, podId: string, checkpoint: string, read: Map<string, CheckpointManifest> = new Map(), depth = 0): Promise<CheckpointManifest> {
  const had = read.get(checkpoint);
  if (had) return had;
  const key = checkpointKey(podId, checkpoint, 'manifest.json');
  let bytes: Uint8Array;
  try {
    bytes = await store.getBytes(key);
  } catch (err: unknown) {
    if (err instanceof ObjectNotFoundError) throw new FeosError('NOT_FOUND', `checkpoint ${checkpoint} of pod ${podId} is not in the object store ${store.url}: no ${key}`);
    throw new FeosError(storeFailureCode(err), `object store: ${errorMessage(err)}`, { cause: err });
  }
  const bad = (why: string) => new FeosError('DATA_LOSS', `checkpoint ${checkpoint} of pod ${podId}: ${key} is not a manifest: ${why}; nothing was restored`);
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (err: unknown) {
    throw bad(`not JSON (${errorMessage(err)})`);
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw bad('not an object');
  if (doc.version !== 1 && doc.version !== 2 && doc.version !== 3 && doc.version !== 4) throw bad(`version ${JSON.stringify(doc.version)}, want 1, 2, 3 or ${MANIFEST_VERSION}`);
  const packs = doc.version >= 3 ? doc.packs : [];
  if (!Array.isArray(packs) || !packs.every((p) => typeof p === 'string' && isPackName(p))) throw bad('packs: want a list of pack names (32 hex digits)');
  if (doc.podId !== podId) throw bad(`it names pod ${JSON.stringify(doc.podId)}`);
  if (doc.checkpoint !== checkpoint) throw bad(`it names checkpoint ${JSON.stringify(doc.checkpoint)}`);
  if (typeof doc.guestVersion !== 'string' || !/^[A-Za-z0-9._-]+$/.test(doc.guestVersion)) throw bad(`guestVersion ${JSON.stringify(doc.guestVersion)}`);
  if (typeof doc.memory !== 'boolean') throw bad('memory: want true or false');
  let spec: PodSpec;
  try {
    spec = fromJson(PodSpecSchema, doc.spec as JsonValue);
  } catch (err: unknown) {
    throw bad(`spec: ${errorMessage(err)}`);
  }
  if (!Array.isArray(doc.files)) throw bad('files: want a list');
  // A relative manifest's base: an earlier checkpoint of the pod, read (and resolved) first.
  let base: CheckpointManifest | undefined;
  if (doc.version === 4 && doc.base !== undefined) {
    if (typeof doc.base !== 'string' || !CHECKPOINT_NAME.test(doc.base) || doc.base >= checkpoint) throw bad(`base ${JSON.stringify(doc.base)}: want an earlier checkpoint's name`);
    if (depth >= MAX_BASE_DEPTH) throw bad(`its bases are more than ${MAX_BASE_DEPTH} deep`);
    try {
      base = await readManifest(store, podId, doc.base, read, depth + 1);
    } catch (err: unknown) {
      if (!(err instanceof FeosError) || (err.code !== 'NOT_FOUND' && err.code !== 'DATA_LOSS')) throw err;
      const why = err.code === 'NOT_FOUND' ? `whose manifest ${checkpointKey(podId, doc.base, 'manifest.json')} is not in the object store ${store.url}` : `which does not read (${err.message})`;
      throw new FeosError('DATA_LOSS', `checkpoint ${checkpoint} of pod ${podId}: its manifest ${key} is relative to checkpoint ${doc.base}, ${why}; nothing was restored`);
    }
    if (base.version < 3) throw bad(`base ${doc.base} is a version ${base.version} manifest, not one of packs`);
  }
  const files: CheckpointFile[] = [];
  for (const f of doc.files as Array<Record<string, unknown>>) {
    if (!f || typeof f.name !== 'string' || !Number.isSafeInteger(f.sizeBytes) || (f.sizeBytes as number) < 0 || typeof f.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(f.sha256)) {
      throw bad(`files: ${JSON.stringify(f)} is not {name, sizeBytes, sha256}`);
    }
    const file: CheckpointFile = { name: f.name, sizeBytes: f.sizeBytes as number, sha256: f.sha256 };
    if (doc.version === 2) {
      const ok =
        Array.isArray(f.chunks) &&
        (f.chunks as Array<Record<string, unknown>>).every((c) => c && typeof c.sha256 === 'string' && /^[0-9a-f]{64}$/.test(c.sha256) && Number.isSafeInteger(c.sizeBytes) && (c.sizeBytes as number) > 0);
      if (!ok) throw bad(`files: ${f.name}: chunks: want a list of {sha256, sizeBytes}`);
      file.chunks = (f.chunks as ChunkRef[]).map((c) => ({ sha256: c.sha256, sizeBytes: c.sizeBytes }));
      const sum = file.chunks.reduce((n, c) => n + c.sizeBytes, 0);
      if (sum !== file.sizeBytes) throw bad(`files: ${f.name}: its chunks hold ${sum} bytes, its sizeBytes says ${file.sizeBytes}`);
    }
    if (doc.version >= 3) {
      if (!Array.isArray(f.chunks)) throw bad(`files: ${f.name}: chunks: want a list of [pack, offset, length, sha256]`);
      const packed: PackedChunk[] = [];
      const theirs = base?.files.find((x) => x.name === f.name)?.packed;
      let sum = 0;
      for (const c of f.chunks as unknown[]) {
        if (Array.isArray(c) && c.length === 2 && doc.version === 4) {
          // A run of the base's file: [first, count].
          const [first, count] = c as unknown[];
          if (!theirs) throw bad(`files: ${f.name}: chunks: ${JSON.stringify(c)} is a run of the base's file, and ${base ? `base ${base.checkpoint} has no ${f.name}` : 'there is no base'}`);
          if (!Number.isSafeInteger(first) || !Number.isSafeInteger(count) || (first as number) < 0 || (count as number) <= 0 || (first as number) + (count as number) > theirs.length) {
            throw bad(`files: ${f.name}: chunks: ${JSON.stringify(c)} is not [first, count] within the base's ${theirs.length} chunks`);
          }
          for (const x of theirs.slice(first as number, (first as number) + (count as number))) {
            packed.push(x);
            sum += x.sizeBytes;
          }
          continue;
        }
        const [p, offset, length, sha] = Array.isArray(c) ? c : [];
        const pack = Number.isSafeInteger(p) ? packs[p as number] : undefined;
        if (pack === undefined || !Number.isSafeInteger(offset) || (offset as number) < 0 || !Number.isSafeInteger(length) || (length as number) <= 0 || typeof sha !== 'string' || !/^[0-9a-f]{64}$/.test(sha)) {
          throw bad(`files: ${f.name}: chunks: ${JSON.stringify(c)} is not [pack, offset, length, sha256]`);
        }
        packed.push({ pack, offset: offset as number, sizeBytes: length as number, sha256: sha });
        sum += length as number;
      }
      if (sum !== file.sizeBytes) throw bad(`files: ${f.name}: its chunks hold ${sum} bytes, its sizeBytes says ${file.sizeBytes}`);
      file.packed = packed;
    }
    files.push(file);
  }
  const volumes: CheckpointVolume[] = [];
  if (doc.volumes !== undefined && !Array.isArray(doc.volumes)) throw bad('volumes: want a list');
  for (const v of (doc.volumes ?? []) as Array<Record<string, unknown>>) {
    const ok =
      v &&
      typeof v.name === 'string' &&
      typeof v.volumeId === 'string' &&
      /^[0-9a-f-]{36}$/.test(v.volumeId) &&
      typeof v.sizeBytes === 'string' &&
      /^\d+$/.test(v.sizeBytes) &&
      typeof v.formatted === 'boolean' &&
      v.key === volumeKey(v.volumeId, checkpoint) &&
      Number.isSafeInteger(v.fileSizeBytes) &&
      typeof v.sha256 === 'string' &&
      /^[0-9a-f]{64}$/.test(v.sha256) &&
      (v.labels === undefined || (typeof v.labels === 'object' && !Array.isArray(v.labels)));
    if (!ok) throw bad(`volumes: ${JSON.stringify(v)} is not {name, volumeId, sizeBytes, labels, formatted, key, fileSizeBytes, sha256}`);
    volumes.push({
      name: v.name as string,
      volumeId: v.volumeId as string,
      sizeBytes: v.sizeBytes as string,
      labels: Object.fromEntries(Object.entries((v.labels ?? {}) as Record<string, unknown>).map(([k, x]) => [k, String(x)])),
      formatted: v.formatted as boolean,
      key: v.key as string,
      fileSizeBytes: v.fileSizeBytes as number,
      sha256: v.sha256 as string,
    });
  }
  const names = new Set(files.map((f) => f.name));
  if (!names.has(DISK_FILE)) throw bad(`files: no ${DISK_FILE}`);
  if (doc.memory && !names.has(MEMORY_FILE)) throw bad(`files: memory is true but there is no ${MEMORY_FILE}`);
  const m: CheckpointManifest = {
    version: doc.version,
    podId,
    checkpoint,
    createdAt: String(doc.createdAt ?? ''),
    ...(doc.podCreatedAt === undefined ? {} : { podCreatedAt: podCreatedAtOf(doc.podCreatedAt, bad) }),
    node: String(doc.node ?? ''),
    guestVersion: doc.guestVersion,
    memory: doc.memory,
    spec,
    files,
    volumes,
    uploadedBytes: Number.isSafeInteger(doc.uploadedBytes) ? (doc.uploadedBytes as number) : undefined,
    ...(base ? { base: base.checkpoint, baseDepth: (base.baseDepth ?? 0) + 1 } : { baseDepth: 0 }),
  };
  read.set(checkpoint, m);
  return m;
}

/** A manifest's `podCreatedAt`, checked. @throws the `bad` error when it is not an RFC 3339 time */
function podCreatedAtOf(v: unknown, bad: (why: string) => Error): string {
  try {
    if (typeof v !== 'string') throw new Error('not a string');
    fromJson(TimestampSchema, v);
    return v;
  } catch {
    throw bad(`podCreatedAt ${JSON.stringify(v)}: want an RFC 3339 time such as 2026-11-29T16:02:11.123Z`);
  }
}

/**
 * The creation time a restored pod's new record takes: the manifest's `podCreatedAt` (the pod keeps the time it
 * was created, whichever node restores it), or now for a manifest written before it was kept.
 */
export function restoredCreatedAt(m: CheckpointManifest): Timestamp {
  return m.podCreatedAt ? fromJson(TimestampSchema, m.podCreatedAt) : timestampNow();
}

/**
 * A local file's bytes, as `put` and `PackWriter.putFile` take them: pieces of `PIECE_BYTES`, each a buffer of its
 * own (the last may be shorter), read into buffers of `pieces` when given (a pack writer's, which gives each back
 * once it is done with it) or fresh ones.
 * @throws the read's error; the signal's reason when it aborts
 */
export async function* fileChunks(path: string, signal?: AbortSignal, pieces?: PieceBuffers): AsyncIterable<Uint8Array> {
  signal?.throwIfAborted();
  const fh = await open(path, 'r');
  try {
    for (;;) {
      signal?.throwIfAborted();
      const buf = pieces ? pieces.take() : Buffer.allocUnsafeSlow(PIECE_BYTES);
      const { bytesRead } = await fh.read(buf, 0, buf.byteLength, null);
      if (bytesRead === 0) {
        pieces?.give(buf);
        return;
      }
      yield bytesRead === buf.byteLength ? buf : buf.subarray(0, bytesRead);
    }
  } finally {
    await fh.close();
  }
}

/** How often a file being written is looked at again while it has less than a piece more (ms). */
const GROWING_POLL_MS = 5;

/**
 * A file's bytes as its writer appends them: QEMU's migration stream while the suspend writes it (`exec:cat >`),
 * so that a hibernation cuts and uploads the memory while QEMU is still writing it. Whole pieces of 1 MiB are read
 * once the file holds them (each its own buffer, from `pieces` when given, which the hash pool takes without a copy: smaller pieces as `cat`
 * writes them cost more messages and copies than they gain), from a file that may not exist yet; the rest once
 * `written` has resolved (the writer is done: the suspend returns once QEMU has quit), to the file's end. Nothing
 * tells a reader that a file grew (QEMU says nothing until the stream's end; inotify would wake it at every write
 * of `cat`), so its size is looked at again every GROWING_POLL_MS while it has less than a piece more.
 * @param written settles when the writer is done; its rejection ends the bytes with its error
 * @throws the writer's error; ENOENT when the file is not there once the writer is done; the signal's reason
 */
export async function* growingFileChunks(path: string, written: Promise<unknown>, signal?: AbortSignal, pieces?: PieceBuffers): AsyncIterable<Uint8Array> {
  let end: { failed: boolean; err?: unknown } | undefined;
  const settled = written.then(
    () => {
      end = { failed: false };
    },
    (err: unknown) => {
      end = { failed: true, err };
    },
  );
  const idle = () => Promise.race([settled, new Promise<void>((r) => setTimeout(r, GROWING_POLL_MS))]);
  let fh: Awaited<ReturnType<typeof open>> | undefined;
  try {
    for (;;) {
      signal?.throwIfAborted();
      const done = end;
      if (done?.failed) throw done.err;
      try {
        fh = await open(path, 'r');
        break;
      } catch (err: unknown) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || done) throw err;
      }
      await idle();
    }
    let pos = 0;
    for (;;) {
      signal?.throwIfAborted();
      // Seen before the size: a file looked at after the writer's end is whole.
      const done = end;
      if (done?.failed) throw done.err;
      const size = (await fh.stat()).size;
      if (size - pos < PIECE_BYTES && !done) {
        await idle();
        continue;
      }
      if (size <= pos) return;
      const whole = size - pos >= PIECE_BYTES && pieces;
      const buf = whole ? pieces.take() : Buffer.allocUnsafeSlow(Math.min(PIECE_BYTES, size - pos));
      const { bytesRead } = await fh.read(buf, 0, buf.byteLength, pos);
      if (bytesRead === 0) {
        if (whole) pieces.give(buf);
        return;
      }
      pos += bytesRead;
      yield bytesRead === buf.byteLength ? buf : buf.subarray(0, bytesRead);
    }
  } finally {
    await fh?.close();
  }
}

/**
 * An object a restore copies: its key, and what its manifest says of it; with `chunks`, the file is those
 * chunks below `key` (a chunk prefix), in order.
 */
export interface ExpectedObject {
  key: string;
  sizeBytes: number;
  sha256: string;
  chunks?: ChunkRef[];
  /** The file is these chunks of the packs below `key` (a pack prefix), in order (version 3). */
  packed?: PackedChunk[];
}

/** Where a restore's copy spent its time (ms), added to by `fetchVerified`: ranged GETs and writes, the whole file's check, its fsync. */
export interface FetchTimings {
  fetchMs: number;
  checkMs: number;
  syncMs: number;
}

/** A write to the node's own disk that failed while an object was copied (the store is not to blame). */
class LocalWriteError extends Error {
  readonly path: string;
  constructor(path: string, cause: unknown) {
    super(`${path}: ${errorMessage(cause)}`, { cause });
    this.path = path;
  }
  /** UNAVAILABLE naming the node's file and whether its disk is full, not the store. */
  toFeos(): FeosError {
    const code = (this.cause as NodeJS.ErrnoException).code;
    const why = code === 'ENOSPC' || code === 'EDQUOT' ? "this node's state dir is full (the object store is not)" : "this node's state dir failed";
    return new FeosError('UNAVAILABLE', `${why}: writing ${this.message}; nothing was restored`, { cause: this.cause });
  }
}

/**
 * Copies an object from the store to `path` (made anew, fsynced), checking its size and SHA-256
 * against what the manifest says; a file that differs is removed.
 * @param what names the checkpoint in messages ("checkpoint C of pod P")
 * @param outcome ends a DATA_LOSS message: what the failure leaves ("nothing was restored")
 * @throws FeosError DATA_LOSS naming the object, what the manifest says and what was read (also when
 *   the object is missing: the manifest names it); UNAVAILABLE when the store fails ("object store
 *   URL: ...") or the node's disk does ("this node's state dir is full (the object store is not):
 *   writing PATH: ENOSPC ..." or "this node's state dir failed: ...")
 */
export async function fetchVerified(
  store: ObjectStore,
  want: ExpectedObject,
  path: string,
  what: string,
  signal?: AbortSignal,
  timings?: FetchTimings,
  outcome = 'nothing was restored',
): Promise<void> {
  const t0 = performance.now();
  let sha256: string;
  let size = 0;
  const fh = await open(path, 'w', 0o600);
  try {
    try {
      if (want.packed) {
        // Written in place, out of order, each chunk checked against its SHA-256 before it was written: the file is
        // the manifest's chunks in order (their sizes add up to its size, readManifest checked), so the whole file's
        // SHA-256 would say nothing more (reading 180 MiB back cost 2 s under load).
        const got = await readPacked(store, want.key, want.packed, fh, { signal, onWriteError: (err) => new LocalWriteError(path, err) });
        if (timings) timings.fetchMs += performance.now() - t0;
        size = (await fh.stat()).size;
        sha256 = size === got.sizeBytes ? want.sha256 : '(not computed: the size differs)';
      } else {
        const hash = createHash('sha256');
        const source = want.chunks ? getChunked(store, want.key, want.chunks, { signal }) : store.get(want.key, { signal });
        for await (const chunk of source) {
          hash.update(chunk);
          size += chunk.byteLength;
          try {
            await fh.write(chunk);
          } catch (err: unknown) {
            throw new LocalWriteError(path, err);
          }
        }
        sha256 = hash.digest('hex');
      }
    } catch (err: unknown) {
      if (err instanceof LocalWriteError) throw err.toFeos();
      if (err instanceof ObjectNotFoundError) throw new FeosError('DATA_LOSS', `${what}: ${err.key}, which its manifest names, is missing; ${outcome}`);
      const code = storeFailureCode(err);
      throw new FeosError(code, `${code === 'DATA_LOSS' ? `${what}: ` : ''}object store ${store.url}: ${errorMessage(err)}${code === 'DATA_LOSS' ? `; ${outcome}` : ''}`, { cause: err });
    }
    const s0 = performance.now();
    try {
      await fh.sync();
    } catch (err: unknown) {
      throw new LocalWriteError(path, err).toFeos();
    }
    if (timings) timings.syncMs += performance.now() - s0;
  } catch (err: unknown) {
    await fh.close().catch(() => {});
    await rm(path, { force: true });
    throw err;
  }
  await fh.close();
  if (size !== want.sizeBytes || sha256 !== want.sha256) {
    await rm(path, { force: true });
    throw new FeosError('DATA_LOSS', `${what}: ${want.key} is ${size} bytes with SHA-256 ${sha256}; its manifest says ${want.sizeBytes} bytes with ${want.sha256}; ${outcome}`);
  }
}

/** The pod's checkpoints that have a manifest, oldest first. */
export async function listCheckpoints(store: ObjectStore, podId: string): Promise<string[]> {
  const keys = await store.list(`pods/${podId}`);
  const names = new Set<string>();
  for (const k of keys) {
    const m = /^pods\/[^/]+\/([^/]+)\/manifest\.json$/.exec(k);
    if (m && CHECKPOINT_NAME.test(m[1])) names.add(m[1]);
  }
  return [...names].sort();
}

/**
 * The manifests of the pod's checkpoints whose data the store keeps: those not restored yet (a restore may
 * still take them) and the newest (the base of the pod's next hibernation). A prune keeps exactly their
 * chunks and packs, so what these name is in the store.
 * @throws what the store throws; FeosError DATA_LOSS for a manifest that does not read
 */
export async function keptManifests(store: ObjectStore, podId: string): Promise<CheckpointManifest[]> {
  const all = await listCheckpoints(store, podId);
  const out: CheckpointManifest[] = [];
  const read = new Map<string, CheckpointManifest>();
  for (const [i, name] of all.entries()) {
    const newest = i === all.length - 1;
    if (!newest && (await store.exists(checkpointKey(podId, name, 'restored')))) continue;
    out.push(await readManifest(store, podId, name, read));
  }
  return out;
}

/**
 * What a new hibernation of the pod stands on: the chunks in its packs it need not upload again, those the kept
 * checkpoints name (`keptManifests`; packs that no manifest names, left by a hibernation that failed or was
 * killed, are not counted: the next prune removes them), and the base its manifest may be relative to, the
 * newest checkpoint's manifest (when it reads and is one of packs). A manifest that does not read is skipped.
 * @throws what the store throws
 */
export async function hibernationBase(store: ObjectStore, podId: string): Promise<{ index: ChunkIndex; base?: CheckpointManifest }> {
  const index: ChunkIndex = new Map();
  const all = await listCheckpoints(store, podId);
  const read = new Map<string, CheckpointManifest>();
  let base: CheckpointManifest | undefined;
  for (const [i, name] of all.entries()) {
    const newest = i === all.length - 1;
    if (!newest && (await store.exists(checkpointKey(podId, name, 'restored')))) continue;
    let m: CheckpointManifest;
    try {
      m = await readManifest(store, podId, name, read);
    } catch (err: unknown) {
      if (err instanceof FeosError && err.code === 'DATA_LOSS') continue;
      throw err;
    }
    for (const f of m.files) for (const c of f.packed ?? []) index.set(c.sha256, c);
    if (newest && m.version >= 3) base = m;
  }
  return { index, base };
}

/**
 * The checkpoints whose manifests the pod's checkpoints not restored yet stand on (their bases, and theirs): a
 * delete of the pod's claimed checkpoints leaves these, since a restore may still take one standing on them.
 * @throws what the store throws; FeosError DATA_LOSS for a manifest that does not read (then nothing is known to be
 *   unneeded)
 */
export async function neededBases(store: ObjectStore, podId: string): Promise<Set<string>> {
  const out = new Set<string>();
  const read = new Map<string, CheckpointManifest>();
  for (const name of await listCheckpoints(store, podId)) {
    if (await store.exists(checkpointKey(podId, name, 'restored'))) continue;
    for (let b = (await readManifest(store, podId, name, read)).base; b && !out.has(b); b = (await readManifest(store, podId, b, read)).base) out.add(b);
  }
  return out;
}

/**
 * Removes the pod's chunks (version 2) and packs (version 3) that no kept checkpoint needs (`keptManifests`).
 * A pack one kept chunk is in stays whole, with the chunks in it that nothing names any more (packs are not
 * rewritten). Runs after a hibernation's manifest, a withdrawn hibernation and a pod's delete; only the node
 * the pod lives on hibernates it, so nothing uploads the pod's chunks meanwhile.
 * @returns how many chunks and packs were removed
 * @throws what the store throws (a manifest that does not read keeps everything: nothing is removed)
 */
export async function prunePodChunks(store: ObjectStore, podId: string): Promise<number> {
  const keepChunks = new Set<string>();
  const keepPacks = new Set<string>();
  for (const m of await keptManifests(store, podId)) {
    for (const f of m.files) {
      for (const c of f.chunks ?? []) keepChunks.add(c.sha256);
      for (const c of f.packed ?? []) keepPacks.add(c.pack);
    }
  }
  const removed = (await pruneChunks(store, chunkPrefix(podId), keepChunks)) + (await prunePacks(store, packPrefix(podId), keepPacks));
  // Half-written packs a kill left (a directory store's .part files) and directories left empty: nothing uploads
  // the pod's packs while it is pruned.
  await store.deleteLeftovers?.(chunkPrefix(podId));
  await store.deleteLeftovers?.(packPrefix(podId));
  return removed;
}
