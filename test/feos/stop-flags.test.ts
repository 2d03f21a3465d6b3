// feosd's stop and store flags refused at its start, before anything is taken (seed 000, "Suspend on
// stop": the suspends end 10 s before --stop-grace does; Node's timers hold at most 24.8 days).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { FEOSD, tempDir } from './harness.ts';

function feosd(dir: string, args: string[]) {
  return spawnSync(process.execPath, [FEOSD, '--state-dir', join(dir, 'state'), '--run-dir', join(dir, 'run'), ...args], { encoding: 'utf8', timeout: 30_000 });
}

test('feosd refuses --stop-grace of 10 s or less with --suspend-on-stop, a grace longer than a timer holds, and an --object-store that is a file', { timeout: 60_000 }, (t) => {
  const { dir, cleanup } = tempDir('feos-stopflags-');
  t.after(cleanup);
  const short = feosd(dir, ['--suspend-on-stop', '--stop-grace', '10']);
  assert.equal(short.status, 1);
  assert.match(short.stderr, /--stop-grace 10 with --suspend-on-stop: the suspends end 10 s before the grace does.*give more than 10 s/);
  const long = feosd(dir, ['--stop-grace', '99999999999']);
  assert.equal(long.status, 1);
  assert.match(long.stderr, /at most 2147483 s \(24\.8 days/);
  const file = join(dir, 'store-file');
  writeFileSync(file, 'x');
  const store = feosd(dir, ['--object-store', pathToFileURL(file).href]);
  assert.equal(store.status, 1);
  assert.match(store.stderr, /store-file exists and is not a directory/);
  assert.equal(existsSync(join(dir, 'state')), false, 'nothing was made');
});
