/**
 * What `EtcdStorage` (etcd.ts), its reads and writes (etcd-kv.ts) and its watch (etcd-watch.ts)
 * share: the key layout, commit conditions and writes, the watch events, and the resourceVersion splice.
 */
/** Keys of the object store. */
export const REGISTRY_PREFIX = '/registry/';
/** Keys of content-addressed blobs: `/blobs/<sha256>` (a manifest) and `/blobs/<sha256>/<chunk>`. */
export const BLOB_PREFIX = '/blobs/';
/** The key that several API servers compare-and-swap so that one of them compacts per interval. */
export const COMPACT_KEY = '/kube32/compact_rev_key';
/** Bytes of one blob chunk: under etcd's default request limit (`--max-request-bytes`, 1.5 MiB). */
export const BLOB_CHUNK_BYTES = 1024 * 1024;
/** Keys per page of a range read (lists are read in pages at one revision). */
export const PAGE_KEYS = 1000;
/** The stored value's opening when its resourceVersion can be spliced in without parsing. */
export const RV_OPENING = '{"metadata":{"resourceVersion":"';

/** A key-value as the API server's thread sees it; `value` has its resourceVersion spliced in. */
export interface Row {
  key: string;
  value: string;
  mod: number;
}

/** One condition of a commit: the key's (or every key of `[key, end)`'s) mod revision. */
export interface Cond {
  key: string;
  /** Range end (exclusive), for a condition on a whole prefix. */
  end?: string;
  /** `eq`: mod revision equals `mod` (0: the key is absent); `lt`: every key's mod revision is below `mod`. */
  cmp: 'eq' | 'lt';
  mod: number;
}

/** A write of a commit. */
export type Write = { key: string; put: string } | { key: string; del: true };

/** One etcd event as posted to the API server's thread. */
export interface WireEvent {
  key: string;
  rev: number;
  /** The new value (PUT), with its resourceVersion. */
  value?: string;
  /** The value before, with its own resourceVersion, when etcd still had it. */
  prev?: string;
  created: boolean;
}

/** Messages of the event port. */
export type WatchBatch = { events: WireEvent[] } | { gap: number; message: string } | { error: string };

/** The end of the range of keys under `prefix` (etcd's prefix convention: last byte + 1). */
export function prefixEnd(prefix: string): string {
  const b = Buffer.from(prefix);
  b[b.length - 1] = b[b.length - 1]! + 1;
  return b.toString('latin1');
}

/** `value` with its `metadata.resourceVersion` set to `rev`: a splice when written by `encodeValue`, else a parse. */
export function withResourceVersion(value: string, rev: number): string {
  if (value.startsWith(RV_OPENING)) {
    const close = value.indexOf('"', RV_OPENING.length);
    return `${RV_OPENING}${rev}${value.slice(close)}`;
  }
  const obj = JSON.parse(value) as { metadata?: Record<string, unknown> };
  obj.metadata = { ...(obj.metadata ?? {}), resourceVersion: String(rev) };
  return JSON.stringify(obj);
}

/** A revision or count of etcd's answers (a string or number of the gRPC's int64) as a number. */
export const num = (s: string | number | undefined): number => Number(s ?? 0);
/** A key as etcd's bytes (keys are latin1: one byte a character). */
export const keyBuf = (k: string): Buffer => Buffer.from(k, 'latin1');

