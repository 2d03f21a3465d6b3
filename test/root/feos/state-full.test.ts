// A restore into a node whose state dir is full (a small tmpfs, as root): the error names this node's
// state dir, not the object store, feosd logs it, and nothing is left behind (seed 000, "Hibernate and
// Restore": until the claim a failure leaves nothing).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { status } from '@grpc/grpc-js';
import { startFeosd, tempDir } from '../../feos/harness.ts';
import { LocalDirObjectStore } from '../../../src/feos/store/index.ts';

test('a restore whose copy fills the state dir says the state dir is full (not the store), logs it, and leaves nothing', { timeout: 60_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const { dir, cleanup } = tempDir('feos-full-');
  const state = join(dir, 'state');
  mkdirSync(state);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', state]);
  t.after(() => {
    execFileSync('umount', ['-l', state]);
    cleanup();
  });
  const guestDir = join(dir, 'guest');
  mkdirSync(join(guestDir, 'gv1'), { recursive: true });
  writeFileSync(join(guestDir, 'gv1', 'data.qcow2'), 'blank');
  const storeDir = join(dir, 'store');
  const id = 'fxkkstate01';
  const checkpoint = '20261129T170000Z-abcd';
  const ck = join(storeDir, 'pods', id, checkpoint);
  mkdirSync(ck, { recursive: true });
  const disk = Buffer.alloc(8 * 1024 * 1024, 1);
  writeFileSync(join(ck, 'disk.qcow2'), disk);
  writeFileSync(
    join(ck, 'manifest.json'),
    JSON.stringify({
      version: 1,
      podId: id,
      checkpoint,
      createdAt: new Date().toISOString(),
      node: 'elsewhere',
      guestVersion: 'gv1',
      memory: false,
      spec: { vcpus: 1, memoryBytes: '268435456' },
      files: [{ name: 'disk.qcow2', sizeBytes: disk.length, sha256: createHash('sha256').update(disk).digest('hex') }],
    }),
  );
  const feosd = await startFeosd(dir, { guestDir, extra: ['--object-store', pathToFileURL(storeDir).href] });
  t.after(() => feosd.stop('SIGKILL'));
  await assert.rejects(feosd.pods.restorePod({ id }), (e: { code?: number; details?: string }) => {
    assert.equal(e.code, status.UNAVAILABLE);
    assert.match(e.details ?? '', /this node's state dir is full \(the object store is not\): writing .*ENOSPC/);
    return true;
  });
  assert.match(feosd.stderr(), /restore: refused/);
  assert.deepEqual(readdirSync(join(state, 'disks')), [], 'no copy stays');
  assert.equal(existsSync(join(ck, 'restored')), false, 'the checkpoint is not claimed');
  assert.ok(existsSync(join(ck, 'disk.qcow2')));
});

test('the local-directory store names a read-only file system (EROFS), not the ENOENT of a recursive mkdir', { timeout: 30_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const { dir, cleanup } = tempDir('feos-rostore-');
  const ro = join(dir, 'ro');
  mkdirSync(ro);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,ro', 'tmpfs', ro]);
  t.after(() => {
    execFileSync('umount', ['-l', ro]);
    cleanup();
  });
  const store = new LocalDirObjectStore(pathToFileURL(join(ro, 'store')).href);
  await assert.rejects(store.put('pods/abcdefghjkm/20261129T170000Z-abcd/memory', new Uint8Array([1])), (e: Error) => {
    assert.match(e.message, /EROFS: read-only file system/);
    assert.doesNotMatch(e.message, /ENOENT/);
    return true;
  });
});
