// The object store in a local directory (--object-store file:///path): whole objects only, their size
// and SHA-256 as written, claims that one caller wins, listing without half-written files, key checks.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { LocalDirObjectStore, ObjectNotFoundError, openObjectStore } from '../../src/feos/store/index.ts';
import { tempDir } from './harness.ts';

async function* chunks(parts: Uint8Array[], onEach?: () => void): AsyncIterable<Uint8Array> {
  for (const p of parts) {
    onEach?.();
    yield p;
  }
}

test('put writes an object whole with its size and SHA-256; get, getBytes, exists, list and delete see it', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-store-');
  t.after(cleanup);
  const store = openObjectStore(pathToFileURL(join(dir, 'store')).href);
  const a = Buffer.alloc(3 * 1024 * 1024, 7);
  const b = Buffer.from('tail');
  const put = await store.put('pods/abcdefghjkm/c1/memory', chunks([a, b]));
  assert.equal(put.sizeBytes, a.length + b.length);
  assert.equal(put.sha256, createHash('sha256').update(a).update(b).digest('hex'));
  let read = 0;
  const h = createHash('sha256');
  for await (const c of store.get('pods/abcdefghjkm/c1/memory')) {
    read += c.byteLength;
    h.update(c);
  }
  assert.equal(read, put.sizeBytes);
  assert.equal(h.digest('hex'), put.sha256);
  await store.put('pods/abcdefghjkm/c1/manifest.json', new TextEncoder().encode('{}'));
  assert.equal(new TextDecoder().decode(await store.getBytes('pods/abcdefghjkm/c1/manifest.json')), '{}');
  assert.deepEqual(await store.list('pods/abcdefghjkm'), ['pods/abcdefghjkm/c1/manifest.json', 'pods/abcdefghjkm/c1/memory']);
  assert.deepEqual(await store.list('pods/nobody'), []);
  assert.equal(await store.exists('pods/abcdefghjkm/c1/memory'), true);
  await store.delete('pods/abcdefghjkm/c1/memory');
  await store.delete('pods/abcdefghjkm/c1/memory');
  assert.equal(await store.exists('pods/abcdefghjkm/c1/memory'), false);
  await assert.rejects(store.getBytes('pods/abcdefghjkm/c1/memory'), ObjectNotFoundError);
  await assert.rejects(
    (async () => {
      for await (const _ of store.get('pods/abcdefghjkm/c1/memory')) void _;
    })(),
    ObjectNotFoundError,
  );
});

test('a put that is cut leaves no object and no temporary file', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-store-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const ac = new AbortController();
  let n = 0;
  await assert.rejects(
    store.put(
      'pods/p/c/memory',
      chunks([Buffer.alloc(10), Buffer.alloc(10), Buffer.alloc(10)], () => {
        if (++n === 2) ac.abort(new Error('abandoned'));
      }),
      { signal: ac.signal },
    ),
    /abandoned/,
  );
  assert.equal(await store.exists('pods/p/c/memory'), false);
  assert.deepEqual(readdirSync(join(dir, 'pods', 'p', 'c')), [], 'no .part file stays');
  // A half-written file of another writer (a crash) is never listed.
  writeFileSync(join(dir, 'pods', 'p', 'c', '.memory.1234.part'), 'half');
  assert.deepEqual(await store.list('pods/p'), []);
});

test('putIfAbsent: one claim wins, the next finds the object', { timeout: 10_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-store-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(dir).href);
  const results = await Promise.all([1, 2, 3].map((i) => store.putIfAbsent('pods/p/c/restored', new TextEncoder().encode(`claim ${i}`))));
  assert.deepEqual(results.filter(Boolean).length, 1);
  assert.match(new TextDecoder().decode(await store.getBytes('pods/p/c/restored')), /^claim [123]$/);
});

test('bad keys and URLs are refused with the rule', async () => {
  assert.throws(() => openObjectStore('s3://bucket/x'), /want file:\/\/\/absolute\/path \(s3:\/\/ is not built/);
  assert.throws(() => openObjectStore('file://host/x'), /want file:\/\/\/absolute\/path/);
  const store = new LocalDirObjectStore('file:///tmp/feos-store-never');
  for (const key of ['../etc/passwd', 'pods//x', 'pods/.hidden', 'pods/a b', '']) {
    await assert.rejects(store.exists(key), RangeError);
    await assert.rejects(store.getBytes(key), RangeError);
  }
});
