import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../api/index.ts';
import { fakeContext } from '../testing/fakes.ts';
import { reconcileServiceAccount } from './controller.ts';

test('a namespace without its default ServiceAccount gets one; one that has it, or is going, gets nothing', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.namespaces.set({ metadata: { name: 'team-a' } });
  await reconcileServiceAccount('team-a', ctx);
  assert.deepEqual(fake.calls, [
    { op: 'createServiceAccount', args: ['team-a', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default', namespace: 'team-a' } }] },
  ]);

  fake.calls.length = 0;
  cache.serviceAccounts.set({ metadata: { name: 'default', namespace: 'team-a' } });
  await reconcileServiceAccount('team-a', ctx);
  cache.namespaces.set({ metadata: { name: 'going', deletionTimestamp: new Date() }, status: { phase: 'Terminating' } });
  await reconcileServiceAccount('going', ctx);
  await reconcileServiceAccount('absent', ctx);
  assert.deepEqual(fake.calls, []);
});

test('AlreadyExists (another writer was first) is success; another error goes back to the queue', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.namespaces.set({ metadata: { name: 'b' } });
  fake.failures.set('createServiceAccount', new ApiError('create serviceaccount b/default', 409, 'AlreadyExists', 'serviceaccounts "default" already exists'));
  await reconcileServiceAccount('b', ctx);
  fake.failures.set('createServiceAccount', new ApiError('create serviceaccount b/default', 503, 'ServiceUnavailable', 'etcd does not answer'));
  await assert.rejects(reconcileServiceAccount('b', ctx), /503 ServiceUnavailable/);
});
