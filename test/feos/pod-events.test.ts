// WatchPodEvents against a real feosd (no VM): each event carries the pod as that change recorded it,
// also for a watcher that reads slowly (its events wait in feosd's stream behind HTTP/2's flow control,
// and were serialized only then: from the pod the bring-up had changed meanwhile).
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type PodEvent, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startFeosd, tempDir, until } from './harness.ts';

test('a slow watcher gets each change as it was recorded: PENDING, PENDING with its guest version, then FAILED, for every pod', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-events-');
  t.after(cleanup);
  // A guest version whose files are empty: each bring-up records it (a second PENDING), then fails.
  const guest = join(dir, 'guest', '20260101-000000');
  mkdirSync(guest, { recursive: true });
  for (const f of ['vmlinuz', 'initramfs', 'system.img', 'data.qcow2', 'guest.json']) writeFileSync(join(guest, f), '');
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const stream = feosd.pods.watchPodEvents({});
  t.after(() => stream.cancel());
  const events: PodEvent[] = [];
  stream.on('data', (ev: PodEvent) => events.push(ev));
  stream.on('error', () => {});
  // The watcher stops reading; with 30 KiB of metadata a pod, a few events fill HTTP/2's 64 KiB window
  // and feosd's next writes wait.
  stream.pause();
  const metadata = { note: 'x'.repeat(30 * 1024) };
  const ids = Array.from({ length: 40 }, (_, i) => `evsxw${String(i).padStart(4, '0')}ab`);
  for (const id of ids) await feosd.pods.createPod({ id, spec: { metadata } });
  await until('every pod is FAILED', async () => ((await feosd.pods.listPods({})).pods.every((p) => p.state === PodState.FAILED) ? true : undefined), 60_000);
  stream.resume();
  await until('every FAILED event is read', async () => (events.filter((e) => e.pod?.state === PodState.FAILED).length >= ids.length ? true : undefined), 60_000);
  for (const id of ids) {
    const seen = events.filter((e) => e.podId === id && !e.initial).map((e) => `${PodState[e.pod!.state]}${e.pod!.guestVersion ? ` ${e.pod!.guestVersion}` : ''}`);
    assert.deepEqual(seen, ['PENDING', 'PENDING 20260101-000000', 'FAILED 20260101-000000'], `${id}: the pods its events carried`);
  }
});
