/**
 * An in-memory backend, for tests only: the same semantics as `SqliteStorage` (atomic
 * transactions with rollback, one resourceVersion counter, group commit), nothing kept across restarts.
 */
import { BaseStorage, type Change, DEFAULT_WATCH_WINDOW, type StoredRow } from './base.ts';
import type { ObjectKey } from './interface.ts';

/** Objects in a Map. */
export class MemoryStorage extends BaseStorage {
  private readonly rowsByResource = new Map<string, Map<string, StoredRow>>();
  private readonly blobs = new Map<string, Uint8Array>();
  private rv = 0;

  constructor(opts: { watchWindow?: number } = {}) {
    super(opts.watchWindow ?? DEFAULT_WATCH_WINDOW);
    this.initWindow();
  }

  protected rawGet(key: ObjectKey): string | undefined {
    return this.rowsByResource.get(key.resource)?.get(`${key.namespace}\0${key.name}`)?.value;
  }
  protected rawList(resource: string, namespace: string | undefined): StoredRow[] {
    const t = this.rowsByResource.get(resource);
    if (!t) return [];
    const keys = [...t.keys()].filter((k) => namespace === undefined || k.startsWith(`${namespace}\0`)).sort();
    return keys.map((k) => t.get(k)!);
  }
  protected readRv(): number {
    return this.rv;
  }
  protected persist(changes: Change[], rv: number): void {
    for (const { key, value } of changes) {
      let t = this.rowsByResource.get(key.resource);
      if (!t) {
        t = new Map();
        this.rowsByResource.set(key.resource, t);
      }
      const k = `${key.namespace}\0${key.name}`;
      if (value === undefined) t.delete(k);
      else t.set(k, { namespace: key.namespace, name: key.name, value });
    }
    this.rv = rv;
  }
  async putBlob(sha256: string, bytes: Uint8Array): Promise<void> {
    if (!this.blobs.has(sha256)) this.blobs.set(sha256, new Uint8Array(bytes));
  }
  async getBlob(sha256: string): Promise<Uint8Array | undefined> {
    return this.blobs.get(sha256);
  }
  protected closeBackend(): void {}
}
