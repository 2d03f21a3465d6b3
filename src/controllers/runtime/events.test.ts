import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeContext, pod } from '../testing/fakes.ts';
import { EVENT_SPAM_BURST, EVENT_SPAM_REFILL_MS, recordEvent, recordPodEvent } from './context.ts';

const rsRef = { apiVersion: 'apps/v1', kind: 'ReplicaSet', namespace: 'default', name: 'web', uid: 'uid-web' };

test('one source writes at most 25 events about one object at once, then one per 5 minutes (client-go spam filter)', { timeout: 5000 }, async () => {
  const { ctx, fake, clock } = fakeContext();
  for (let i = 0; i < 40; i++) await recordEvent(ctx, rsRef, 'Normal', 'SuccessfulCreate', `Created pod: web-${i}`, { component: 'replicaset-controller' });
  assert.equal(fake.events.length, EVENT_SPAM_BURST);
  assert.equal(fake.events.at(-1)?.message, `Created pod: web-${EVENT_SPAM_BURST - 1}`);
  clock.advance(EVENT_SPAM_REFILL_MS);
  await recordEvent(ctx, rsRef, 'Normal', 'SuccessfulCreate', 'Created pod: web-late', { component: 'replicaset-controller' });
  await recordEvent(ctx, rsRef, 'Normal', 'SuccessfulCreate', 'Created pod: web-later', { component: 'replicaset-controller' });
  assert.deepEqual(fake.events.slice(EVENT_SPAM_BURST).map((e) => e.message), ['Created pod: web-late']);
  // Another source, or another object, has a bucket of its own.
  await recordEvent(ctx, rsRef, 'Normal', 'ScalingReplicaSet', 'other source', { component: 'deployment-controller' });
  assert.equal(fake.events.at(-1)?.message, 'other source');
});

test('every pod gets its own Scheduled event however many the scheduler writes', { timeout: 5000 }, async () => {
  const { ctx, fake } = fakeContext();
  for (let i = 0; i < 100; i++) await recordPodEvent(ctx, pod(`p${i}`), 'Normal', 'Scheduled', `Successfully assigned default/p${i} to a`, 'default-scheduler');
  assert.equal(fake.events.filter((e) => e.reason === 'Scheduled').length, 100);
});
