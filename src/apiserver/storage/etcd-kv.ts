/**
 * EtcdStorage's reads and writes: ranges read in pages at one revision, commits
 * as compare-and-swap transactions, content-addressed blobs in chunks, and kube-apiserver's compactor.
 */
import type { Etcd3, ICompare, IKeyValue, IRequestOp } from 'etcd3';
import { BLOB_CHUNK_BYTES, BLOB_PREFIX, COMPACT_KEY, type Cond, keyBuf, num, PAGE_KEYS, prefixEnd, type Row, type Write, withResourceVersion } from './etcd-wire.ts';

/** A key-value of etcd as a {@link Row} (its resourceVersion spliced in). */
export function toRow(kv: IKeyValue): Row {
  const mod = num(kv.mod_revision);
  return { key: kv.key.toString('latin1'), value: withResourceVersion(kv.value.toString('utf8'), mod), mod };
}

/** The key-value calls of one etcd client. Every method raises the client's errors (gRPC, deadline). */
export class EtcdKv {
  readonly client: Etcd3;
  constructor(client: Etcd3) {
    this.client = client;
  }

  /** One range read: `[key, end)` (or `key` alone), at `revision` (default: the latest), at most `limit` keys. */
  range(key: string, end?: string, revision?: number, limit?: number) {
    return this.client.kv.range({ key: keyBuf(key), range_end: end === undefined ? undefined : keyBuf(end), revision, limit });
  }

  /** etcd's current revision. */
  async currentRev(): Promise<number> {
    const r = await this.client.kv.range({ key: keyBuf(COMPACT_KEY), count_only: true });
    return num(r.header.revision);
  }

  /** Every key under `prefix` at one revision, in pages. */
  async rangeAll(prefix: string): Promise<{ rows: Row[]; rev: number }> {
    const end = prefixEnd(prefix);
    const rows: Row[] = [];
    let from = prefix;
    let rev: number | undefined;
    for (;;) {
      const r = await this.range(from, end, rev, PAGE_KEYS);
      rev ??= num(r.header.revision);
      for (const kv of r.kvs) rows.push(toRow(kv));
      if (!r.more || r.kvs.length === 0) break;
      from = `${r.kvs[r.kvs.length - 1]!.key.toString('latin1')}\0`;
    }
    return { rows, rev: rev ?? 0 };
  }

  /** The writes, if every condition holds; `ok` false when one does not (nothing written). */
  async commit(conds: Cond[], writes: Write[]): Promise<{ ok: boolean; rev: number }> {
    const compare: ICompare[] = conds.map((c) => ({
      key: keyBuf(c.key),
      range_end: c.end === undefined ? undefined : keyBuf(c.end),
      target: 'Mod',
      result: c.cmp === 'eq' ? 'Equal' : 'Less',
      mod_revision: c.mod,
    }));
    const success: IRequestOp[] = writes.map((w) =>
      'put' in w ? { request_put: { key: keyBuf(w.key), value: Buffer.from(w.put, 'utf8') } } : { request_delete_range: { key: keyBuf(w.key) } },
    );
    const r = await this.client.kv.txn({ compare, success, failure: [] });
    return { ok: r.succeeded, rev: num(r.header.revision) };
  }

  /**
   * Stores a blob under its sha256 in chunks of {@link BLOB_CHUNK_BYTES}, the manifest last; a blob
   * already there is kept. Answers the revisions its writes made (they carry no `/registry/` event).
   */
  async putBlob(sha256: string, bytes: Uint8Array): Promise<number[]> {
    const manifest = `${BLOB_PREFIX}${sha256}`;
    const have = await this.range(manifest);
    if (have.kvs.length > 0) return [];
    const revisions: number[] = [];
    const chunks = Math.max(1, Math.ceil(bytes.byteLength / BLOB_CHUNK_BYTES));
    for (let i = 0; i < chunks; i++) {
      const part = bytes.subarray(i * BLOB_CHUNK_BYTES, (i + 1) * BLOB_CHUNK_BYTES);
      const r = await this.client.kv.put({ key: keyBuf(`${manifest}/${String(i).padStart(6, '0')}`), value: Buffer.from(part.buffer, part.byteOffset, part.byteLength) });
      revisions.push(num(r.header.revision));
    }
    // The manifest last, only if absent: a reader that finds it finds every chunk.
    const m = await this.client.kv.txn({
      compare: [{ key: keyBuf(manifest), target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key: keyBuf(manifest), value: Buffer.from(JSON.stringify({ size: bytes.byteLength, chunks })) } }],
      failure: [],
    });
    if (m.succeeded) revisions.push(num(m.header.revision));
    return revisions;
  }

  /**
   * The blob of `sha256`, or undefined when its manifest is absent.
   * @throws Error when fewer bytes are found than the manifest says
   */
  async getBlob(sha256: string): Promise<Uint8Array | undefined> {
    const manifest = `${BLOB_PREFIX}${sha256}`;
    const m = await this.range(manifest);
    if (m.kvs.length === 0) return undefined;
    const { size, chunks } = JSON.parse(m.kvs[0]!.value.toString()) as { size: number; chunks: number };
    const out = new Uint8Array(size);
    let at = 0;
    let from = `${manifest}/`;
    const end = prefixEnd(`${manifest}/`);
    while (at < size || chunks === 0) {
      const r = await this.range(from, end, undefined, 8);
      for (const kv of r.kvs) {
        out.set(kv.value, at);
        at += kv.value.byteLength;
      }
      if (!r.more || r.kvs.length === 0) break;
      from = `${r.kvs[r.kvs.length - 1]!.key.toString('latin1')}\0`;
    }
    if (at !== size) throw new Error(`blob ${sha256}: ${at} of ${size} bytes found in etcd`);
    return out;
  }

  /** The oldest revision etcd can still read at or after `from` (etcd compacted what is older). */
  async oldestReadable(from: number, rev: number): Promise<number> {
    const readable = async (at: number) => {
      try {
        await this.range(COMPACT_KEY, undefined, at);
        return true;
      } catch (err: unknown) {
        if (/compacted/.test(String((err as Error)?.message))) return false;
        throw err;
      }
    };
    if (from > rev || (await readable(from))) return from;
    let lo = from + 1;
    let hi = rev;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (await readable(mid)) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}

/**
 * kube-apiserver's compactor: every `intervalMs`, the process that wins the compare-and-swap on
 * COMPACT_KEY (version as seen last time) compacts to the revision it recorded one interval ago.
 * @param onWrite called with the revision of each COMPACT_KEY write this process made (it carries no `/registry/` event)
 * @returns stops the schedule
 */
export function scheduleCompaction(client: Etcd3, intervalMs: number, onWrite: (revision: number) => void = () => {}): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let seenVersion = 0;
  let lastRev = 0;
  const tick = async () => {
    try {
      const r = await client.kv.txn({
        compare: [{ key: keyBuf(COMPACT_KEY), target: 'Version', result: 'Equal', version: seenVersion }],
        success: [{ request_put: { key: keyBuf(COMPACT_KEY), value: Buffer.from('') } }],
        failure: [{ request_range: { key: keyBuf(COMPACT_KEY) } }],
      });
      const rev = num(r.header.revision);
      if (!r.succeeded) {
        seenVersion = num(r.responses[0]?.response_range.kvs[0]?.version);
      } else {
        seenVersion++;
        onWrite(rev);
        if (lastRev > 0) await client.kv.compact({ revision: lastRev });
      }
      lastRev = rev;
    } catch {
      // The next tick tries again; a missed compaction only keeps more history.
    }
    if (!stopped) timer = setTimeout(tick, intervalMs).unref();
  };
  if (intervalMs > 0) timer = setTimeout(tick, intervalMs).unref();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
