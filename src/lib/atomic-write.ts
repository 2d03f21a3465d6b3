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
