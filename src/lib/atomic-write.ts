/**
 * Writes a file whole or not at all: a temporary file beside it, fsync, rename over the target,
 * then fsync of the directory so that the rename itself is durable. A reader never sees half a
 * record, and a crash leaves either the old file or the new one.
 */
import { open, rename, rm } from 'node:fs/promises';
import { openSync, writeSync, fsyncSync, closeSync, renameSync, rmSync } from 'node:fs';
import { dirname, basename, join } from 'node:path';
import { randomBytes } from 'node:crypto';

function tempPath(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
}

/**
 * Writes `data` to `path` atomically and durably.
 * @param path the target file; its directory must exist
 * @param data the whole content
 * @param mode file mode of the new file
 * @default mode 0o644
 * @throws Error whose message names the step that failed ("write", "fsync", "rename", "fsync directory"), with the system error as `cause`
 */
export async function writeFileAtomic(path: string, data: Uint8Array | string, mode = 0o644): Promise<void> {
  const tmp = tempPath(path);
  let step = 'open';
  try {
    const fh = await open(tmp, 'w', mode);
    try {
      step = 'write';
      await fh.writeFile(data);
      step = 'fsync';
      await fh.sync();
    } finally {
      await fh.close();
    }
    step = 'rename';
    await rename(tmp, path);
    step = 'fsync directory';
    const dir = await open(dirname(path), 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  } catch (err: unknown) {
    await rm(tmp, { force: true }).catch(() => {});
    throw new Error(`${path}: ${step} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** The same as `writeFileAtomic`, synchronously, for the few places that cannot await (exit handlers). */
export function writeFileAtomicSync(path: string, data: Uint8Array | string, mode = 0o644): void {
  const tmp = tempPath(path);
  let step = 'open';
  try {
    const fd = openSync(tmp, 'w', mode);
    try {
      step = 'write';
      const buf = typeof data === 'string' ? Buffer.from(data) : data;
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off);
      step = 'fsync';
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    step = 'rename';
    renameSync(tmp, path);
    step = 'fsync directory';
    const dfd = openSync(dirname(path), 'r');
    try {
      fsyncSync(dfd);
    } finally {
      closeSync(dfd);
    }
  } catch (err: unknown) {
    rmSync(tmp, { force: true });
    throw new Error(`${path}: ${step} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/**
 * A file written whole or not at all, as {@link writeFileAtomic} writes it, but piece by piece while
 * its bytes arrive (a snapshot streamed from a node: issue 26, the disk write overlaps the network,
 * and only the fsync is left once the last byte is in). Pieces are written in the order given, at
 * the positions given; {@link commit} waits for them, fsyncs, renames and fsyncs the directory.
 * Nothing is visible at `path` before the commit; {@link abort} removes the temporary file.
 */
export class AtomicFileWriter {
  readonly path: string;
  readonly #tmp: string;
  readonly #opened: ReturnType<typeof open>;
  /** The writes so far, in order; the first failure is kept and reported by commit. */
  #chain: Promise<void>;
  #done = false;

  /**
   * Opens the temporary file beside `path` (at once, without waiting: the writes queue behind it).
   * @param mode file mode of the new file
   * @default mode 0o644
   */
  constructor(path: string, mode = 0o644) {
    this.path = path;
    this.#tmp = tempPath(path);
    this.#opened = open(this.#tmp, 'w', mode);
    this.#opened.catch(() => {});
    this.#chain = this.#opened.then(() => {});
    this.#chain.catch(() => {});
  }

  /**
   * Queues `bytes` to be written at `position`. The caller must not change `bytes` afterwards.
   * Errors are reported by {@link commit}.
   */
  write(bytes: Uint8Array, position: number): void {
    if (this.#done) return;
    this.#chain = this.#chain.then(async () => {
      const fh = await this.#opened;
      for (let at = 0; at < bytes.length;) {
        const { bytesWritten } = await fh.write(bytes, at, bytes.length - at, position + at);
        at += bytesWritten;
      }
    });
    this.#chain.catch(() => {});
  }

  /**
   * Waits for the writes, fsyncs the file, renames it over `path` and fsyncs the directory.
   * @throws Error whose message names the step that failed ("open", "write", "fsync", "rename",
   *   "fsync directory"), with the system error as `cause`; the temporary file is then removed
   */
  async commit(): Promise<void> {
    if (this.#done) throw new Error(`${this.path}: the write was already committed or aborted`);
    this.#done = true;
    let step = 'open';
    let fh: Awaited<ReturnType<typeof open>> | undefined;
    try {
      fh = await this.#opened;
      step = 'write';
      await this.#chain;
      step = 'fsync';
      await fh.sync();
      await fh.close();
      fh = undefined;
      step = 'rename';
      await rename(this.#tmp, this.path);
      step = 'fsync directory';
      const dir = await open(dirname(this.path), 'r');
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    } catch (err: unknown) {
      await fh?.close().catch(() => {});
      await rm(this.#tmp, { force: true }).catch(() => {});
      throw new Error(`${this.path}: ${step} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  /** Drops the file: the writes queued end, the temporary file is removed. Never throws. */
  async abort(): Promise<void> {
    if (this.#done) return;
    this.#done = true;
    await this.#chain.catch(() => {});
    const fh = await this.#opened.catch(() => undefined);
    await fh?.close().catch(() => {});
    await rm(this.#tmp, { force: true }).catch(() => {});
  }
}
