/**
 * `kube32-cli dev` as a real process: start a pod, curl it, SIGTERM with --save-on-exit writes its
 * snapshot, a restart with --restore continues the count.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { ROOT, example, tempDir, wat } from './helpers.ts';

const run = promisify(execFile);
const CLI = join(ROOT, 'bin/kube32-cli.js');

interface Dev {
  child: ChildProcess;
  url: Promise<string>;
  stderr: () => string;
  stdout: () => string;
  exited: Promise<number | null>;
}

function startDev(args: string[]): Dev {
  const child = spawn(process.execPath, [CLI, 'dev', ...args, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  let out = '';
  const url = Promise.withResolvers<string>();
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    err += c;
    const m = /serving \S+ on (http:\/\/\S+)/.exec(err);
    if (m) url.resolve(m[1]!);
  });
  child.stdout!.setEncoding('utf8').on('data', (c: string) => { out += c; });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => {
    url.reject(new Error(`kube32-cli dev exited (${code}) before serving: ${err}`));
    resolve(code);
  }));
  return { child, url: url.promise, stderr: () => err, stdout: () => out, exited };
}

async function curl(url: string): Promise<{ count: number; node: string; podTimeMs: number; restores: number }> {
  const { stdout } = await run('curl', ['-sS', '--max-time', '5', url]);
  return JSON.parse(stdout);
}

test('kube32-cli dev serves a pod, saves it on SIGTERM, and restores it', { timeout: 60_000 }, async (t) => {
  const wasm = join(ROOT, 'build/examples/counter.wasm');
  example('counter');
  const tmp = tempDir('dev');
  t.after(tmp.remove);
  const file = join(tmp.dir, 'counter.k32s');

  const first = startDev([wasm, '--env', 'NODE_NAME=laptop', '--tick-interval', '50ms', '--save-on-exit', file]);
  t.after(() => first.child.kill('SIGKILL'));
  const url = await first.url;
  assert.deepEqual([(await curl(url)).count, (await curl(url)).count, (await curl(url)).count], [1, 2, 3]);
  assert.equal((await curl(url)).node, 'laptop');
  first.child.kill('SIGTERM');
  assert.equal(await first.exited, 0, first.stderr());
  assert.match(first.stderr(), /saved .*counter\.k32s: \d+ bytes, sha256:[0-9a-f]{64}, pod time \d+ ms/);
  assert.match(first.stdout(), /counter: started afresh/);
  assert.ok(existsSync(file) && statSync(file).size > 65536);
  const { stdout: inspected } = await run(process.execPath, [CLI, 'snapshot', 'inspect', file]);
  assert.match(inspected, /Trailer:\s+ok/);

  const second = startDev([wasm, '--env', 'NODE_NAME=desk', '--restore', file]);
  t.after(() => second.child.kill('SIGKILL'));
  const url2 = await second.url;
  const n = await curl(url2);
  assert.equal(n.count, 5, 'the count continues from the snapshot');
  assert.equal(n.node, 'desk');
  assert.equal(n.restores, 1);
  assert.match(second.stderr(), /restored from .*counter\.k32s at pod time \d+ ms/);
  second.child.kill('SIGINT');
  assert.equal(await second.exited, 0);
  assert.match(second.stdout(), /counter: restored at count 4/);
});

test('kube32-cli dev refuses a module that cannot run, naming the cause', { timeout: 30_000 }, async (t) => {
  const tmp = tempDir('dev-bad');
  t.after(tmp.remove);
  const bad = join(tmp.dir, 'bad.wasm');
  await run('sh', ['-c', `printf 'not wasm' > ${bad}`]);
  const notWasm = assert.rejects(run(process.execPath, [CLI, 'dev', bad, '--port', '0']), (e: { code?: number; stderr?: string }) => {
    assert.equal(e.code, 1);
    assert.match(e.stderr!, /bad\.wasm: not a WebAssembly module/);
    return true;
  });
  const noSnapshot = assert.rejects(run(process.execPath, [CLI, 'dev', join(ROOT, 'build/examples/counter.wasm'), '--restore', join(tmp.dir, 'none.k32s'), '--port', '0']), /none\.k32s: no such file/);
  await Promise.all([notWasm, noSnapshot]);
});

test('kube32-cli dev --topics: a channel send on a subscribed topic comes back as an event', { timeout: 30_000 }, async (t) => {
  const tmp = tempDir('dev-topics');
  t.after(tmp.remove);
  // Each tick sends "ping" on the channel "t"; each event bumps a counter the response carries.
  const wasm = join(tmp.dir, 'pinger.wasm');
  writeFileSync(wasm, wat(`(module
    (import "k32" "kube32_channel_open" (func $open (param i32 i32) (result i32)))
    (import "k32" "k32_channel_send" (func $send (param i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "tping")
    (data (i32.const 100) "HTTP/1.1 200 OK\\r\\ncontent-length: 1\\r\\n\\r\\n0")
    (global $events (mut i32) (i32.const 0))
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 1024))
    (func (export "k32_tick") (drop (call $send (call $open (i32.const 0) (i32.const 1)) (i32.const 1) (i32.const 4))))
    (func (export "k32_event") (param i32 i32 i32 i32) (global.set $events (i32.add (global.get $events) (i32.const 1))))
    (func (export "k32_handle") (param i32 i32) (result i64)
      (i32.store8 (i32.const 138) (i32.add (i32.const 48) (i32.lt_u (i32.const 0) (global.get $events))))
      (i64.or (i64.const 100) (i64.shl (i64.const 39) (i64.const 32)))))`));
  const dev = startDev([wasm, '--tick-interval', '20ms', '--topics', 't,other']);
  t.after(() => dev.child.kill('SIGKILL'));
  const url = await dev.url;
  let body = '0';
  const deadline = Date.now() + 10_000;
  while (body !== '1' && Date.now() < deadline) ({ stdout: body } = await run('curl', ['-sS', '--max-time', '5', url]));
  assert.equal(body, '1', 'the pod received its own channel message as an event');
  assert.match(dev.stderr(), /channel t: 4 bytes/);
  dev.child.kill('SIGTERM');
  assert.equal(await dev.exited, 0);
});

/** Runs `kube32-cli dev ARGS` to its end (bounded: a runner that hangs fails the test). */
async function devFails(args: string[]): Promise<{ code: number | null; stderr: string; ms: number }> {
  const t0 = performance.now();
  try {
    await run(process.execPath, [CLI, 'dev', ...args], { timeout: 20_000 });
  } catch (err: unknown) {
    const e = err as { code?: number | string; killed?: boolean; stderr?: string };
    assert.ok(!e.killed, `kube32-cli dev ${args.join(' ')} kept running: ${e.stderr}`);
    return { code: typeof e.code === 'number' ? e.code : null, stderr: e.stderr ?? '', ms: performance.now() - t0 };
  }
  throw new Error(`kube32-cli dev ${args.join(' ')} succeeded`);
}

test('kube32-cli dev exits at once, non-zero, when it cannot listen or cannot start the pod; Ctrl-C cancels a start or a stuck save', { timeout: 60_000 }, async (t) => {
  const wasm = join(ROOT, 'build/examples/counter.wasm');
  example('counter');
  const tmp = tempDir('dev-fail');
  t.after(tmp.remove);
  const busy = createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  t.after(() => busy.close());
  const port = (busy.address() as AddressInfo).port;
  const trap = join(tmp.dir, 'trap.wasm');
  writeFileSync(trap, wat(`(module (memory (export "memory") 1)
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 0))
    (func (export "k32_handle") (param i32 i32) (result i64) (i64.const 0))
    (func (export "k32_init") unreachable))`));
  const [inUse, noAddress, badSave, trapped] = await Promise.all([
    devFails([wasm, '--port', String(port)]),
    // 192.0.2.1 (TEST-NET-1) is never an address of this computer.
    devFails([wasm, '--port', '0', '--address', '192.0.2.1']),
    devFails([wasm, '--port', '0', '--save-on-exit', join(tmp.dir, 'no-such-dir', 'x.k32s')]),
    devFails([trap, '--port', '0']),
    cancelDuringStart(t, tmp),
    secondInterrupt(t, tmp),
  ]);
  assert.equal(inUse.code, 1);
  assert.match(inUse.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use \\(EADDRINUSE\\)`));
  assert.equal(noAddress.code, 1);
  assert.match(noAddress.stderr, /cannot listen on 192\.0\.2\.1:0: no interface of this computer has that address \(EADDRNOTAVAIL\)/);
  assert.equal(badSave.code, 1);
  assert.match(badSave.stderr, /--save-on-exit .*x\.k32s: no such directory .*no-such-dir/);
  assert.equal(trapped.code, 1);
  assert.match(trapped.stderr, /trap: Trap: k32_init: unreachable/);
  for (const r of [inUse, noAddress, badSave, trapped]) assert.doesNotMatch(r.stderr, /serving/);
});

/**
 * Ctrl-C while k32_init runs cancels the start: exit code 130, the message, the temporary
 * directory removed. Returns once the runner has ended.
 */
async function cancelDuringStart(t: TestContext, tmp: { dir: string }): Promise<void> {
  const name = `slow-init-${process.pid}`;
  const wasm = join(tmp.dir, `${name}.wasm`);
  writeFileSync(wasm, wat(`(module
    (import "k32" "k32_log" (func $log (param i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "initialising")
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 1024))
    (func (export "k32_handle") (param i32 i32) (result i64) (i64.const 0))
    (func (export "k32_init") (call $log (i32.const 0) (i32.const 12)) (loop $l (br $l))))`));
  const dev = startDev([wasm]);
  t.after(() => dev.child.kill('SIGKILL'));
  dev.url.catch(() => {});
  const logged = Promise.withResolvers<void>();
  dev.child.stdout!.on('data', () => {
    if (dev.stdout().includes('initialising')) logged.resolve();
  });
  void dev.exited.then(() => logged.reject(new Error(`kube32-cli dev ended before k32_init logged: ${dev.stderr()}`)));
  await logged.promise;
  dev.child.kill('SIGINT');
  assert.equal(await dev.exited, 130, dev.stderr());
  assert.match(dev.stderr(), new RegExp(`${name}: the start was cancelled`));
  assert.deepEqual(readdirSync(tmpdir()).filter((f) => f.startsWith(`kube32-dev-${name}-`)), []);
}

/**
 * A second Ctrl-C while --save-on-exit waits for a call that never returns ends the runner at
 * once: exit code 1, no snapshot file, no temporary file beside it.
 */
async function secondInterrupt(t: TestContext, tmp: { dir: string }): Promise<void> {
  const name = `stuck-tick-${process.pid}`;
  const wasm = join(tmp.dir, `${name}.wasm`);
  writeFileSync(wasm, wat(`(module
    (import "k32" "k32_log" (func $log (param i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "ticking")
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 1024))
    (func (export "k32_handle") (param i32 i32) (result i64) (i64.const 0))
    (func (export "k32_tick") (call $log (i32.const 0) (i32.const 7)) (loop $l (br $l))))`));
  const file = join(tmp.dir, 'stuck.k32s');
  const dev = startDev([wasm, '--tick-interval', '10ms', '--save-on-exit', file, '--freeze-timeout', '60s']);
  t.after(() => dev.child.kill('SIGKILL'));
  dev.url.catch(() => {});
  const ticking = Promise.withResolvers<void>();
  dev.child.stdout!.on('data', () => {
    if (dev.stdout().includes('ticking')) ticking.resolve();
  });
  void dev.exited.then(() => ticking.reject(new Error(`kube32-cli dev ended before its tick ran: ${dev.stderr()}`)));
  await ticking.promise; // the tick now never returns: a freeze waits for it
  const stopping = Promise.withResolvers<void>();
  dev.child.stderr!.on('data', () => {
    if (dev.stderr().includes('SIGINT: stopping')) stopping.resolve();
  });
  void dev.exited.then(() => stopping.reject(new Error(`kube32-cli dev ended after one SIGINT: ${dev.stderr()}`)));
  dev.child.kill('SIGINT');
  await stopping.promise;
  dev.child.kill('SIGINT');
  assert.equal(await dev.exited, 1, dev.stderr());
  assert.match(dev.stderr(), new RegExp(`SIGINT again: ending ${name} without saving`));
  assert.ok(!existsSync(file));
  assert.deepEqual(readdirSync(tmp.dir).filter((f) => f.endsWith('.tmp')), []);
  assert.deepEqual(readdirSync(tmpdir()).filter((f) => f.startsWith(`kube32-dev-${name}-`)), [], 'the temporary directory is removed');
}

test('kube32-cli dev refuses a --tick-interval longer than a timer waits (it ticked every 1 ms)', { timeout: 30_000 }, async () => {
  const wasm = join(ROOT, 'build/examples/counter.wasm');
  example('counter');
  const r = await devFails([wasm, '--port', '0', '--tick-interval', '1000h']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--tick-interval: duration "1000h" is too long: at most 596h31m23\.647s \(2147483647 ms\)/);
  assert.doesNotMatch(r.stderr, /serving/);
});
