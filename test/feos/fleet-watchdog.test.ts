// The watchdog and the reports' pods (seed 000, "The control plane"): the fleet client (src/feos/fleet's
// door, in this process) against a stand-in control plane, with a pod source that stops answering:
// the reports carry the last pods as stale, stop once the pods have not answered for the watchdog's
// time (90 s in feosd, 1.5 s here), and come back when the pods answer again; pod events become node
// events; at most 16384 events are kept, the oldest dropped and counted.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { tempDir, until } from './harness.ts';
import { joinToken, joiningHandlers, makeCa, serverCert, startStandIn } from './fleet-standin.ts';
import { startFleet } from '../../src/feos/fleet/index.ts';
import { createLogger } from '../../src/lib/index.ts';
import { type PodEvent, type PodInfo, PodInfoSchema, PodEventSchema } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';

const SECRET = 'abcdef-0123456789abcdef';
const { dir, cleanup } = tempDir('k32t-fleetw-');
const ca = await makeCa();
const cp = await startStandIn(ca, await serverCert(ca, { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] }), joiningHandlers(ca, { secret: SECRET, reportIntervalMs: 200 }));
writeFileSync(join(dir, 'token'), joinToken(SECRET, ca));

/** A pod source whose list answers, or fails as pods that do not answer. */
class Pods extends EventEmitter<{ event: [PodEvent] }> {
  answering = true;
  lists = 0;
  list(): PodInfo[] {
    this.lists++;
    if (!this.answering) throw new Error('the pods do not answer');
    return [create(PodInfoSchema, { id: 'p1' })];
  }
}
const pods = new Pods();
const fleet = startFleet(
  { controlPlane: cp.address, controlPlaneName: 'cp.test', trustDomain: 'feos.local', joinTokenFile: join(dir, 'token'), nodeDir: join(dir, 'node'), nodeName: 'w1' },
  { services: [], pods, accelerator: 'tcg', guestVersions: () => [], version: 'test', log: createLogger('fleet-test'), watchdogMs: 1500 },
);
after(async () => {
  await fleet.stop(100);
  await cp.close();
  cleanup();
});
const reports = () => cp.calls.filter((c) => c.method === 'Report').map((c) => c.request as { pods: PodInfo[]; podsStale: boolean });

test('reports carry the pods; stale ones when they do not answer; none after the watchdog; again once they answer', { timeout: 60_000 }, async () => {
  await until('3 reports', async () => (reports().length >= 3 ? true : undefined), 30_000);
  assert.deepEqual(reports().at(-1)!.pods.map((p) => p.id), ['p1']);
  assert.equal(reports().at(-1)!.podsStale, false);
  pods.answering = false;
  await until('a stale report', async () => (reports().some((r) => r.podsStale) ? true : undefined), 30_000);
  const stale = reports().find((r) => r.podsStale)!;
  assert.deepEqual(stale.pods.map((p) => p.id), ['p1'], 'the last pods that answered');
  // The watchdog's collections go on (each tick asks the pods); the reports stop: ten collections
  // without a report.
  await until(
    'reports stop',
    async () => {
      const c = reports().length;
      const l = pods.lists;
      await until('10 collections', async () => (pods.lists >= l + 10 ? true : undefined), 10_000);
      return reports().length === c ? true : undefined;
    },
    30_000,
  );
  const count = reports().length;
  pods.answering = true;
  await until('reports again', async () => (reports().length > count && !reports().at(-1)!.podsStale ? true : undefined), 30_000);
});

test('pod events go out as node events, numbered after Started', { timeout: 30_000 }, async () => {
  pods.emit('event', create(PodEventSchema, { podId: 'p1', pod: create(PodInfoSchema, { id: 'p1' }) }));
  const ev = () => cp.calls.filter((c) => c.method === 'SendEvents').flatMap((c) => (c.request as { events: { sequence: bigint; event: { case: string; value: { podId?: string } } }[] }).events);
  await until('the pod event', async () => (ev().some((e) => e.event.case === 'pod') ? true : undefined), 20_000);
  const podEv = ev().find((e) => e.event.case === 'pod')!;
  assert.equal(podEv.event.value.podId, 'p1');
  assert.equal(podEv.sequence, 2n);
  assert.equal(fleet.startId.length, 36);
});

test('at most 16384 events are kept: the oldest are dropped and counted', { timeout: 60_000 }, async () => {
  const cp2 = await startStandIn(ca, await serverCert(ca, { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] }), joiningHandlers(ca, { secret: SECRET }));
  const pods2 = new Pods();
  const tokenFile = join(dir, 'token2');
  // No token yet: the events wait in memory.
  const f2 = startFleet(
    { controlPlane: cp2.address, controlPlaneName: 'cp.test', trustDomain: 'feos.local', joinTokenFile: tokenFile, nodeDir: join(dir, 'node2'), nodeName: 'w2' },
    { services: [], pods: pods2, accelerator: 'tcg', guestVersions: () => [], version: 'test', log: createLogger('fleet-test') },
  );
  try {
    for (let i = 0; i < 16_400; i++) pods2.emit('event', create(PodEventSchema, { podId: `p${i}` }));
    writeFileSync(tokenFile, joinToken(SECRET, ca));
    const batches = () => cp2.calls.filter((c) => c.method === 'SendEvents').map((c) => c.request as { events: { sequence: bigint }[]; dropped: bigint });
    await until('every event acknowledged', async () => (batches().reduce((n, b) => n + b.events.length, 0) >= 16_384 ? true : undefined), 30_000);
    // Started (1) and the first 16 pod events (2..17) were dropped.
    assert.equal(batches()[0]!.events[0]!.sequence, 18n);
    assert.equal(batches()[0]!.dropped, 17n);
    assert.equal(batches().at(-1)!.events.at(-1)!.sequence, 16_401n);
    assert.ok(batches().every((b) => b.events.length <= 1000), 'in batches');
  } finally {
    await f2.stop(100);
    await cp2.close();
  }
});
