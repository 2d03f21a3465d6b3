// Several control-plane instances (seed 000, "The control plane"): the join's answer lists two stand-ins;
// feosd holds a node connection to each and reports to one at a time, moving to the other when a call
// fails (the first one stopped); the stopped one, started again on its port, gets its node connection
// back (dialed again on the backoff). Real feosd process, no microVM.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startFeosd, tempDir, until, type FeosdProcess } from './harness.ts';
import { joinToken, joiningHandlers, makeCa, serverCert, startStandIn, type StandIn } from './fleet-standin.ts';
import { unaryCall } from '../../src/feos/fleet/index.ts';
import { ListPodsRequestSchema, ListPodsResponseSchema, PodService } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';

const SECRET = 'abcdef-0123456789abcdef';
const { dir, cleanup } = tempDir('k32t-fleeti-');
const ca = await makeCa();
const cert = await serverCert(ca, { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] });
const instances: { name: string; address: string }[] = [];
const handlers = () => joiningHandlers(ca, { secret: SECRET, reportIntervalMs: 300, instances });
let a: StandIn = await startStandIn(ca, cert, handlers());
const b: StandIn = await startStandIn(ca, cert, handlers());
instances.push({ name: 'a', address: a.address }, { name: 'b', address: b.address });
const tokenFile = join(dir, 'join-token');
const nodeDir = join(dir, 'node');
writeFileSync(tokenFile, joinToken(SECRET, ca));
let feosd: FeosdProcess | undefined;
after(async () => {
  await feosd?.stop('SIGKILL');
  await a.close();
  await b.close();
  cleanup();
});
const reports = (s: StandIn) => s.calls.filter((c) => c.method === 'Report').length;
const live = (s: StandIn) => s.nodeSessions.filter((x) => !x.closed && !x.destroyed);

test('a node connection to each instance listed; node.json keeps the list', { timeout: 90_000 }, async () => {
  feosd = await startFeosd(dir, {
    extra: ['--control-plane', a.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', 'multi'],
  });
  await until('node connections to a and b', async () => (live(a).length > 0 && live(b).length > 0 ? true : undefined), 30_000);
  for (const s of [a, b]) {
    const res = await unaryCall(live(s).at(-1)!, PodService, 'ListPods', ListPodsRequestSchema, ListPodsResponseSchema, {}, 10_000);
    assert.deepEqual(res.pods, []);
  }
  assert.deepEqual(JSON.parse(readFileSync(join(nodeDir, 'node.json'), 'utf8')).instances, instances);
  await until('reports to a', async () => (reports(a) >= 2 ? true : undefined), 30_000);
  assert.equal(reports(b), 0, 'one instance at a time');
});

test('the uplink moves to the next instance when a call fails; a restarted instance gets its connection back', { timeout: 90_000 }, async () => {
  const port = a.port;
  await a.close();
  await until('reports to b', async () => (reports(b) >= 3 ? true : undefined), 30_000);
  assert.ok(live(b).length > 0, "b's node connection stays");
  a = await startStandIn(ca, cert, handlers(), port);
  await until("a's node connection back", async () => (live(a).length > 0 ? true : undefined), 60_000);
  const res = await unaryCall(live(a).at(-1)!, PodService, 'ListPods', ListPodsRequestSchema, ListPodsResponseSchema, {}, 10_000);
  assert.deepEqual(res.pods, []);
  assert.equal(a.calls.filter((c) => c.method === 'Join').length, 0, 'no new join');
});

test('SIGTERM with every instance gone: Stopping is given up after 3 s and feosd ends', { timeout: 60_000 }, async () => {
  await a.close();
  await b.close();
  await feosd!.stop('SIGTERM');
  assert.equal(feosd!.child.exitCode, 0);
  assert.match(feosd!.stderr(), /Stopping was not acknowledged \(3 s at most\)/);
});
