// feosd as a real process, driven by gRPC clients from our protos and by feosctl, without any VM:
// the seed's codes for bad IDs, bad specs and missing pods, ALREADY_EXISTS, the network and volume
// preconditions, a pod that cannot boot FAILED with its reason, the state dir's lock, HostService.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { status } from '@grpc/grpc-js';
import { feosctl, PodState, startFeosd, tempDir, waitForPod } from './harness.ts';

function code(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

test('feosd answers with the seed codes and records pods', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-api-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));

  await t.test('bad IDs are INVALID_ARGUMENT, missing pods NOT_FOUND', async () => {
    for (const id of ['ABCDEFGHJKM', '0bcdefghjkm', 'short', '../../../x']) {
      await assert.rejects(feosd.pods.getPod({ id }), (e) => code(e) === status.INVALID_ARGUMENT);
      await assert.rejects(feosd.pods.deletePod({ id }), (e) => code(e) === status.INVALID_ARGUMENT);
    }
    for (const call of [feosd.pods.getPod, feosd.pods.startPod, feosd.pods.stopPod, feosd.pods.deletePod, feosd.pods.suspendPod, feosd.pods.resumePod]) {
      await assert.rejects(call({ id: 'zzzzzzzzzzz' }), (e) => code(e) === status.NOT_FOUND);
    }
    await assert.rejects(feosd.pods.getPod({ id: '22222222-3333-4444-5555-666666666666' }), (e) => code(e) === status.NOT_FOUND);
  });

  await t.test('bad specs are INVALID_ARGUMENT; a network or a volume the node lacks FAILED_PRECONDITION', async () => {
    await assert.rejects(feosd.pods.createPod({ id: 'abcdefghjkm', spec: { memoryBytes: 1000n } }), (e) => code(e) === status.INVALID_ARGUMENT);
    await assert.rejects(feosd.pods.createPod({ id: 'abcdefghjkm', spec: { vcpus: 99 } }), (e) => code(e) === status.INVALID_ARGUMENT);
    await assert.rejects(feosd.pods.createPod({ id: 'abcdefghjkm', spec: { network: {} } }), (e) => code(e) === status.FAILED_PRECONDITION);
    await assert.rejects(
      feosd.pods.createPod({ id: 'abcdefghjkm', spec: { volumes: [{ name: 'data', volumeId: '22222222-3333-4444-5555-666666666666' }] } }),
      (e) => code(e) === status.FAILED_PRECONDITION,
    );
    await assert.rejects(feosd.pods.getPod({ id: 'abcdefghjkm' }), (e) => code(e) === status.NOT_FOUND);
  });

  await t.test('a pod with no guest installed is FAILED with the reason; the same spec finds it, another is ALREADY_EXISTS', async () => {
    const res = await feosd.pods.createPod({ id: 'abcdefghjkm', spec: { vcpus: 1, memoryBytes: 256n << 20n, metadata: { role: 'web' } } });
    assert.equal(res.pod?.id, 'abcdefghjkm');
    const failed = await waitForPod(feosd, 'abcdefghjkm', (p) => p.state !== PodState.PENDING, 30_000);
    assert.equal(failed.state, PodState.FAILED);
    assert.match(failed.reason, /no guest installed/);
    const again = await feosd.pods.createPod({ id: 'abcdefghjkm', spec: { vcpus: 1, memoryBytes: 256n << 20n, metadata: { role: 'web' } } });
    assert.equal(again.pod?.state, PodState.FAILED);
    await assert.rejects(feosd.pods.createPod({ id: 'abcdefghjkm', spec: { vcpus: 2 } }), (e) => code(e) === status.ALREADY_EXISTS);
    await assert.rejects(feosd.pods.suspendPod({ id: 'abcdefghjkm' }), (e) => code(e) === status.FAILED_PRECONDITION);
    await assert.rejects(feosd.pods.resumePod({ id: 'abcdefghjkm' }), (e) => code(e) === status.FAILED_PRECONDITION);
    // The record on disk is the PodInfo.
    const { fromBinary } = await import('@bufbuild/protobuf');
    const { PodInfoSchema } = await import('../../src/feos/gen/feos/pod/v1/pod_pb.js');
    const rec = fromBinary(PodInfoSchema, readFileSync(join(feosd.stateDir, 'pods', 'abcdefghjkm.pb')));
    assert.equal(rec.state, PodState.FAILED);
    assert.equal(rec.spec?.metadata.role, 'web');
  });

  await t.test('feosctl prints tables, JSON with the id first, YAML, and gRPC errors by their code name', async () => {
    const list = await feosctl(feosd.socket, ['pod', 'list']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^ID\s+STATE/);
    assert.match(list.stdout, /abcdefghjkm\s+FAILED/);
    const json = await feosctl(feosd.socket, ['pod', 'get', 'abcdefghjkm', '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    assert.equal(Object.keys(JSON.parse(json.stdout))[0], 'id');
    assert.equal(JSON.parse(json.stdout).state, 'POD_STATE_FAILED');
    const yaml = await feosctl(feosd.socket, ['pod', 'get', 'abcdefghjkm', '-o', 'yaml']);
    assert.equal(YAML.parse(yaml.stdout).id, 'abcdefghjkm');
    const missing = await feosctl(feosd.socket, ['pod', 'get', 'zzzzzzzzzzz']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^feosctl: NOT_FOUND: pod zzzzzzzzzzz not found/);
    const bad = await feosctl(feosd.socket, ['pod', 'delete', 'Nope']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /INVALID_ARGUMENT/);
    const minted = await feosctl(feosd.socket, ['pod', 'create', '--memory', '192Mi', '-o', 'json']);
    assert.equal(minted.code, 0, minted.stderr);
    assert.match(JSON.parse(minted.stdout).id, /^[a-hjkmnp-tv-z][0-9a-hjkmnp-tv-z]{10}$/);
    const usage = await feosctl(feosd.socket, ['pod', 'create', '--vcpus', 'x']);
    assert.equal(usage.code, 1);
  });

  await t.test('delete removes the record', async () => {
    const del = await feosctl(feosd.socket, ['pod', 'delete', 'abcdefghjkm']);
    assert.equal(del.code, 0, del.stderr);
    await assert.rejects(feosd.pods.getPod({ id: 'abcdefghjkm' }), (e) => code(e) === status.NOT_FOUND);
    assert.throws(() => readFileSync(join(feosd.stateDir, 'pods', 'abcdefghjkm.pb')), /ENOENT/);
  });

  await t.test('HostService: facts, and UpgradeFeosBinary refused without --self-upgrade', async () => {
    const info = await feosd.host.getHostInfo({});
    assert.equal(info.pid, feosd.child.pid);
    assert.equal(info.accelerator, 'tcg');
    await assert.rejects(feosd.host.upgradeFeosBinary([{ part: { case: 'header', value: { size: 1n, sha256: '00' } } }]), (e) => code(e) === status.FAILED_PRECONDITION);
  });
});

test('a second feosd on the same state dir waits for the lock, then takes over', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-lock-');
  t.after(cleanup);
  const first = await startFeosd(dir);
  t.after(() => first.stop('SIGKILL'));
  const second = await startFeosd(dir, { runDir: join(dir, 'run2'), waitServing: false });
  t.after(() => second.stop('SIGKILL'));
  // It says so, and does not serve.
  const deadline = Date.now() + 30_000;
  while (!second.stderr().includes("holds the state dir's lock")) {
    assert.ok(Date.now() < deadline, `the second feosd did not say it waits: ${second.stderr()}`);
    assert.equal(second.child.exitCode, null, 'the second feosd exited instead of waiting');
    await new Promise((r) => second.child.stderr!.once('data', r));
  }
  assert.match(second.stderr(), new RegExp(`pid ${first.child.pid}`));
  assert.ok(!second.stderr().includes('"feosd serving"'));
  // Once the first ends, the second takes the lock within its retry second and serves.
  await first.stop('SIGKILL');
  while (!second.stderr().includes('"feosd serving"')) {
    assert.ok(Date.now() < deadline + 10_000, `the second feosd did not take over: ${second.stderr()}`);
    await new Promise((r) => second.child.stderr!.once('data', r));
  }
  assert.equal(readFileSync(join(dir, 'state', 'feosd.lock'), 'utf8').trim(), String(second.child.pid));
});

test('UpgradeFeosBinary with --self-upgrade checks the digest and runs the new executable with the same pid', { timeout: 120_000 }, async (t) => {
  const { createHash } = await import('node:crypto');
  const { dir, cleanup } = tempDir('feos-upgrade-');
  t.after(cleanup);
  const feosd = await startFeosd(dir, { extra: ['--self-upgrade'] });
  t.after(() => feosd.stop('SIGKILL'));
  const before = await feosd.host.getHostInfo({});
  // The "new binary": a script that runs this checkout's feosd with the arguments it is given.
  const exe = Buffer.from(`#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(new URL('../../', import.meta.url).pathname, 'bin/feosd.js'))} "$@"\n`);
  const sha256 = createHash('sha256').update(exe).digest('hex');
  await assert.rejects(
    feosd.host.upgradeFeosBinary([{ part: { case: 'header', value: { size: BigInt(exe.length), sha256: '0'.repeat(64) } } }, { part: { case: 'chunk', value: exe } }]),
    (e) => code(e) === status.INVALID_ARGUMENT,
  );
  const res = await feosd.host.upgradeFeosBinary([
    { part: { case: 'header', value: { size: BigInt(exe.length), sha256 } } },
    { part: { case: 'chunk', value: exe.subarray(0, 10) } },
    { part: { case: 'chunk', value: exe.subarray(10) } },
  ]);
  assert.equal(res.path, join(feosd.stateDir, 'upgrade', 'feosd'));
  // The same pid serves again, started anew, and holds the lock again.
  const deadline = Date.now() + 60_000;
  while (feosd.stderr().split('"feosd serving"').length < 3) {
    assert.ok(Date.now() < deadline, `no second start: ${feosd.stderr()}`);
    assert.equal(feosd.child.exitCode, null);
    await new Promise((r) => feosd.child.stderr!.once('data', r));
  }
  const after = await feosd.host.getHostInfo({});
  assert.equal(after.pid, before.pid);
  assert.ok(after.startedAt!.seconds * 1000n + BigInt(after.startedAt!.nanos / 1e6) > before.startedAt!.seconds * 1000n + BigInt(before.startedAt!.nanos / 1e6));
  assert.equal(readFileSync(join(feosd.stateDir, 'feosd.lock'), 'utf8').trim(), String(before.pid));
});

test('feosctl pod events streams the current state, then each recorded change', { timeout: 60_000 }, async (t) => {
  const { spawn } = await import('node:child_process');
  const { FEOSCTL } = await import('./harness.ts');
  const { dir, cleanup } = tempDir('feos-events-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  await feosd.pods.createPod({ id: 'evpqd0aaaaa', spec: {} });
  await waitForPod(feosd, 'evpqd0aaaaa', (p) => p.state === PodState.FAILED, 30_000);
  const child = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'events', '-o', 'json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  const lines: Array<{ podId: string; initial?: boolean; deleted?: boolean; pod: { state?: string } | null }> = [];
  let buf = '';
  const waiters = new Set<() => void>();
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl = buf.indexOf('\n');
    while (nl >= 0) {
      lines.push(JSON.parse(buf.slice(0, nl)));
      buf = buf.slice(nl + 1);
      nl = buf.indexOf('\n');
    }
    for (const w of waiters) w();
  });
  const waitLine = (pred: (l: (typeof lines)[number]) => boolean) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (lines.some(pred)) {
          waiters.delete(check);
          resolve();
        }
      };
      waiters.add(check);
      child.once('exit', (c) => reject(new Error(`feosctl pod events exited ${c}`)));
      check();
    });
  await waitLine((l) => l.podId === 'evpqd0aaaaa' && l.initial === true && l.pod?.state === 'POD_STATE_FAILED');
  await feosd.pods.deletePod({ id: 'evpqd0aaaaa' });
  await waitLine((l) => l.podId === 'evpqd0aaaaa' && l.deleted === true);
  await feosd.pods.createPod({ id: 'evpqd0bbbbb', spec: {} });
  await waitLine((l) => l.podId === 'evpqd0bbbbb' && l.pod?.state === 'POD_STATE_PENDING');
  await waitLine((l) => l.podId === 'evpqd0bbbbb' && l.pod?.state === 'POD_STATE_FAILED');
});
