/**
 * `kube32-cli up --feos-nodes 1` as root (issue 18; docs/quickstart.md): a Wasm worker and a FeOS node
 * (a real feosd in a network namespace of its own, joined with a token, the guest found or built) come
 * up with progress lines; kubectl shows the FeOS node Ready with the runtime label; SIGTERM stops
 * everything: no feosd left, no network namespace, no bridge, the token gone. As another user, `up
 * --feos-nodes` says it needs root before it starts anything.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CLI, kubectl, pidsNaming, run, until } from './helpers.ts';

test('up --feos-nodes 1 brings a Ready FeOS node beside a worker and removes everything on SIGTERM', { timeout: 1_500_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const dir = mkdtempSync(join(tmpdir(), 'k32t-up-feos-'));
  let out = '';
  let err = '';
  let tag = '';
  const proc = spawn(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', '--workers', '1', '--feos-nodes', '1', '--feos-accel', 'tcg', '--ready-timeout', '120'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await exited;
    }
    // Whatever it left (a failed run): its children name the data dir; its namespaces and bridge the tag.
    for (const pid of pidsNaming(dir)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    if (tag) {
      for (const ns of (await run('ip', ['netns', 'list'])).stdout.split('\n').map((l) => l.split(' ')[0]!)) if (ns.startsWith(`k32-${tag}-`)) await run('ip', ['netns', 'del', ns]);
      await run('ip', ['link', 'del', `k32fb${tag}`]);
    }
    rmSync(dir, { recursive: true, force: true });
  });

  await t.test('as another user, up --feos-nodes says it needs root and starts nothing', async () => {
    const other = mkdtempSync(join(tmpdir(), 'k32t-up-feos-user-'));
    t.after(() => rmSync(other, { recursive: true, force: true }));
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [CLI, 'up', '--data-dir', other, '--feos-nodes', '2'], { uid: 65534, gid: 65534, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      p.stderr!.setEncoding('utf8').on('data', (d: string) => {
        stderr += d;
      });
      p.once('exit', (code) => resolve({ code, stderr }));
    });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /--feos-nodes needs root: .*network namespace .*Run it as root \(sudo kube32-cli up --feos-nodes 2/);
    assert.ok(!existsSync(join(other, 'logs')), 'nothing was started');
  });

  await t.test('the FeOS node comes up Ready with the runtime label, with progress lines', async () => {
    await until('up says the FeOS nodes are up', async () => {
      if (proc.exitCode !== null) throw new Error(`up exited ${proc.exitCode}: ${err}`);
      return out.includes('FeOS nodes: feos-1');
    }, 1_200_000);
    tag = /network namespace k32-([0-9a-f]{6})-feos-1 /.exec(out)?.[1] ?? '';
    assert.ok(tag, out);
    assert.match(out, /kube32: FeOS guest: /);
    assert.match(out, /kube32: FeOS node feos-1: feosd in network namespace k32-[0-9a-f]{6}-feos-1 \(10\.\d+\.\d+\.2\), joining 10\.\d+\.\d+\.1:\d+/);
    assert.match(out, /kube32: FeOS node feos-1 Ready/);
    const kubeconfig = /export KUBECONFIG=(\S+)/.exec(out)?.[1] ?? '';
    const r = await kubectl(kubeconfig, 'get', 'nodes', '-L', 'kube32.io/runtime');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^feos-1\s+Ready\s.*\sfeos\s*$/m);
    assert.match(r.stdout, /^worker-1\s+Ready\s/m);
    assert.ok((await run('ip', ['netns', 'list'])).stdout.includes(`k32-${tag}-feos-1`));
    assert.ok(pidsNaming(join(dir, 'feos', 'feos-1')).length > 0, 'feosd runs');
  });

  await t.test('SIGTERM stops it all: no feosd, no namespace, no bridge left', async () => {
    proc.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<'late'>((r) => setTimeout(() => r('late'), 180_000).unref())]);
    assert.equal(code, 0, `up's exit: ${code}\n${out}\n${err}`);
    assert.deepEqual(pidsNaming(dir), [], 'no process of the cluster is left');
    assert.ok(!(await run('ip', ['netns', 'list'])).stdout.includes(`k32-${tag}-`), 'the namespace is gone');
    assert.notEqual((await run('ip', ['link', 'show', `k32fb${tag}`])).code, 0, 'the bridge is gone');
  });
});
