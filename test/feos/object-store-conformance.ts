/**
 * What every object store (src/feos/store) must do, run against each implementation: whole objects with
 * their size and SHA-256 as written, reads, listing by prefix, deletes, a cut put that leaves no object, a
 * claim that the second caller loses, key checks.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { ObjectNotFoundError, type ObjectStore, ObjectStoreError } from '../../src/feos/store/index.ts';

/** Yields the parts in order, calling `onEach` before each. */
export async function* chunks(parts: Uint8Array[], onEach?: () => void): AsyncIterable<Uint8Array> {
  for (const p of parts) {
    onEach?.();
    yield p;
  }
}

/**
 * Registers the conformance tests of one implementation.
 * @param name the implementation's name, in the tests' titles
 * @param open a new, empty store for one test, and its clean-up
 */
export function objectStoreConformance(name: string, open: () => Promise<{ store: ObjectStore; cleanup: () => Promise<void> | void }>, timeout = 60_000): void {
  test(`${name}: put writes an object whole with its size and SHA-256; get, getBytes, exists, list and delete see it`, { timeout }, async (t) => {
    const { store, cleanup } = await open();
    t.after(cleanup);
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
    const whole = Buffer.concat([a, b]);
    assert.ok(Buffer.from(await store.getRange('pods/abcdefghjkm/c1/memory', 1000, 5000)).equals(whole.subarray(1000, 6000)), 'a range reads those bytes');
    assert.ok(Buffer.from(await store.getRange('pods/abcdefghjkm/c1/memory', whole.length - 4, 4)).equals(b), 'a range at the end');
    await assert.rejects(store.getRange('pods/abcdefghjkm/c1/memory', whole.length - 4, 10), (e: unknown) => e instanceof ObjectStoreError && e.failure === 'damaged' && e.key === 'pods/abcdefghjkm/c1/memory', 'a range past the end: the object is shorter than its reader was told');
    await assert.rejects(store.getRange('pods/abcdefghjkm/c1/nothing', 0, 10), ObjectNotFoundError);
    // Read into a buffer the caller reuses: the answer is a view of its first bytes, read again with other bytes.
    const into = Buffer.alloc(8000, 0xee);
    const r1 = await store.getRange('pods/abcdefghjkm/c1/memory', 1000, 5000, { into });
    assert.ok(r1.buffer === into.buffer && r1.byteOffset === 0 && r1.byteLength === 5000, 'a view of the buffer given');
    assert.ok(into.subarray(0, 5000).equals(whole.subarray(1000, 6000)) && into[5000] === 0xee, 'those bytes, and none past them');
    await store.getRange('pods/abcdefghjkm/c1/memory', 0, 3000, { into });
    assert.ok(into.subarray(0, 3000).equals(whole.subarray(0, 3000)), 'read into again');
    await assert.rejects(store.getRange('pods/abcdefghjkm/c1/memory', 0, 9000, { into }), RangeError, 'a buffer too short for the range');
    await assert.rejects(store.getRange('pods/abcdefghjkm/c1/memory', whole.length - 4, 10, { into }), (e: unknown) => e instanceof ObjectStoreError && e.failure === 'damaged', 'past the end, into a buffer');
    await store.put('pods/abcdefghjkm/c1/manifest.json', new TextEncoder().encode('{}'));
    assert.equal(new TextDecoder().decode(await store.getBytes('pods/abcdefghjkm/c1/manifest.json')), '{}');
    assert.deepEqual(await store.list('pods/abcdefghjkm'), ['pods/abcdefghjkm/c1/manifest.json', 'pods/abcdefghjkm/c1/memory']);
    assert.deepEqual(await store.list('pods/abcdefghjkm/'), ['pods/abcdefghjkm/c1/manifest.json', 'pods/abcdefghjkm/c1/memory']);
    assert.deepEqual(await store.list('pods/abcdefghj'), [], 'a prefix is whole segments');
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

  test(`${name}: a put of many parts reads back the same bytes; one that is cut leaves no object`, { timeout }, async (t) => {
    const { store, cleanup } = await open();
    t.after(cleanup);
    // 20 MiB in 1 MiB chunks: several multipart parts where the store has them.
    const parts = Array.from({ length: 20 }, (_, i) => Buffer.alloc(1024 * 1024, i));
    const put = await store.put('pods/p/c/memory', chunks(parts));
    assert.equal(put.sizeBytes, 20 * 1024 * 1024);
    const h = createHash('sha256');
    for await (const c of store.get('pods/p/c/memory')) h.update(c);
    assert.equal(h.digest('hex'), createHash('sha256').update(Buffer.concat(parts)).digest('hex'));
    const ac = new AbortController();
    let n = 0;
    await assert.rejects(
      store.put(
        'pods/p/c/disk.qcow2',
        chunks(parts, () => {
          if (++n === 12) ac.abort(new Error('abandoned'));
        }),
        { signal: ac.signal },
      ),
      /abandoned/,
    );
    assert.equal(await store.exists('pods/p/c/disk.qcow2'), false);
    assert.deepEqual(await store.list('pods/p'), ['pods/p/c/memory']);
  });

  test(`${name}: putIfAbsent: the first claim wins, the next finds the object and leaves it`, { timeout }, async (t) => {
    const { store, cleanup } = await open();
    t.after(cleanup);
    assert.equal(await store.putIfAbsent('pods/p/c/restored', new TextEncoder().encode('claim 1')), true);
    assert.equal(await store.putIfAbsent('pods/p/c/restored', new TextEncoder().encode('claim 2')), false);
    assert.equal(new TextDecoder().decode(await store.getBytes('pods/p/c/restored')), 'claim 1');
  });

  test(`${name}: bad keys are refused with the rule, before the store is asked`, { timeout }, async (t) => {
    const { store, cleanup } = await open();
    t.after(cleanup);
    for (const key of ['../etc/passwd', 'pods//x', 'pods/.hidden', 'pods/a b', '']) {
      await assert.rejects(store.exists(key), RangeError);
      await assert.rejects(store.getBytes(key), RangeError);
      await assert.rejects(store.put(key, new Uint8Array(1)), RangeError);
    }
  });
}
