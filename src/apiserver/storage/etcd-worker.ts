/**
 * The etcd side of `EtcdStorage`: a worker thread that owns the etcd v3 client (npm `etcd3`, gRPC)
 * and answers the API server's thread, which waits for each answer with `Atomics.wait` (see
 * `etcd.ts`). It also keeps one etcd watch on `/registry/` from a revision and posts its events, in
 * revision order, to the API server's thread, and compacts etcd's history on a schedule the way
 * kube-apiserver does (a compare-and-swap on one key, so that several API servers compact once).
 *
 * Wire of the request port: `{ id, req }` in, `{ id, ok: true, value } | { id, ok: false, error }`
 * out, then `Atomics.add(signal, 0, 1)` + `Atomics.notify`. Wire of the event port: `WatchBatch`.
 */
import type { Duplex } from 'node:stream';
import { type MessagePort, workerData } from 'node:worker_threads';
import { Etcd3, type IKeyValue, type IRequestOp, type IWatchResponse, type ICompare } from 'etcd3';

/** Keys of the object store. */
export const REGISTRY_PREFIX = '/registry/';
/** Keys of content-addressed blobs: `/blobs/<sha256>` (a manifest) and `/blobs/<sha256>/<chunk>`. */
export const BLOB_PREFIX = '/blobs/';
/** The key that several API servers compare-and-swap so that one of them compacts per interval. */
export const COMPACT_KEY = '/kube32/compact_rev_key';
/** Bytes of one blob chunk: under etcd's default request limit (`--max-request-bytes`, 1.5 MiB). */
export const BLOB_CHUNK_BYTES = 1024 * 1024;
/** Keys per page of a range read (lists are read in pages at one revision). */
const PAGE_KEYS = 1000;
/** The stored value's opening when its resourceVersion can be spliced in without parsing. */
export const RV_OPENING = '{"metadata":{"resourceVersion":"';

/** What `EtcdStorage` passes to the worker. */
export interface EtcdWorkerData {
  endpoints: string[];
  signal: SharedArrayBuffer;
  requests: MessagePort;
  events: MessagePort;
  /** Revisions of history replayed into the watch window at start. */
  replayRevisions: number;
  /** Compaction interval in ms; 0 disables compaction by this process. */
  compactionIntervalMs: number;
  /** Deadline of one etcd call, ms. */
  callTimeoutMs: number;
}

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

/** Requests of the API server's thread. */
export type EtcdRequest =
  | { op: 'init' }
  | { op: 'get'; key: string }
  | { op: 'range'; prefix: string }
  | { op: 'rev' }
  | { op: 'commit'; conds: Cond[]; writes: Write[] }
  | { op: 'putBlob'; sha256: string; bytes: Uint8Array }
  | { op: 'getBlob'; sha256: string }
  | { op: 'compact'; revision: number }
  | { op: 'close' };

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

const num = (s: string | number | undefined): number => Number(s ?? 0);
const keyBuf = (k: string): Buffer => Buffer.from(k, 'latin1');

function startWorker(data: EtcdWorkerData): void {
  const signal = new Int32Array(data.signal);
  const client = new Etcd3({
    hosts: data.endpoints,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + data.callTimeoutMs }),
    grpcOptions: { 'grpc.max_receive_message_length': 256 * 1024 * 1024 },
  });
  let closed = false;
  let nextFrom = 0;
  let stream: Duplex | undefined;
  let compactTimer: NodeJS.Timeout | undefined;

  const range = async (key: string, end?: string, revision?: number, limit?: number) =>
    client.kv.range({ key: keyBuf(key), range_end: end === undefined ? undefined : keyBuf(end), revision, limit });

  async function currentRev(): Promise<number> {
    const r = await client.kv.range({ key: keyBuf(COMPACT_KEY), count_only: true });
    return num(r.header.revision);
  }

  /** Every key under `prefix` at one revision, in pages. */
  async function rangeAll(prefix: string): Promise<{ rows: Row[]; rev: number }> {
    const end = prefixEnd(prefix);
    const rows: Row[] = [];
    let from = prefix;
    let rev: number | undefined;
    for (;;) {
      const r = await range(from, end, rev, PAGE_KEYS);
      rev ??= num(r.header.revision);
      for (const kv of r.kvs) rows.push(toRow(kv));
      if (!r.more || r.kvs.length === 0) break;
      from = `${r.kvs[r.kvs.length - 1]!.key.toString('latin1')}\0`;
    }
    return { rows, rev: rev ?? 0 };
  }

  function toRow(kv: IKeyValue): Row {
    const mod = num(kv.mod_revision);
    return { key: kv.key.toString('latin1'), value: withResourceVersion(kv.value.toString('utf8'), mod), mod };
  }

  async function commit(conds: Cond[], writes: Write[]): Promise<{ ok: boolean; rev: number }> {
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
    const r = await client.kv.txn({ compare, success, failure: [] });
    return { ok: r.succeeded, rev: num(r.header.revision) };
  }

  async function putBlob(sha256: string, bytes: Uint8Array): Promise<void> {
    const manifest = `${BLOB_PREFIX}${sha256}`;
    const have = await range(manifest);
    if (have.kvs.length > 0) return;
    const chunks = Math.max(1, Math.ceil(bytes.byteLength / BLOB_CHUNK_BYTES));
    for (let i = 0; i < chunks; i++) {
      const part = bytes.subarray(i * BLOB_CHUNK_BYTES, (i + 1) * BLOB_CHUNK_BYTES);
      await client.kv.put({ key: keyBuf(`${manifest}/${String(i).padStart(6, '0')}`), value: Buffer.from(part.buffer, part.byteOffset, part.byteLength) });
    }
    // The manifest last, only if absent: a reader that finds it finds every chunk.
    await client.kv.txn({
      compare: [{ key: keyBuf(manifest), target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key: keyBuf(manifest), value: Buffer.from(JSON.stringify({ size: bytes.byteLength, chunks })) } }],
      failure: [],
    });
  }

  async function getBlob(sha256: string): Promise<Uint8Array | undefined> {
    const manifest = `${BLOB_PREFIX}${sha256}`;
    const m = await range(manifest);
    if (m.kvs.length === 0) return undefined;
    const { size, chunks } = JSON.parse(m.kvs[0]!.value.toString()) as { size: number; chunks: number };
    const out = new Uint8Array(size);
    let at = 0;
    let from = `${manifest}/`;
    const end = prefixEnd(`${manifest}/`);
    while (at < size || chunks === 0) {
      const r = await range(from, end, undefined, 8);
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

  /**
   * kube-apiserver's compactor: every interval, the process that wins the compare-and-swap on
   * COMPACT_KEY (version as seen last time) compacts to the revision it recorded one interval ago.
   */
  function scheduleCompaction(): void {
    if (data.compactionIntervalMs <= 0) return;
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
          if (lastRev > 0) await client.kv.compact({ revision: lastRev });
        }
        lastRev = rev;
      } catch {
        // The next tick tries again; a missed compaction only keeps more history.
      }
      if (!closed) compactTimer = setTimeout(tick, data.compactionIntervalMs).unref();
    };
    compactTimer = setTimeout(tick, data.compactionIntervalMs).unref();
  }

  /** The oldest revision etcd can still read at or after `from` (etcd compacted what is older). */
  async function oldestReadable(from: number, rev: number): Promise<number> {
    const readable = async (at: number) => {
      try {
        await range(COMPACT_KEY, undefined, at);
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

  /**
   * Opens the watch of `/registry/` from `from`; resolves with the revision it really starts at
   * (later than `from` when etcd compacted past it).
   */
  async function openWatch(from: number): Promise<number> {
    for (;;) {
      const s = (await client.watchClient.watch()) as unknown as Duplex;
      const created = await new Promise<IWatchResponse>((resolve, reject) => {
        s.once('data', resolve);
        s.once('error', reject);
        s.write({ create_request: { key: keyBuf(REGISTRY_PREFIX), range_end: keyBuf(prefixEnd(REGISTRY_PREFIX)), start_revision: from, prev_kv: true, progress_notify: true } });
      });
      if (created.canceled) {
        s.end();
        const compacted = num(created.compact_revision);
        if (compacted > from) {
          from = compacted;
          continue;
        }
        throw new Error(`etcd refused the watch: ${created.cancel_reason || 'canceled'}`);
      }
      stream = s;
      nextFrom = from;
      s.on('data', (res: IWatchResponse) => onWatchResponse(res));
      s.on('error', (err: unknown) => onWatchLost(err));
      s.on('end', () => onWatchLost(new Error('the watch stream ended')));
      return from;
    }
  }

  function onWatchResponse(res: IWatchResponse): void {
    if (res.canceled) {
      // etcd compacted past a watch that was still catching up: resume at the compaction, and say so.
      const compacted = num(res.compact_revision);
      if (compacted > nextFrom) {
        data.events.postMessage({ gap: compacted - 1, message: `etcd compacted revisions ${nextFrom}..${compacted - 1} before the watch delivered them` } satisfies WatchBatch);
        nextFrom = compacted;
      }
      onWatchLost(new Error(`watch canceled: ${res.cancel_reason || `compacted at ${compacted}`}`));
      return;
    }
    if (res.events.length === 0) return;
    const events: WireEvent[] = res.events.map((e) => {
      const rev = num(e.kv.mod_revision);
      return {
        key: e.kv.key.toString('latin1'),
        rev,
        value: e.type === 'Put' ? withResourceVersion(e.kv.value.toString('utf8'), rev) : undefined,
        prev: e.prev_kv ? withResourceVersion(e.prev_kv.value.toString('utf8'), num(e.prev_kv.mod_revision)) : undefined,
        created: e.type === 'Put' && num(e.kv.create_revision) === rev,
      };
    });
    nextFrom = events[events.length - 1]!.rev + 1;
    data.events.postMessage({ events } satisfies WatchBatch);
  }

  let reconnecting = false;
  function onWatchLost(err: unknown): void {
    if (closed || reconnecting) return;
    reconnecting = true;
    try {
      stream?.removeAllListeners();
      stream?.on('error', () => {});
      stream?.end();
    } catch {
      // already gone
    }
    const retry = (delay: number) => {
      setTimeout(async () => {
        if (closed) return;
        try {
          const want = nextFrom;
          const got = await openWatch(want);
          reconnecting = false;
          if (got > want) data.events.postMessage({ gap: got - 1, message: `etcd compacted revisions ${want}..${got - 1} while the watch was away (${String(err)})` } satisfies WatchBatch);
        } catch {
          retry(Math.min(delay * 2, 5000));
        }
      }, delay).unref();
    };
    retry(100);
  }

  async function handle(req: EtcdRequest): Promise<unknown> {
    switch (req.op) {
      case 'init': {
        const rev = await currentRev();
        const start = await openWatch(await oldestReadable(Math.max(1, rev + 1 - data.replayRevisions), rev));
        scheduleCompaction();
        return { rev, droppedUpTo: start - 1 };
      }
      case 'get': {
        const r = await range(req.key);
        return { row: r.kvs[0] ? toRow(r.kvs[0]) : undefined, rev: num(r.header.revision) };
      }
      case 'range':
        return rangeAll(req.prefix);
      case 'rev':
        return currentRev();
      case 'commit':
        return commit(req.conds, req.writes);
      case 'putBlob':
        return putBlob(req.sha256, req.bytes);
      case 'getBlob':
        return getBlob(req.sha256);
      case 'compact':
        await client.kv.compact({ revision: req.revision, physical: true });
        return undefined;
      case 'close':
        closed = true;
        clearTimeout(compactTimer);
        try {
          stream?.removeAllListeners();
          stream?.on('error', () => {});
          stream?.end();
        } catch {
          // already gone
        }
        client.close();
        data.events.close();
        return undefined;
    }
  }

  data.requests.on('message', async ({ id, req }: { id: number; req: EtcdRequest }) => {
    let reply: { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string; code?: number };
    try {
      reply = { id, ok: true, value: await handle(req) };
    } catch (err: unknown) {
      const e = err as { message?: unknown; code?: unknown };
      reply = { id, ok: false, error: typeof e?.message === 'string' ? e.message : String(err), code: typeof e?.code === 'number' ? e.code : undefined };
    }
    data.requests.postMessage(reply);
    Atomics.add(signal, 0, 1);
    Atomics.notify(signal, 0);
    if (req.op === 'close') data.requests.close();
  });
}

if (workerData && (workerData as { signal?: unknown }).signal instanceof SharedArrayBuffer) startWorker(workerData as EtcdWorkerData);
