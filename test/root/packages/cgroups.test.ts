// feosd's place in the cgroup tree (seed 000, "Jail, user and cgroup"; docs/feos/packages.md), as root,
// on this machine's cgroup v2 hierarchy, without a microVM: real processes stand in for QEMU.
// - feosd started in a cgroup that --vms-cgroup names moves into its leaf feosd/ (the microVMs go into
//   vms/<id> beside it), and a feosd started in that leaf already stays there;
// - feosd --hand-over-vms, run as ExecStopPost= is (in feosd.service's .control), moves the processes
//   of a feosd from before --vms-cgroup (feosd.service/vms/<id>) to feos-vms.service/vms/<id>, with their
//   cpu.weight where the hierarchy has the cpu controller, and removes the old cgroups.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '../../helpers/wait.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const CGROUP2 = ['/sys/fs/cgroup', '/sys/fs/cgroup/unified'].find((d) => existsSync(join(d, 'cgroup.controllers')));

/** The cgroup v2 directory of `pid`. */
const cgroupOf = (pid: number) => join(CGROUP2!, readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').find((l) => l.startsWith('0::'))!.slice(3));

/** `argv` started inside the cgroup `dir` (its shell writes itself into cgroup.procs, then execs). */
function startIn(dir: string, argv: string[], log: { text: string }): ChildProcess {
  const child = spawn('sh', ['-c', 'echo $$ > "$0" && exec "$@"', join(dir, 'cgroup.procs'), ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const s of [child.stdout!, child.stderr!]) s.on('data', (d: Buffer) => (log.text += d.toString()));
  return child;
}

test('feosd moves into its leaf cgroup, and --hand-over-vms moves the microVMs of a feosd from before --vms-cgroup', { timeout: 180_000, skip: CGROUP2 ? false : 'no cgroup v2 hierarchy' }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const root = join(CGROUP2!, `k32t-cgroups-${process.pid}`);
  const tmp = mkdtempSync(join(tmpdir(), 'k32t-cgroups-'));
  const children: ChildProcess[] = [];
  t.after(async () => {
    for (const c of children) c.kill('SIGKILL');
    await Promise.all(children.map((c) => (c.exitCode !== null || c.signalCode !== null ? undefined : new Promise((r) => c.once('exit', r)))));
    if (existsSync(root)) {
      const dirs = [root, ...readdirSync(root, { recursive: true, withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(e.parentPath, e.name))];
      // A cgroup is removable once the kernel has let go of its last process.
      const remove = (d: string) => {
        if (existsSync(d)) rmdirSync(d);
        return true;
      };
      for (const d of dirs.sort((a, b) => b.length - a.length)) await waitFor(`${d} removed`, 10_000, () => remove(d), { intervalMs: 100 });
    }
    rmSync(tmp, { recursive: true, force: true });
  });
  const feosd = (dir: string, name: string, extra: string[], log: { text: string }) =>
    startIn(dir, [process.execPath, join(REPO, 'bin/feosd.js'), '--state-dir', join(tmp, name, 'state'), '--run-dir', join(tmp, name, 'run'), '--guest-dir', join(tmp, 'guest'), '--accel', 'tcg', ...extra], log);

  await t.test('a feosd whose --vms-cgroup is its own cgroup moves into the leaf feosd/ of it; one in the leaf already stays', async () => {
    const given = join(root, 'given');
    mkdirSync(given, { recursive: true });
    const log = { text: '' };
    const a = feosd(given, 'a', ['--vms-cgroup', given], log);
    children.push(a);
    await waitFor('feosd serving', 60_000, () => log.text.includes('"feosd serving"'), { describe: () => log.text });
    assert.equal(cgroupOf(a.pid!), join(given, 'feosd'));
    assert.equal(readFileSync(join(given, 'cgroup.procs'), 'utf8'), '', 'nothing is left in the given cgroup, which may now enable controllers');
    assert.match(log.text, /feosd moved into its leaf cgroup/);
    // A second feosd (another state dir) started in the leaf, as systemd's DelegateSubgroup=feosd does.
    const log2 = { text: '' };
    const b = feosd(join(given, 'feosd'), 'b', ['--vms-cgroup', given], log2);
    children.push(b);
    await waitFor('the second feosd serving', 60_000, () => log2.text.includes('"feosd serving"'), { describe: () => log2.text });
    assert.equal(cgroupOf(b.pid!), join(given, 'feosd'));
    assert.doesNotMatch(log2.text, /feosd moved into its leaf cgroup/);
    assert.ok(!existsSync(join(given, 'feosd', 'feosd')), 'no leaf below the leaf');
  });

  await t.test("feosd --hand-over-vms moves feosd.service's vms/<id> to feos-vms.service's, each with its weight", async () => {
    const service = join(root, 'system.slice/feosd.service');
    const vms = join(root, 'system.slice/feos-vms.service');
    mkdirSync(vms, { recursive: true });
    const hasCpu = readFileSync(join(CGROUP2!, 'cgroup.controllers'), 'utf8').split(/\s+/).includes('cpu');
    // The layout of a feosd from before --vms-cgroup: its microVMs below its own cgroup.
    const olds: ChildProcess[] = [];
    for (const [id, weight] of [
      ['vmold00001', '100'],
      ['vmold00002', '200'],
    ] as const) {
      const dir = join(service, 'vms', id);
      mkdirSync(dir, { recursive: true });
      if (hasCpu) writeFileSync(join(dir, 'cpu.weight'), weight);
      const p = startIn(dir, ['sleep', '600'], { text: '' });
      children.push(p);
      olds.push(p);
      await waitFor(`the stand-in of ${id} in its cgroup`, 10_000, () => cgroupOf(p.pid!) === dir && readFileSync(`/proc/${p.pid}/comm`, 'utf8').trim() === 'sleep');
    }
    // ExecStopPost= runs in the service's .control (systemd 254 and later), or in the service's cgroup.
    const control = join(service, '.control');
    mkdirSync(control, { recursive: true });
    const log = { text: '' };
    const h = startIn(control, [process.execPath, join(REPO, 'bin/feosd.js'), '--hand-over-vms', '--vms-cgroup', vms], log);
    const code = await new Promise<number | null>((r) => h.once('exit', r));
    assert.equal(code, 0, log.text);
    assert.match(log.text, /handed 2 microVM\(s\) over to --vms-cgroup/);
    for (const [i, id] of ['vmold00001', 'vmold00002'].entries()) {
      assert.equal(cgroupOf(olds[i].pid!), join(vms, 'vms', id));
      if (hasCpu) assert.equal(readFileSync(join(vms, 'vms', id, 'cpu.weight'), 'utf8').trim(), i === 0 ? '100' : '200');
    }
    assert.ok(!existsSync(join(service, 'vms')), "feosd.service's vms/ is gone");
    if (!hasCpu) t.diagnostic(`${CGROUP2} has no cpu controller here (cgroup v1 holds it): no cpu.weight to carry over`);
    // Without --vms-cgroup it says what it needs.
    const log2 = { text: '' };
    const bad = startIn(control, [process.execPath, join(REPO, 'bin/feosd.js'), '--hand-over-vms'], log2);
    assert.notEqual(await new Promise<number | null>((r) => bad.once('exit', r)), 0);
    assert.match(log2.text, /--hand-over-vms needs --vms-cgroup DIR/);
  });
});
