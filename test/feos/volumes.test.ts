// feos.volume.v1 against a real feosd (no VM): CreateVolume's checks and idempotence, claims by
// CreatePod all or none, ATTACHED until DeletePod, DeleteVolume refused while a pod has it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { makeClient } from '../../src/feos/api/index.ts';
import { VolumeService, VolumeState } from '../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { feosctl, PodState, startFeosd, tempDir, waitForPod } from './harness.ts';

const MiB = 1024n * 1024n;
const A = 'aaaaaaaa-2222-4333-8444-555555555555';
const B = 'bbbbbbbb-2222-4333-8444-666666666666';
const code = (e: unknown) => (e as { code?: number }).code;

test('volumes: create, claim all or none, attached until the pod goes, delete', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-vol-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const vols = makeClient(VolumeService, `unix:${feosd.socket}`);
  t.after(() => vols.grpc.close());

  for (const [id, size] of [['NOT-A-UUID', 64n * MiB], [A.toUpperCase(), 64n * MiB], [A, 32n * MiB], [A, 64n * MiB + 1n], [A, 17n * 1024n * 1024n * MiB]] as const) {
    await assert.rejects(vols.createVolume({ id, sizeBytes: size }), (e) => code(e) === status.INVALID_ARGUMENT, `${id} ${size}`);
  }
  const a = (await vols.createVolume({ id: A, sizeBytes: 64n * MiB, labels: { app: 'db' } })).volume!;
  assert.equal(a.state, VolumeState.AVAILABLE);
  assert.equal(a.formatted, false);
  const again = (await vols.createVolume({ id: A, sizeBytes: 64n * MiB, labels: { app: 'db' } })).volume!;
  assert.equal(again.id, A);
  await assert.rejects(vols.createVolume({ id: A, sizeBytes: 128n * MiB, labels: { app: 'db' } }), (e) => code(e) === status.ALREADY_EXISTS);
  await assert.rejects(vols.createVolume({ id: A, sizeBytes: 64n * MiB }), (e) => code(e) === status.ALREADY_EXISTS);
  assert.ok(existsSync(join(feosd.stateDir, 'volumes', `${A}.pb`)));

  // All or none: B is missing, so A is not claimed either.
  await assert.rejects(
    feosd.pods.createPod({ id: 'vnmpqd0aaaa', spec: { volumes: [{ name: 'a', volumeId: A }, { name: 'b', volumeId: B }] } }),
    (e) => code(e) === status.FAILED_PRECONDITION && /volume bbbbbbbb-2222-4333-8444-666666666666 is not on the node/.test((e as Error).message),
  );
  assert.equal((await vols.getVolume({ id: A })).volume!.state, VolumeState.AVAILABLE);

  await feosd.pods.createPod({ id: 'vnmpqd0aaaa', spec: { volumes: [{ name: 'a', volumeId: A }] } });
  const attached = (await vols.getVolume({ id: A })).volume!;
  assert.equal(attached.state, VolumeState.ATTACHED);
  assert.equal(attached.podId, 'vnmpqd0aaaa');
  await assert.rejects(
    feosd.pods.createPod({ id: 'vnmpqd0bbbb', spec: { volumes: [{ name: 'a', volumeId: A }] } }),
    (e) => code(e) === status.FAILED_PRECONDITION && /attached to pod vnmpqd0aaaa/.test((e as Error).message),
  );
  await assert.rejects(vols.deleteVolume({ id: A }), (e) => code(e) === status.FAILED_PRECONDITION);
  // No guest is installed: the bring-up fails, and the volume stays the pod's until the pod goes.
  await waitForPod(feosd, 'vnmpqd0aaaa', (p) => p.state === PodState.FAILED, 30_000);
  assert.equal((await vols.getVolume({ id: A })).volume!.state, VolumeState.ATTACHED);
  await feosd.pods.deletePod({ id: 'vnmpqd0aaaa' });
  const freed = (await vols.getVolume({ id: A })).volume!;
  assert.equal(freed.state, VolumeState.AVAILABLE);
  assert.equal(freed.podId, '');
  assert.equal((await vols.listVolumes({})).volumes.length, 1);
  const listed = await feosctl(feosd.socket, ['volume', 'list']);
  assert.match(listed.stdout, new RegExp(`${A}\\s+AVAILABLE\\s+64Mi`));
  const del = await feosctl(feosd.socket, ['volume', 'delete', A]);
  assert.equal(del.code, 0, del.stderr);
  await assert.rejects(vols.getVolume({ id: A }), (e) => code(e) === status.NOT_FOUND);
  const made = await feosctl(feosd.socket, ['volume', 'create', B, '--size', '1Gi', '--label', 'app=db', '-o', 'json']);
  assert.equal(made.code, 0, made.stderr);
  assert.equal(JSON.parse(made.stdout).state, 'VOLUME_STATE_AVAILABLE');
  const bad = await feosctl(feosd.socket, ['volume', 'create', 'nope', '--size', '1Gi']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /INVALID_ARGUMENT/);
  await assert.rejects(vols.deleteVolume({ id: A }), (e) => code(e) === status.NOT_FOUND);
  assert.equal(existsSync(join(feosd.stateDir, 'volumes', `${A}.pb`)), false);
});
