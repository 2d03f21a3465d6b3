// feosd joins a stand-in control plane (test/feos/fleet-standin.ts): the join and the node's files,
// reports at the asked rate, events re-sent until acknowledged, a node connection on which the stand-in
// calls feosd's API, a renewal with a short certificate, PERMISSION_DENIED -> removed-<time>/ and a new
// join with a new token, and SIGTERM: Stopping first, GOAWAY, the in-flight stream ended with
// UNAVAILABLE "the node stops". Real feosd processes, no microVM.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createPrivateKey, createPublicKey, X509Certificate } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostname } from 'node:os';
import { startFeosd, tempDir, until, type FeosdProcess } from './harness.ts';
import { callStream, joinToken, joiningHandlers, makeCa, Refuse, serverCert, startStandIn } from './fleet-standin.ts';
import { unaryCall } from '../../src/feos/fleet/index.ts';
import { ListPodsRequestSchema, ListPodsResponseSchema, PodService, WatchPodEventsRequestSchema, PodEventSchema } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';

const SECRET = 'abcdef-0123456789abcdef';
const SECRET2 = 'ghijkl-0123456789abcdef';
const { dir, cleanup } = tempDir('k32t-fleet-');
const ca = await makeCa();
const cert = await serverCert(ca, { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] });
let sendEventsCalls = 0;
const base = joiningHandlers(ca, { secret: SECRET, ttlMs: 9000, renewAfterMs: 4000, reportIntervalMs: 300 });
const cp = await startStandIn(ca, cert, {
  ...base,
  // The first batch is not acknowledged: it must come again.
  SendEvents: (req: { events: { sequence: bigint }[] }) => (sendEventsCalls++ === 0 ? { acknowledged: 0n } : base.SendEvents(req)),
});
const nodeDir = join(dir, 'node');
const tokenFile = join(dir, 'join-token');
writeFileSync(tokenFile, joinToken(SECRET, ca));
let feosd: FeosdProcess | undefined;
after(async () => {
  await feosd?.stop('SIGKILL');
  await cp.close();
  cleanup();
});

const calls = (m: string) => cp.calls.filter((c) => c.method === m);
const leafSerial = () => new X509Certificate(readFileSync(join(nodeDir, 'chain.pem'), 'utf8')).serialNumber;

test('feosd joins: key.pem 0600 PKCS#8, chain.pem, bundle.pem, node.json in a 0700 directory', { timeout: 90_000 }, async () => {
  feosd = await startFeosd(dir, {
    extra: ['--control-plane', cp.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', 'n1', '--stop-grace', '10'],
  });
  await until('node.json', async () => (existsSync(join(nodeDir, 'node.json')) ? true : undefined), 30_000);
  const join1 = calls('Join');
  assert.equal(join1.length, 1);
  assert.equal((join1[0]!.request as { tokenSecret: string }).tokenSecret, SECRET);
  assert.equal((join1[0]!.request as { nodeName: string }).nodeName, 'n1');
  assert.equal(statSync(nodeDir).mode & 0o777, 0o700);
  assert.equal(statSync(join(nodeDir, 'key.pem')).mode & 0o777, 0o600);
  const keyPem = readFileSync(join(nodeDir, 'key.pem'), 'utf8');
  assert.match(keyPem, /^-----BEGIN PRIVATE KEY-----/);
  const key = createPrivateKey(keyPem);
  assert.equal(key.asymmetricKeyDetails?.namedCurve, 'prime256v1');
  const leaf = new X509Certificate(readFileSync(join(nodeDir, 'chain.pem'), 'utf8'));
  assert.ok(leaf.publicKey.export({ type: 'spki', format: 'der' }).equals(createPublicKey(key).export({ type: 'spki', format: 'der' })), "the certificate is for the node's key");
  assert.ok(leaf.checkIssued(new X509Certificate(ca.pem)));
  assert.equal(readFileSync(join(nodeDir, 'bundle.pem'), 'utf8'), ca.pem);
  const rec = JSON.parse(readFileSync(join(nodeDir, 'node.json'), 'utf8'));
  assert.equal(rec.name, 'n1');
  assert.equal(rec.spiffeId, 'spiffe://feos.local/node/n1');
  assert.ok(Date.parse(rec.notAfter) > Date.now() && Date.parse(rec.renewAt) < Date.parse(rec.notAfter));
  assert.deepEqual(rec.instances, []);
});

test('reports come at the rate the control plane asks (300 ms), on the node certificate', { timeout: 60_000 }, async () => {
  await until('8 reports', async () => (calls('Report').length >= 8 ? true : undefined), 30_000);
  const at = calls('Report').map((c) => {
    const t = (c.request as { collectedAt: { seconds: bigint; nanos: number } }).collectedAt;
    return Number(t.seconds) * 1000 + t.nanos / 1e6;
  });
  const gaps = at.slice(2).map((t, i) => t - at[i + 1]!);
  // collected_at is the end of each collection (the pods' list takes up to a second), so one gap may
  // shrink by what the collection before it took longer on a loaded machine; the ticks keep the rate,
  // which the mean over the gaps shows.
  const mean = gaps.reduce((x, y) => x + y, 0) / gaps.length;
  assert.ok(mean >= 250, `no report sooner than asked: ${gaps} (mean ${mean})`);
  assert.ok(gaps.sort((a, b) => a - b)[Math.floor(gaps.length / 2)]! < 1500, `as often as asked, not every 3 s: ${gaps}`);
  const r = calls('Report').at(-1)!;
  assert.ok(r.peerSerial, 'mutual TLS');
  const req = r.request as { startId: string; node: { hostname: string; cpus: number } };
  assert.equal(req.node.hostname, hostname());
  assert.ok(req.node.cpus > 0);
});

test('events are numbered from 1 and sent again until acknowledged', { timeout: 60_000 }, async () => {
  await until('two batches', async () => (calls('SendEvents').length >= 2 ? true : undefined), 30_000);
  const seqs = (i: number) => (calls('SendEvents')[i]!.request as { events: { sequence: bigint; event: { case: string; value: { reason?: string } } }[] }).events;
  const first = seqs(0);
  assert.equal(first[0]!.sequence, 1n);
  assert.equal(first[0]!.event.case, 'feosd');
  assert.equal(first[0]!.event.value.reason, 'Started');
  assert.equal(seqs(1)[0]!.sequence, 1n, 'not acknowledged: sent again');
  const reports = calls('Report').length;
  await until('5 more reports', async () => (calls('Report').length >= reports + 5 ? true : undefined), 30_000);
  assert.ok(calls('SendEvents').slice(2).every((c) => (c.request as { events: { sequence: bigint }[] }).events.every((e) => e.sequence > 1n)), 'acknowledged: not sent again');
});

test("a node connection: the stand-in calls feosd's ListPods over it", { timeout: 60_000 }, async () => {
  await until('a node connection', async () => (cp.nodeSessions.length > 0 ? true : undefined), 30_000);
  const s = cp.nodeSessions.at(-1)!;
  const res = await unaryCall(s, PodService, 'ListPods', ListPodsRequestSchema, ListPodsResponseSchema, {}, 10_000);
  assert.deepEqual(res.pods, []);
  assert.ok(cp.connections.some((c) => c.alpn === 'feos-node/1' && c.peerSerial), 'with the node certificate');
});

test('the certificate is renewed at its renewal time; new connections use the new one', { timeout: 60_000 }, async () => {
  const before = leafSerial();
  const old = cp.nodeSessions.filter((s) => !s.closed && !s.destroyed);
  const drained = old.map((s) => new Promise<void>((r) => s.once('goaway', () => r())));
  await until('a renewal', async () => (calls('Renew').length > 0 && leafSerial() !== before ? true : undefined), 30_000);
  const now = leafSerial();
  await until('a node connection with the new certificate', async () => (cp.connections.some((c) => c.alpn === 'feos-node/1' && c.peerSerial === now) ? true : undefined), 30_000);
  await Promise.all(drained);
  assert.ok(old.length > 0, 'the old node connections drain (GOAWAY)');
  await until('a report with the new certificate', async () => (calls('Report').some((c) => c.peerSerial === now) ? true : undefined), 30_000);
  const rec = JSON.parse(readFileSync(join(nodeDir, 'node.json'), 'utf8'));
  assert.ok(Date.parse(rec.renewAt) > Date.now() - 5000);
});

test('PERMISSION_DENIED: the identity moves into removed-<time>/, and the node joins again with a new token', { timeout: 90_000 }, async () => {
  const oldKey = readFileSync(join(nodeDir, 'key.pem'), 'utf8');
  const sessions = [...cp.nodeSessions];
  cp.handlers.Report = () => {
    throw new Refuse(7, 'the node was removed');
  };
  const removed = await until('removed-*', async () => readdirSync(nodeDir).find((f) => f.startsWith('removed-') && existsSync(join(nodeDir, f, 'node.json'))), 30_000);
  assert.match(removed, /^removed-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z$/);
  assert.equal(readFileSync(join(nodeDir, removed, 'key.pem'), 'utf8'), oldKey);
  assert.ok(existsSync(join(nodeDir, removed, 'chain.pem')));
  await until('the node connections closed', async () => (sessions.every((s) => s.closed || s.destroyed) ? true : undefined), 30_000);
  // The same token is not sent again; a new one is.
  Object.assign(cp.handlers, joiningHandlers(ca, { secret: SECRET2, reportIntervalMs: 300 }));
  writeFileSync(tokenFile, joinToken(SECRET2, ca));
  await until('a join with the new token', async () => (calls('Join').length >= 2 ? true : undefined), 30_000);
  assert.deepEqual(
    calls('Join').map((c) => (c.request as { tokenSecret: string }).tokenSecret),
    [SECRET, SECRET2],
  );
  await until('node.json again', async () => (existsSync(join(nodeDir, 'node.json')) ? true : undefined), 30_000);
  assert.notEqual(readFileSync(join(nodeDir, 'key.pem'), 'utf8'), oldKey, 'a new key');
});

test('SIGTERM: Stopping first, GOAWAY, then the stream in flight ends with UNAVAILABLE "the node stops"', { timeout: 90_000 }, async () => {
  const n = cp.nodeSessions.length;
  await until('a node connection after the new join', async () => (cp.nodeSessions.length > n || cp.nodeSessions.some((s) => !s.closed && !s.destroyed) ? true : undefined), 30_000);
  const s = cp.nodeSessions.findLast((x) => !x.closed && !x.destroyed)!;
  let goawayAt = 0;
  s.once('goaway', () => {
    goawayAt = Date.now();
  });
  const watch = callStream(s, '/feos.pod.v1.PodService/WatchPodEvents', WatchPodEventsRequestSchema, PodEventSchema, {});
  // Streams are taken in order: once ListPods is answered, the watch runs on feosd.
  await unaryCall(s, PodService, 'ListPods', ListPodsRequestSchema, ListPodsResponseSchema, {}, 10_000);
  await feosd!.stop('SIGTERM');
  const end = await watch.ended;
  assert.equal(end.status, '14', `UNAVAILABLE, got ${end.status} ${end.message}`);
  assert.match(end.message, /^the node stops: the call did not end within 1 s of feosd's stop$/);
  const stopping = calls('Stopping');
  assert.equal(stopping.length, 1);
  assert.ok(goawayAt > 0, 'GOAWAY on the node connection');
  assert.ok(stopping[0]!.at <= goawayAt && goawayAt <= end.at, 'Stopping, then GOAWAY, then the end');
  const ev = calls('SendEvents').flatMap((c) => (c.request as { events: { event: { case: string; value: { reason?: string } } }[] }).events);
  assert.ok(ev.some((e) => e.event.case === 'feosd' && e.event.value.reason === 'Stopping'), 'the Stopping event');
  assert.equal(feosd!.child.exitCode, 0);
});

test("a ping within the calls' grace: the stream in flight still ends with its UNAVAILABLE status", { timeout: 90_000 }, async () => {
  // --stop-grace 120: 12 s for the calls, more than the 10 s between two pings, so one falls within
  // the grace, on a node connection that drains (GOAWAY sent). Such a ping used to destroy the session
  // (grpc-js's keepalive) and reset the stream: it ended without any status.
  const n = cp.nodeSessions.length;
  feosd = await startFeosd(dir, {
    extra: ['--control-plane', cp.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', 'n1', '--stop-grace', '120'],
  });
  await until('a node connection', async () => (cp.nodeSessions.length > n ? true : undefined), 30_000);
  const s = cp.nodeSessions.at(-1)!;
  let goaway = false;
  let pingsAfterGoaway = 0;
  s.once('goaway', () => {
    goaway = true;
  });
  s.on('ping', () => {
    if (goaway) pingsAfterGoaway++;
  });
  const watch = callStream(s, '/feos.pod.v1.PodService/WatchPodEvents', WatchPodEventsRequestSchema, PodEventSchema, {});
  await unaryCall(s, PodService, 'ListPods', ListPodsRequestSchema, ListPodsResponseSchema, {}, 10_000);
  await feosd.stop('SIGTERM');
  const end = await watch.ended;
  assert.equal(end.status, '14', `UNAVAILABLE, got ${end.status} ${end.message}`);
  assert.match(end.message, /^the node stops: the call did not end within 12 s of feosd's stop$/);
  assert.ok(goaway, 'GOAWAY on the node connection');
  assert.ok(pingsAfterGoaway === 0, 'a draining node connection is not pinged');
  assert.equal(feosd.child.exitCode, 0);
});

test('the node connection is pinged every 10 s', { timeout: 60_000 }, async () => {
  const n = cp.nodeSessions.length;
  feosd = await startFeosd(dir, {
    extra: ['--control-plane', cp.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', 'n1', '--stop-grace', '10'],
  });
  await until('a node connection', async () => (cp.nodeSessions.length > n ? true : undefined), 30_000);
  const s = cp.nodeSessions.at(-1)!;
  await new Promise<void>((r) => s.once('ping', () => r()));
  assert.doesNotMatch(feosd.stderr(), /goes without pings/);
  await feosd.stop('SIGTERM');
});
