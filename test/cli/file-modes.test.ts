/**
 * What holds Secrets is private whatever the umask and the data dir's mode (issue 19 "Seed and operator
 * details"): `kube32-cli up` on a data dir made 0755 leaves it 0700, the database, its WAL and shared
 * memory 0600, the logs folder 0700 and each log 0600; a database an older run left 0644 is 0600 again.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { startCluster } from '../e2e/cluster.ts';

const mode = (p: string) => statSync(p).mode & 0o777;

test('the data dir, the database, its WAL and the logs are private', { timeout: 240_000 }, async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'k32-modes-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dataDir = join(root, 'data');
  mkdirSync(dataDir, { mode: 0o755 });
  chmodSync(dataDir, 0o755);
  const old = process.umask(0o022);
  t.after(() => process.umask(old));
  const first = await startCluster(t, { workers: 0, dataDir });
  const check = () => {
    assert.equal(mode(dataDir).toString(8), '700', 'the data dir');
    for (const f of ['kube32.db', 'kube32.db-wal', 'kube32.db-shm']) assert.equal(mode(join(dataDir, f)).toString(8), '600', f);
    assert.equal(mode(join(dataDir, 'logs')).toString(8), '700', 'logs/');
    const logs = readdirSync(join(dataDir, 'logs'));
    assert.ok(logs.length > 0);
    for (const l of logs) assert.equal(mode(join(dataDir, 'logs', l)).toString(8), '600', `logs/${l}`);
  };
  check();
  await first.stop();
  // An older run's modes are put right at the next start.
  chmodSync(dataDir, 0o755);
  chmodSync(join(dataDir, 'kube32.db'), 0o644);
  chmodSync(join(dataDir, 'logs'), 0o755);
  for (const l of readdirSync(join(dataDir, 'logs'))) chmodSync(join(dataDir, 'logs', l), 0o644);
  const second = await startCluster(t, { workers: 0, dataDir });
  check();
  await second.stop();
});
