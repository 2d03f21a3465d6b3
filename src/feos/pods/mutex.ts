/** A promise mutex: `run` queues a task behind the ones before it. */
export class Mutex {
  #tail: Promise<unknown> = Promise.resolve();
  #held = 0;

  /** Whether a task holds or waits for the mutex. */
  get busy(): boolean {
    return this.#held > 0;
  }

  /** Runs `fn` once the tasks before it ended; its result or error is the returned promise's. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    this.#held += 1;
    const p = this.#tail.then(fn).finally(() => {
      this.#held -= 1;
    });
    this.#tail = p.catch(() => {});
    return p;
  }
}
