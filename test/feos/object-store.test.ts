// The object store in a local directory (--object-store file:///path): whole objects only, their size
// and SHA-256 as written, claims that one caller wins, listing without half-written files, key checks.
import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { LocalDirObjectStore, openObjectStore } from '../../src/feos/store/index.ts';
import { tempDir } from './harness.ts';
import { chunks, objectStoreConformance } from './object-store-conformance.ts';

objectStoreConformance('a local directory', async () => {
  const { dir, cleanup } = tempDir('feos-store-');
  return { store: openObjectStore(pathToFileURL(join(dir, 'store')).href), cleanup };
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
  assert.throws(() => openObjectStore('ftp://bucket/x'), /want file:\/\/\/absolute\/path or s3:\/\/BUCKET\/PREFIX/);
  assert.throws(() => openObjectStore('s3://B/x'), /want s3:\/\/BUCKET\/PREFIX/);
  assert.throws(() => openObjectStore('s3://bucket/a b'), /the prefix "a b"/);
  assert.throws(() => openObjectStore('file://host/x'), /want file:\/\/\/absolute\/path/);
  const store = new LocalDirObjectStore('file:///tmp/feos-store-never');
  for (const key of ['../etc/passwd', 'pods//x', 'pods/.hidden', 'pods/a b', '']) {
    await assert.rejects(store.exists(key), RangeError);
    await assert.rejects(store.getBytes(key), RangeError);
  }
});
