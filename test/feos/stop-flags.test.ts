// feosd's flags refused at its start, before anything is taken (seed 000, "Suspend on stop": the
// suspends end 10 s before --stop-grace does; Node's timers hold at most 24.8 days), the registry
// forwards and the microVMs' cgroup; and the warning of a feosd that has no guest.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { FEOSD, startFeosd, tempDir } from './harness.ts';

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

test('feosd refuses a --registry-forward or --insecure-registry that is not host:port and a --vms-cgroup that is not a cgroup v2 directory', { timeout: 60_000 }, (t) => {
  const { dir, cleanup } = tempDir('feos-flags-');
  t.after(cleanup);
  for (const v of ['nonsense', '127.0.0.1:99999', '127.0.0.1:0', ':5000', '::1:5000', '[nope]:5000']) {
    const r = feosd(dir, ['--registry-forward', v]);
    assert.equal(r.status, 1, `${v}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`--registry-forward "${v.replace(/[[\]().]/g, '\\$&')}": want host:port or \\[IPv6\\]:port with a port from 1 to 65535`));
    const i = feosd(dir, ['--insecure-registry', v]);
    assert.equal(i.status, 1, `${v}: ${i.stderr}`);
    assert.match(i.stderr, new RegExp(`--insecure-registry "${v.replace(/[[\]().]/g, '\\$&')}": want host:port or \\[IPv6\\]:port with a port from 1 to 65535`));
  }
  const cgroup = feosd(dir, ['--vms-cgroup', dir]);
  assert.equal(cgroup.status, 1);
  assert.match(cgroup.stderr, /--vms-cgroup ".*": not a cgroup v2 directory \(no cgroup\.controllers there\)/);
  assert.equal(existsSync(join(dir, 'state')), false, 'nothing was made');
});

test('feosd without a guest warns at its start, naming the directory and how to build one', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-noguest-');
  t.after(cleanup);
  const d = await startFeosd(dir, { guestDir: join(dir, 'no-guests') });
  t.after(() => d.stop('SIGKILL'));
  assert.match(d.stderr(), /"level":40.*no guest installed in [^"]*no-guests: every bring-up will fail until one is \(scripts\/build-guest\.sh [^"]*no-guests\)/);
});
