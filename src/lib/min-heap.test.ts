import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MinHeap } from './min-heap.ts';

test('a min-heap answers its items by least key, whatever order they came in', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: -1000, max: 1000 }), { maxLength: 200 }), (keys) => {
      const h = new MinHeap<number>();
      for (const [i, k] of keys.entries()) h.push(k, i);
      assert.equal(h.size, keys.length);
      const out: number[] = [];
      for (let top = h.pop(); top; top = h.pop()) {
        assert.equal(keys[top.item], top.key, 'each item keeps its key');
        out.push(top.key);
      }
      assert.deepEqual(out, [...keys].sort((a, b) => a - b));
      assert.equal(h.peek(), undefined);
    }),
  );
});
