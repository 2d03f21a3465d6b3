/** The storage layer's door. */
export * from './interface.ts';
export { BaseStorage, DEFAULT_WATCH_WINDOW } from './base.ts';
export { SqliteStorage, type SqliteStorageOptions } from './sqlite.ts';
export { MemoryStorage } from './memory.ts';
export { Cacher, DEFAULT_CACHE_WINDOW } from './cacher.ts';
export { type KeptCopy, keepListed, keepWatching, type ListedCopy } from './relist.ts';
