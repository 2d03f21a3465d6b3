/**
 * Fault tests of a move (issue 26, "No lost state"): a real control plane process (`kube32-cli
 * control-plane`: the API server and the controllers, sqlite, on a fixed port) and two real kube32-sim
 * workers. A counter pod moves while one process is SIGKILLed at one step of the move: the control plane
 * before the freeze, while the snapshot streams, once the data is stored, once the replacement is
 * written, once `Moving` is written; the source worker once the data is stored; the target worker once
 * the replacement is written; the source before the freeze. Each process stops exactly at its step with
 * the test-only pause hook (src/lib/test-pause.ts: it writes `<step>.paused` and waits for `<step>.go`),
 * never with a sleep. The killed process is started again (same data dir: the control plane at once, a
 * worker once the move has finished without it); then exactly one node runs
 * the pod, it counts on from its freeze, and the Checkpoint is `Completed` or `Failed` with a reason.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { type Checkpoint, RestClient } from '../../src/api/index.ts';
import { claimLoopbackRange, unusedPort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import { pushCounterModule } from './cluster.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');
const SIM = join(ROOT, 'bin/kube32-sim.js');
/** Every step a process may pause at; all start disarmed (their `.go` file exists). */
const STEPS = ['saving', 'data-stored', 'replaced', 'moving', 'kubelet-frozen', 'kubelet-prepared', 'kubelet-restore'];
const PORT = 18380;

/** A process of the test, restartable on the same data dir. */
interface Proc {
  name: string;
  proc: ChildProcess;
  exited: Promise<unknown>;
  out: string;
  /** Its pause dir. */
  pauses: string;
}

test('a move survives a SIGKILL of any one process at any step: one pod, counting on from its freeze, the Checkpoint Completed or Failed with a reason', { timeout: 600_000 }, async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'k32-move-faults-'));
  const procs = new Set<Proc>();
  t.after(async () => {
    for (const p of procs) if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGKILL');
    await Promise.all([...procs].map((p) => p.exited));
    rmSync(tmp, { recursive: true, force: true });
  });
  const until = <T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 60_000): Promise<T> => waitFor(what, ms, fn);

  const spawnProc = (name: string, file: string, args: string[]): Proc => {
    const pauses = join(tmp, `pauses-${name}`);
    mkdirSync(pauses, { recursive: true });
    for (const s of STEPS) writeFileSync(join(pauses, `${s}.go`), '');
    const proc = spawn(process.execPath, [file, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn', KUBE32_TEST_PAUSE_DIR: pauses, KUBE32_TEST_PAUSE_AT: STEPS.join(',') },
    });
    const p: Proc = { name, proc, exited: new Promise((r) => proc.once('exit', r)), out: '', pauses };
    proc.stdout!.on('data', (d: Buffer) => {
      p.out += d.toString();
    });
    proc.stderr!.on('data', (d: Buffer) => {
      p.out = (p.out + d.toString()).slice(-20_000);
    });
    procs.add(p);
    return p;
  };
  /** Arms `step` of `p`: the next time it gets there it pauses. */
  const arm = (p: Proc, step: string) => {
    rmSync(join(p.pauses, `${step}.paused`), { force: true });
    rmSync(join(p.pauses, `${step}.go`), { force: true });
  };
  const pausedAt = (p: Proc, step: string) => until(`${p.name} to pause at ${step}`, () => existsSync(join(p.pauses, `${step}.paused`)));
  const release = (p: Proc, step: string) => writeFileSync(join(p.pauses, `${step}.go`), '');
  const kill = async (p: Proc) => {
    p.proc.kill('SIGKILL');
    await p.exited;
    procs.delete(p);
  };

  // The control plane, on a port below the ephemeral range (free while it is away).
  const cpDir = join(tmp, 'cp');
  let cpPort = 0;
  const startCp = async (): Promise<Proc> => {
    const p = spawnProc('cp', CLI, ['control-plane', '--data-dir', cpDir, '--port', String(cpPort), '--move-timeout', '15s', '--push-snapshots-to-target']);
    await until('the control plane to listen', () => {
      if (p.proc.exitCode !== null) throw new Error(`control-plane exited ${p.proc.exitCode}: ${p.out.slice(-3000)}`);
      return p.out.includes('"kubeconfig"');
    });
    return p;
  };
  cpPort = await unusedPort('127.0.0.1');
  let cp = await startCp();
  const kc = new KubeConfig();
  kc.loadFromFile(join(cpDir, 'kubeconfig'));
  const rest = new RestClient(kc);
  t.after(() => rest.close());

  // The fixture module.
  await pushCounterModule(rest, tmp);

  // Two workers on loopback addresses of their own; restartable on their data dirs.
  const prefix = await claimLoopbackRange();
  const addresses: Record<string, string> = { w1: `${prefix}.2`, w2: `${prefix}.3` };
  const workers: Record<string, Proc> = {};
  const startWorker = async (name: string): Promise<Proc> => {
    const kubeconfig = execFileSync(process.execPath, [CLI, 'apiserver', '--data-dir', cpDir, '--issue-node-kubeconfig', name]).toString().trim();
    const p = spawnProc(name, SIM, ['--kubeconfig', kubeconfig, '--name', name, '--address', addresses[name]!, '--kubelet-port', '0', '--data-dir', join(tmp, name), '--interp-mops', '1000']);
    await until(`worker ${name} to start`, () => {
      if (p.proc.exitCode !== null) throw new Error(`kube32-sim ${name} exited ${p.proc.exitCode}: ${p.out.slice(-3000)}`);
      return p.out.includes('ready:');
    });
    workers[name] = p;
    return p;
  };
  await startWorker('w1');
  await startWorker('w2');

  const getPod = async (): Promise<V1Pod | undefined> => rest.json<V1Pod>({ method: 'GET', path: '/api/v1/namespaces/default/pods/faulty' }).catch(() => undefined);
  const getCk = async (name: string): Promise<Checkpoint | undefined> => rest.json<Checkpoint>({ method: 'GET', path: `/apis/kube32.io/v1/namespaces/default/checkpoints/${name}` }).catch(() => undefined);
  const count = (node: string, path: string): Promise<{ status: number; count?: number }> => new Promise((resolve) => {
    const req = http.get({ host: addresses[node], port: PORT, path, agent: false, timeout: 30_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ...(res.statusCode === 200 ? { count: (JSON.parse(body) as { count: number }).count } : {}) }));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve({ status: 0 }));
  });
  /** The nodes whose kubelet runs the pod: a snapshot that leaves it running answers 200 there, 404 elsewhere. */
  const runningOn = async (): Promise<string[]> => {
    const on: string[] = [];
    for (const node of Object.keys(workers)) {
      const r = await rest.request({ method: 'POST', path: `/api/v1/nodes/${node}/proxy/checkpoint/default/faulty/c?leave=running` }).catch(() => undefined);
      if (!r) continue;
      for await (const _ of r.body) { /* the snapshot, or the refusal */ }
      if (r.status === 200) on.push(node);
    }
    return on;
  };
  /** The pod settled: Running, no restore annotation; its node and count (one request counted). */
  const settled = async (): Promise<{ node: string; count: number }> => {
    const pod = await until('the pod to run', async () => {
      const p = await getPod();
      return p?.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] && p.status.containerStatuses?.[0]?.state?.running ? p : undefined;
    }, 120_000);
    const node = pod.spec!.nodeName!;
    const r = await until('the pod to answer', async () => {
      const x = await count(node, '/count');
      return x.status === 200 ? x : undefined;
    });
    return { node, count: r.count! };
  };

  await rest.json({
    method: 'POST', path: '/api/v1/namespaces/default/pods',
    body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'faulty', namespace: 'default' }, spec: { nodeName: 'w1', containers: [{ name: 'c', image: 'wasm://counter-fixture', ports: [{ containerPort: PORT }], resources: { limits: { memory: '64Ki' } } }] } },
  });
  let state = await settled();
  assert.equal(state.count, 1);

  /**
   * One fault: a move of the pod, `who` paused at `step` and killed there (or, for a worker, the control
   * plane paused at `step` while the worker is killed), the killed process started again; then one copy,
   * counting on from its freeze (unless `lost`: the source held the only copy before the freeze).
   */
  let n = 0;
  const fault = async (label: string, who: 'cp' | 'source' | 'target', step: string, expect: { phase: 'Completed' | 'Failed' | 'either'; lost?: boolean }) => {
    const source = state.node;
    const target = source === 'w1' ? 'w2' : 'w1';
    const name = `faulty-${n++}`;
    const pauser = step === 'kubelet-frozen' ? workers[source]! : step === 'kubelet-restore' || step === 'kubelet-prepared' ? workers[target]! : cp;
    arm(pauser, step);
    await rest.json({ method: 'POST', path: '/apis/kube32.io/v1/namespaces/default/checkpoints', body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name }, spec: { podName: 'faulty', action: 'Move' } } });
    await pausedAt(pauser, step);
    const victim = who === 'cp' ? cp : workers[who === 'source' ? source : target]!;
    await kill(victim);
    if (victim !== pauser) release(pauser, step);
    // The control plane comes back at once (it finishes the move); a worker once the move has finished
    // without it (a worker back sooner would make the outcome a race between its start and the move's).
    if (who === 'cp') cp = await startCp();
    const ck = await until(`${label}: the Checkpoint to finish`, async () => {
      const c = await getCk(name);
      return c?.status?.phase === 'Completed' || c?.status?.phase === 'Failed' ? c : undefined;
    }, 120_000);
    if (who !== 'cp') await startWorker(victim.name);
    if (expect.phase !== 'either') assert.equal(ck.status?.phase, expect.phase, `${label}: ${ck.status?.message}`);
    if (ck.status?.phase === 'Failed') assert.ok((ck.status.message ?? '').length > 10, `${label}: a reason (${ck.status.message})`);
    const now = await settled();
    // The other node's copy (frozen for the move) ends once its kubelet sees the replacement: exactly one node
    // holds the pod within a bound, and never the wrong one.
    let on: string[] = [];
    await until(`${label}: exactly one node to hold the pod`, async () => {
      on = await runningOn();
      return on.length === 1 || undefined;
    }, 30_000).catch(() => {});
    assert.deepEqual(on, [now.node], `${label}: exactly one node runs the pod`);
    if (expect.lost) assert.equal(now.count, 1, `${label}: the source held the only copy; the pod starts afresh`);
    else assert.equal(now.count, state.count + 1, `${label}: the pod counts on from its freeze (${ck.status?.message})`);
    state = now;
  };

  await fault('control plane killed before the freeze (Saving written)', 'cp', 'saving', { phase: 'Completed' });
  await fault('control plane killed while the snapshot streams (the pod frozen)', 'cp', 'kubelet-frozen', { phase: 'Completed' });
  await fault('control plane killed once the data is stored', 'cp', 'data-stored', { phase: 'Completed' });
  await fault('control plane killed once the replacement is written', 'cp', 'replaced', { phase: 'Completed' });
  await fault('control plane killed once Moving is written', 'cp', 'moving', { phase: 'Completed' });
  // The case: Moving, the source copy stopped, the target not yet holding the data.
  // Completed, or (the target's retry after the control plane's restart later than the move timeout)
  // rolled back to the source, which restores from the same data: the state is kept either way.
  await fault('control plane killed while the target restores, before it has the data', 'cp', 'kubelet-restore', { phase: 'either' });
  // The snapshot pushed to the target (--push-snapshots-to-target) and its restore prepared there, written, not run:
  // the control plane killed then (its store done or not), or the target itself.
  await fault('control plane killed while the target holds a prepared restore', 'cp', 'kubelet-prepared', { phase: 'either' });
  await fault('target worker killed while its prepared restore waits for the commit', 'target', 'kubelet-prepared', { phase: 'either' });
  await fault('source worker killed once the data is stored', 'source', 'data-stored', { phase: 'Completed' });
  await fault('target worker killed once the replacement is written', 'target', 'replaced', { phase: 'Failed' });
  await fault('source worker killed before the freeze', 'source', 'saving', { phase: 'Failed', lost: true });
});
