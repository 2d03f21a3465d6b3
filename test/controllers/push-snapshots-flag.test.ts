/**
 * `kube32-cli control-plane --push-snapshots-to-target[=false]` (docs/checkpoints.md): with the push (the
 * default) the API server sends a move's snapshot on to the target's kubelet while it stores it, and the
 * replacement restores from that copy; with `=false` nothing is pushed and the target fetches the stored
 * data once the replacement is bound to it. What tells them apart for a user: the target's kubelet logs
 * (`LOG_LEVEL=debug`) `restore: data answered` with `staged: true` for the pushed copy, without it for a
 * fetch. A real control plane process, two real kube32-sim workers, a counter pod moved once each way.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { type Checkpoint, RestClient } from '../../src/api/index.ts';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import { pushCounterModule } from './cluster.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');
const SIM = join(ROOT, 'bin/kube32-sim.js');
const PORT = 18390;

/** The counter's count at `host` (one request counted). */
function count(host: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const req = http.get({ host, port: PORT, path: '/count', agent: false, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve(res.statusCode === 200 ? (JSON.parse(body) as { count: number }).count : undefined));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
  });
}

/**
 * Starts `kube32-cli control-plane` with `flags` and two workers, moves a counter pod from w1 to w2, and
 * answers the target's `restore: data answered` log lines (parsed).
 */
async function moveOnce(t: TestContext, flags: string[]): Promise<Array<Record<string, unknown>>> {
  const tmp = mkdtempSync(join(tmpdir(), 'k32-push-flag-'));
  const procs: Array<{ proc: ChildProcess; exited: Promise<unknown> }> = [];
  t.after(async () => {
    for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    rmSync(tmp, { recursive: true, force: true });
  });
  const start = (file: string, args: string[]): { proc: ChildProcess; out: () => string } => {
    const proc = spawn(process.execPath, [file, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'debug' } });
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    proc.stderr!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    procs.push({ proc, exited: new Promise((r) => proc.once('exit', r)) });
    return { proc, out: () => out };
  };
  const cpDir = join(tmp, 'cp');
  const cp = start(CLI, ['control-plane', '--data-dir', cpDir, '--port', '0', ...flags]);
  await waitFor('the control plane to listen', 60_000, () => {
    if (cp.proc.exitCode !== null) throw new Error(`control-plane exited ${cp.proc.exitCode}: ${cp.out().slice(-3000)}`);
    return cp.out().includes('"kubeconfig"');
  });
  const kc = new KubeConfig();
  kc.loadFromFile(join(cpDir, 'kubeconfig'));
  const rest = new RestClient(kc);
  t.after(() => rest.close());
  await pushCounterModule(rest, tmp);

  const prefix = await claimLoopbackRange();
  const address = { w1: `${prefix}.2`, w2: `${prefix}.3` };
  const workers: Record<string, ReturnType<typeof start>> = {};
  for (const name of ['w1', 'w2'] as const) {
    const kubeconfig = execFileSync(process.execPath, [CLI, 'apiserver', '--data-dir', cpDir, '--issue-node-kubeconfig', name]).toString().trim();
    const w = start(SIM, ['--kubeconfig', kubeconfig, '--name', name, '--address', address[name], '--kubelet-port', '0', '--data-dir', join(tmp, name)]);
    await waitFor(`worker ${name} to start`, 60_000, () => {
      if (w.proc.exitCode !== null) throw new Error(`kube32-sim ${name} exited ${w.proc.exitCode}: ${w.out().slice(-3000)}`);
      return w.out().includes('ready:');
    });
    workers[name] = w;
  }

  await rest.json({
    method: 'POST', path: '/api/v1/namespaces/default/pods',
    body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'pushed' }, spec: { nodeName: 'w1', containers: [{ name: 'c', image: 'wasm://counter-fixture', ports: [{ containerPort: PORT }], resources: { limits: { memory: '64Ki' } } }] } },
  });
  await waitFor('the counter to answer at w1', 60_000, async () => (await count(address.w1)) === 1);
  assert.equal(await count(address.w1), 2);

  await rest.json({ method: 'POST', path: '/apis/kube32.io/v1/namespaces/default/checkpoints', body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'm1' }, spec: { podName: 'pushed', action: 'Move', target: { nodeName: 'w2' } } } });
  const ck = await waitFor('the move to end', 90_000, async () => {
    const k = await rest.json<Checkpoint>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints/m1' });
    return k.status?.phase === 'Completed' || k.status?.phase === 'Failed' ? k : undefined;
  });
  assert.equal(ck.status?.phase, 'Completed', ck.status?.message ?? '');
  const pod = await rest.json<V1Pod>({ method: 'GET', path: '/api/v1/namespaces/default/pods/pushed' });
  assert.equal(pod.spec?.nodeName, 'w2');
  assert.equal(await count(address.w2), 3, 'the count goes on from the freeze at the target');

  return workers.w2!.out().split('\n').filter((l) => l.startsWith('{') && l.includes('"restore: data answered"')).map((l) => JSON.parse(l) as Record<string, unknown>);
}

test('kube32-cli control-plane pushes a move\'s snapshot to the target by default: the target restores from the pushed copy (staged: true)', { timeout: 240_000 }, async (t) => {
  const answered = await moveOnce(t, []);
  assert.equal(answered.length, 1, JSON.stringify(answered));
  assert.equal(answered[0]!.staged, true, `the restore took the copy pushed to the target: ${JSON.stringify(answered[0])}`);
});

test('kube32-cli control-plane --push-snapshots-to-target=false pushes nothing: the target fetches the stored data (no staged copy)', { timeout: 240_000 }, async (t) => {
  const answered = await moveOnce(t, ['--push-snapshots-to-target=false']);
  assert.equal(answered.length, 1, JSON.stringify(answered));
  assert.equal(answered[0]!.staged, undefined, `the restore fetched the data, no copy was pushed: ${JSON.stringify(answered[0])}`);
  assert.ok(Number(answered[0]!.bytes) > 0, 'the fetched data has bytes');
});
