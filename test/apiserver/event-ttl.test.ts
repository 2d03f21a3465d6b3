/**
 * Core Events' time to live (`--event-ttl`, kube-apiserver's flag): as kube-apiserver's etcd lease granted
 * at each write, an Event lives for the TTL from its last write, whatever times it carries. One created
 * now with a `lastTimestamp` of yesterday is still there (it was deleted at once when the TTL ran from its
 * timestamps), and is deleted at its due time, not at a pass over every Event; one written again lives on
 * from that write; one written after it stays while it goes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoreV1Api, type CoreV1Event, Watch } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

test('an Event lives --event-ttl from its last write: an old lastTimestamp does not shorten it; it is then deleted', { timeout: 90_000 }, async (t) => {
  // 6 s: long enough for a create and a read on a loaded machine, short enough to see the expiry.
  const api = await startApiServer(t, { args: ['--event-ttl', '6s'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const yesterday = new Date(Date.now() - 86_400_000);
  const ev = (name: string, last: Date) => core.createNamespacedEvent({
    namespace: 'default',
    body: { metadata: { name }, involvedObject: { kind: 'Pod', name: 'p', namespace: 'default' }, reason: 'R', message: 'm', count: 1, firstTimestamp: last, lastTimestamp: last },
  });
  const names = async () => (await core.listNamespacedEvent({ namespace: 'default' })).items.map((e: CoreV1Event) => e.metadata?.name);

  await ev('old.1', yesterday);
  // The read right after the create (a TTL from yesterday's lastTimestamp deleted it at once).
  assert.equal((await core.readNamespacedEvent({ namespace: 'default', name: 'old.1' })).metadata?.name, 'old.1');

  // The deletions in the order of the last writes, seen by a watch: second.1 is created after first.1's
  // create, and first.1 is written again after second.1's create, so second.1 goes first.
  const deleted: string[] = [];
  const watching = await new Watch(api.kubeConfig).watch('/api/v1/namespaces/default/events', {}, (type: string, obj: CoreV1Event) => {
    if (type === 'DELETED') deleted.push(obj.metadata?.name ?? '');
  }, () => {});
  t.after(() => watching.abort());
  await waitFor('old.1 deleted after its TTL', 60_000, async () => !(await names()).includes('old.1'));
  await ev('first.1', yesterday);
  await ev('second.1', yesterday);
  const first = await core.readNamespacedEvent({ namespace: 'default', name: 'first.1' });
  await core.replaceNamespacedEvent({ namespace: 'default', name: 'first.1', body: { ...first, count: 2, lastTimestamp: new Date() } });
  await waitFor('first.1 and second.1 deleted after their TTL', 60_000, () => deleted.includes('first.1') && deleted.includes('second.1'));
  assert.deepEqual(deleted.filter((n) => n !== 'old.1'), ['second.1', 'first.1'], 'an Event written again outlives one created before that write');
});
