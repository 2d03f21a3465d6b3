/**
 * `kube32-cli control-plane`: the API server and the controllers in one process. It prints where it
 * listens, kubectl works against it, and its scheduler binds a pod to a Ready node.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');

function kubectl(kubeconfig: string, args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile('kubectl', ['--kubeconfig', kubeconfig, ...args], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
    child.stdin?.end(input ?? '');
  });
}

test('kube32-cli control-plane serves the API and schedules pods', { timeout: 90_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32-cp-'));
  const proc = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dir, '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'warn' },
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  t.after(async () => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then((code) => {
      throw new Error(`control-plane exited ${code}: ${stderr}`);
    }),
  ]);
  const info = JSON.parse(line) as { url: string; port: number; kubeconfig: string };
  assert.match(info.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(info.kubeconfig, join(dir, 'kubeconfig'));

  // A Ready node without a kubelet, and a pod: the scheduler binds it.
  const node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } };
  assert.equal((await kubectl(info.kubeconfig, ['create', '-f', '-'], JSON.stringify(node))).code, 0);
  const status = { status: { allocatable: { memory: '1Mi', pods: '10' }, capacity: { memory: '1Mi', pods: '10' }, conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'test' }] } };
  const patched = await kubectl(info.kubeconfig, ['patch', 'node', 'n1', '--subresource=status', '--type=merge', '-p', JSON.stringify(status)]);
  assert.equal(patched.code, 0, patched.stderr);
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p1', namespace: 'default' }, spec: { containers: [{ name: 'c', image: `kube32.io/wasm-sha256:${'0'.repeat(64)}` }] } };
  const created = await kubectl(info.kubeconfig, ['create', '-f', '-'], JSON.stringify(pod));
  assert.equal(created.code, 0, created.stderr);
  const deadline = Date.now() + 20_000;
  let bound = '';
  while (Date.now() < deadline) {
    bound = (await kubectl(info.kubeconfig, ['get', 'pod', 'p1', '-o', 'jsonpath={.spec.nodeName}'])).stdout;
    if (bound) break;
  }
  assert.equal(bound, 'n1');

  proc.kill('SIGTERM');
  assert.equal(await exited, 0, stderr);
});

test('kube32-cli control-plane refuses a bad flag with a clear message', { timeout: 30_000 }, async () => {
  const r = await new Promise<{ code: number; stderr: string }>((resolve) => {
    execFile(process.execPath, [CLI, 'control-plane', '--data-dir', '/tmp/nowhere', '--move-timeout', 'soon'], (err, _out, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr: String(stderr) });
    });
  });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--move-timeout: invalid duration "soon"/);
});

test('kube32-cli control-plane refuses a bad FeOS flag without --feos-listen too, before anything starts', { timeout: 120_000 }, async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'k32-feos-flags-'));
  try {
    for (const [flag, value, message] of [
      ['--feos-mesh-node-limit', '0', /--feos-mesh-node-limit "0": want a whole number from 1 to 4096/],
      ['--feos-node-cert-ttl', '5s', /--feos-node-cert-ttl: must be at least 1m/],
    ] as const) {
      const r = await new Promise<{ code: number; stderr: string }>((resolve) => {
        execFile(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', '0', flag, value], { timeout: 50_000 }, (err, _out, stderr) => {
          resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr: String(stderr) });
        });
      });
      assert.equal(r.code, 1, `${flag} ${value}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
    assert.deepEqual(readdirSync(dataDir), [], 'nothing was started in the data dir');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
