/**
 * RuntimeClasses (issue 18; docs/feos/cluster-pods.md) through the real kubectl: served and discovered,
 * `feos` made at start; the admission of a pod's create as kube-apiserver's RuntimeClass plugin does it
 * (403 for an unknown class, overhead, nodeSelector and tolerations merged, conflicts refused); a pod of the
 * other runtime refused at create and at binding, with a message that says which runtime runs what.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';

const HEX = 'ab'.repeat(32);

test('RuntimeClass: served, feos at start, applied to pods at create, runtimes kept apart', { timeout: 240_000 }, async (t) => {
  const api = await startApiServer(t);
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const k = (args: string[], input?: string) => api.kubectl(args, input === undefined ? {} : { input });

  await t.test('kubectl get runtimeclass lists feos, api-resources lists the kind', async () => {
    const r = await k(['get', 'runtimeclass']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^NAME\s+HANDLER\s+AGE\n/);
    assert.match(r.stdout, /^feos\s+feos\s+\S+$/m);
    const res = await k(['api-resources', '--api-group', 'node.k8s.io']);
    assert.match(res.stdout, /^runtimeclasses\s+node\.k8s\.io\/v1\s+false\s+RuntimeClass$/m);
    const feos = JSON.parse((await k(['get', 'runtimeclass', 'feos', '-o', 'json'])).stdout) as Record<string, unknown>;
    assert.deepEqual(feos.scheduling, {
      nodeSelector: { 'kube32.io/runtime': 'feos' },
      tolerations: [{ key: 'kube32.io/runtime', operator: 'Equal', value: 'feos', effect: 'NoSchedule' }],
    });
  });

  await t.test('a RuntimeClass is created, its handler is immutable, it is deleted', async () => {
    const yaml = 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: vm-small}\nhandler: feos\noverhead: {podFixed: {cpu: 250m, memory: 64Mi}}\nscheduling:\n  nodeSelector: {kube32.io/runtime: feos}\n';
    let r = await k(['apply', '-f', '-'], yaml);
    assert.equal(r.code, 0, r.stderr);
    r = await k(['patch', 'runtimeclass', 'vm-small', '--type', 'merge', '-p', '{"handler":"other"}']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /RuntimeClass "vm-small" is invalid: handler: Invalid value: .*field is immutable/);
    r = await k(['create', '-f', '-'], 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nohandler}\n');
    assert.match(r.stderr, /handler: Required value/);
    r = await k(['get', 'runtimeclass', 'vm-small', '-o', 'jsonpath={.overhead.podFixed.cpu}']);
    assert.equal(r.stdout, '250m');
  });

  await t.test('an unknown runtimeClassName is refused as kube-apiserver refuses it', async () => {
    const r = await k(['run', 'x', '--image=busybox:1.36', '--overrides', '{"spec":{"runtimeClassName":"gvisor"}}']);
    assert.notEqual(r.code, 0);
    assert.equal(r.stderr.trim(), 'Error from server (Forbidden): pods "x" is forbidden: pod rejected: RuntimeClass "gvisor" not found');
  });

  await t.test('the RuntimeClass merges into the pod: overhead, nodeSelector, tolerations', async () => {
    const pod: V1Pod = {
      metadata: { name: 'vm' },
      spec: { runtimeClassName: 'vm-small', nodeSelector: { disk: 'ssd' }, containers: [{ name: 'app', image: 'busybox:1.36' }] },
    };
    await core.createNamespacedPod({ namespace: 'default', body: pod });
    const stored = await core.readNamespacedPod({ namespace: 'default', name: 'vm' });
    assert.deepEqual(stored.spec?.overhead, { cpu: '250m', memory: '64Mi' });
    assert.deepEqual(stored.spec?.nodeSelector, { disk: 'ssd', 'kube32.io/runtime': 'feos' });
    const feosPod: V1Pod = { metadata: { name: 'vm2' }, spec: { runtimeClassName: 'feos', containers: [{ name: 'app', image: 'busybox:1.36' }] } };
    await core.createNamespacedPod({ namespace: 'default', body: feosPod });
    const tol = (await core.readNamespacedPod({ namespace: 'default', name: 'vm2' })).spec?.tolerations ?? [];
    assert.ok(tol.some((x) => x.key === 'kube32.io/runtime' && x.value === 'feos' && x.effect === 'NoSchedule'), JSON.stringify(tol));
    let r = await k(['run', 'clash', '--image=busybox:1.36', '--overrides', '{"spec":{"runtimeClassName":"feos","nodeSelector":{"kube32.io/runtime":"wasm"}}}']);
    assert.equal(r.stderr.trim(), 'Error from server (Forbidden): pods "clash" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[kube32.io/runtime] = feos; pod.spec.nodeSelector[kube32.io/runtime] = wasm');
    r = await k(['run', 'ovh', '--image=busybox:1.36', '--overrides', '{"spec":{"runtimeClassName":"vm-small","overhead":{"cpu":"1"}}}']);
    assert.equal(r.stderr.trim(), 'Error from server (Forbidden): pods "ovh" is forbidden: pod rejected: Pod\'s Overhead doesn\'t match RuntimeClass\'s defined Overhead');
    r = await k(['run', 'ovh2', '--image=busybox:1.36', '--overrides', '{"spec":{"overhead":{"cpu":"1"}}}']);
    assert.equal(r.stderr.trim(), 'Error from server (Forbidden): pods "ovh2" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead');
  });

  await t.test('a Wasm image under RuntimeClass feos, or on a FeOS node, and an OCI image on a Wasm worker: refused, saying which runs what', async () => {
    let r = await k(['run', 'w', `--image=kube32.io/wasm-sha256:${HEX}`, '--overrides', '{"spec":{"runtimeClassName":"feos"}}']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Pod "w" is invalid: spec\.containers\[0\]\.image: Invalid value: "kube32\.io\/wasm-sha256:(ab)+": RuntimeClass "feos" runs OCI container images in FeOS microVMs; a Wasm module \(wasm:\/\/NAME, kube32\.io\/wasm-sha256:<hex>\) runs on Kube32's Wasm workers/);
    await core.createNode({ body: { metadata: { name: 'vm-a', labels: { 'kube32.io/runtime': 'feos' } } } });
    await core.createNode({ body: { metadata: { name: 'wasm-1' } } });
    r = await k(['run', 'w2', `--image=kube32.io/wasm-sha256:${HEX}`, '--overrides', '{"spec":{"nodeName":"vm-a"}}']);
    assert.match(r.stderr, /Pod "w2" is invalid: spec\.nodeName: Invalid value: "vm-a": node "vm-a" is a FeOS node: it runs OCI container images in microVMs \(runtimeClassName: feos\); "kube32\.io\/wasm-sha256:(ab)+" is a Wasm module, which Kube32's Wasm workers run/);
    // Through the binding (what a scheduler sends).
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'wasm' }, spec: { containers: [{ name: 'app', image: `kube32.io/wasm-sha256:${HEX}` }] } } });
    const bind = (pod: string, node: string) => k(['create', '--raw', `/api/v1/namespaces/default/pods/${pod}/binding`, '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'Binding', metadata: { name: pod }, target: { kind: 'Node', name: node } }));
    r = await bind('wasm', 'vm-a');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Error from server \(Forbidden\): pods "wasm" is forbidden: cannot bind to node "vm-a": node "vm-a" is a FeOS node/);
    r = await bind('vm2', 'wasm-1');
    assert.match(r.stderr, /Error from server \(Forbidden\): pods "vm2" is forbidden: cannot bind to node "wasm-1": node "wasm-1" is a Kube32 Wasm worker: it runs Wasm modules \(wasm:\/\/NAME\); "busybox:1.36" is an OCI container image, which FeOS nodes run in microVMs \(bind it to a FeOS node\)/, 'vm2 has the RuntimeClass already: the way out is a FeOS node');
    // The right pairs bind.
    assert.equal((await bind('vm2', 'vm-a')).code, 0);
    assert.equal((await bind('wasm', 'wasm-1')).code, 0);
    assert.equal((await core.readNamespacedPod({ namespace: 'default', name: 'vm2' })).spec?.nodeName, 'vm-a');
  });

  await t.test('kubectl delete runtimeclass', async () => {
    const r = await k(['delete', 'runtimeclass', 'vm-small']);
    assert.equal(r.code, 0, r.stderr);
    assert.match((await k(['get', 'runtimeclass'])).stdout, /^feos\s/m);
  });
});
