/**
 * `kube32-cli up --storage etcd --apiservers 2` as real processes (issue 20): two API server processes
 * (the control plane's and `apiserver-2`) listen on the one port with SO_REUSEPORT and share etcd.
 * kubectl creates and lists pods through that port; each process's own `/metrics`, read on the peer
 * port `up` prints for it, shows it answered pod requests; after `apiserver-2` is SIGKILLed kubectl goes
 * on through the same port; stopping `up` leaves no process. Both hold the cluster's one CA and token key, and each one's
 * identity Lease names its own peer port. `--apiservers` above 1 without etcd, and
 * values that are not a whole number of at least 1, are refused before anything starts.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { isProcessAlive } from '../../src/lib/index.ts';
import { CLI, run, startCluster, type TestCluster, waitFor } from '../e2e/cluster.ts';
import { apiRequest } from '../etcd/apiserver-process.ts';

const NO_ETCD = existsSync('/usr/bin/etcd') ? false : '/usr/bin/etcd (Debian etcd-server) is not installed';

function tempDir(t: TestContext): string {
  const d = mkdtempSync(join(tmpdir(), 'kube32-up-apiservers-test-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** The admin's token and the cluster CA, from the kubeconfig `up` wrote. */
function credentials(c: TestCluster): { token: string; caPem: string } {
  const cfg = parseYaml(readFileSync(c.kubeconfig, 'utf8')) as { clusters: { cluster: { 'certificate-authority-data': string } }[]; users: { user: { token: string } }[] };
  return { token: cfg.users[0]!.user.token, caPem: Buffer.from(cfg.clusters[0]!.cluster['certificate-authority-data'], 'base64').toString() };
}

/** Each API server process `up` printed: `name (pid N, peer port P)`. */
function apiservers(c: TestCluster): { name: string; pid: number; peerPort: number }[] {
  const line = /(\d+) API server processes share port (\d+): (.*)\./.exec(c.output());
  assert.ok(line, c.output());
  return [...line[3]!.matchAll(/([\w-]+) \(pid (\d+), peer port (\d+)\)/g)].map((m) => ({ name: m[1]!, pid: Number(m[2]), peerPort: Number(m[3]) }));
}

/** The pod LISTs one process answered, from its own /metrics (`apiserver_request_total`) on its peer port. */
async function podLists(peerPort: number, creds: { token: string; caPem: string }): Promise<number> {
  const r = await apiRequest(`https://127.0.0.1:${peerPort}/metrics`, creds);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const text = String(r.body.text);
  return [...text.matchAll(/^apiserver_request_total\{verb="list",resource="pods",[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

const pod = (name: string) => JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [{ name: 'c', image: 'wasm-free:1' }] } });

test('up refuses --apiservers above 1 without --storage etcd, and bad --apiservers values, before starting anything', { timeout: 60_000 }, async (t) => {
  const dir = tempDir(t);
  for (const [args, msg] of [
    [['--apiservers', '2'], /--apiservers 2 needs --storage etcd: several API server processes share their objects through etcd only/],
    [['--apiservers', '2', '--storage', 'sqlite'], /--apiservers 2 needs --storage etcd/],
    [['--apiservers', '0', '--storage', 'etcd'], /invalid value "0" for --apiservers: expected a whole number from 1 to 16/],
    [['--apiservers', '1.5', '--storage', 'etcd'], /invalid value "1.5" for --apiservers/],
    [['--apiservers', 'two', '--storage', 'etcd'], /invalid value "two" for --apiservers/],
  ] as const) {
    const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', '--workers', '0', ...args], { timeoutMs: 20_000 });
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, msg);
    assert.doesNotMatch(r.stdout, /starting/, 'nothing was started');
  }
  assert.ok(!existsSync(join(dir, 'logs')), 'no component was started');
});

test(
  'up --storage etcd --apiservers 2: both processes serve the one port; one SIGKILLed, kubectl goes on; stopping leaves nothing',
  { timeout: 300_000, skip: NO_ETCD },
  async (t) => {
    const c = await startCluster(t, { workers: 0, extraArgs: ['--storage', 'etcd', '--apiservers', '2'] });
    assert.match(c.output(), /apiserver-2\s+ready\s+https:\/\/127\.0\.0\.1:\d+/);
    const procs = apiservers(c);
    assert.deepEqual(procs.map((p) => p.name), ['control-plane', 'apiserver-2']);
    assert.equal(procs[1]!.pid, c.childPid('apiserver-2'));
    const port = new URL(parseYaml(readFileSync(c.kubeconfig, 'utf8')).clusters[0].cluster.server as string).port;
    assert.ok(c.output().includes(`2 API server processes share port ${port}`), 'the kubeconfig names the shared port');
    assert.notEqual(procs[0]!.peerPort, procs[1]!.peerPort);
    // One cluster: apiserver-2 took the CA and the token key from etcd (its own data dir, the same files).
    const second = join(c.dataDir, 'apiservers', 'apiserver-2');
    for (const f of ['pki/ca.crt', 'pki/token.key']) assert.equal(readFileSync(join(second, f), 'utf8'), readFileSync(join(c.dataDir, f), 'utf8'), f);

    // Each process's identity Lease names its own peer port (the URL the checkpoint-data peers use), not the
    // shared one; each writes its Lease once it serves, so the two may come a moment apart.
    const peerUrls = procs.map((p) => `https://127.0.0.1:${p.peerPort}`).sort();
    let seen = '';
    await waitFor(`identity Leases naming ${peerUrls.join(', ')}`, 30_000, async () => {
      const r = await c.kubectl(['get', 'leases', '-n', 'kube-system', '-l', 'apiserver.kubernetes.io/identity=kube-apiserver', '-o', "jsonpath={range .items[*]}{.metadata.annotations['kube32\\.io/apiserver-url']}{'\\n'}{end}"]);
      assert.equal(r.code, 0, r.stderr);
      seen = r.stdout;
      return JSON.stringify(r.stdout.trim().split('\n').sort()) === JSON.stringify(peerUrls);
    }).catch((err: unknown) => assert.fail(`${err instanceof Error ? err.message : String(err)}; the Leases name: ${seen}`));

    for (const name of ['one', 'two']) {
      const r = await c.kubectl(['create', '-f', '-'], { input: pod(name) });
      assert.equal(r.code, 0, r.stderr);
    }
    // Each kubectl opens its own connection; the kernel spreads them among the two listeners.
    const creds = credentials(c);
    const before = await Promise.all(procs.map((p) => podLists(p.peerPort, creds)));
    // At most 60 lists: with connections spread at random, all 60 on one listener has odds of 2^-59.
    let now = before;
    for (let tries = 0; tries < 60 && !now.every((n, i) => n > before[i]!); tries++) {
      const r = await c.kubectl(['get', 'pods', '-o', 'name']);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, 'pod/one\npod/two\n');
      now = await Promise.all(procs.map((p) => podLists(p.peerPort, creds)));
    }
    assert.ok(now.every((n, i) => n > before[i]!), `each process answered pod lists: ${before} → ${now}`);

    process.kill(procs[1]!.pid, 'SIGKILL');
    await waitFor('up to see apiserver-2 killed', 30_000, async () => c.output().includes('apiserver-2 was killed by SIGKILL'));
    for (let i = 0; i < 8; i++) {
      const r = await c.kubectl(['get', 'pods', '-o', 'name']);
      assert.equal(r.code, 0, `list ${i} after the SIGKILL: ${r.stderr}`);
      assert.equal(r.stdout, 'pod/one\npod/two\n');
    }
    const three = await c.kubectl(['create', '-f', '-'], { input: pod('three') });
    assert.equal(three.code, 0, three.stderr);
    assert.equal(c.process.exitCode, null, 'up goes on with one API server');

    const pids = [c.childPid('etcd'), c.childPid('control-plane'), procs[1]!.pid];
    assert.equal(await c.stop(), 0, c.output());
    for (const pid of pids) assert.ok(!isProcessAlive(pid), `pid ${pid} is stopped`);
    assert.ok(!existsSync(join(c.dataDir, 'up.lock')));
  },
);
