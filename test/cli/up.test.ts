/**
 * kube32-cli up as a real process: clear refusals when the port or the data dir is taken or a flag is
 * wrong (nothing started, nothing lost), and, once the control plane exists, the control plane alone
 * (`--workers 0`) coming up, answering kubectl, stopping on SIGTERM, and a second `up` finding its
 * objects again; SIGHUP (the terminal closed) and a closed standard output (`up | head -2`) never leave
 * the cluster running; worker addresses another cluster holds are refused before anything starts, or
 * replaced by free ones when `--first-address` is not given, also when they are taken after the check (two ups
 * started at the same moment).
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { KUBELET_PORT, portFree } from '../../src/cli/worker-addresses.ts';
import { isProcessAlive } from '../../src/lib/index.ts';
import { CLI, run, startCluster, waitFor } from '../e2e/cluster.ts';

function tempDir(t: import('node:test').TestContext): string {
  const d = mkdtempSync(join(tmpdir(), 'kube32-up-test-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

test('up refuses a port in use, with the port in the message, and leaves no lock behind', { timeout: 90_000 }, async (t) => {
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

test('up refuses a data dir that a live up holds, naming its pid; a stale lock is taken over', { timeout: 90_000 }, async (t) => {
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

test('up checks its flags before starting anything: it prints nothing but the error and exits non-zero', { timeout: 120_000 }, async (t) => {
  const dir = tempDir(t);
  for (const [args, msg] of [
    [['--workers', 'two'], /invalid value "two" for --workers/],
    [['--workers', '-1'], /invalid value "-1" for --workers/],
    [['--port', '70000'], /invalid value "70000" for --port/],
    [['--first-address', '10.0.0.2'], /invalid first worker address "10\.0\.0\.2"/],
    [['--feos-nodes', '17'], /invalid value "17" for --feos-nodes: expected a whole number from 0 to 16/],
    [['--feos-nodes', '1', '--feos-listen', '127.0.0.1:7443'], /--feos-nodes puts the port for FeOS nodes on its nodes' bridge: leave --feos-listen out/],
    [['--feos-nodes', '1', '--feos-accel', 'fast'], /invalid value "fast" for --feos-accel: expected auto, kvm or tcg/],
    [['--feos-nodes', '1', '--feos-registry', '127.0.0.1'], /argument '127\.0\.0\.1' is invalid\. expected HOST:PORT, such as 127\.0\.0\.1:5000/],
    [['--feos-registry', '127.0.0.1:5000'], /--feos-object-store and --feos-registry are for the FeOS nodes of --feos-nodes N/],
    [['--feos-nodes', '1', '--feos-object-store', 'ftp://host/x'], /invalid value "ftp:\/\/host\/x" for --feos-object-store: expected file:\/\/\/absolute\/path or s3:\/\/BUCKET\/PREFIX/],
    [['--feos-nodes', '1', '--feos-object-store', 's3://b/p', '--feos-s3-endpoint', '127.0.0.1:8080'], /invalid value "127\.0\.0\.1:8080" for --feos-s3-endpoint: expected an http:\/\/ or https:\/\/ URL/],
    [['--feos-nodes', '1', '--feos-s3-endpoint', 'http://127.0.0.1:8080'], /--feos-s3-endpoint is for an S3 object store: give --feos-object-store s3:\/\/BUCKET\/PREFIX too/],
    // Flags up passes on to the control plane or its workers: checked by up too, before it says it starts.
    [['--pod-eviction-timeout', 'soon'], /^error: --pod-eviction-timeout: invalid duration "soon": expected a number and a unit \(ns, us, ms, s, m, h\), as in "500ms" or "1m30s"\n$/],
    [['--pod-eviction-timeout', '0s'], /^error: --pod-eviction-timeout: must be positive\n$/],
    [['--feos-listen', '127.0.0.1'], /^error: --feos-listen "127\.0\.0\.1": want ADDRESS:PORT or \[IPv6\]:PORT with a port from 0 to 65535, e\.g\. 0\.0\.0\.0:7443\n$/],
    [['--first-address', '127.0.0.254', '--workers', '3'], /^error: worker 2 has no loopback address after 127\.0\.0\.254\n$/],
  ] as const) {
    const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, ...args], { timeoutMs: 20_000 });
    assert.notEqual(r.code, 0, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.equal(r.stdout, '', `${args.join(' ')}: nothing but the error`);
    assert.match(r.stderr, msg);
  }
  assert.ok(!existsSync(join(dir, 'logs', 'control-plane.log')), 'no control plane was started');
});

test('as root, up --feos-nodes refuses a data dir too long for a microVM\'s unix sockets, naming the longest that fits', { timeout: 60_000, skip: process.getuid?.() !== 0 ? 'needs root (as another user, --feos-nodes says it needs root first)' : false }, async () => {
  const long = join(tmpdir(), 'k32t-a-data-dir-whose-path-is-far-too-long-for-sockets');
  const r = await run(process.execPath, [CLI, 'up', '--data-dir', long, '--feos-nodes', '2'], { timeoutMs: 20_000 });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /--data-dir \S+ is too long for FeOS nodes: a microVM's sockets under it \(\S+\/feos\/feos-2\/state\/vms\/0{36}\/console\.sock\) take \d+ bytes, over the 107 of a unix socket path; give a data dir of at most \d+ bytes/);
  assert.ok(!existsSync(join(long, 'logs')), 'nothing was started');
});

test('up --workers 0: the control plane alone; kubectl works; Ctrl-C stops it; a second up finds its objects', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { workers: 0 });
  assert.match(c.output(), /control plane\s+ready\s+https?:\/\/127\.0\.0\.1:\d+/);
  assert.match(c.output(), new RegExp(`export KUBECONFIG=${c.kubeconfig}`));
  // The port for FeOS nodes, on a free loopback port (docs/feos/fleet.md), answers TLS 1.3 with ALPN h2.
  const feos = /FeOS nodes join at 127\.0\.0\.1:(\d+): feosd --control-plane/.exec(c.output());
  assert.ok(feos, c.output());
  const alpn = await new Promise<string | false>((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port: Number(feos[1]), ALPNProtocols: ['h2'], rejectUnauthorized: false }, () => {
      resolve(s.getProtocol() === 'TLSv1.3' ? (s.alpnProtocol ?? false) : false);
      s.destroy();
    });
    s.once('error', reject);
  });
  assert.equal(alpn, 'h2');
  const ns = await c.kubectl(['get', 'namespaces', '-o', 'name']);
  assert.equal(ns.code, 0, ns.stderr);
  assert.match(ns.stdout, /namespace\/default/);
  const cm = await c.kubectl(['create', 'configmap', 'kept', '--from-literal=a=1']);
  assert.equal(cm.code, 0, cm.stderr);
  // The data dir is taken while this up runs.
  const second = await run(process.execPath, [CLI, 'up', '--data-dir', c.dataDir, '--port', '0'], { timeoutMs: 20_000 });
  assert.equal(second.code, 1);
  assert.match(second.stderr, new RegExp(`the data dir ${c.dataDir} is in use by another kube32-cli up \\(pid ${c.process.pid}\\)`));
  // Nothing lost: the first up runs on, its lock as it was.
  assert.equal(JSON.parse(readFileSync(join(c.dataDir, 'up.lock'), 'utf8')).pid, c.process.pid);
  assert.equal((await c.kubectl(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.a}'])).stdout, '1');
  assert.equal(await c.stop('SIGINT'), 0, c.output()); // Ctrl-C
  assert.match(c.output(), /SIGINT: stopping the cluster[\s\S]*stopping the control plane[\s\S]*cluster stopped/);
  assert.ok(!existsSync(join(c.dataDir, 'up.lock')));

  const again = await startCluster(t, { workers: 0, dataDir: c.dataDir });
  const got = await again.kubectl(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.a}']);
  assert.equal(got.stdout, '1', got.stderr);
  assert.equal(await again.stop(), 0);
});

/** Whether process `pid` is alive. */
const alive = isProcessAlive;

/** Holds `address`:`port` open (another cluster's worker) until the test ends. */
async function hold(t: import('node:test').TestContext, address: string, port: number): Promise<void> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen({ host: address, port, exclusive: true }, () => resolve());
  });
  t.after(() => srv.close());
}

/** A loopback /24 that no other suite uses: 127.A.B.x with A in 251..254. */
function privateRange(): [number, number] {
  return [251 + Math.floor(Math.random() * 4), 1 + Math.floor(Math.random() * 250)];
}

test('up refuses a data dir that is a file, or under a file, saying so, and leaves the file alone', { timeout: 90_000 }, async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'not-a-dir');
  writeFileSync(file, 'keep me');
  const r = await run(process.execPath, [CLI, 'up', '--data-dir', file, '--port', '0'], { timeoutMs: 20_000 });
  assert.equal(r.code, 1);
  assert.equal(r.stderr.trim(), `error: the data dir ${file} is not a directory (a file of that name exists): pass --data-dir with a directory, or a path where up can create one`);
  assert.equal(readFileSync(file, 'utf8'), 'keep me');
  const under = await run(process.execPath, [CLI, 'up', '--data-dir', join(file, 'sub'), '--port', '0'], { timeoutMs: 20_000 });
  assert.equal(under.code, 1);
  assert.match(under.stderr, /is not a directory \(a file stands in its path\)/);
});

test('an empty --data-dir (a variable left unset) is refused by up, control-plane, apiserver and kubeconfig user; nothing is written in the current directory', { timeout: 120_000 }, async (t) => {
  const cwd = tempDir(t);
  // Run from cwd: "" resolved to it, and up wrote a whole cluster there (kube32.db, pki/, kubeconfig, logs/, nodes/).
  const inCwd = (args: string[]) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [CLI, ...args], { cwd, timeout: 20_000, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout: String(stdout), stderr: String(stderr) });
      });
    });
  for (const args of [
    ['up', '--data-dir', '', '--port', '0', '--workers', '0', '--ready-timeout', '5'],
    ['up', '--data-dir', ' ', '--port', '0', '--workers', '0', '--ready-timeout', '5'],
    ['control-plane', '--data-dir', '', '--port', '0'],
    ['apiserver', '--data-dir', '', '--port', '0'],
    ['kubeconfig', 'user', 'ed', '--data-dir', ''],
  ]) {
    const r = await inCwd(args);
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /^error: option '--data-dir <dir>' argument ' ?' is invalid\. the data dir must be a path \(an empty one would be the current directory\)\n/, args.join(' '));
    assert.doesNotMatch(r.stdout, /starting a local cluster/, args.join(' '));
  }
  assert.deepEqual(readdirSync(cwd), [], 'nothing written in the current directory');
});

test('down stops the cluster up runs on a data dir, as Ctrl-C there; down again says nothing runs and exits 0', { timeout: 180_000 }, async (t) => {
  const c = await startCluster(t, { workers: 1 });
  const upPid = c.process.pid!;
  const r = await run(process.execPath, [CLI, 'down', '--data-dir', c.dataDir], { timeoutMs: 150_000 });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, `stopping the cluster in ${c.dataDir} (kube32-cli up, pid ${upPid}; its workers drain first)\ncluster stopped\n`);
  assert.ok(!isProcessAlive(upPid), 'up has exited');
  assert.equal(await c.stop(), 0, 'up exited 0, as on Ctrl-C');
  assert.match(c.output(), /SIGTERM: stopping the cluster[\s\S]*cluster stopped/);
  assert.ok(!existsSync(join(c.dataDir, 'up.lock')), 'the lock is released');
  const again = await run(process.execPath, [CLI, 'down', '--data-dir', c.dataDir], { timeoutMs: 30_000 });
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stdout, `kube32: no cluster runs in ${c.dataDir}: nothing to stop\n`);
});

test('up refuses a worker heap below one WebAssembly page, or not a quantity, before starting anything', { timeout: 60_000 }, async (t) => {
  const dataDir = join(tempDir(t), 'cluster');
  for (const [value, message] of [
    ['1', 'error: --worker-heap must hold at least one 64Ki WebAssembly page (65536 bytes): current value is "1" (1 bytes)'],
    ['abc', 'error: --worker-heap must be a byte quantity such as 64Mi: current value is "abc"'],
  ]) {
    const r = await run(process.execPath, [CLI, 'up', '--data-dir', dataDir, '--port', '0', '--worker-heap', value!], { timeoutMs: 20_000 });
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim(), message);
    assert.ok(!existsSync(dataDir), 'nothing was started or written');
  }
});

test('up refuses worker addresses in use when --first-address is given, naming a free range, before starting anything', { timeout: 90_000 }, async (t) => {
  const [a, b] = privateRange();
  await hold(t, `127.${a}.${b}.3`, KUBELET_PORT); // worker-2's kubelet port, as another cluster's worker would
  const dir = tempDir(t);
  const r = await run(process.execPath, [CLI, 'up', '--data-dir', dir, '--port', '0', '--first-address', `127.${a}.${b}.2`], { timeoutMs: 20_000 });
  assert.equal(r.code, 1, r.stdout);
  assert.match(r.stderr, new RegExp(`127\\.${a}\\.${b}\\.3:10250 \\(a worker's kubelet port\\) is already in use`));
  assert.match(r.stderr, new RegExp(`Pass --first-address 127\\.${a}\\.${b + 1}\\.2 \\(free for 2 workers\\), or leave --first-address out`));
  assert.ok(!existsSync(join(dir, 'logs', 'control-plane.log')), 'no control plane was started');
  assert.ok(!existsSync(join(dir, 'up.lock')), 'the data dir is released');
});

test('up without --first-address takes free worker addresses when the default ones are in use (a second cluster)', { timeout: 180_000 }, async (t) => {
  // As when another `up` runs with the defaults: its worker-1 holds 127.0.0.2:10250.
  if (await portFree('127.0.0.2', KUBELET_PORT)) await hold(t, '127.0.0.2', KUBELET_PORT);
  const c = await startCluster(t, { workers: 1, firstAddress: null });
  const moved = c.output().match(/worker addresses 127\.0\.0\.2 are in use \(another cluster on this computer\?\): using (127\.0\.\d+\.2)/);
  assert.ok(moved, c.output());
  assert.match(c.output(), new RegExp(`worker-1\\s+ready\\s+${moved[1]!.replaceAll('.', '\\.')}`));
  const addr = await c.kubectl(['get', 'node', 'worker-1', '-o', 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}']);
  assert.equal(addr.stdout, moved[1], addr.stderr);
  assert.equal(await c.stop(), 0, c.output());
});

test('two ups started at the same moment find the same free addresses; the one whose worker finds its address taken moves to the next free range', { timeout: 240_000 }, async (t) => {
  // Both check the range before either starts a worker (the control plane comes first), so both choose it.
  const [a, b] = await Promise.all([startCluster(t, { workers: 1, firstAddress: null }), startCluster(t, { workers: 1, firstAddress: null })]);
  const address = async (c: typeof a) => (await c.kubectl(['get', 'node', 'worker-1', '-o', 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}'])).stdout;
  const [addrA, addrB] = [await address(a), await address(b)];
  assert.notEqual(addrA, addrB, `${a.output()}\n---\n${b.output()}`);
  const moved = [a, b].filter((c) => /worker addresses \S+ were taken meanwhile \(another cluster started at the same moment\?\): using 127\./.test(c.output()));
  assert.equal(moved.length, 1, `exactly one up moved to another range:\n${a.output()}\n---\n${b.output()}`);
  assert.equal(await a.stop(), 0, a.output());
  assert.equal(await b.stop(), 0, b.output());
});

test('after up was killed with SIGKILL, the next up on its data dir takes it over (its lock, the same addresses)', { timeout: 180_000 }, async (t) => {
  const first = await startCluster(t, { workers: 1 });
  const worker = first.childPid('worker-1');
  first.process.kill('SIGKILL');
  // The children notice that up is gone and stop (up-sigkill.test.ts); one that had not yet is stopped by the next up.
  const second = await startCluster(t, { workers: 1, dataDir: first.dataDir, firstAddress: first.firstAddress });
  assert.ok(!alive(worker), 'the old worker is gone');
  assert.match(second.output(), new RegExp(`worker-1\\s+ready\\s+${first.firstAddress.replaceAll('.', '\\.')}`), 'the same address, not another range');
  assert.equal(await second.stop(), 0, second.output());
});

test('SIGHUP (the terminal closed) stops the cluster as SIGTERM does: nothing is left running', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { workers: 0 });
  const cp = c.childPid('control-plane');
  assert.equal(await c.stop('SIGHUP'), 0, c.output());
  assert.match(c.output(), /SIGHUP: stopping the cluster[\s\S]*stopping the control plane[\s\S]*cluster stopped/);
  assert.ok(!alive(cp), `the control plane (pid ${cp}) is stopped`);
  assert.ok(!existsSync(join(c.dataDir, 'up.lock')));
});

test('a closed standard output (up | head -2) does not end up: it goes on, printing on standard error, and stops cleanly', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-up-test-'));
  const proc = spawn(process.execPath, [CLI, 'up', '--workers', '0', '--data-dir', dir, '--port', '0', '--ready-timeout', '120'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const closed = new Promise<number>((resolve) => proc.once('close', (code, sig) => resolve(code ?? (sig ? 128 : 1))));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await closed;
    // A failed run may leave children (they have process groups of their own): kill what the lock names.
    try {
      const lock = JSON.parse(readFileSync(join(dir, 'up.lock'), 'utf8')) as { children: Record<string, number> };
      for (const pid of Object.values(lock.children)) if (alive(pid)) process.kill(pid, 'SIGKILL');
    } catch {
      // no lock: up released the data dir
    }
    rmSync(dir, { recursive: true, force: true });
  });
  // Like head -2: read two lines, then close the pipe.
  let out = '';
  await new Promise<void>((resolve) => {
    const onData = (d: Buffer): void => {
      out += d.toString();
      if (out.split('\n').length > 2) {
        proc.stdout!.off('data', onData);
        proc.stdout!.destroy();
        resolve();
      }
    };
    proc.stdout!.on('data', onData);
  });
  let err = '';
  const ready = await new Promise<boolean>((resolve) => {
    proc.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes('Press Ctrl-C to stop')) resolve(true);
    });
    void closed.then(() => resolve(false));
  });
  assert.ok(ready, `up exited before it was ready: ${out}\n${err}`);
  assert.match(err, /standard output was closed; up goes on, printing here[\s\S]*control plane\s+ready[\s\S]*export KUBECONFIG=/);
  const cp = (JSON.parse(readFileSync(join(dir, 'up.lock'), 'utf8')) as { children: Record<string, number> }).children['control-plane']!;
  proc.kill('SIGTERM');
  assert.equal(await closed, 0, err);
  assert.match(err, /cluster stopped/);
  assert.ok(!alive(cp), `the control plane (pid ${cp}) is stopped`);
});

test('a worker killed while up runs is reported with its signal, and as staying down', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { workers: 1 });
  process.kill(c.childPid('worker-1'), 'SIGKILL');
  // It said "worker-1 exited with code signal": the signal's name was lost.
  await waitFor('up reporting the killed worker', 30_000, async () => /worker-1 was killed by SIGKILL; it stays down until up is started again \(log /.test(c.output()));
  assert.equal(await c.stop(), 0, c.output());
});

test('a control plane killed while up runs stops the cluster, and up says which signal killed it', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { workers: 0 });
  process.kill(c.childPid('control-plane'), 'SIGKILL');
  // up exits on its own; stop() only waits for it then. It said "the control plane exited (code 128)".
  await waitFor('up exiting', 60_000, async () => c.process.exitCode !== null);
  assert.equal(await c.stop(), 1, c.output());
  assert.match(c.output(), /control plane was killed by SIGKILL; the end of /);
  assert.match(c.output(), /error: the control plane was killed by SIGKILL: the cluster is down/);
});
