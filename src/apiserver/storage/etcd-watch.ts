/**
 * EtcdStorage's one watch on `/registry/`: opened from a revision, its events handed in revision
 * order to a {@link WatchSink} as {@link WatchBatch}es; reopened where it
 * left off when the stream is lost, with a gap announced when etcd compacted past it.
 */
import type { Duplex } from 'node:stream';
import type { Etcd3, IWatchResponse } from 'etcd3';
import { Backoff } from '../../lib/index.ts';
import { keyBuf, num, prefixEnd, REGISTRY_PREFIX, type WatchBatch, type WireEvent, withResourceVersion } from './etcd-wire.ts';

/** The first and the longest pause between two tries to reopen a lost watch, ms. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5000;

/** Where the watch hands its batches, in revision order (EtcdStorage's `onBatch`). */
export interface WatchSink {
  postMessage(batch: WatchBatch): void;
}

/** The watch of `/registry/`, posting to `events`. */
export class RegistryWatch {
  readonly #client: Etcd3;
  readonly #events: WatchSink;
  #stream: Duplex | undefined;
  #nextFrom = 0;
  #closed = false;
  #reconnecting = false;

  constructor(client: Etcd3, events: WatchSink) {
    this.#client = client;
    this.#events = events;
  }

  /**
   * Opens the watch from `from`; resolves with the revision it really starts at (later than `from`
   * when etcd compacted past it).
   * @throws Error when etcd refuses the watch for another reason than compaction
   */
  async open(from: number): Promise<number> {
    for (;;) {
      const s = (await this.#client.watchClient.watch()) as unknown as Duplex;
      const created = await new Promise<IWatchResponse>((resolve, reject) => {
        s.once('data', resolve);
        s.once('error', reject);
        s.write({ create_request: { key: keyBuf(REGISTRY_PREFIX), range_end: keyBuf(prefixEnd(REGISTRY_PREFIX)), start_revision: from, prev_kv: true, progress_notify: true } });
      });
      if (created.canceled) {
        cancelStream(s);
        const compacted = num(created.compact_revision);
        if (compacted > from) {
          from = compacted;
          continue;
        }
        throw new Error(`etcd refused the watch: ${created.cancel_reason || 'canceled'}`);
      }
      this.#stream = s;
      this.#nextFrom = from;
      s.on('data', (res: IWatchResponse) => this.#onResponse(res));
      s.on('error', (err: unknown) => this.#onLost(err));
      s.on('end', () => this.#onLost(new Error('the watch stream ended')));
      return from;
    }
  }

  /** Ends the stream; nothing is posted or reopened after. */
  close(): void {
    this.#closed = true;
    this.#endStream();
  }

  #endStream(): void {
    if (this.#stream) cancelStream(this.#stream);
    this.#stream = undefined;
  }

  #post(batch: WatchBatch): void {
    this.#events.postMessage(batch);
  }

  #onResponse(res: IWatchResponse): void {
    if (res.canceled) {
      // etcd compacted past a watch that was still catching up: resume at the compaction, and say so.
      const compacted = num(res.compact_revision);
      if (compacted > this.#nextFrom) {
        this.#post({ gap: compacted - 1, message: `etcd compacted revisions ${this.#nextFrom}..${compacted - 1} before the watch delivered them` });
        this.#nextFrom = compacted;
      }
      this.#onLost(new Error(`watch canceled: ${res.cancel_reason || `compacted at ${compacted}`}`));
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
    this.#nextFrom = events[events.length - 1]!.rev + 1;
    this.#post({ events });
  }

  #onLost(err: unknown): void {
    if (this.#closed || this.#reconnecting) return;
    this.#reconnecting = true;
    this.#endStream();
    const backoff = new Backoff({ initialMs: RETRY_FIRST_MS, maxMs: RETRY_MAX_MS });
    const retry = () => {
      setTimeout(async () => {
        if (this.#closed) return;
        try {
          const want = this.#nextFrom;
          const got = await this.open(want);
          this.#reconnecting = false;
          if (got > want) this.#post({ gap: got - 1, message: `etcd compacted revisions ${want}..${got - 1} while the watch was away (${String(err)})` });
        } catch {
          retry();
        }
      }, backoff.next()).unref();
    };
    retry();
  }
}

/**
 * Ends a watch stream at once: its gRPC call cancelled, as etcd3's own watcher does. Ending only our
 * side (`end()`) leaves the call open (etcd keeps a half-closed watch), and an open call keeps the
 * client's connection, and so the process, alive after `Etcd3.close()`.
 */
function cancelStream(s: Duplex): void {
  try {
    s.removeAllListeners();
    s.on('error', () => {});
    s.end();
    (s as Duplex & { cancel?: () => void }).cancel?.();
  } catch {
    // already gone
  }
}
