import assert from 'node:assert/strict';
import { test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { V1Pod } from '@kubernetes/client-node';
import { PodInfoSchema, PodState } from '../../feos/gen/feos/pod/v1/pod_pb.js';
import { feosPodSpec, META, metadataKey, pullTokenOf } from './spec.ts';
import { podStatusOf } from './status.ts';

const POD: V1Pod = {
  metadata: { name: 'web-1', namespace: 'shop', uid: '0b6f2c8e-4a1d-4c3e-9f7a-2d5e8c1b3a90', labels: { app: 'web', 'app.kubernetes.io/name': 'shop' } },
  spec: {
    nodeName: 'vm-a',
    containers: [
      {
        name: 'app',
        image: 'registry.example:5000/shop/web:1',
        command: ['/bin/web'],
        args: ['--port', '80'],
        env: [{ name: 'MODE', value: 'prod' }, { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
        resources: { limits: { cpu: '1500m', memory: '300M' }, requests: { cpu: '1', memory: '200Mi' } },
      },
      { name: 'side', image: 'busybox:1.36', resources: { limits: { cpu: '250m' } } },
    ],
  },
};

test('a Pod as a FeOS PodSpec: vCPUs and memory from the limits, containers, a network, labels and who made it as metadata', { timeout: 5000 }, () => {
  const spec = feosPodSpec(POD, 'vm-a', 'cluster-uid');
  assert.equal(spec.vcpus, 2, '1.5 + 0.25 cpus rounded up');
  assert.equal(spec.memoryBytes, 287n * 1024n * 1024n, '300M rounded up to whole MiB');
  assert.deepEqual(spec.network, {});
  assert.deepEqual(spec.containers?.[0], { name: 'app', image: 'registry.example:5000/shop/web:1', command: ['/bin/web'], args: ['--port', '80'], env: { MODE: 'prod', POD: 'web-1' } });
  assert.deepEqual(spec.metadata, { app: 'web', 'app.kubernetes.io_name': 'shop', [META.cluster]: 'cluster-uid', [META.namespace]: 'shop', [META.name]: 'web-1', [META.uid]: POD.metadata!.uid });
  const bare = feosPodSpec({ metadata: { name: 'x' }, spec: { hostNetwork: true, containers: [{ name: 'c', image: 'busybox:1' }] } }, 'n', 'c');
  assert.equal(bare.vcpus, 1);
  assert.equal(bare.memoryBytes, 0n, "feosd's default");
  assert.equal(bare.network, undefined, 'hostNetwork: no network device');
  assert.equal(metadataKey('a/b c'), 'a_b_c');
});

test('the pull token comes from the imagePullSecret entry of the image\'s registry', { timeout: 5000 }, () => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const secret = (auths: Record<string, unknown>) => ({ type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': b64(JSON.stringify({ auths })) } });
  assert.equal(pullTokenOf(POD, [secret({ 'other.example': { password: 'no' } }), secret({ 'registry.example:5000': { auth: b64('robot:s3cret') } })]), 's3cret');
  assert.equal(pullTokenOf(POD, [secret({ 'https://registry.example:5000': { registrytoken: 'tok' } })]), 'tok');
  assert.equal(pullTokenOf(POD, [secret({ 'docker.io': { password: 'hub' } })]), undefined);
  const hub: V1Pod = { spec: { containers: [{ name: 'c', image: 'busybox:1.36' }] } };
  assert.equal(pullTokenOf(hub, [secret({ 'https://index.docker.io/v1/': { password: 'hub' } })]), 'hub');
});

test('PodInfo as the Pod\'s status: Pending, then Running with its address, then an exited container', { timeout: 5000 }, () => {
  const now = new Date('2026-12-02T05:00:00Z');
  const pending = podStatusOf(POD, create(PodInfoSchema, { id: 'x', state: PodState.PENDING }), { restartCount: 0, hostIP: '10.1.2.2' }, now);
  assert.equal(pending.phase, 'Pending');
  assert.equal(pending.containerStatuses?.[0]?.state?.waiting?.reason, 'ContainerCreating');
  assert.equal(pending.hostIP, '10.1.2.2');
  assert.equal(pending.podIP, undefined);
  const started = new Date('2026-12-02T04:59:00Z');
  const info = create(PodInfoSchema, { id: 'x', state: PodState.RUNNING, ipv4Address: '10.200.0.5', ipv6Address: 'fd00::5', startedAt: timestampFromDate(started), containers: [{ name: 'app', state: 'running' }, { name: 'side', state: 'running' }] });
  const running = podStatusOf(POD, info, { restartCount: 0, hostIP: '10.1.2.2' }, now);
  assert.equal(running.phase, 'Running');
  assert.equal(running.podIP, 'fd00::5');
  assert.deepEqual(running.podIPs, [{ ip: 'fd00::5' }, { ip: '10.200.0.5' }]);
  for (const type of ['Ready', 'ContainersReady']) assert.equal(running.conditions?.find((c) => c.type === type)?.status, 'True', type);
  assert.equal(String(running.containerStatuses?.[0]?.state?.running?.startedAt), started.toISOString());
  assert.equal(running.containerStatuses?.[0]?.imageID, 'registry.example:5000/shop/web:1');
  info.containers[1]!.state = 'exited';
  info.containers[1]!.exitCode = 3;
  const exited = podStatusOf(POD, info, { restartCount: 0 }, now);
  assert.equal(exited.containerStatuses?.[1]?.state?.terminated?.exitCode, 3);
  assert.equal(exited.conditions?.find((c) => c.type === 'Ready')?.status, 'False');
  const pulling = podStatusOf(POD, create(PodInfoSchema, { id: 'x', state: PodState.FAILED, reason: 'container app: create: 401 Unauthorized' }), { restartCount: 1, waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image "x"' } }, now);
  assert.equal(pulling.phase, 'Pending');
  assert.equal(pulling.containerStatuses?.[0]?.state?.waiting?.reason, 'ImagePullBackOff');
  assert.equal(pulling.containerStatuses?.[0]?.restartCount, 1);
});
