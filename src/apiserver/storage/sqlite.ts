/**
 * The default backend: one SQLite file (better-sqlite3) in WAL mode with synchronous commits
 * (`synchronous = FULL`), so an answered write survives a crash. Writes are group-committed
 * (base.ts): the transactions that committed while the event loop went round are written in one
 * SQLite transaction, one fsync, and each is answered after it. The fsync itself still runs on the
 * API server's thread (better-sqlite3 is synchronous): one per group instead of one per write. Objects are JSON rows keyed by
 * (resource, namespace, name); the resourceVersion is one counter row; module bytes are rows keyed
 * by their SHA-256.
 */
import { chmodSync, closeSync, existsSync, openSync } from 'node:fs';
import Database from 'better-sqlite3';
import { BaseStorage, type Change, DEFAULT_WATCH_WINDOW, type StoredRow } from './base.ts';
import type { ObjectKey } from './interface.ts';

/** Options of `SqliteStorage`. */
export interface SqliteStorageOptions {
  /** Events kept for watch resumption. @default 50000 */
  watchWindow?: number;
}

/** Objects in one SQLite file. */
export class SqliteStorage extends BaseStorage {
  private readonly db: Database.Database;
  private readonly stmts: {
    get: Database.Statement;
    listAll: Database.Statement;
    listNs: Database.Statement;
    listAllValues: Database.Statement;
    listNsValues: Database.Statement;
    put: Database.Statement;
    del: Database.Statement;
    setRv: Database.Statement;
    rv: Database.Statement;
    putBlob: Database.Statement;
    getBlob: Database.Statement;
  };

  /**
   * Opens (or creates) the database at `path`.
   * @throws Error when the file cannot be opened or is not a database of this server
   */
  constructor(path: string, opts: SqliteStorageOptions = {}) {
    super(opts.watchWindow ?? DEFAULT_WATCH_WINDOW);
    // The database holds Secrets: the file, its WAL and shared memory 0600, whatever the umask or the modes
    // an older run left (SQLite gives the -wal and -shm files the db's mode; the data dir is made 0700 by the server).
    const own = () => {
      for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
    };
    closeSync(openSync(path, 'a', 0o600));
    own();
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    own();
    this.db.pragma('synchronous = FULL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS objects (
        resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 1), rv INTEGER NOT NULL);
      INSERT OR IGNORE INTO counter (id, rv) VALUES (1, 0);
      CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, bytes BLOB NOT NULL) WITHOUT ROWID;
    `);
    this.stmts = {
      get: this.db.prepare('SELECT value FROM objects WHERE resource = ? AND namespace = ? AND name = ?').pluck(),
      listAll: this.db.prepare('SELECT namespace, name, value FROM objects WHERE resource = ? ORDER BY namespace, name'),
      listNs: this.db.prepare('SELECT namespace, name, value FROM objects WHERE resource = ? AND namespace = ? ORDER BY name'),
      listAllValues: this.db.prepare('SELECT value FROM objects WHERE resource = ? ORDER BY namespace, name').pluck(),
      listNsValues: this.db.prepare('SELECT value FROM objects WHERE resource = ? AND namespace = ? ORDER BY name').pluck(),
      put: this.db.prepare('INSERT OR REPLACE INTO objects (resource, namespace, name, value) VALUES (?, ?, ?, ?)'),
      del: this.db.prepare('DELETE FROM objects WHERE resource = ? AND namespace = ? AND name = ?'),
      setRv: this.db.prepare('UPDATE counter SET rv = ? WHERE id = 1'),
      rv: this.db.prepare('SELECT rv FROM counter WHERE id = 1').pluck(),
      putBlob: this.db.prepare('INSERT OR IGNORE INTO blobs (sha256, bytes) VALUES (?, ?)'),
      getBlob: this.db.prepare('SELECT bytes FROM blobs WHERE sha256 = ?').pluck(),
    };
    this.initWindow();
  }

  protected rawGet(key: ObjectKey): string | undefined {
    return this.stmts.get.get(key.resource, key.namespace, key.name) as string | undefined;
  }
  protected rawList(resource: string, namespace: string | undefined): StoredRow[] {
    return (namespace === undefined ? this.stmts.listAll.all(resource) : this.stmts.listNs.all(resource, namespace)) as StoredRow[];
  }
  protected override rawListValues(resource: string, namespace: string | undefined): string[] {
    return (namespace === undefined ? this.stmts.listAllValues.all(resource) : this.stmts.listNsValues.all(resource, namespace)) as string[];
  }
  protected readRv(): number {
    return this.stmts.rv.get() as number;
  }
  /** One SQLite transaction (one fsync at its commit) for the whole group. */
  protected persist(changes: Change[], rv: number): void {
    this.db.transaction(() => {
      for (const { key, value } of changes) {
        if (value === undefined) this.stmts.del.run(key.resource, key.namespace, key.name);
        else this.stmts.put.run(key.resource, key.namespace, key.name, value);
      }
      this.stmts.setRv.run(rv);
    })();
  }
  async putBlob(sha256: string, bytes: Uint8Array): Promise<void> {
    this.stmts.putBlob.run(sha256, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  }
  async getBlob(sha256: string): Promise<Uint8Array | undefined> {
    return this.stmts.getBlob.get(sha256) as Buffer | undefined;
  }
  protected closeBackend(): void {
    if (this.db.open) this.db.close();
  }
}
