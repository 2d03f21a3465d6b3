/**
 * `kube32-cli control-plane` as real processes: one data dir, one control plane. A second
 * control plane (or an `apiserver`, or an `up`) on a data dir a control plane holds is refused at once (exit 1, "the data
 * dir D is in use by PID (...)") and leaves the kubeconfig as it was; a control plane on the data dir
 * of a running `up` is refused the same way. A control plane refused for an unreachable etcd removes
 * the data dir it created. With `--storage etcd`, leader election is on by default (its Lease exists)
 * and `/readyz` fails its `etcd` check (500, `[-]etcd failed: reason withheld`) once etcd is gone,
 * while `/livez` stays ok; it answers ok again once etcd is back. `up --storage etcd` elects too.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { CLI, KUBECTL, run, startCluster } from '../e2e/cluster.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';
import { refusedPort } from '../helpers/ports.ts';
import { loadClusterTarget } from '../../src/cli/kubeconfig.ts';
import { rawRequest } from '../../src/cli/api-client.ts';
import { waitFor } from '../helpers/wait.ts';

const NO_ETCD = existsSync('/usr/bin/etcd') ? false : '/usr/bin/etcd (Debian etcd-server) is not installed';

function tempDir(t: TestContext): string {
  const d = mkdtempSync(join(tmpdir(), 'kube32-cp-lock-test-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

interface RunningControlPlane {
  proc: ChildProcess;
  kubeconfig: string;
  output(): string;
}

/** Starts `control-plane` and waits (at most 60 s) for its JSON line; stopped (SIGTERM, then SIGKILL) in `t.after`. */
async function startControlPlane(t: TestContext, dataDir: string, args: string[] = []): Promise<RunningControlPlane> {
  const proc = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(killer);
    }
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
    proc.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`control-plane exited (${code}): ${err}`));
    });
  });
  const { kubeconfig } = JSON.parse(line) as { kubeconfig: string };
  return { proc, kubeconfig, output: () => out + err };
}

/** GET `path` with the admin kubeconfig: status and body. */
async function get(kubeconfig: string, path: string): Promise<{ status: number; body: string }> {
  const kc = loadClusterTarget({ kubeconfig }).kubeConfig;
  const res = await rawRequest(kc, { path, signal: AbortSignal.timeout(15_000) });
  const chunks: Buffer[] = [];
  for await (const c of res.body) chunks.push(c as Buffer);
  return { status: res.status, body: Buffer.concat(chunks).toString() };
}

/** Polls `fn` every 100 ms until it answers true, failing after `ms`. */
const until = async (what: string, ms: number, fn: () => Promise<boolean>): Promise<void> => {
  await waitFor(what, ms, fn, { intervalMs: 100 });
};

test('a second control-plane (or apiserver, or up) on a data dir a control-plane holds is refused and changes nothing', { timeout: 120_000 }, async (t) => {
  const dir = tempDir(t);
  const first = await startControlPlane(t, dir);
  const kubeconfig = readFileSync(first.kubeconfig, 'utf8');
  const lockBefore = readFileSync(join(dir, 'control-plane.lock'), 'utf8');
  assert.deepEqual(JSON.parse(lockBefore), { pid: first.proc.pid, command: 'kube32-cli control-plane' });

  const second = await run(process.execPath, [CLI, 'control-plane', '--data-dir', dir, '--port', '0'], { timeoutMs: 30_000 });
  assert.equal(second.code, 1, second.stdout + second.stderr);
  assert.match(second.stderr, new RegExp(`^error: the data dir ${dir} is in use by ${first.proc.pid} \\(kube32-cli control-plane, `, 'm'));
  assert.equal(second.stdout, '', 'the refused one announced no server');
  assert.equal(readFileSync(first.kubeconfig, 'utf8'), kubeconfig, 'the kubeconfig still points at the running control plane');
  assert.equal(readFileSync(join(dir, 'control-plane.lock'), 'utf8'), lockBefore, 'the lock is still the first one\'s');

  const api = await run(process.execPath, [CLI, 'apiserver', '--data-dir', dir, '--port', '0'], { timeoutMs: 30_000 });
  assert.equal(api.code, 1, api.stdout + api.stderr);
  assert.match(api.stderr, new RegExp(`^error: the data dir ${dir} is in use by ${first.proc.pid} \\(kube32-cli control-plane, `, 'm'));

  const up = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', '--workers', '0'], { timeoutMs: 30_000 });
  assert.equal(up.code, 1, up.stdout + up.stderr);
  assert.match(up.stderr, new RegExp(`the data dir ${dir} is in use by ${first.proc.pid} \\(kube32-cli control-plane`));
  assert.ok(!existsSync(join(dir, 'up.lock')), 'the refused up released its lock');
  assert.equal(readFileSync(first.kubeconfig, 'utf8'), kubeconfig);

  const ready = await get(first.kubeconfig, '/readyz');
  assert.equal(ready.status, 200, 'the first control plane still serves');

  first.proc.kill('SIGTERM');
  await new Promise((r) => first.proc.once('exit', r));
  assert.ok(!existsSync(join(dir, 'control-plane.lock')), 'a stopped control plane releases the data dir');
});

test('a control-plane on the data dir of a running up is refused; up\'s own control plane runs', { timeout: 180_000 }, async (t) => {
  const cluster = await startCluster(t, { workers: 0 });
  const kubeconfig = readFileSync(cluster.kubeconfig, 'utf8');
  const upPid = Number(JSON.parse(readFileSync(join(cluster.dataDir, 'up.lock'), 'utf8')).pid);
  const r = await run(process.execPath, [CLI, 'control-plane', '--data-dir', cluster.dataDir, '--port', '0'], { timeoutMs: 30_000 });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, new RegExp(`^error: the data dir ${cluster.dataDir} is in use by ${upPid} \\(kube32-cli up, `, 'm'));
  assert.equal(readFileSync(cluster.kubeconfig, 'utf8'), kubeconfig);
  const ns = await run(KUBECTL, ['--kubeconfig', cluster.kubeconfig, 'get', 'namespace', 'default', '-o', 'name'], { timeoutMs: 30_000 });
  assert.equal(ns.stdout.trim(), 'namespace/default', ns.stderr);
  assert.equal(await cluster.stop(), 0, cluster.output());
});

test('a control-plane refused for an unreachable etcd removes the data dir it created', { timeout: 90_000 }, async (t) => {
  const parent = tempDir(t);
  const dir = join(parent, 'new-data-dir');
  // Nothing listens there: a port below the ephemeral range that no fixture hands to a server.
  const port = await refusedPort('127.0.0.1');
  const r = await run(process.execPath, [CLI, 'control-plane', '--data-dir', dir, '--port', '0', '--storage', 'etcd', '--etcd-endpoints', `http://127.0.0.1:${port}`], {
    timeoutMs: 80_000,
  });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^error: /m);
  assert.doesNotMatch(r.stderr, /Resolution note/);
  assert.ok(!existsSync(dir), `the data dir it created is gone: ${r.stderr}`);
});

test(
  'with --storage etcd: leader election by default; /readyz fails its etcd check while etcd is gone, /livez stays ok',
  { timeout: 180_000, skip: NO_ETCD },
  async (t) => {
    const etcd = await startEtcd(t);
    const dir = tempDir(t);
    const cp = await startControlPlane(t, dir, ['--storage', 'etcd', '--etcd-endpoints', etcd.url]);
    // The controllers hold their Lease: leader election is on without --leader-elect.
    await until('the controllers\' Lease is held', 60_000, async () => {
      const l = await run(KUBECTL, ['--kubeconfig', cp.kubeconfig, '-n', 'kube-system', 'get', 'lease', 'kube32-controllers', '-o', 'jsonpath={.spec.holderIdentity}'], { timeoutMs: 20_000 });
      return l.code === 0 && l.stdout !== '';
    });
    assert.deepEqual(await get(cp.kubeconfig, '/readyz'), { status: 200, body: 'ok' });
    const verbose = await get(cp.kubeconfig, '/readyz?verbose');
    assert.equal(verbose.status, 200);
    assert.match(verbose.body, /^\[\+\]etcd ok$/m);
    assert.match(verbose.body, /readyz check passed/);

    etcd.proc.kill('SIGKILL');
    await new Promise((r) => etcd.proc.once('exit', r));
    let failed = { status: 0, body: '' };
    await until('/readyz fails', 60_000, async () => {
      failed = await get(cp.kubeconfig, '/readyz');
      return failed.status === 500;
    });
    assert.match(failed.body, /^\[\+\]ping ok$/m);
    assert.match(failed.body, /^\[-\]etcd failed: reason withheld$/m);
    assert.match(failed.body, /readyz check failed/);
    assert.equal((await get(cp.kubeconfig, '/readyz?verbose')).status, 500);
    const one = await get(cp.kubeconfig, '/readyz/etcd');
    assert.equal(one.status, 500);
    assert.match(one.body, /^internal server error: /);
    assert.deepEqual(await get(cp.kubeconfig, '/livez'), { status: 200, body: 'ok' });
    assert.equal((await get(cp.kubeconfig, '/readyz?exclude=etcd')).status, 200);

    await etcd.restart();
    await until('/readyz answers ok again', 60_000, async () => (await get(cp.kubeconfig, '/readyz')).status === 200);
  },
);

test('up --storage etcd: its control plane elects a leader by default', { timeout: 180_000, skip: NO_ETCD }, async (t) => {
  const cluster = await startCluster(t, { workers: 0, extraArgs: ['--storage', 'etcd'] });
  await until('the controllers\' Lease is held', 60_000, async () => {
    const l = await run(KUBECTL, ['--kubeconfig', cluster.kubeconfig, '-n', 'kube-system', 'get', 'lease', 'kube32-controllers', '-o', 'jsonpath={.spec.holderIdentity}'], { timeoutMs: 20_000 });
    return l.code === 0 && l.stdout !== '';
  });
  assert.equal(await cluster.stop(), 0, cluster.output());
});
