/**
 * A binary min-heap of items ordered by a numeric key (a due time): push and pop in O(log n), the least
 * key at `peek()`. Items are not removed from the middle: a caller whose item went stale (an Event that was
 * updated or deleted) pushes the new one and skips the stale one when it comes out ("lazy deletion").
 */
export class MinHeap<T> {
  readonly #keys: number[] = [];
  readonly #items: T[] = [];

  /** How many items it holds (stale ones included). */
  get size(): number {
    return this.#keys.length;
  }

  /** Adds `item` under `key`. */
  push(key: number, item: T): void {
    this.#keys.push(key);
    this.#items.push(item);
    let i = this.#keys.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (this.#keys[parent]! <= this.#keys[i]!) break;
      this.#swap(i, parent);
      i = parent;
    }
  }

  /** The least key and its item, left in place; undefined when empty. */
  peek(): { key: number; item: T } | undefined {
    return this.#keys.length === 0 ? undefined : { key: this.#keys[0]!, item: this.#items[0]! };
  }

  /** Removes and answers the least key and its item; undefined when empty. */
  pop(): { key: number; item: T } | undefined {
    const top = this.peek();
    if (!top) return undefined;
    const lastKey = this.#keys.pop()!;
    const lastItem = this.#items.pop()!;
    if (this.#keys.length > 0) {
      this.#keys[0] = lastKey;
      this.#items[0] = lastItem;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let least = i;
        if (l < this.#keys.length && this.#keys[l]! < this.#keys[least]!) least = l;
        if (r < this.#keys.length && this.#keys[r]! < this.#keys[least]!) least = r;
        if (least === i) break;
        this.#swap(i, least);
        i = least;
      }
    }
    return top;
  }

  /** Removes every item. */
  clear(): void {
    this.#keys.length = 0;
    this.#items.length = 0;
  }

  #swap(a: number, b: number): void {
    [this.#keys[a], this.#keys[b]] = [this.#keys[b]!, this.#keys[a]!];
    [this.#items[a], this.#items[b]] = [this.#items[b]!, this.#items[a]!];
  }
}
