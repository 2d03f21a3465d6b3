/**
 * Core Events' time to live (`--event-ttl`, kube-apiserver's flag): an Event is deleted when its last
 * occurrence is older than the TTL, at that moment (a heap of due times), not at the next pass over every
 * Event; a fresh one stays, and one written again (`lastTimestamp` raised, as a repeat raises it) lives on
 * from its new time.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

const TTL_MS = 10 * 60_000;

test('an Event past --event-ttl is deleted at its due time; a fresh one and one written again stay', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--event-ttl', '10m'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const ev = (name: string, last: Date) => core.createNamespacedEvent({
    namespace: 'default',
    body: { metadata: { name }, involvedObject: { kind: 'Pod', name: 'p', namespace: 'default' }, reason: 'R', message: 'm', count: 1, firstTimestamp: last, lastTimestamp: last },
  });
  const exists = async (name: string) => (await core.listNamespacedEvent({ namespace: 'default', fieldSelector: `metadata.name=${name}` })).items.length === 1;
  // Due in 1 s, then written again (a repeat) with a fresh lastTimestamp: it must outlive its first due time.
  await ev('repeated.1', new Date(Date.now() - TTL_MS + 1_000));
  const repeated = await core.readNamespacedEvent({ namespace: 'default', name: 'repeated.1' });
  await core.replaceNamespacedEvent({ namespace: 'default', name: 'repeated.1', body: { ...repeated, count: 2, lastTimestamp: new Date() } });
  await ev('fresh.1', new Date());
  // Due in 2 s (the minute-long passes of a scan would not reach it within this test).
  await ev('expiring.1', new Date(Date.now() - TTL_MS + 2_000));
  assert.ok(await exists('expiring.1'), 'not expired before its due time');
  await waitFor('the expired Event deleted', 15_000, async () => !(await exists('expiring.1')));
  assert.ok(await exists('fresh.1'), 'a fresh Event stays');
  assert.ok(await exists('repeated.1'), 'an Event written again lives on from its new lastTimestamp');
});
