/**
 * `kube32-cli control-plane --port 0` keeps its port across restarts of its data dir, so a node
 * kubeconfig issued with `apiserver --issue-node-kubeconfig` before a restart still reaches the control
 * plane after it. When that port is taken meanwhile, the control plane starts on another, says so on
 * standard error (naming the old port and how to issue the node kubeconfigs again), and keeps the new
 * port from then on. An explicit `--port` is honoured as given.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { CLI } from '../e2e/cluster.ts';

interface Started {
  port: number;
  stderr(): string;
  stop(): Promise<void>;
}

/** Starts `control-plane` on `dataDir` and waits (at most 60 s) for its JSON line; stopped in `t.after` too. */
async function startControlPlane(t: TestContext, dataDir: string, port = '0'): Promise<Started> {
  const proc: ChildProcess = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', port], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(killer);
    }
  };
  t.after(stop);
  proc.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`control-plane not ready within 60 s: ${err}`)), 60_000);
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, nl));
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`control-plane exited (${code}): ${err}`));
    });
  });
  return { port: (JSON.parse(line) as { port: number }).port, stderr: () => err, stop };
}

/** Runs a command (at most 60 s): its exit code and output. */
function run(file: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 60_000 }, (e, stdout, stderr) => {
      resolve({ code: e ? (typeof e.code === 'number' ? e.code : 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** What a node kubeconfig's identity may do on its own Node: `yes` when the server it names answers. */
const nodeCanPatchItself = (kubeconfig: string, node: string) =>
  run('kubectl', ['--kubeconfig', kubeconfig, '--request-timeout', '10s', 'auth', 'can-i', 'patch', `nodes/${node}`]);

test('control-plane --port 0 keeps its port across restarts, so node kubeconfigs stay right', { timeout: 240_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kube32-port-test-'));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));

  const first = await startControlPlane(t, dataDir);
  const issued = await run(process.execPath, [CLI, 'apiserver', '--data-dir', dataDir, '--issue-node-kubeconfig', 'node-a']);
  assert.equal(issued.code, 0, issued.stderr);
  const nodeKubeconfig = issued.stdout.trim();
  assert.match(readFileSync(nodeKubeconfig, 'utf8'), new RegExp(`server: https://127\\.0\\.0\\.1:${first.port}\\b`));
  assert.deepEqual(JSON.parse(readFileSync(join(dataDir, 'apiserver-port.json'), 'utf8')), { port: first.port });
  await first.stop();

  await t.test('a restart with --port 0 listens on the same port: the node kubeconfig works', async () => {
    const again = await startControlPlane(t, dataDir);
    assert.equal(again.port, first.port);
    assert.doesNotMatch(again.stderr(), /warning: port/);
    const r = await nodeCanPatchItself(nodeKubeconfig, 'node-a');
    assert.equal(r.stdout.trim(), 'yes', r.stderr);
    await again.stop();
  });

  await t.test('when the port is taken meanwhile: another port, a warning saying what to do, and that port kept', async () => {
    const squatter: Server = createServer();
    await new Promise<void>((resolve, reject) => {
      squatter.once('error', reject);
      squatter.listen(first.port, '127.0.0.1', resolve);
    });
    t.after(() => new Promise<void>((resolve) => squatter.close(() => resolve())));
    const moved = await startControlPlane(t, dataDir);
    assert.notEqual(moved.port, first.port);
    assert.match(
      moved.stderr(),
      new RegExp(
        `warning: port ${first.port}, where this data dir's API server listened until now, is in use: listening on another\\. Node kubeconfigs issued before name port ${first.port}: issue them again \\(kube32-cli apiserver --data-dir ${dataDir} --issue-node-kubeconfig NODE\\)`,
      ),
    );
    assert.deepEqual(JSON.parse(readFileSync(join(dataDir, 'apiserver-port.json'), 'utf8')), { port: moved.port });
    // Issued again, the node kubeconfig names the new port and works.
    const reissued = await run(process.execPath, [CLI, 'apiserver', '--data-dir', dataDir, '--issue-node-kubeconfig', 'node-a']);
    assert.equal(reissued.code, 0, reissued.stderr);
    const r = await nodeCanPatchItself(nodeKubeconfig, 'node-a');
    assert.equal(r.stdout.trim(), 'yes', r.stderr);
    await moved.stop();
  });

  await t.test('an explicit --port that is taken is refused, not moved', async () => {
    const remembered = (JSON.parse(readFileSync(join(dataDir, 'apiserver-port.json'), 'utf8')) as { port: number }).port;
    const squatter: Server = createServer();
    await new Promise<void>((resolve, reject) => {
      squatter.once('error', reject);
      squatter.listen(remembered, '127.0.0.1', resolve);
    });
    t.after(() => new Promise<void>((resolve) => squatter.close(() => resolve())));
    const r = await run(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', String(remembered)]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${remembered}: .*EADDRINUSE`));
  });
});
