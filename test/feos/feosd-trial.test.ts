// Findings of an operator's first trial of feosd and feosctl, each pinned by what the operator saw:
// a stop with a watcher connected, streams' errors, feosctl's usage errors, a second feosd on the same
// run dir, duplicate volumes, --wait on a FAILED pod, bad --state-dir and --tcp. feosd runs without QEMU.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { FEOSCTL, feosctl, PodState, startFeosd, tempDir, waitForPod } from './harness.ts';

test('SIGTERM ends a connected `pod events` watcher with UNAVAILABLE "feosd stops" and feosd exits', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const feosd = await startFeosd(dir, { extra: ['--stop-grace', '20'] });
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'trpqd0aaaaa', spec: {} });
  await waitForPod(feosd, 'trpqd0aaaaa', (p) => p.state === PodState.FAILED, 30_000);
  const child = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'events'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const watcherExit = once(child, 'exit');
  // The watch is open once the pod's initial event is printed.
  let out = '';
  child.stdout!.setEncoding('utf8');
  while (!out.includes('trpqd0aaaaa')) {
    const [d] = (await Promise.race([once(child.stdout!, 'data'), watcherExit.then(() => [''])])) as [string];
    if (child.exitCode !== null) assert.fail(`feosctl pod events exited: ${err}`);
    out += d;
  }
  child.stdout!.resume();
  const feosdExit = once(feosd.child, 'exit');
  const t0 = Date.now();
  feosd.child.kill('SIGTERM');
  const [code] = (await watcherExit) as [number];
  assert.equal(code, 1);
  assert.match(err, /UNAVAILABLE: feosd stops/);
  const [feosdCode] = (await feosdExit) as [number];
  assert.equal(feosdCode, 0);
  // The watch does not wait for the calls' grace (2 s here).
  assert.ok(Date.now() - t0 < 10_000, `feosd took ${Date.now() - t0} ms to stop`);
});

test("server streams' errors reach feosctl, which prints the code and exits 1", { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'trpqd0bbbbb', spec: {} });
  await waitForPod(feosd, 'trpqd0bbbbb', (p) => p.state === PodState.FAILED, 30_000);
  const cases: Array<[string[], RegExp]> = [
    [['pod', 'logs', 'trpqd0zzzzz'], /NOT_FOUND/],
    [['pod', 'logs', 'BAD'], /INVALID_ARGUMENT/],
    [['pod', 'logs', 'trpqd0bbbbb'], /FAILED_PRECONDITION: pod trpqd0bbbbb is FAILED/],
    [['pod', 'logs', '-f', 'trpqd0bbbbb'], /FAILED_PRECONDITION/],
    [['pod', 'events', 'nosuchpod'], /INVALID_ARGUMENT|NOT_FOUND/],
    [['pod', 'events', 'trpqd0zzzzz'], /NOT_FOUND/],
  ];
  for (const [args, want] of cases) {
    const r = await feosctl(feosd.socket, args, 20_000);
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, want, args.join(' '));
  }
});

test('feosctl names the field or flag, the value and what it wants for what it cannot convert, and exits 1', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const { writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const socket = join(dir, 'none.sock');
  const files: Array<[string, RegExp]> = [
    ['vcpus: [1\n', /not YAML or JSON/],
    ['foo: bar\n', /key "foo" is unknown/],
    ['memory: 512Mi\n', /key "memory" is unknown.*memoryBytes/],
    ['vcpus: "two"\n', /vcpus.*"two"/],
    ['vcpus: -2\n', /vcpus.*-2 out of range/],
    ['- vcpus: 1\n', /want a PodSpec.*got a list/],
    ['', /empty: want a PodSpec/],
  ];
  for (const [i, [text, want]] of files.entries()) {
    const f = join(dir, `spec${i}.yaml`);
    writeFileSync(f, text);
    const r = await feosctl(socket, ['pod', 'create', '-f', f], 20_000);
    assert.equal(r.code, 1, `${JSON.stringify(text)}: ${r.stderr}`);
    assert.match(r.stderr, want, JSON.stringify(text));
    assert.match(r.stderr, new RegExp(`spec${i}\\.yaml`));
  }
  for (const v of ['0', '-1', 'abc', '1.5', '99999999999999999999']) {
    const r = await feosctl(socket, ['pod', 'create', `--vcpus=${v}`], 20_000);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`--vcpus "${v.replace('.', '\\.')}": want a whole number from 1 to 32`));
  }
  const mem = await feosctl(socket, ['pod', 'create', '--memory', '18446744073709551616'], 20_000);
  assert.equal(mem.code, 1);
  assert.match(mem.stderr, /--memory "18446744073709551616": want whole Mi/);
  const label = await feosctl(socket, ['volume', 'create', '0e9c4f3e-1111-4222-8333-444455556666', '--size', '1Gi', '--label', 'novalue'], 20_000);
  assert.equal(label.code, 1);
  assert.match(label.stderr, /--label "novalue": want key=value/);
});

test('a second feosd on the same run dir refuses to take a served api.sock; the first serves on', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const { join } = await import('node:path');
  const first = await startFeosd(join(dir, 'a'), { runDir: join(dir, 'run') });
  t.after(() => first.stop('SIGKILL'));
  const second = await startFeosd(join(dir, 'b'), { runDir: join(dir, 'run'), waitServing: false });
  t.after(() => second.stop('SIGKILL'));
  const [code] = (await once(second.child, 'exit')) as [number];
  assert.equal(code, 1);
  assert.match(second.stderr(), new RegExp(`another feosd serves ${join(dir, 'run', 'api.sock')}, pid ${first.child.pid}`));
  const info = await first.host.getHostInfo({});
  assert.equal(info.pid, first.child.pid);
});

test('feosd refuses a bad --state-dir or --tcp with a clear message, exit 1, and leaves no api.sock', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const { existsSync } = await import('node:fs');
  const { join } = await import('node:path');
  const cases: Array<[string[], RegExp]> = [
    [['--state-dir', '/proc/feos-state'], /--state-dir \/proc\/feos-state: cannot make/],
    [['--state-dir', ''], /--state-dir is empty/],
    [['--tcp', 'notanaddress'], /--tcp \\"notanaddress\\": want host:port/],
    [['--tcp', '127.0.0.1:99999'], /--tcp \\"127.0.0.1:99999\\": want host:port/],
    // A well-formed address feosd cannot bind: the socket it had bound goes again.
    [['--tcp', '192.0.2.1:1'], /bind 192\.0\.2\.1:1/],
  ];
  for (const [i, [flags, want]] of cases.entries()) {
    const base = join(dir, String(i));
    const p = await startFeosd(base, { extra: flags, waitServing: false });
    t.after(() => p.stop('SIGKILL'));
    const [code] = (await once(p.child, 'exit')) as [number];
    assert.equal(code, 1, `${flags.join(' ')}: ${p.stderr()}`);
    assert.match(p.stderr(), want, flags.join(' '));
    assert.ok(!existsSync(p.socket), `${flags.join(' ')} left ${p.socket}`);
  }
});

test('create refuses a volume listed twice; --wait on a pod that ends FAILED exits 1 with the reason', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const vid = '0e9c4f3e-1111-4222-8333-444455556666';
  await assert.rejects(
    feosd.pods.createPod({ id: 'trpqd0ccccc', spec: { volumes: [{ name: 'data', volumeId: vid }, { name: 'again', volumeId: vid }] } }),
    (e: { code?: number; details?: string }) => e.code === 3 && e.details!.includes(vid) && /data/.test(e.details!) && /again/.test(e.details!),
  );
  // No guest is installed: the bring-up fails.
  const created = await feosctl(feosd.socket, ['pod', 'create', '--id', 'trpqd0ddddd', '--wait'], 30_000);
  assert.equal(created.code, 1, created.stderr);
  assert.match(created.stdout, /trpqd0ddddd\s+FAILED/);
  assert.match(created.stderr, /pod trpqd0ddddd is FAILED: .+/);
  const started = await feosctl(feosd.socket, ['pod', 'start', 'trpqd0ddddd', '--wait'], 30_000);
  assert.equal(started.code, 1, started.stderr);
  assert.match(started.stderr, /pod trpqd0ddddd is FAILED: .+/);
});

test('feosctl: no feosd is "is feosd running?"; host info as protobuf JSON and YAML; each state once in the events table', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  const { mkdirSync, writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const YAML = (await import('yaml')).default;
  const none = await feosctl(join(dir, 'none.sock'), ['pod', 'list'], 20_000);
  assert.equal(none.code, 1);
  assert.equal(none.stderr, `feosctl: UNAVAILABLE: is feosd running? no socket at ${join(dir, 'none.sock')}; to reach another feosd, pass --socket PATH (its <run-dir>/api.sock), --tcp HOST:PORT or --kubeconfig FILE --node NAME\n`);
  // A guest version whose files are empty: the bring-up records it (a second PENDING record), then fails.
  const guest = join(dir, 'guest', '20260101-000000');
  mkdirSync(guest, { recursive: true });
  for (const f of ['vmlinuz', 'initramfs', 'system.img', 'data.qcow2', 'guest.json']) writeFileSync(join(guest, f), '');
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const json = await feosctl(feosd.socket, ['host', 'info', '-o', 'json'], 20_000);
  assert.equal(json.code, 0, json.stderr);
  assert.doesNotMatch(json.stdout, /\$typeName|"seconds"/);
  const info = JSON.parse(json.stdout) as { pid: number; startedAt: string };
  assert.equal(info.pid, feosd.child.pid);
  assert.ok(!Number.isNaN(Date.parse(info.startedAt)), info.startedAt);
  const yaml = await feosctl(feosd.socket, ['host', 'info', '-o', 'yaml'], 20_000);
  assert.equal(yaml.code, 0, yaml.stderr);
  assert.equal((YAML.parse(yaml.stdout) as { pid: number }).pid, feosd.child.pid);
  const child = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'events'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    out += d;
  });
  // The watch is open once it shows a first pod.
  await feosd.pods.createPod({ id: 'trpqd0fffff', spec: {} });
  while (!out.includes('trpqd0fffff')) {
    if (child.exitCode !== null) assert.fail(`feosctl pod events exited: ${out}`);
    await once(child.stdout!, 'data');
  }
  const created = feosctl(feosd.socket, ['pod', 'create', '--id', 'trpqd0eeeee', '--wait'], 30_000);
  assert.equal((await created).code, 1);
  while (!/trpqd0eeeee\s+FAILED/.test(out)) {
    if (child.exitCode !== null) assert.fail(`feosctl pod events exited: ${out}`);
    await once(child.stdout!, 'data');
  }
  assert.equal(out.match(/trpqd0eeeee\s+PENDING\s+created/g)?.length, 1, out);
});

test("a node that has not joined its cluster yet logs once that the pods' network is not up, with the reason", { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-trial-');
  t.after(cleanup);
  // Nothing answers at the control plane's port and there is no token: the node stays unjoined, without its /96.
  const feosd = await startFeosd(dir, {
    extra: ['--control-plane', '127.0.0.1:1', '--join-token-file', `${dir}/no-token`, '--node-name', 'trial-unjoined', '--mesh-device', `wgtr${process.pid % 100000}`],
  });
  t.after(() => feosd.stop('SIGKILL'));
  const deadline = Date.now() + 30_000;
  while (!feosd.stderr().includes('control plane: join token')) {
    if (Date.now() > deadline) assert.fail(`no word of the join token within 30 s: ${feosd.stderr()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const lines = feosd.stderr().split('\n').filter((l) => /pods'? network is not (set )?up/.test(l));
  assert.equal(lines.length, 1, lines.join('\n'));
  const { msg, reason } = JSON.parse(lines[0]) as { msg: string; reason: string };
  assert.equal(msg, "the pods' network is not up; pods with a network fail");
  assert.equal(reason, "the node has no /96 of its cluster's mesh yet (the control plane gives it after the join)");
});
