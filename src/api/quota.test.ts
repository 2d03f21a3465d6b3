import assert from 'node:assert/strict';
import { test } from 'node:test';
import { amountOf, formatQuantity, namespaceUsage, podComputeUsage, quotaMatches } from './quota.ts';

test('quantities print as Kubernetes prints them', () => {
  const f = (q: string) => formatQuantity(amountOf(q));
  assert.equal(f('500m'), '500m');
  assert.equal(f('1'), '1');
  assert.equal(f('1000m'), '1');
  assert.equal(f('2000'), '2k');
  assert.equal(f('1024Mi'), '1Gi');
  assert.equal(f('1536Ki'), '1536Ki');
  assert.equal(f('0'), '0');
  assert.equal(f('1.5'), '1500m');
});

test("a pod's compute usage: the containers' sum or the largest init container, and the overhead", () => {
  const u = podComputeUsage({
    containers: [{ resources: { requests: { cpu: '250m', memory: '64Mi' } } }, { resources: { requests: { cpu: '250m' }, limits: { memory: '128Mi' } } }],
    initContainers: [{ resources: { requests: { cpu: '2' } } }],
    overhead: { memory: '1Mi' },
  });
  assert.equal(formatQuantity(u['requests.cpu']!), '2');
  assert.equal(formatQuantity(u.cpu!), '2');
  assert.equal(formatQuantity(u['requests.memory']!), '65Mi');
  assert.equal(formatQuantity(u['limits.memory']!), '129Mi');
  assert.equal(u['limits.cpu'], undefined);
});

test('a namespace usage counts pods that still run, and scopes pick pods only', () => {
  const pods = [
    { spec: { containers: [{ resources: { requests: { memory: '1Mi' } } }] }, status: { phase: 'Running' } },
    { spec: { containers: [{}] }, status: { phase: 'Pending' } },
    { spec: { containers: [{ resources: { requests: { memory: '1Mi' } } }] }, status: { phase: 'Succeeded' } },
  ];
  const used = namespaceUsage(['pods', 'requests.memory', 'count/deployments.apps'], (k) => (k === 'pods' ? pods : [{}]));
  assert.deepEqual(Object.fromEntries(Object.entries(used).map(([k, a]) => [k, formatQuantity(a)])), { pods: '2', 'requests.memory': '1Mi', 'count/deployments.apps': '1' });
  assert.equal(formatQuantity(namespaceUsage(['pods'], () => pods, ['BestEffort']).pods!), '1');
  assert.equal(quotaMatches(['BestEffort'], 'configmaps', {}), false);
});
