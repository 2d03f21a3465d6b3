// TrafficService's calls (seed: "Traffic records"): every call streams the one channel through a
// bounded queue of its own; a caller that reads nothing (a `feosctl traffic watch` stopped with
// SIGSTOP) loses records, counted exactly in its next record's `missed`, while another caller
// gets every record. Also what a reader of the node loses (TrafficChannel.lost) reaches `missed`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { TrafficChannel, dnsQueryEntry, trafficService } from '../../src/feos/network/index.ts';

const FEOSCTL = join(import.meta.dirname, '../../bin/feosctl.js');
const POD = 'abcdefghjkm';

async function until<T>(what: string, ms: number, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A TrafficService served on a unix socket of a temp dir; stopped and removed after the test. */
async function serveTraffic(t: { after(fn: () => Promise<void>): void }, svc: ReturnType<typeof trafficService>): Promise<{ socket: string; server: grpc.Server }> {
  const dir = await mkdtemp(join(tmpdir(), 'k32t-traffic-watch-'));
  const server = new grpc.Server();
  server.addService(svc.definition, svc.implementation);
  const socket = join(dir, 'grpc.sock');
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  t.after(async () => {
    server.forceShutdown();
    await rm(dir, { recursive: true, force: true });
  });
  return { socket, server };
}

/** `feosctl --socket SOCKET traffic watch ARGS`: its output (stdout and stderr as they came) and its exit. */
function feosctlWatch(socket: string, ...args: string[]) {
  const child = spawn(process.execPath, [FEOSCTL, '--socket', socket, 'traffic', 'watch', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  for (const s of [child.stdout, child.stderr]) s.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.once('close', (c) => r(c)));
  return { child, exited, out: () => out };
}

test('a watcher that reads nothing misses records, counted in its next record; the others get them all', { timeout: 120_000 }, async (t) => {
  const channel = new TrafficChannel();
  const { socket } = await serveTraffic(t, trafficService(channel, { queueRecords: 200 }));
  const watch = (...args: string[]) => {
    const w = feosctlWatch(socket, '-o', 'json', ...args);
    const lines = () =>
      w
        .out()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { podId?: string; missed?: string; dnsQuery?: { name: string } });
    return { ...w, lines };
  };
  const slow = watch('--pod', POD);
  const fast = watch();
  t.after(async () => {
    for (const w of [slow, fast]) {
      w.child.kill('SIGCONT');
      w.child.kill('SIGKILL');
    }
  });
  let seq = 0;
  const published: string[] = [];
  const publish = (name: string, podId = POD) => {
    channel.publish(dnsQueryEntry({ time: Date.now(), podId, source: '169.254.16.1', transport: 'udp', name, type: 'A', rcode: 'NXDOMAIN', answeredBy: '11.0.0.2', addresses: [] }));
    if (podId === POD) published.push(name);
  };
  await until('both watchers to stream', 30_000, () => {
    publish(`warm-${seq++}`);
    return slow.lines().length > 0 && fast.lines().length > 0 ? true : undefined;
  });
  const first = slow.lines()[0].dnsQuery!.name;
  slow.child.kill('SIGSTOP');
  // Records of another pod reach the unfiltered watcher alone.
  publish('other-pod', 'bcdefghjkmn');
  const N = 5000;
  // In chunks of half the queue, each once the reading watcher has the one before: it keeps up.
  for (let i = 0; i < N; i++) {
    publish(`burst-${i}`);
    if (i % 100 === 99) {
      const name = `burst-${i}`;
      await until(`the reading watcher to get ${name}`, 30_000, () => (fast.out().includes(`"${name}"`) ? true : undefined));
    }
  }
  const fastNames = fast.lines().map((l) => l.dnsQuery?.name);
  assert.ok(fastNames.includes('other-pod'));
  for (let i = 0; i < N; i += 499) assert.ok(fastNames.includes(`burst-${i}`), `burst-${i}`);
  assert.equal(fast.lines().reduce((n, l) => n + Number(l.missed ?? 0), 0), 0, 'the reading watcher missed nothing');
  slow.child.kill('SIGCONT');
  let j = 0;
  const last = await until('the stopped watcher to catch up', 30_000, () => {
    const name = `after-${j++}`;
    publish(name);
    return slow.lines().some((l) => l.dnsQuery?.name === `after-${j - 2}`) ? `after-${j - 2}` : undefined;
  });
  const got = slow.lines();
  const missed = got.reduce((n, l) => n + Number(l.missed ?? 0), 0);
  assert.ok(missed > 0, 'records were missed');
  assert.ok(got.every((l) => l.podId === POD), 'only the pod asked for');
  const span = published.indexOf(last) - published.indexOf(first) + 1;
  assert.equal(got.filter((l) => published.indexOf(l.dnsQuery!.name) <= published.indexOf(last)).length + missed, span, `got ${got.length}, missed ${missed}, span ${span}`);
  // What a reader of the node lost is counted in each caller's next record.
  channel.lost(3);
  publish('after-loss');
  const afterLoss = await until('the record after a loss', 10_000, () => slow.lines().find((l) => l.dnsQuery?.name === 'after-loss'));
  assert.equal(afterLoss.missed, '3');
  for (const w of [slow, fast]) {
    w.child.kill('SIGINT');
    assert.equal(await w.exited, 0, w.out().slice(-300));
  }
});

test('`feosctl traffic watch --pod` of a bad ID or of a pod the node has no records of fails at once, with the code', { timeout: 60_000 }, async (t) => {
  const { socket } = await serveTraffic(t, trafficService(new TrafficChannel(), { podKnown: (id) => id === POD }));
  const watch = async (...args: string[]) => {
    const w = feosctlWatch(socket, ...args);
    return { code: await w.exited, out: w.out() };
  };
  const bad = await watch('--pod', 'NOT_A_POD');
  assert.equal(bad.code, 1, bad.out);
  assert.match(bad.out, /INVALID_ARGUMENT: pod ID "NOT_A_POD": must be 11 characters of lowercase Crockford base32/);
  // One unknown among known ones fails the whole call, in table and JSON output alike.
  for (const o of ['table', 'json']) {
    const unknown = await watch('--pod', POD, '--pod', 'bcdefghjkmn', '-o', o);
    assert.equal(unknown.code, 1, unknown.out);
    assert.match(unknown.out, /^feosctl: NOT_FOUND: pod bcdefghjkmn has no network on this node, nor had one in the last 5 minutes\n$/);
  }
});

test('a watch ends at once when feosd stops, with UNAVAILABLE "feosd stops", so that it holds no stop for the grace of the calls', { timeout: 60_000 }, async (t) => {
  const channel = new TrafficChannel();
  const stopping = new AbortController();
  const { socket, server } = await serveTraffic(t, trafficService(channel, { stopping: stopping.signal }));
  const watch = () => {
    const w = feosctlWatch(socket);
    t.after(() => w.child.kill('SIGKILL'));
    return w;
  };
  const w = watch();
  let i = 0;
  await until('the watcher to stream', 30_000, () => {
    channel.publish(dnsQueryEntry({ time: Date.now(), podId: POD, source: '169.254.16.1', transport: 'udp', name: `before-stop-${i++}`, type: 'A', rcode: 'NXDOMAIN', answeredBy: '11.0.0.2', addresses: [] }));
    return w.out().includes('before-stop-') ? true : undefined;
  });
  // feosd's close() aborts `stopping` first, then waits for the calls to end (tryShutdown): the watch must end.
  stopping.abort();
  const shutdown = new Promise<void>((r) => server.tryShutdown(() => r()));
  assert.equal(await w.exited, 1, w.out());
  assert.match(w.out(), /\nfeosctl: UNAVAILABLE: feosd stops\n$/);
  await shutdown;
});
