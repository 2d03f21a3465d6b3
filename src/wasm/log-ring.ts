/**
 * A container's log: a bounded ring of lines (oldest dropped first), readable as `kubectl logs`
 * reads it: the last N lines, lines since a time, and following new lines as they come.
 */
import type { LogEntry, LogReadOptions } from './types.ts';

/** Longest line kept, in UTF-16 code units; longer lines are cut and marked (the worker already cuts a pod's lines at 16 KiB). */
const MAX_LINE = 17 * 1024;

/** A bounded log of one container. */
export class LogRing {
  readonly #capacityBytes: number;
  readonly #entries: LogEntry[] = [];
  #head = 0;
  #bytes = 0;
  #seq = 0;
  #closed = false;
  readonly #waiters = new Set<() => void>();

  /**
   * @param capacityBytes the most bytes of lines held (each line counts its length plus 32)
   * @throws RangeError for a capacity below 1 KiB
   */
  constructor(capacityBytes = 1 << 20) {
    if (!Number.isInteger(capacityBytes) || capacityBytes < 1024) throw new RangeError(`log ring capacity must be at least 1024 bytes: current value is ${capacityBytes}`);
    this.#capacityBytes = capacityBytes;
  }

  /** Appends a line (a trailing newline is removed) and wakes followers. */
  append(line: string, time = Date.now()): LogEntry {
    let text = line.endsWith('\n') ? line.slice(0, -1) : line;
    if (text.length > MAX_LINE) text = `${text.slice(0, MAX_LINE)}… (${text.length - MAX_LINE} more characters cut)`;
    const entry: LogEntry = { time, line: text, seq: ++this.#seq };
    this.#entries.push(entry);
    this.#bytes += text.length + 32;
    while (this.#bytes > this.#capacityBytes && this.#entries.length - this.#head > 1) {
      const old = this.#entries[this.#head++]!;
      this.#bytes -= old.line.length + 32;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#entries.length) {
      this.#entries.splice(0, this.#head);
      this.#head = 0;
    }
    this.#wake();
    return entry;
  }

  /** Lines held now, oldest first. */
  entries(): LogEntry[] {
    return this.#entries.slice(this.#head);
  }

  /** Ends every follow (the container ended). */
  close(): void {
    this.#closed = true;
    this.#wake();
  }

  #wake(): void {
    for (const w of this.#waiters) w();
    this.#waiters.clear();
  }

  /**
   * Reads the log. Without `follow` it yields the lines held that match and ends; with it, it goes
   * on with new lines until `signal` aborts or the container ends.
   */
  async *read(opts: LogReadOptions = {}): AsyncGenerator<LogEntry, void, undefined> {
    if (opts.tail !== undefined && (!Number.isInteger(opts.tail) || opts.tail < 0)) throw new RangeError(`tail must be a non-negative integer: current value is ${opts.tail}`);
    let list = this.entries();
    if (opts.sinceTime !== undefined) list = list.filter((e) => e.time >= opts.sinceTime!);
    if (opts.tail !== undefined) list = opts.tail === 0 ? [] : list.slice(-opts.tail);
    let last = this.#seq;
    for (const e of list) yield e;
    if (!opts.follow) return;
    const signal = opts.signal;
    while (!this.#closed && !signal?.aborted) {
      const more = this.entries().filter((e) => e.seq > last);
      if (more.length > 0) {
        last = more[more.length - 1]!.seq;
        for (const e of more) yield e;
        continue;
      }
      await new Promise<void>((resolve) => {
        const onAbort = (): void => resolve();
        signal?.addEventListener('abort', onAbort, { once: true });
        this.#waiters.add(() => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
      });
    }
    for (const e of this.entries()) if (e.seq > last) yield e;
  }
}
