/**
 * The storage conformance suite (`storage-conformance.ts`) against the memory and SQLite backends;
 * etcd's run is in `test/apiserver-etcd/`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStorage, SqliteStorage } from '../../src/apiserver/storage/index.ts';
import { runStorageConformance } from './storage-conformance.ts';

runStorageConformance('memory', {
  make: (_t, { watchWindow }) => new MemoryStorage({ watchWindow }),
  noPeerReason: 'one process, one synchronous writer: a transaction cannot lose to another',
});

runStorageConformance('sqlite', {
  make: (t, { watchWindow }) => {
    const dir = mkdtempSync(join(tmpdir(), 'kube32-conformance-'));
    const s = new SqliteStorage(join(dir, 'db'), { watchWindow });
    t.after(async () => {
      await s.close();
      rmSync(dir, { recursive: true, force: true });
    });
    return s;
  },
  noPeerReason: 'one writer per file: a second SqliteStorage would not see the first one\'s watch events',
});
