import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { pickNode } from '../../api/index.ts';
import { AssumedPods, reconcileSchedule } from './reconcile.ts';

const FEOS_TAINT = [{ key: 'kube32.io/runtime', value: 'feos', effect: 'NoSchedule' }];

/** A FeOS node as src/fleet writes it: the label, the taint, allocatable cpu and memory. */
function feosNode(name: string, cpu: string, memory: string) {
  const n = node(name, { labels: { 'kube32.io/runtime': 'feos' }, taints: FEOS_TAINT, memory });
  n.status!.allocatable = { cpu, memory, pods: '110' };
  return n;
}

/** A pod as the RuntimeClass admission leaves it: runtimeClassName feos, the selector and toleration merged. */
function microVmPod(name: string, requests: Record<string, string>, overhead?: Record<string, string>): V1Pod {
  const p = pod(name);
  p.spec = {
    runtimeClassName: 'feos',
    nodeSelector: { 'kube32.io/runtime': 'feos' },
    tolerations: [{ key: 'kube32.io/runtime', operator: 'Equal', value: 'feos', effect: 'NoSchedule' }],
    containers: [{ name: 'app', image: 'busybox:1.36', resources: { requests } }],
    ...(overhead ? { overhead } : {}),
  };
  return p;
}

test('cpu and memory requests, with the overhead, are fitted against a FeOS node\'s allocatable', { timeout: 5000 }, () => {
  const nodes = [feosNode('vm-a', '2', '1Gi')];
  assert.deepEqual(pickNode(microVmPod('fits', { cpu: '1500m', memory: '512Mi' }), nodes, []), { nodeName: 'vm-a' });
  const cpu = pickNode(microVmPod('cpu', { cpu: '1800m' }, { cpu: '250m' }), nodes, []);
  assert.equal(cpu.nodeName, undefined);
  assert.equal((cpu as { message: string }).message, '0/1 nodes are available: 1 Insufficient cpu.');
  const mem = pickNode(microVmPod('mem', { memory: '1000Mi' }, { memory: '64Mi' }), nodes, []);
  assert.equal((mem as { message: string }).message, '0/1 nodes are available: 1 Insufficient memory.');
  // What pods already bound there request counts.
  const bound = microVmPod('bound', { cpu: '1' });
  bound.spec!.nodeName = 'vm-a';
  const second = pickNode(microVmPod('second', { cpu: '1500m' }), nodes, [bound]);
  assert.equal((second as { message: string }).message, '0/1 nodes are available: 1 Insufficient cpu.');
});

test('a Wasm pod is never placed on a FeOS node, a container image never on a Wasm worker: the reasons say which runs what', { timeout: 5000 }, () => {
  const nodes = [feosNode('vm-a', '4', '4Gi'), node('wasm-1')];
  // A Wasm pod that tolerates the taint anyway.
  const wasm = pod('counter');
  wasm.spec!.tolerations = [{ key: 'kube32.io/runtime', operator: 'Exists' }];
  assert.deepEqual(pickNode(wasm, [nodes[0]!], []), {
    reason: 'Unschedulable',
    message: '0/1 nodes are available: 1 node(s) were FeOS nodes, which run OCI container images in microVMs, not the Wasm module "wasm://counter".',
  });
  assert.deepEqual(pickNode(wasm, nodes, []), { nodeName: 'wasm-1' });
  // An OCI image without a RuntimeClass: not on the Wasm worker (and the FeOS taint is not tolerated).
  const oci = pod('web');
  oci.spec!.containers[0]!.image = 'nginx:1.27';
  assert.equal(
    (pickNode(oci, nodes, []) as { message: string }).message,
    '0/2 nodes are available: 1 node(s) had untolerated taint {kube32.io/runtime: feos}, 1 node(s) were Wasm workers, which run Wasm modules, not the OCI container image "nginx:1.27" (runtimeClassName: feos runs it on a FeOS node).',
  );
  // A bare name may be a module pushed later: left to the Wasm worker.
  const bare = pod('bare');
  bare.spec!.containers[0]!.image = 'nginx';
  assert.deepEqual(pickNode(bare, nodes, []), { nodeName: 'wasm-1' });
});

test('a pod of RuntimeClass feos and no FeOS node: FailedScheduling names the RuntimeClass and the nodes it selects', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('wasm-1'));
  cache.nodes.set(node('wasm-2'));
  cache.pods.set(microVmPod('vm', { cpu: '1' }));
  await reconcileSchedule('default/vm', ctx, new AssumedPods());
  assert.deepEqual(fake.eventReasons, ['FailedScheduling']);
  assert.equal(
    fake.events[0]!.message,
    '0/2 nodes are available: 2 node(s) were Wasm workers, which run Wasm modules, not the OCI container image "busybox:1.36". RuntimeClass "feos" runs the pod on nodes labelled kube32.io/runtime=feos (FeOS nodes, joined with feosd --control-plane).',
  );
});
