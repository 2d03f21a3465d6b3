/** The pure parts of `kube32-cli up`: worker addresses and names, the default data dir. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultDataDir } from '../../src/cli/commands/cluster.ts';
import { workerAddress, workerName } from '../../src/cli/local-cluster.ts';
import { formatSize } from '../../src/cli/output.ts';

test('workers take consecutive loopback addresses from the first one', () => {
  assert.equal(workerAddress(1), '127.0.0.2');
  assert.equal(workerAddress(2), '127.0.0.3');
  assert.equal(workerAddress(1, '127.5.6.2'), '127.5.6.2');
  assert.equal(workerAddress(3, '127.0.0.250'), '127.0.0.252');
  assert.equal(workerName(2), 'worker-2');
});

test('a first address outside 127.0.0.0/8, or a range that runs out, is refused', () => {
  assert.throws(() => workerAddress(1, '10.0.0.2'), /invalid first worker address "10\.0\.0\.2"/);
  assert.throws(() => workerAddress(1, '127.0.0'), /invalid first worker address/);
  assert.throws(() => workerAddress(2, '127.255.255.254'), /worker 2 has no loopback address/);
});

test('the default data dir is $KUBE32_DATA_DIR, else ~/.kube32', () => {
  assert.equal(defaultDataDir({ HOME: '/home/a' }), '/home/a/.kube32');
  assert.equal(defaultDataDir({ HOME: '/home/a', KUBE32_DATA_DIR: '/srv/k' }), '/srv/k');
});

test('sizes print as kubectl prints them', () => {
  assert.equal(formatSize(512), '512B');
  assert.equal(formatSize(1536), '1.5KiB');
  assert.equal(formatSize(66_000), '64KiB');
  assert.equal(formatSize(16 * 1024 * 1024), '16MiB');
});
