/**
 * Snapshots pushed to this node ahead of a move's replacement (issue 26, "Faster moves"): while the API
 * server stores a move's snapshot (`POST .../checkpoints/<name>/data?node=<source>&target=<this node>`),
 * it sends the same bytes on to the target's kubelet as they arrive (`POST /restore-data/<ns>/<pod>/
 * <container>/<checkpoint>`), so that the target holds them when the replacement is bound to it instead
 * of requesting them only then.
 *
 * A staged snapshot is never restored on its own word: the container's restore still asks the control
 * plane for the Checkpoint's data, with `If-None-Match` naming the staged bytes' SHA-256 (their K32S
 * trailer), and uses them only on a 304 (the data stored is those bytes); any other answer is used as
 * before and the staged copy dropped. So the data is still durable in the control plane before the
 * replacement is written, and a restore only ever runs what it stored.
 *
 * The node may also prepare the restore while the bytes arrive (a {@link PrepareHook}: a pod thread
 * writes them into the instance as they come, `PodInstance.prepareRestore`), which runs nothing of the
 * pod until the container's restore commits it, after the same 304: the restore's work then overlaps
 * the control plane's store (its fsync, the replacement's write) instead of following it.
 *
 * Bounded: at most {@link MAX_STAGED_BYTES} staged at once (a push beyond is refused, 413), each kept
 * {@link STAGED_TTL_MS} (a move that fails before its replacement leaves its copy here until then; a
 * prepared restore is cancelled with it).
 */
import type { IncomingMessage } from 'node:http';
import type { PreparedRestore } from '../wasm/index.ts';
import { EndpointError } from './http/status.ts';

/** Bytes of staged snapshots a node holds at most: 64 MiB. */
export const MAX_STAGED_BYTES = 64 * 1024 * 1024;
/** How long a staged snapshot is kept unused: 60 s, the move timeout. */
export const STAGED_TTL_MS = 60_000;
/** Bytes of one staged chunk: 1 MiB, a restore's message to the pod's thread. */
export const STAGED_CHUNK_BYTES = 1 << 20;
/** How long a restore waits for a staged snapshot still arriving before it fetches the data instead: 10 s. */
export const STAGED_WAIT_MS = 10_000;

/** Where a staged snapshot is for: the pod, its container and the Checkpoint. */
export interface StagedAt {
  ns: string;
  pod: string;
  container: string;
  checkpoint: string;
}

/**
 * Prepares the restore of a snapshot while it arrives: reads `pieces` (each once, as it comes; it
 * throws when the push breaks) into a prepared restore, or answers undefined (nothing prepared, the
 * pieces left unread). Called when a push begins.
 */
export type PrepareHook = (at: StagedAt, pieces: AsyncIterable<Uint8Array>) => Promise<PreparedRestore | undefined>;

/** A snapshot staged here: its pieces as they came, and whether it came whole. */
export interface StagedSnapshot {
  /**
   * The snapshot's SHA-256 (hex): as its sender named it, checked against its trailer once whole, or
   * (a push that names none) its trailer once whole; '' until then.
   */
  readonly sha256: string;
  readonly byteLength: number;
  /**
   * The bytes in order, gathered while they arrive into chunks of {@link STAGED_CHUNK_BYTES}, each
   * spanning its own buffer (the last one may be shorter), so that a restore can transfer them to the
   * pod's thread without copying them again.
   */
  readonly pieces: Uint8Array[];
  /** True once every byte came and the trailer is {@link sha256}; false when the push broke or disagreed. */
  readonly whole: Promise<boolean>;
  /** The restore the node prepared from the pieces as they came ({@link PrepareHook}); undefined when none. */
  readonly prepared: Promise<PreparedRestore | undefined> | undefined;
  /**
   * True once a prepared restore has read the pieces (their buffers went to its pod thread): a restore
   * then uses that one, or fetches the data again.
   */
  readonly consumed: boolean;
}

/** A staged snapshot as this module fills it. */
interface Entry {
  sha256: string;
  readonly byteLength: number;
  readonly pieces: Uint8Array[];
  readonly whole: Promise<boolean>;
  prepared: Promise<PreparedRestore | undefined> | undefined;
  consumed: boolean;
}

function keyOf(ns: string, pod: string, container: string, checkpoint: string): string {
  return `${ns}/${pod}/${container}/${checkpoint}`;
}

/** The snapshots staged on this node, by pod, container and Checkpoint. */
export class StagedRestores {
  readonly #entries = new Map<string, { staged: Entry; timer: NodeJS.Timeout }>();
  #bytes = 0;
  readonly #prepare: PrepareHook | undefined;

  /** @param prepare prepares each pushed snapshot's restore while it arrives (none: the pieces are only kept) */
  constructor(prepare?: PrepareHook) {
    this.#prepare = prepare;
  }

  /** Bytes staged now. */
  get stagedBytes(): number {
    return this.#bytes;
  }

  /**
   * Reads a pushed snapshot's body into a staged entry (replacing an earlier one of the same key).
   * @param length the body's Content-Length
   * @param sha256 the snapshot's SHA-256, hex (64 digits), or '' when the sender names none (its trailer is taken)
   * @returns the entry once its body has ended (whole or not)
   * @throws EndpointError 400 for a bad length or digest; 413 when it would pass {@link MAX_STAGED_BYTES}
   */
  async receive(req: IncomingMessage, at: StagedAt, length: number, sha256: string): Promise<StagedSnapshot> {
    if (!Number.isSafeInteger(length) || length < 32) throw new EndpointError(400, 'BadRequest', `a staged snapshot needs a Content-Length of at least 32 bytes: current value is ${length}`);
    if (sha256 !== '' && !/^[0-9a-f]{64}$/.test(sha256)) throw new EndpointError(400, 'BadRequest', `x-kube32-snapshot-sha256 must be 64 lowercase hex digits: current value is "${sha256}"`);
    const key = keyOf(at.ns, at.pod, at.container, at.checkpoint);
    void this.#drop(key);
    if (this.#bytes + length > MAX_STAGED_BYTES) {
      throw new EndpointError(413, 'RequestEntityTooLarge', `staging ${length} bytes would pass the node's ${MAX_STAGED_BYTES} bytes of staged snapshots`);
    }
    const pieces: Uint8Array[] = [];
    let settle!: (ok: boolean) => void;
    const whole = new Promise<boolean>((r) => { settle = r; });
    const staged: Entry = { sha256: '', byteLength: length, pieces, whole, prepared: undefined, consumed: false };
    const timer = setTimeout(() => void this.#drop(key, staged), STAGED_TTL_MS);
    timer.unref();
    this.#entries.set(key, { staged, timer });
    this.#bytes += length;
    /** Wakes the prepared restore's reader when a piece comes or the push ends. */
    let wake: (() => void) | undefined;
    let ended: boolean | undefined;
    if (this.#prepare) {
      const live = async function* (): AsyncGenerator<Uint8Array> {
        staged.consumed = true;
        for (let i = 0; ; i++) {
          while (i >= pieces.length && ended === undefined) await new Promise<void>((r) => { wake = r; });
          if (i < pieces.length) {
            yield pieces[i]!;
            continue;
          }
          if (ended) return;
          throw new Error('the push of the snapshot broke off');
        }
      };
      staged.prepared = this.#prepare(at, live()).catch(() => undefined);
    }
    let got = 0;
    let chunk: Uint8Array | undefined;
    let filled = 0;
    /** The last 32 bytes so far (the trailer once whole), kept apart: the pieces may be moved to a pod thread. */
    let tail: Buffer = Buffer.alloc(0);
    try {
      for await (const c of req) {
        const b = c as Buffer;
        if (got + b.length > length) {
          got += b.length;
          break;
        }
        tail = b.length >= 32 ? Buffer.from(b.subarray(b.length - 32)) : Buffer.concat([tail, b]).subarray(-32);
        for (let at = 0; at < b.length;) {
          chunk ??= new Uint8Array(Math.min(STAGED_CHUNK_BYTES, length - got - at + filled));
          const n = Math.min(chunk.length - filled, b.length - at);
          chunk.set(b.subarray(at, at + n), filled);
          filled += n;
          at += n;
          if (filled === chunk.length) {
            pieces.push(chunk);
            chunk = undefined;
            filled = 0;
            wake?.();
          }
        }
        got += b.length;
      }
    } catch {
      // The push broke (the API server went, or gave up on it): not whole.
    }
    const trailer = tail.toString('hex');
    const ok = got === length && (sha256 === '' || trailer === sha256);
    if (ok) staged.sha256 = trailer;
    ended = ok;
    wake?.();
    settle(ok);
    if (!ok) void this.#drop(key, staged);
    return staged;
  }

  /**
   * Takes (removes) the staged snapshot of a container's restore from `checkpoint`, once its push has
   * ended; undefined when none is staged, it did not come whole, or it is still arriving after
   * {@link STAGED_WAIT_MS}.
   */
  async take(ns: string, pod: string, container: string, checkpoint: string): Promise<StagedSnapshot | undefined> {
    const key = keyOf(ns, pod, container, checkpoint);
    const e = this.#entries.get(key);
    if (!e) return undefined;
    void this.#drop(key, e.staged, true);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((r) => {
      timer = setTimeout(() => r(false), STAGED_WAIT_MS);
    });
    try {
      if (await Promise.race([e.staged.whole, late])) return e.staged;
      void e.staged.prepared?.then((p) => p?.cancel());
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Drops every staged snapshot (the node stops); resolves once their prepared restores are cancelled. */
  async clear(): Promise<void> {
    await Promise.all([...this.#entries.keys()].map((key) => this.#drop(key)));
  }

  /** Forgets the entry of `key` (only that one, when given); its prepared restore is cancelled unless `taken`. */
  #drop(key: string, only?: Entry, taken = false): Promise<void> {
    const e = this.#entries.get(key);
    if (!e || (only && e.staged !== only)) return Promise.resolve();
    clearTimeout(e.timer);
    this.#entries.delete(key);
    this.#bytes -= e.staged.byteLength;
    if (taken || !e.staged.prepared) return Promise.resolve();
    return e.staged.prepared.then((p) => p?.cancel());
  }
}
