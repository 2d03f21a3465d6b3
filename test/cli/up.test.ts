/**
 * kube32-cli up as a real process: clear refusals when the port or the data dir is taken or a flag is
 * wrong (nothing started, nothing lost), and, once the control plane exists, the control plane alone
 * (`--workers 0`) coming up, answering kubectl, stopping on SIGTERM, and a second `up` finding its
 * objects again.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CLI, run, startCluster } from '../e2e/cluster.ts';

function tempDir(t: import('node:test').TestContext): string {
  const d = mkdtempSync(join(tmpdir(), 'kube32-up-test-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

test('up refuses a port in use, with the port in the message, and leaves no lock behind', { timeout: 30_000 }, async (t) => {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  t.after(() => srv.close());
  const port = (srv.address() as AddressInfo).port;
  const dir = tempDir(t);
  const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', String(port)], { timeoutMs: 20_000 });
  assert.equal(r.code, 1);
  assert.match(r.stderr, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use.*--port 0`));
  assert.ok(!existsSync(join(dir, 'up.lock')), 'the data dir is released');
});

test('up refuses a data dir that a live up holds, naming its pid; a stale lock is taken over', { timeout: 30_000 }, async (t) => {
  const dir = tempDir(t);
  const holder = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  const holderExit = new Promise((r) => holder.once('exit', r));
  t.after(async () => {
    holder.kill('SIGKILL');
    await holderExit;
  });
  writeFileSync(join(dir, 'up.lock'), JSON.stringify({ pid: holder.pid, children: {} }));
  const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0'], { timeoutMs: 20_000 });
  assert.equal(r.code, 1);
  assert.match(r.stderr, new RegExp(`the data dir ${dir} is in use by another kube32-cli up \\(pid ${holder.pid}\\)`));
  assert.equal(JSON.parse(readFileSync(join(dir, 'up.lock'), 'utf8')).pid, holder.pid, 'the holder keeps its lock');

  holder.kill('SIGKILL');
  await holderExit;
  // Stale now: up takes the data dir (and then fails or succeeds on the control plane, which is not this test's subject).
  const r2 = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', '--ready-timeout', '1'], { timeoutMs: 30_000 });
  assert.doesNotMatch(r2.stderr, /is in use by another kube32-cli up/);
  assert.ok(!existsSync(join(dir, 'up.lock')), 'released on the way out');
});

test('up checks its flags before starting anything', { timeout: 30_000 }, async (t) => {
  const dir = tempDir(t);
  for (const [args, msg] of [
    [['--workers', 'two'], /invalid value "two" for --workers/],
    [['--workers', '-1'], /invalid value "-1" for --workers/],
    [['--port', '70000'], /invalid value "70000" for --port/],
    [['--first-address', '10.0.0.2'], /invalid first worker address "10\.0\.0\.2"/],
  ] as const) {
    const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, ...args], { timeoutMs: 20_000 });
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, msg);
  }
  assert.ok(!existsSync(join(dir, 'logs', 'control-plane.log')), 'no control plane was started');
});

test('up --workers 0: the control plane alone; kubectl works; Ctrl-C stops it; a second up finds its objects', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { workers: 0 });
  assert.match(c.output(), /control plane\s+ready\s+https?:\/\/127\.0\.0\.1:\d+/);
  assert.match(c.output(), new RegExp(`export KUBECONFIG=${c.kubeconfig}`));
  const ns = await c.kubectl(['get', 'namespaces', '-o', 'name']);
  assert.equal(ns.code, 0, ns.stderr);
  assert.match(ns.stdout, /namespace\/default/);
  const cm = await c.kubectl(['create', 'configmap', 'kept', '--from-literal=a=1']);
  assert.equal(cm.code, 0, cm.stderr);
  // The data dir is taken while this up runs.
  const second = await run(process.execPath, [CLI, 'up', '--data-dir', c.dataDir, '--port', '0'], { timeoutMs: 20_000 });
  assert.equal(second.code, 1);
  assert.match(second.stderr, /is in use by another kube32-cli up/);
  assert.equal(await c.stop('SIGINT'), 0, c.output()); // Ctrl-C
  assert.match(c.output(), /SIGINT: stopping the cluster[\s\S]*stopping the control plane[\s\S]*cluster stopped/);
  assert.ok(!existsSync(join(c.dataDir, 'up.lock')));

  const again = await startCluster(t, { workers: 0, dataDir: c.dataDir });
  const got = await again.kubectl(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.a}']);
  assert.equal(got.stdout, '1', got.stderr);
  assert.equal(await again.stop(), 0);
});
