/**
 * An in-memory backend, for tests only: the same semantics as `SqliteStorage` (atomic
 * transactions with rollback, one resourceVersion counter), nothing kept across restarts.
 */
import { BaseStorage, DEFAULT_WATCH_WINDOW } from './base.ts';
import type { ObjectKey } from './interface.ts';

type Undo = () => void;

/** Objects in a Map. */
export class MemoryStorage extends BaseStorage {
  private readonly rows = new Map<string, Map<string, string>>();
  private readonly blobs = new Map<string, Uint8Array>();
  private rv = 0;
  private undo: Undo[] | undefined;

  constructor(opts: { watchWindow?: number } = {}) {
    super(opts.watchWindow ?? DEFAULT_WATCH_WINDOW);
    this.initWindow();
  }

  private table(resource: string): Map<string, string> {
    let t = this.rows.get(resource);
    if (!t) {
      t = new Map();
      this.rows.set(resource, t);
    }
    return t;
  }
  protected rawGet(key: ObjectKey): string | undefined {
    return this.rows.get(key.resource)?.get(`${key.namespace}/${key.name}`);
  }
  protected rawList(resource: string, namespace: string | undefined): string[] {
    const t = this.rows.get(resource);
    if (!t) return [];
    const keys = [...t.keys()].filter((k) => namespace === undefined || k.startsWith(`${namespace}/`)).sort();
    return keys.map((k) => t.get(k)!);
  }
  protected rawPut(key: ObjectKey, json: string): void {
    const t = this.table(key.resource);
    const k = `${key.namespace}/${key.name}`;
    const before = t.get(k);
    t.set(k, json);
    this.undo?.push(() => (before === undefined ? t.delete(k) : t.set(k, before)));
  }
  protected rawDelete(key: ObjectKey): void {
    const t = this.table(key.resource);
    const k = `${key.namespace}/${key.name}`;
    const before = t.get(k);
    t.delete(k);
    if (before !== undefined) this.undo?.push(() => t.set(k, before));
  }
  protected nextRv(): number {
    const before = this.rv;
    this.undo?.push(() => {
      this.rv = before;
    });
    return ++this.rv;
  }
  protected readRv(): number {
    return this.rv;
  }
  protected atomically<T>(fn: () => T): T {
    const outer = this.undo;
    const mine: Undo[] = [];
    this.undo = mine;
    try {
      const r = fn();
      outer?.push(...mine);
      return r;
    } catch (err: unknown) {
      for (const u of mine.reverse()) u();
      throw err;
    } finally {
      this.undo = outer;
    }
  }
  putBlob(sha256: string, bytes: Uint8Array): void {
    if (!this.blobs.has(sha256)) this.blobs.set(sha256, new Uint8Array(bytes));
  }
  getBlob(sha256: string): Uint8Array | undefined {
    return this.blobs.get(sha256);
  }
  close(): void {}
}
