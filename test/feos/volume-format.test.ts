// How the guest formats a volume (src/feos/guest/volume-format.ts): the inodes capped so that a large
// volume's format writes little into its qcow2 (a 16 TiB volume wrote 4.6 GiB and did not end within
// its timeout), and the block count within ext2's 32 bits; the arguments run with busybox's mke2fs.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { commandFailure, MAX_VOLUME_BLOCKS, mke2fsArgs, mke2fsTimeoutMs } from '../../src/feos/guest/index.ts';
import { tempDir } from './harness.ts';

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const TiB = 2 ** 40;

test('mke2fs arguments: an inode per 16 KiB up to 16 GiB, a million inodes at most, 2^32 - 1 blocks at most', () => {
  assert.deepEqual(mke2fsArgs('data', '/dev/vdc', 64 * MiB), ['-F', '-b', '4096', '-i', '16384', '-L', 'data', '/dev/vdc', String(64 * 1024)]);
  assert.deepEqual(mke2fsArgs('data', '/dev/vdc', 16 * GiB).slice(3, 5), ['-i', '16384']);
  assert.deepEqual(mke2fsArgs('data', '/dev/vdc', 17 * GiB).slice(3, 5), ['-i', '32768']);
  assert.deepEqual(mke2fsArgs('data', '/dev/vdc', TiB).slice(3, 5), ['-i', String(MiB)]);
  const huge = mke2fsArgs('a-name-longer-than-sixteen', '/dev/vdd', 16 * TiB);
  assert.deepEqual(huge, ['-F', '-b', '4096', '-i', String(16 * MiB), '-L', 'a-name-longer-th', '/dev/vdd', String(MAX_VOLUME_BLOCKS * 4)]);
  for (const size of [64 * MiB, 3 * GiB + 5 * MiB, 100 * GiB, 16 * TiB]) {
    const args = mke2fsArgs('v', '/dev/vdc', size);
    assert.ok(size / Number(args[4]) <= 2 ** 20, `${size}: ${args[4]} bytes an inode`);
    assert.ok(Number(args[8]) * 1024 <= size, `${size}: no more than the device`);
  }
  assert.equal(mke2fsTimeoutMs(64 * MiB), 120_004);
  assert.equal(mke2fsTimeoutMs(16 * TiB), 120_000 + 16 * 60_000);
});

test("the arguments make a file system with busybox's mke2fs, writing a small part of the volume", { timeout: 60_000 }, (t) => {
  const { dir, cleanup } = tempDir('feos-mkfs-');
  t.after(cleanup);
  const img = join(dir, 'vol.img');
  writeFileSync(img, '');
  truncateSync(img, 2 * GiB);
  execFileSync('busybox', ['mke2fs', ...mke2fsArgs('data', img, 2 * GiB)], { stdio: 'pipe', timeout: 30_000 });
  const written = statSync(img).blocks * 512;
  assert.ok(written < 64 * MiB, `${written} bytes written for a 2 GiB volume`);
  // An ext2 superblock at 1 KiB: its magic 0xEF53 at byte 56, its block count at byte 4.
  const sb = execFileSync('dd', [`if=${img}`, 'bs=1024', 'skip=1', 'count=1', 'status=none']);
  assert.equal(sb.readUInt16LE(56), 0xef53);
  assert.equal(sb.readUInt32LE(4), (2 * GiB) / 4096);
});

test("a format's or mount's failure is one line: its stderr, or that it was ended at its timeout", async () => {
  const run = promisify(execFile);
  const killed = await run('sleep', ['5'], { timeout: 50 }).catch((e: unknown) => e);
  assert.equal(commandFailure(killed, 50), 'did not end within 0.05 s (SIGTERM)');
  const failed = await run('sh', ['-c', 'echo "mke2fs: bad\nsecond line" >&2; exit 1']).catch((e: unknown) => e);
  assert.equal(commandFailure(failed, 1000), 'mke2fs: bad; second line');
  assert.equal(commandFailure(new Error('Command failed: /bin/mke2fs -F /dev/vdc\n'), 1000), 'Command failed: /bin/mke2fs -F /dev/vdc');
});
