/**
 * ResourceQuota and LimitRange with the real kubectl against a real API server and the controllers (issue 19):
 * a LimitRange's defaults filled into a pod (and its annotation), its maximum refused with kube-apiserver's
 * message; a quota refusing a pod over its memory or its pod count, and a pod that sets no memory, with
 * kube-apiserver's words; an object count (`count/deployments.apps`); `status.used` kept by the quota
 * controller, as `kubectl get quota` prints it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startControllersCluster } from './cluster.ts';

const pod = (name: string, ns: string, resources?: { requests?: Record<string, string>; limits?: Record<string, string> }) =>
  JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: ns }, spec: { containers: [{ name: 'app', image: 'wasm://counter-fixture', ...(resources ? { resources } : {}) }] } });

test('ResourceQuota and LimitRange admission, and the quota status', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const kubectl = c.api.kubectl;
  for (const ns of ['limits', 'quota', 'objects', 'scoped']) assert.equal((await kubectl(['create', 'namespace', ns])).code, 0);

  await t.test('a LimitRange defaults a container and bounds it', async () => {
    const lr = `apiVersion: v1
kind: LimitRange
metadata: {name: mem, namespace: limits}
spec:
  limits:
  - type: Container
    default: {memory: 256Ki, cpu: 500m}
    defaultRequest: {memory: 128Ki}
    max: {memory: 1Mi}
`;
    let r = await kubectl(['apply', '-f', '-'], { input: lr });
    assert.equal(r.code, 0, r.stderr);
    // The item's own defaults (SetDefaults_LimitRangeItem): the cpu request from the cpu default.
    r = await kubectl(['get', 'limitrange', 'mem', '-n', 'limits', '-o', 'jsonpath={.spec.limits[0].defaultRequest}']);
    assert.deepEqual(JSON.parse(r.stdout), { memory: '128Ki', cpu: '500m' });
    r = await kubectl(['get', 'limits', '-n', 'limits']);
    assert.match(r.stdout, /^NAME\s+CREATED AT\nmem\s+\d{4}-/m);

    r = await kubectl(['create', '-f', '-'], { input: pod('plain', 'limits') });
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['get', 'pod', 'plain', '-n', 'limits', '-o', 'json']);
    const p = JSON.parse(r.stdout) as { metadata: { annotations: Record<string, string> }; spec: { containers: { resources: unknown }[] }; status: { qosClass: string } };
    assert.deepEqual(p.spec.containers[0]!.resources, { limits: { memory: '256Ki', cpu: '500m' }, requests: { memory: '128Ki', cpu: '500m' } });
    assert.equal(p.metadata.annotations['kubernetes.io/limit-ranger'], 'LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app');
    assert.equal(p.status.qosClass, 'Burstable');

    // A container's own value is kept; over the maximum is 403.
    r = await kubectl(['create', '-f', '-'], { input: pod('big', 'limits', { limits: { memory: '2Mi' } }) });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Error from server \(Forbidden\): .*pods "big" is forbidden: maximum memory usage per Container is 1Mi, but limit is 2Mi/);
  });

  await t.test('a quota refuses what would exceed it, with kube-apiserver\'s message', async () => {
    const quota = `apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: quota}
spec:
  hard: {pods: "2", requests.memory: 1Mi, limits.memory: 2Mi}
`;
    let r = await kubectl(['apply', '-f', '-'], { input: quota });
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', '-f', '-'], { input: pod('bare', 'quota') });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /pods "bare" is forbidden: failed quota: compute: must specify limits\.memory for: app; requests\.memory for: app/);

    r = await kubectl(['create', '-f', '-'], { input: pod('a', 'quota', { limits: { memory: '512Ki' } }) });
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', '-f', '-'], { input: pod('b', 'quota', { limits: { memory: '768Ki' } }) });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Error from server \(Forbidden\): .*pods "b" is forbidden: exceeded quota: compute, requested: requests\.memory=768Ki, used: requests\.memory=512Ki, limited: requests\.memory=1Mi/);
    r = await kubectl(['create', '-f', '-'], { input: pod('b', 'quota', { limits: { memory: '256Ki' } }) });
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', '-f', '-'], { input: pod('c', 'quota', { limits: { memory: '1Ki' } }) });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /pods "c" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2/);

    // The controller keeps status.used; kubectl prints it.
    await c.until('the quota status', async () => {
      const g = await kubectl(['get', 'quota', 'compute', '-n', 'quota', '-o', 'jsonpath={.status.used}']);
      if (!g.stdout) return false;
      const used = JSON.parse(g.stdout) as Record<string, string>;
      return used.pods === '2' && used['requests.memory'] === '768Ki' && used['limits.memory'] === '768Ki' && Object.keys(used).length === 3;
    });
    r = await kubectl(['get', 'quota', '-n', 'quota']);
    assert.match(r.stdout, /^NAME\s+AGE\s+REQUEST\s+LIMIT$/m);
    assert.match(r.stdout, /^compute\s+\S+\s+pods: 2\/2, requests\.memory: 768Ki\/1Mi\s+limits\.memory: 768Ki\/2Mi$/m);

    // A pod deleted frees its share.
    r = await kubectl(['delete', 'pod', 'b', '-n', 'quota', '--wait=false']);
    assert.equal(r.code, 0, r.stderr);
    await c.until('pod b gone from the quota', async () => {
      const g = await kubectl(['get', 'quota', 'compute', '-n', 'quota', '-o', 'jsonpath={.status.used.pods}']);
      return g.stdout === '1';
    }, 60_000);
  });

  await t.test('a scoped quota counts only the pods of its scope', async () => {
    let r = await kubectl(['create', 'quota', 'best-effort', '-n', 'scoped', '--hard=pods=1', '--scopes=BestEffort']);
    assert.equal(r.code, 0, r.stderr);
    for (const name of ['sized-1', 'sized-2']) {
      r = await kubectl(['create', '-f', '-'], { input: pod(name, 'scoped', { limits: { memory: '64Ki' } }) });
      assert.equal(r.code, 0, r.stderr);
    }
    r = await kubectl(['create', '-f', '-'], { input: pod('free-1', 'scoped') });
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', '-f', '-'], { input: pod('free-2', 'scoped') });
    assert.match(r.stderr, /pods "free-2" is forbidden: exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1/);
  });

  await t.test('an object count: count/deployments.apps', async () => {
    let r = await kubectl(['create', 'quota', 'objects', '-n', 'objects', '--hard=count/deployments.apps=1']);
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', 'deployment', 'one', '-n', 'objects', '--image=wasm://counter-fixture']);
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['create', 'deployment', 'two', '-n', 'objects', '--image=wasm://counter-fixture']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /deployments\.apps "two" is forbidden: exceeded quota: objects, requested: count\/deployments\.apps=1, used: count\/deployments\.apps=1, limited: count\/deployments\.apps=1/);
  });
});
