/**
 * The object store in a local directory (`--object-store file:///path`): an object is the file
 * `<root>/<key>`. A put writes `.<name>.<random>.part` beside it, hashing as it writes, fsyncs it,
 * renames it over the key and fsyncs the directory, so a reader sees a whole object or none; a claim
 * (`putIfAbsent`) links its temporary file to the key, which fails when the key has one. Two feosds on
 * one host (or on hosts sharing the directory) can use one store.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, type Dirent, existsSync } from 'node:fs';
import { link, mkdir, open, readdir, readFile, rename, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { errorMessage } from '../api/index.ts';
import { checkKey, ObjectNotFoundError, type ObjectStore, ObjectStoreError, type PutOptions, type PutResult, type RangeOptions, rangeBuffer, type StoreCallOptions } from './store.ts';

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * `mkdir -p` that names the real cause: Node's recursive mkdir reports ENOENT where a parent refuses
 * new entries (a read-only file system, no write permission); each missing directory is then made on
 * its own, and the first one's error (EROFS, EACCES, ENOSPC, ENOTDIR) is thrown.
 */
async function makeDirs(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
    return;
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const missing: string[] = [];
  for (let d = dir; !existsSync(d); d = dirname(d)) {
    missing.push(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing.reverse()) {
    try {
      await mkdir(d);
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

/** An object store in a local directory. */
export class LocalDirObjectStore implements ObjectStore {
  readonly url: string;
  readonly root: string;

  /**
   * @param url `file:///absolute/path`
   * @throws RangeError when the URL is not a `file:` URL of an absolute path
   */
  constructor(url: string) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new RangeError(`object store ${JSON.stringify(url)}: want file:///absolute/path`);
    }
    if (u.protocol !== 'file:' || (u.host !== '' && u.host !== 'localhost')) throw new RangeError(`object store ${JSON.stringify(url)}: want file:///absolute/path`);
    this.url = url;
    this.root = fileURLToPath(u);
  }

  #path(key: string): string {
    return join(this.root, ...checkKey(key));
  }

  async put(key: string, body: AsyncIterable<Uint8Array> | Uint8Array, options: PutOptions = {}): Promise<PutResult> {
    const path = this.#path(key);
    const tmp = join(dirname(path), `.${key.split('/').at(-1)}.${randomBytes(4).toString('hex')}.part`);
    let step = 'mkdir';
    try {
      await makeDirs(dirname(path));
      step = 'open';
      const fh = await open(tmp, 'wx', 0o600);
      const hash = createHash('sha256');
      let size = 0;
      try {
        step = 'write';
        const chunks = body instanceof Uint8Array ? [body] : body;
        for await (const chunk of chunks) {
          options.signal?.throwIfAborted();
          if (!options.unhashed) hash.update(chunk);
          await fh.write(chunk);
          size += chunk.byteLength;
          options.onProgress?.(size);
        }
        options.signal?.throwIfAborted();
        step = 'fsync';
        await fh.sync();
      } finally {
        await fh.close();
      }
      step = 'rename';
      await rename(tmp, path);
      step = 'fsync directory';
      await syncDir(dirname(path));
      return { sizeBytes: size, sha256: options.unhashed ? '' : hash.digest('hex') };
    } catch (err: unknown) {
      await rm(tmp, { force: true }).catch(() => {});
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      throw new ObjectStoreError(key, `${this.url}: put ${key}: ${step} failed: ${errorMessage(err)}`, { cause: err });
    }
  }

  async putIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    const path = this.#path(key);
    const tmp = join(dirname(path), `.${key.split('/').at(-1)}.${randomBytes(4).toString('hex')}.part`);
    try {
      await makeDirs(dirname(path));
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(body);
        await fh.sync();
      } finally {
        await fh.close();
      }
      try {
        await link(tmp, path);
      } catch (err: unknown) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
        throw err;
      }
      await syncDir(dirname(path));
      return true;
    } catch (err: unknown) {
      throw new ObjectStoreError(key, `${this.url}: claim ${key}: ${errorMessage(err)}`, { cause: err });
    } finally {
      await rm(tmp, { force: true }).catch(() => {});
    }
  }

  async *get(key: string, options: StoreCallOptions = {}): AsyncIterable<Uint8Array> {
    const path = this.#path(key);
    const stream = createReadStream(path, { highWaterMark: 1024 * 1024, signal: options.signal });
    try {
      for await (const chunk of stream) yield chunk as Buffer;
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new ObjectNotFoundError(key, this.url);
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      throw new ObjectStoreError(key, `${this.url}: get ${key}: ${errorMessage(err)}`, { cause: err });
    }
  }

  async getBytes(key: string): Promise<Uint8Array> {
    const path = this.#path(key);
    try {
      return await readFile(path);
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new ObjectNotFoundError(key, this.url);
      throw new ObjectStoreError(key, `${this.url}: get ${key}: ${errorMessage(err)}`, { cause: err });
    }
  }

  async getRange(key: string, offset: number, length: number, options: RangeOptions = {}): Promise<Uint8Array> {
    const path = this.#path(key);
    options.signal?.throwIfAborted();
    const into = rangeBuffer(options.into, length);
    let fh: Awaited<ReturnType<typeof open>>;
    try {
      fh = await open(path, 'r');
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new ObjectNotFoundError(key, this.url);
      throw new ObjectStoreError(key, `${this.url}: get ${key}: ${errorMessage(err)}`, { cause: err });
    }
    try {
      const buf = into ?? Buffer.allocUnsafe(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await fh.read(buf, got, length - got, offset + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      if (got !== length) {
        throw new ObjectStoreError(key, `${this.url}: get ${key}: bytes ${offset} to ${offset + length - 1} asked, the object ends after ${offset + got} (it is not what was put)`, { failure: 'damaged' });
      }
      return buf.subarray(0, length);
    } catch (err: unknown) {
      if (err instanceof ObjectStoreError) throw err;
      throw new ObjectStoreError(key, `${this.url}: get ${key}: ${errorMessage(err)}`, { cause: err });
    } finally {
      await fh.close();
    }
  }

  async exists(key: string): Promise<boolean> {
    const path = this.#path(key);
    try {
      return (await stat(path)).isFile();
    } catch {
      return false;
    }
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    const walk = async (dir: string, rel: string) => {
      let entries: Dirent[];
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch (err: unknown) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return;
        throw new ObjectStoreError(prefix, `${this.url}: list ${prefix}: ${errorMessage(err)}`, { cause: err });
      }
      for (const e of entries) {
        if (e.name.startsWith('.')) continue;
        const k = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) await walk(join(dir, e.name), k);
        else if (e.isFile()) keys.push(k);
      }
    };
    const clean = prefix.replace(/\/+$/, '');
    await walk(clean ? this.#path(clean) : this.root, clean);
    return keys.sort();
  }

  /** Removes the `.part` files below `prefix`, then its directory and its parent when they are empty. */
  async deleteLeftovers(prefix: string): Promise<void> {
    const dir = this.#path(prefix.replace(/\/+$/, ''));
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isFile() && e.name.startsWith('.') && e.name.endsWith('.part')) await rm(join(dir, e.name), { force: true });
    for (const d of [dir, dirname(dir)]) {
      if (d === this.root) break;
      await rmdir(d).catch(() => {});
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.#path(key);
    try {
      await rm(path, { force: true });
    } catch (err: unknown) {
      throw new ObjectStoreError(key, `${this.url}: delete ${key}: ${errorMessage(err)}`, { cause: err });
    }
  }
}
