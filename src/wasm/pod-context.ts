/**
 * One pod inside a pod thread: its module instance, memory, `k32` imports, clock, freeze mark and
 * snapshot streams, listening on the pod's own port. A thread holds one context (a pod of its own)
 * or many (dense pods, see docs/wasm-runtime.md). A context ends alone: a trap, a failed start or
 * a detach frees its instance and memory and closes its port without touching its co-tenants.
 */
import type { MessagePort } from 'node:worker_threads';
import type { SnapshotDecoder } from '../k32s/index.ts';
import { INSTR } from './abi.ts';
import { HostState, makeImports, PodClock } from './host.ts';
import { beginSnapshot, type KnownDigest, PodStateIO, sameEvents, type SnapshotStream, type TopicEvent } from './pod-state.ts';
import { splitHttpResponse } from './http-response.ts';
import { accountedStatus, PodUsage, type RunRecorder } from './pod-usage.ts';
import { type CallResult, type FromWorker, RESTORE_ACK_EVERY, type ToWorker, type WorkerInit } from './protocol.ts';
import type { ThreadStatus } from './thread-status.ts';
import { WA, type WasmInstance, type WasmMemory } from './wasm-api.ts';

const enc = new TextEncoder();
/** What {@link PodContext} `#run` returns when the pod was let go before its code could run. */
const GONE = Symbol('gone');

function trapMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** The export a call kind runs. */
const EXPORT_OF = { handle: 'k32_handle', tick: 'k32_tick', event: 'k32_event' } as const;

/** A pod's context on its thread. */
export class PodContext {
  readonly #slot: number;
  readonly #port: MessagePort;
  readonly #init: WorkerInit;
  readonly #status: RunRecorder;
  readonly #gone: Int32Array;
  readonly #onEnd: () => void;
  readonly #clock = new PodClock();
  readonly #host = new HostState();
  readonly #imports: ReturnType<typeof makeImports>;
  #instance: WasmInstance | undefined;
  #memory: WasmMemory | undefined;
  #state: PodStateIO | undefined;
  /** Pod time and Unix time recorded at the freeze, so that the same frozen pod gives the same bytes. */
  #frozenAt: { podTimeMs: number; unixTimeMs: number } | undefined;
  /** Set once the pod has ended here (trap, failed start, detach): messages are ignored. */
  #dead = false;
  /** Set once detached: the context is freed and posts nothing more. */
  #closed = false;
  /** The restore in progress: its reader, and how the start continues. */
  #restoring: { decoder: SnapshotDecoder; read: number; done: (err?: unknown, events?: TopicEvent[]) => void } | undefined;
  /** A prepared restore waiting for its `commit` (init.gated): resolves with the commit's fsDir. */
  #commit: ((fsDir: string | undefined) => void) | undefined;
  /** Active snapshot streams by id. */
  readonly #streams = new Map<number, SnapshotStream>();
  /** The snapshot SHA-256 of this freeze, once hashed (a digest pass, or a stream read to its end). */
  #digest: KnownDigest | undefined;
  /** Results of the calls run in this turn of the thread's event loop, sent together (see {@link #reply}). */
  #outbox: CallResult[] = [];
  #outboxTransfer: ArrayBuffer[] = [];

  /**
   * @param slot the pod's slot on the thread (what {@link ThreadStatus} records while its code runs)
   * @param gone set to 1 by the main thread once the pod has ended there
   * @param usage the buffer of the pod's {@link PodUsage} (its runs' time and memory, read by the main thread)
   * @param onEnd called once when the context is freed (detach)
   */
  constructor(slot: number, port: MessagePort, init: WorkerInit, status: ThreadStatus, gone: Int32Array, usage: SharedArrayBuffer, onEnd: () => void) {
    this.#slot = slot;
    this.#port = port;
    this.#init = init;
    this.#status = accountedStatus(status, new PodUsage(usage), () => this.#memory?.buffer.byteLength ?? 0);
    this.#gone = gone;
    this.#onEnd = onEnd;
    // The thread may have waited in the pool since the node booted: the pod's clock starts now.
    this.#clock.reset(0);
    this.#imports = makeImports(
      {
        env: init.env,
        assets: init.assets,
        ...(init.fsDir ? { fsDir: init.fsDir } : {}),
        ...(init.fsLimitBytes !== undefined ? { fsLimitBytes: init.fsLimitBytes } : {}),
        clock: this.#clock,
        memory: () => this.#memory,
        log: (line) => this.#post({ op: 'log', line }),
        send: (topic, payload) => this.#post({ op: 'send', topic, payload }, [payload.buffer as ArrayBuffer]),
      },
      this.#host,
    );
    port.on('message', (m: ToWorker) => this.#onMessage(m));
  }

  /** Posts `m` to the main thread, after the results not yet sent (the order of messages is kept). */
  #post(m: FromWorker, transfer: ArrayBuffer[] = []): void {
    if (this.#closed) return;
    this.#flush();
    this.#port.postMessage(m, transfer);
  }

  /**
   * Queues a call's result: the main thread keeps several calls sent ahead, the port delivers those
   * waiting in one turn of the event loop, and their results go back in one message once the turn is
   * done (setImmediate runs after the port's messages), not one message a call.
   */
  #reply(r: CallResult, transfer: ArrayBuffer[]): void {
    if (this.#closed) return;
    if (this.#outbox.length === 0) setImmediate(() => this.#flush());
    this.#outbox.push(r);
    for (const b of transfer) this.#outboxTransfer.push(b);
  }

  #flush(): void {
    if (this.#outbox.length === 0) return;
    const results = this.#outbox;
    const transfer = this.#outboxTransfer;
    this.#outbox = [];
    this.#outboxTransfer = [];
    if (this.#closed) return;
    if (results.length === 1) this.#port.postMessage(results[0]!, transfer);
    else this.#port.postMessage({ op: 'results', results } satisfies FromWorker, transfer);
  }

  #ex<T>(name: string): T | undefined {
    return this.#instance!.exports[name] as T | undefined;
  }

  /**
   * Records in the thread's status that the pod's code begins to run, unless the main thread has let
   * the pod go (then the context is freed and false returned). The order matters: the status is
   * written before `gone` is read, and the main thread sets `gone` before it reads the status, so
   * either this sees `gone`, or the main thread sees the run (and bounds it by its deadline).
   */
  #enter(): boolean {
    this.#status.enter(this.#slot);
    if (Atomics.load(this.#gone, 0) === 0) return true;
    this.#status.leave();
    this.detach();
    return false;
  }

  /** Runs the pod's own code, recorded in the thread's status (the main thread measures its deadline). */
  #run<T>(f: () => T): T | typeof GONE {
    if (!this.#enter()) return GONE;
    try {
      return f();
    } finally {
      this.#status.leave();
    }
  }

  /** Frees the context: its instance and memory are unreferenced, its files closed, its port closed. */
  detach(): void {
    if (this.#closed) return;
    this.#dead = true;
    this.#closed = true;
    this.#host.dispose();
    this.#restoring?.done(new Error('the pod was detached'));
    this.#restoring = undefined;
    this.#commit?.(undefined);
    this.#streams.clear();
    this.#instance = undefined;
    this.#memory = undefined;
    this.#state = undefined;
    this.#port.removeAllListeners('message');
    this.#port.close();
    this.#onEnd();
  }

  /** The pod's end on this thread (a trap, a failed start): nothing runs for it any more. */
  #die(): void {
    this.#dead = true;
    this.#host.dispose();
    this.#streams.clear();
    this.#instance = undefined;
    this.#memory = undefined;
    this.#state = undefined;
  }

  /** An unexpected failure of the start's own code (not the pod's): the start fails, for this pod alone. */
  crash(err: unknown): void {
    if (this.#dead) return;
    this.#fail('Error', `cannot start the pod: ${trapMessage(err)}`);
  }

  #fail(reason: 'RestoreError' | 'Trap' | 'Error', message: string): void {
    this.#die();
    this.#post({ op: 'startFailed', reason, message });
  }

  /**
   * Instantiates the module and starts the pod: the start function, the restore (when asked),
   * `k32_init` or `k32_restored`, then `ready`; an app pod's entry point runs next, until it returns.
   */
  async start(): Promise<void> {
    const init = this.#init;
    // The main thread bounds the module's start function and k32_init/k32_restored (callDeadlineMs).
    this.#post({ op: 'startCall', name: 'start' });
    try {
      // Synchronously, so that a restore's first chunks (already queued on the port) meet a decoder.
      const instance = this.#run(() => new WA.Instance(init.compiled, { k32: this.#imports }));
      if (instance === GONE) return;
      this.#instance = instance;
      this.#memory = this.#ex<WasmMemory>(INSTR.memory);
      this.#state = new PodStateIO(init, this.#instance, this.#memory);
      this.#post({ op: 'startCall' });
    } catch (err: unknown) {
      // The start section trapped, or linking failed.
      this.#fail(err instanceof WA.RuntimeError || err instanceof RangeError ? 'Trap' : 'Error', `cannot start the module: ${trapMessage(err)}`);
      return;
    }
    let events: TopicEvent[] = [];
    if (init.restore) {
      try {
        events = await this.#restore();
      } catch (err: unknown) {
        if (this.#closed) return;
        this.#fail('RestoreError', `cannot restore the snapshot: ${trapMessage(err)}`);
        return;
      }
    }
    if (this.#dead) return;
    if (init.restore && init.gated) {
      // A prepared restore (issue 26): the state is written back; nothing of the pod runs until the
      // node commits it (once the control plane has confirmed the snapshot stored), or detaches it.
      const podTimeMs = this.#clock.now();
      const fsDir = await new Promise<string | undefined>((resolve) => {
        this.#commit = resolve;
        this.#post({ op: 'restoredGated' });
      });
      this.#commit = undefined;
      if (this.#dead) return;
      if (fsDir) this.#host.bindFsDir(fsDir);
      // The pod's clock goes on from its freeze: the wait for the commit was not its time.
      this.#clock.reset(podTimeMs);
    }
    const first = init.restore ? 'k32_restored' : 'k32_init';
    const fn = this.#ex<() => void>(first);
    if (fn && init.exportNames.includes(first)) {
      this.#post({ op: 'startCall', name: first });
      try {
        if (this.#run(fn) === GONE) return;
      } catch (err: unknown) {
        this.#fail('Trap', `${first}: ${trapMessage(err)}`);
        return;
      }
    }
    this.#post({ op: 'ready', podTimeMs: this.#clock.now(), events });
    if (init.kind === 'app' && init.entryPoint) {
      // An app pod: the entry point runs once, on this thread (always one of its own), until it returns.
      setImmediate(() => {
        if (this.#dead) return;
        const entry = this.#ex<() => void>(init.entryPoint!)!;
        try {
          if (this.#run(entry) === GONE) return;
          this.#die();
          this.#post({ op: 'exit', reason: 'Completed', message: `${init.entryPoint} returned` });
        } catch (err: unknown) {
          this.#die();
          this.#post({ op: 'exit', reason: 'Trap', message: `${init.entryPoint}: ${trapMessage(err)}` });
        }
      });
    }
  }

  /** Waits for the snapshot's chunks (restoreChunk... restoreEnd) and writes the state back. */
  #restore(): Promise<TopicEvent[]> {
    const decoder = this.#state!.restoreDecoder();
    return new Promise((resolve, reject) => {
      this.#restoring = {
        decoder,
        read: 0,
        done: (err, events) => {
          this.#restoring = undefined;
          if (err !== undefined) reject(err);
          else resolve(events ?? []);
        },
      };
    });
  }

  #onRestoreMessage(m: ToWorker): void {
    const r = this.#restoring;
    if (!r) return;
    try {
      if (m.op === 'restoreChunk') {
        r.decoder.push(m.chunk);
        // Told after the first chunk (the header is checked) and every few MiB, not once a MiB (pod-start.ts).
        r.read++;
        if (r.read === 1 || r.read % RESTORE_ACK_EVERY === 0) this.#post({ op: 'restoreRead', count: r.read });
      } else if (m.op === 'restoreAbort') {
        throw new Error(m.message);
      } else if (m.op === 'restoreEnd') {
        const snap = r.decoder.end();
        this.#state!.applyRestored(snap);
        for (const c of snap.channels) this.#host.reopenChannel(c.handle, c.name);
        this.#clock.reset(Number(snap.header.podTimeMs));
        r.done(undefined, snap.events);
      }
    } catch (err: unknown) {
      r.done(err);
    }
  }

  /** Copies `data` into the module's memory at a fresh k32_alloc; 0 when the module has no room. */
  #place(data: Uint8Array): number {
    const alloc = this.#ex<(n: number) => number>('k32_alloc')!;
    const ptr = alloc(data.length) >>> 0;
    if (ptr === 0) return 0;
    const buf = this.#memory!.buffer;
    if (ptr + data.length > buf.byteLength) throw new Error(`k32_alloc returned ${ptr}, which with ${data.length} bytes is outside the memory`);
    new Uint8Array(buf, ptr, data.length).set(data);
    return ptr;
  }

  #call(m: Extract<ToWorker, { op: 'call' }>): void {
    const reply = (r: Omit<CallResult, 'op' | 'id' | 'openFiles'>, transfer: ArrayBuffer[] = []): void =>
      this.#reply({ op: 'result', id: m.id, ...r, openFiles: this.#host.openFiles() }, transfer);
    const name = EXPORT_OF[m.kind];
    if (!this.#init.exportNames.includes(name)) {
      reply({ error: { code: 'NotHandled', message: `the module does not export ${name}` } });
      return;
    }
    if (!this.#enter()) return;
    try {
      if (m.kind === 'tick') {
        this.#ex<() => void>('k32_tick')!();
        this.#status.leave();
        reply({});
      } else if (m.kind === 'event') {
        const topic = enc.encode(m.topic);
        const both = new Uint8Array(topic.length + m.payload.length);
        both.set(topic);
        both.set(m.payload, topic.length);
        const ptr = this.#place(both);
        if (ptr === 0) {
          this.#status.leave();
          reply({ error: { code: 'NoMemory', message: `k32_alloc(${both.length}) returned 0: the event on ${m.topic} was dropped` } });
          return;
        }
        this.#ex<(a: number, b: number, c: number, d: number) => void>('k32_event')!(ptr, topic.length, ptr + topic.length, m.payload.length);
        this.#status.leave();
        reply({});
      } else {
        const ptr = this.#place(m.request);
        if (ptr === 0) {
          this.#status.leave();
          reply({ error: { code: 'NoMemory', message: `k32_alloc(${m.request.length}) returned 0: no room for the request` } });
          return;
        }
        const packed = this.#ex<(p: number, l: number) => bigint>('k32_handle')!(ptr, m.request.length);
        this.#status.leave();
        const rp = Number(packed & 0xffffffffn);
        const rl = Number((packed >> 32n) & 0xffffffffn);
        const buf = this.#memory!.buffer;
        if (rp + rl > buf.byteLength) {
          reply({ error: { code: 'BadResponse', message: `k32_handle returned the range ${rp}+${rl}, outside the module's memory (${buf.byteLength} bytes)` } });
          return;
        }
        if (!m.split) {
          const response = new Uint8Array(buf.slice(rp, rp + rl));
          reply({ response }, [response.buffer]);
          return;
        }
        // Parsed here, from a view of the memory: the body is copied once, the main thread writes it as it comes.
        let split: ReturnType<typeof splitHttpResponse>;
        try {
          split = splitHttpResponse(new Uint8Array(buf, rp, rl));
        } catch (err: unknown) {
          reply({ error: { code: 'BadResponse', message: `k32_handle's response does not parse: ${trapMessage(err)}` } });
          return;
        }
        reply({ split }, [split.body.buffer as ArrayBuffer]);
      }
    } catch (err: unknown) {
      this.#status.leave();
      // A trap ends this pod only: its instance and memory go, the thread's other pods go on.
      this.#die();
      reply({ error: { code: 'Trap', message: `${name}: ${trapMessage(err)}` } });
    }
  }

  /**
   * Begins a snapshot stream: answers its length (and digest), then sends its first `m.credit` chunks
   * at once, without waiting for the main thread to ask (one round trip less).
   */
  #snapshot(m: Extract<ToWorker, { op: 'snapshot' }>): void {
    try {
      const at = this.#frozenAt ?? { podTimeMs: this.#clock.now(), unixTimeMs: Date.now() };
      const state = this.#state!.snapshotState(at, [...this.#host.channelsByHandle].map(([handle, name]) => ({ handle, name })), m.events);
      const known = this.#frozenAt && this.#digest && sameEvents(this.#digest.events, m.events) ? this.#digest.sha256 : undefined;
      const { byteLength, snapshotSha256, stream } = beginSnapshot(state, { digest: m.digest, chunkBytes: m.chunkBytes, ...(known ? { known } : {}) });
      if (snapshotSha256 && this.#frozenAt) this.#digest = { events: m.events, sha256: snapshotSha256 };
      this.#streams.set(m.id, stream);
      const sha = snapshotSha256 ? { snapshotSha256: Buffer.from(snapshotSha256).toString('hex') } : {};
      this.#post({ op: 'snapshotInfo', id: m.id, byteLength, podTimeMs: Number(state.podTimeMs), ...sha });
    } catch (err: unknown) {
      this.#post({ op: 'snapshotInfo', id: m.id, byteLength: 0, podTimeMs: 0, error: trapMessage(err) });
      return;
    }
    this.#snapshotNext(m.id, m.credit);
  }

  /** Sends chunks of a stream while the main thread has room for them (it grants credit as it consumes). */
  #snapshotNext(id: number, credit: number): void {
    const s = this.#streams.get(id);
    // Ended (its end or error already sent), cancelled, or dropped by a thaw (the main thread ends it then).
    if (!s) return;
    s.credit += credit;
    const live = this.#memory?.buffer;
    try {
      while (s.credit > 0) {
        const r = s.gen.next();
        if (r.done) {
          this.#streams.delete(id);
          // The stream was read to its end: its trailer is this freeze's digest (for these events).
          if (s.trailer && this.#frozenAt) this.#digest = { events: s.events, sha256: s.trailer };
          this.#post({ op: 'snapshotChunk', id, end: true });
          return;
        }
        const v = r.value;
        let chunk: Uint8Array;
        if (v.buffer === live) {
          // A view of the live memory: one bounded copy, then transferred (not copied again).
          chunk = v.slice();
        } else {
          // The writer's own buffer (header, the small sections and the trailer): transferred as it is.
          chunk = v.byteOffset === 0 && v.byteLength === v.buffer.byteLength ? v : v.slice();
          if (chunk.length >= 32) s.trailer = chunk.slice(chunk.length - 32);
        }
        this.#post({ op: 'snapshotChunk', id, chunk }, [chunk.buffer as ArrayBuffer]);
        s.credit--;
      }
    } catch (err: unknown) {
      this.#streams.delete(id);
      this.#post({ op: 'snapshotChunk', id, error: trapMessage(err) });
    }
  }

  #onMessage(m: ToWorker): void {
    if (this.#dead) return;
    switch (m.op) {
      case 'call': this.#call(m); break;
      case 'calls':
        for (const c of m.calls) {
          if (this.#dead) break;
          this.#call(c);
        }
        break;
      case 'freeze':
        this.#frozenAt = { podTimeMs: this.#clock.now(), unixTimeMs: Date.now() };
        this.#digest = undefined;
        this.#post({ op: 'done', id: m.id, podTimeMs: this.#frozenAt.podTimeMs });
        break;
      case 'thaw':
        this.#frozenAt = undefined;
        this.#digest = undefined;
        this.#streams.clear();
        this.#post({ op: 'done', id: m.id });
        break;
      case 'snapshot': this.#snapshot(m); break;
      case 'snapshotNext': this.#snapshotNext(m.id, m.credit); break;
      case 'snapshotCancel': this.#streams.delete(m.id); break;
      case 'restoreChunk':
      case 'restoreEnd':
      case 'restoreAbort': this.#onRestoreMessage(m); break;
      case 'commit': this.#commit?.(m.fsDir); break;
    }
  }
}
