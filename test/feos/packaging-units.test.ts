// Units of feosd's start under systemd that need no root (docs/feos/packages.md): the cgroup feosd is
// given, where cgroup v2 is mounted.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cgroup2Mount, givenCgroup } from '../../src/feos/microvm/index.ts';
import { vmsCgroupHint } from '../../src/feos/index.ts';

test("the cgroup feosd is given: its own, or the parent of systemd's leaf feosd or .control", () => {
  assert.equal(givenCgroup('/sys/fs/cgroup/system.slice/feosd.service/feosd'), '/sys/fs/cgroup/system.slice/feosd.service');
  assert.equal(givenCgroup('/sys/fs/cgroup/system.slice/feosd.service/.control'), '/sys/fs/cgroup/system.slice/feosd.service');
  assert.equal(givenCgroup('/sys/fs/cgroup/system.slice/feosd.service'), '/sys/fs/cgroup/system.slice/feosd.service');
  assert.equal(givenCgroup('/sys/fs/cgroup'), '/sys/fs/cgroup');
});

test("cgroup v2's mount point comes from mountinfo: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32t-mountinfo-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const hybrid = join(dir, 'hybrid');
  writeFileSync(
    hybrid,
    [
      '25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755',
      '26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw',
      '27 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
      '',
    ].join('\n'),
  );
  assert.equal(cgroup2Mount(hybrid), '/sys/fs/cgroup/unified');
  const unified = join(dir, 'unified');
  writeFileSync(unified, '30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n');
  assert.equal(cgroup2Mount(unified), '/sys/fs/cgroup');
  const v1 = join(dir, 'v1');
  writeFileSync(v1, '27 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n');
  assert.equal(cgroup2Mount(v1), undefined);
});

test("--vms-cgroup's error names the path below this host's cgroup v2 where the unit's is under another mount", () => {
  const unitPath = '/sys/fs/cgroup/system.slice/feos-vms.service';
  // A hybrid host: the package's path is under the v1 tmpfs; the same cgroup is below the v2 mount.
  assert.match(vmsCgroupHint(unitPath, '/sys/fs/cgroup/unified'), /cgroup v2 is at \/sys\/fs\/cgroup\/unified on this host: give --vms-cgroup \/sys\/fs\/cgroup\/unified\/system\.slice\/feos-vms\.service \(in FEOSD_ARGS/);
  // Nothing to add on a unified host, for a path below the v2 mount already, or for one elsewhere.
  assert.equal(vmsCgroupHint(unitPath, '/sys/fs/cgroup'), '');
  assert.equal(vmsCgroupHint('/sys/fs/cgroup/unified/gone', '/sys/fs/cgroup/unified'), '');
  assert.equal(vmsCgroupHint('/srv/cg', '/sys/fs/cgroup/unified'), '');
  assert.match(vmsCgroupHint(unitPath, undefined), /no cgroup v2 hierarchy is mounted on this host/);
});

test('feosd takes the last --vms-cgroup given (FEOSD_ARGS after the unit\'s), and refuses a bad last one', { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32t-vmscg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const feosd = (...args: string[]) =>
    new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn(process.execPath, [join(import.meta.dirname, '../../bin/feosd.js'), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.once('close', (code) => resolve({ code, err }));
    });
  // --hand-over-vms ends at once; a --vms-cgroup that is not cgroup v2 before the last one does not count.
  const v2 = cgroup2Mount();
  if (v2) {
    const ok = await feosd('--hand-over-vms', '--vms-cgroup', join(dir, 'not-a-cgroup'), '--vms-cgroup', v2);
    assert.equal(ok.code, 0, ok.err);
  } else t.diagnostic('no cgroup v2 mounted here: only the refusal is checked');
  const bad = await feosd('--hand-over-vms', '--vms-cgroup', v2 ?? '/', '--vms-cgroup', join(dir, 'not-a-cgroup'));
  assert.equal(bad.code, 1, bad.err);
  assert.match(bad.err, /error: option '--vms-cgroup <dir>' argument '.*not-a-cgroup' is invalid\. --vms-cgroup ".*not-a-cgroup": not a cgroup v2 directory \(no cgroup\.controllers there\)/);
});

test('npm run package and package-repo with a mistyped flag say which and how they are run, exit 2', { timeout: 60_000 }, async () => {
  const run = (script: string, ...args: string[]) =>
    new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn(process.execPath, [join(import.meta.dirname, '../../scripts', script), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.once('close', (code) => resolve({ code, err }));
    });
  const pkg = await run('package.ts', '--verison', '1.0');
  assert.equal(pkg.code, 2, pkg.err);
  assert.match(pkg.err, /^package: Unknown option '--verison'.*\nusage: node scripts\/package\.ts \[--version V\]/s);
  const repo = await run('package-repo.ts', '--out');
  assert.equal(repo.code, 2, repo.err);
  assert.match(repo.err, /^package-repo: Option '--out <value>' argument missing\nusage: node scripts\/package-repo\.ts /);
});
