/**
 * `kube32-cli up --storage etcd` as a real process (issue 11, docs/etcd.md): without
 * `--etcd-endpoints`, up runs its own etcd (/usr/bin/etcd) in `<data-dir>/etcd/`, the control plane
 * keeps the objects there (no SQLite database), kubectl sees the worker's Node Ready, a ConfigMap
 * survives an `up` restart on the same data dir, and stopping leaves nothing running, etcd included
 * (stopped last). With `--etcd-endpoints`, up starts no etcd and the control plane uses the one given.
 * A SIGKILLed `up` leaves an etcd that the next `up` stops before opening its data again. Bad
 * `--storage` and `--etcd-endpoints` values are refused before anything starts.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { CLI, run, startCluster, type TestCluster } from '../e2e/cluster.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';
import { isProcessAlive } from '../../src/lib/index.ts';

const NO_ETCD = existsSync('/usr/bin/etcd') ? false : '/usr/bin/etcd (Debian etcd-server) is not installed';

function tempDir(t: TestContext): string {
  const d = mkdtempSync(join(tmpdir(), 'kube32-up-etcd-test-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** The pids of every child `up` records: etcd, the control plane and the workers. */
function childPids(c: TestCluster, names: string[]): Record<string, number> {
  return Object.fromEntries(names.map((n) => [n, c.childPid(n)]));
}

/** Worker-1's Node as kubectl shows it: its Ready condition's status. */
async function nodeReady(c: TestCluster): Promise<string> {
  const r = await c.kubectl(['get', 'node', 'worker-1', '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}']);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout;
}

test('up --storage etcd refuses bad --storage and --etcd-endpoints values before starting anything', { timeout: 60_000 }, async (t) => {
  const dir = tempDir(t);
  for (const [args, msg] of [
    [['--storage', 'postgres'], /invalid value "postgres" for --storage: expected sqlite or etcd/],
    [['--storage', 'etcd', '--etcd-endpoints', 'localhost:2379'], /invalid etcd endpoint "localhost:2379"/],
    [['--storage', 'etcd', '--etcd-endpoints', ','], /invalid value "," for --etcd-endpoints/],
    [['--etcd-endpoints', 'http://127.0.0.1:2379'], /--etcd-endpoints needs --storage etcd/],
  ] as const) {
    const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', ...args], { timeoutMs: 20_000 });
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, msg);
  }
  assert.ok(!existsSync(join(dir, 'logs', 'control-plane.log')), 'no control plane was started');
  assert.ok(!existsSync(join(dir, 'etcd')), 'no etcd was started');
});

test(
  'up --storage etcd --workers 1: its own etcd; the Node Ready; a ConfigMap survives a restart; nothing left running after stop',
  { timeout: 300_000, skip: NO_ETCD },
  async (t) => {
    const first = await startCluster(t, { workers: 1, extraArgs: ['--storage', 'etcd'] });
    assert.match(first.output(), /etcd\s+ready\s+http:\/\/127\.0\.0\.1:\d+/);
    assert.match(first.output(), /Objects are kept in etcd at http:\/\/127\.0\.0\.1:\d+/);
    // etcd comes up before the control plane that needs it.
    assert.match(first.output(), /etcd\s+ready[\s\S]*control plane\s+starting/);
    assert.ok(existsSync(join(first.dataDir, 'etcd', 'member')), 'etcd keeps its data in <data-dir>/etcd');
    assert.ok(!existsSync(join(first.dataDir, 'kube32.db')), 'no SQLite database: the objects are in etcd');
    assert.equal(await nodeReady(first), 'True');
    const cm = await first.kubectl(['create', 'configmap', 'kept', '--from-literal=a=1']);
    assert.equal(cm.code, 0, cm.stderr);

    const pids = childPids(first, ['etcd', 'control-plane', 'worker-1']);
    assert.equal(await first.stop(), 0, first.output());
    assert.match(first.output(), /stopping worker-1[\s\S]*stopping the control plane[\s\S]*stopping etcd[\s\S]*cluster stopped/, 'etcd is stopped last');
    for (const [name, pid] of Object.entries(pids)) assert.ok(!isProcessAlive(pid), `${name} (pid ${pid}) is stopped`);
    assert.ok(!existsSync(join(first.dataDir, 'up.lock')));

    const second = await startCluster(t, { workers: 1, dataDir: first.dataDir, extraArgs: ['--storage', 'etcd'] });
    assert.match(second.output(), /etcd\s+ready/);
    const got = await second.kubectl(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.a}']);
    assert.equal(got.stdout, '1', got.stderr);
    assert.equal(await nodeReady(second), 'True');
    const pids2 = childPids(second, ['etcd', 'control-plane', 'worker-1']);
    assert.equal(await second.stop(), 0, second.output());
    for (const [name, pid] of Object.entries(pids2)) assert.ok(!isProcessAlive(pid), `${name} (pid ${pid}) is stopped`);
  },
);

test('up --storage etcd --etcd-endpoints URL: no etcd of its own; the control plane uses the one given', { timeout: 180_000, skip: NO_ETCD }, async (t) => {
  const etcd = await startEtcd(t);
  const c = await startCluster(t, { workers: 0, extraArgs: ['--storage', 'etcd', '--etcd-endpoints', etcd.url] });
  assert.doesNotMatch(c.output(), /etcd\s+starting/);
  assert.ok(!existsSync(join(c.dataDir, 'etcd')), 'no local etcd data dir');
  assert.ok(c.output().includes(`Objects are kept in etcd at ${etcd.url}`), c.output());
  const cm = await c.kubectl(['create', 'configmap', 'outside', '--from-literal=b=2']);
  assert.equal(cm.code, 0, cm.stderr);
  // The object is in the etcd given: read its key through etcd's v3 JSON gateway.
  const key = Buffer.from('/registry/configmaps/default/outside').toString('base64');
  const r = await fetch(`${etcd.url}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key }) });
  const body = (await r.json()) as { count?: string };
  assert.equal(body.count, '1', JSON.stringify(body));
  assert.equal(await c.stop(), 0, c.output());
  assert.ok(isProcessAlive(etcd.proc.pid!), 'the etcd given is not up\'s to stop');
});

test('after up --storage etcd was killed with SIGKILL, the next up stops the etcd it left and finds the objects', { timeout: 240_000, skip: NO_ETCD }, async (t) => {
  const first = await startCluster(t, { workers: 0, extraArgs: ['--storage', 'etcd'] });
  const cm = await first.kubectl(['create', 'configmap', 'survivor', '--from-literal=c=3']);
  assert.equal(cm.code, 0, cm.stderr);
  const etcd = first.childPid('etcd');
  first.process.kill('SIGKILL');
  const second = await startCluster(t, { workers: 0, dataDir: first.dataDir, extraArgs: ['--storage', 'etcd'] });
  assert.match(second.output(), new RegExp(`stopping etcd \\(pid ${etcd}\\) left running by an earlier up`));
  assert.ok(!isProcessAlive(etcd), 'the old etcd is gone');
  const got = await second.kubectl(['get', 'configmap', 'survivor', '-o', 'jsonpath={.data.c}']);
  assert.equal(got.stdout, '3', got.stderr);
  const etcd2 = second.childPid('etcd');
  assert.equal(await second.stop(), 0, second.output());
  assert.ok(!isProcessAlive(etcd2), 'the new etcd is stopped');
});
