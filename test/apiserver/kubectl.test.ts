/**
 * The API server driven by the real kubectl (v1.32): version, api-resources, get (Tables, -o wide,
 * -A, labels), describe, create, apply (client-side and server-side), patch, label, delete,
 * cordon, uncordon, drain with evictions, get -w, explain, checkpoints with and without -o wide,
 * and the errors kubectl prints. A restart keeps every object.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

const until = <T>(what: string, fn: () => Promise<T | undefined | false>, ms = 15_000): Promise<T> => waitFor(what, ms, fn);

function file(api: TestApiServer, name: string, text: string): string {
  const p = join(api.dataDir, name);
  writeFileSync(p, text);
  return p;
}

const POD = `apiVersion: v1
kind: Pod
metadata:
  name: demo
  labels: {app: web}
spec:
  containers:
  - name: app
    image: nginx:1.27
    ports: [{containerPort: 80}]
`;

test('kubectl works against the API server', { timeout: 480_000 }, async (t) => {
  const api = await startApiServer(t);
  const core = api.kubeConfig.makeApiClient(CoreV1Api);

  await t.test('version reports the server as v1.32', async () => {
    const r = await api.kubectl(['version']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Server Version: v1\.32\.0-kube32/);
  });

  await t.test('api-resources lists the built-in resources and checkpoints (ckpt)', async () => {
    const r = await api.kubectl(['api-resources']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^checkpoints\s+ckpt\s+kube32\.io\/v1\s+true\s+Checkpoint$/m);
    assert.match(r.stdout, /^pods\s+po\s+v1\s+true\s+Pod$/m);
    assert.match(r.stdout, /^deployments\s+deploy\s+apps\/v1\s+true\s+Deployment$/m);
    assert.match(r.stdout, /^leases\s+coordination\.k8s\.io\/v1\s+true\s+Lease$/m);
  });

  await t.test('create, get (Table, wide, -A, labels) and AlreadyExists', async () => {
    const f = file(api, 'pod.yaml', POD);
    let r = await api.kubectl(['create', '-f', f]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'pod/demo created');
    r = await api.kubectl(['create', '-f', f]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /Error from server \(AlreadyExists\): error when creating ".*pod\.yaml": pods "demo" already exists/);
    r = await api.kubectl(['get', 'pods']);
    assert.match(r.stdout, /^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE$/m);
    assert.match(r.stdout, /^demo\s+0\/1\s+Pending\s+0\s+\d+s$/m);
    r = await api.kubectl(['get', 'pods', '-o', 'wide']);
    assert.match(r.stdout, /^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\s+IP\s+NODE\s+NOMINATED NODE\s+READINESS GATES$/m);
    r = await api.kubectl(['get', 'pods', '-A', '--show-labels']);
    assert.match(r.stdout, /^default\s+demo\s+0\/1\s+Pending\s+0\s+\S+\s+app=web$/m);
    r = await api.kubectl(['get', 'pod', 'demo', '-o', 'jsonpath={.spec.containers[0].ports[0].protocol} {.spec.restartPolicy} {.status.phase}']);
    assert.equal(r.stdout, 'TCP Always Pending');
  });

  await t.test('apply (client-side) configures, then reports unchanged; server-side apply', async () => {
    const f = file(api, 'pod.yaml', POD.replace('1.27', '1.28').replace('{app: web}', '{app: web, tier: front}'));
    let r = await api.kubectl(['apply', '-f', f]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'pod/demo configured');
    r = await api.kubectl(['apply', '-f', f]);
    assert.equal(r.stdout.trim(), 'pod/demo unchanged');
    const pod = await core.readNamespacedPod({ name: 'demo', namespace: 'default' });
    assert.equal(pod.spec?.containers[0]?.image, 'nginx:1.28');
    assert.equal(pod.metadata?.labels?.tier, 'front');
    const ssa = file(api, 'ssa.yaml', POD.replace('name: demo', 'name: ssa'));
    r = await api.kubectl(['apply', '--server-side', '-f', ssa]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'pod/ssa serverside-applied');
    r = await api.kubectl(['apply', '--server-side', '-f', file(api, 'ssa2.yaml', POD.replace('name: demo', 'name: ssa').replace('{app: web}', '{app: web2}'))]);
    assert.equal(r.code, 0, r.stderr);
    let ssaPod = await core.readNamespacedPod({ name: 'ssa', namespace: 'default' });
    assert.equal(ssaPod.metadata?.labels?.app, 'web2');
    // A field the manager applied before and leaves out now is removed; others' fields stay.
    r = await api.kubectl(['apply', '--server-side', '-f', file(api, 'ssa3.yaml', POD.replace('name: demo', 'name: ssa').replace('{app: web}', '{app: web2, extra: x}'))]);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['label', 'pod', 'ssa', 'by-hand=yes']);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['apply', '--server-side', '-f', file(api, 'ssa4.yaml', POD.replace('name: demo', 'name: ssa').replace('{app: web}', '{app: web3}'))]);
    assert.equal(r.code, 0, r.stderr);
    ssaPod = await core.readNamespacedPod({ name: 'ssa', namespace: 'default' });
    assert.deepEqual(ssaPod.metadata?.labels, { app: 'web3', 'by-hand': 'yes' });
    assert.deepEqual(ssaPod.metadata?.managedFields?.map((m) => [m.manager, m.operation]), [['kubectl', 'Apply']]);
  });

  await t.test('patch (merge, json, strategic), label and annotate', async () => {
    let r = await api.kubectl(['patch', 'pod', 'demo', '--type=merge', '-p', '{"metadata":{"labels":{"m":"1"}}}']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'pod/demo patched');
    r = await api.kubectl(['patch', 'pod', 'demo', '--type=json', '-p', '[{"op":"add","path":"/metadata/labels/j","value":"2"}]']);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['patch', 'pod', 'demo', '-p', '{"spec":{"containers":[{"name":"app","image":"nginx:1.29"}]}}']);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['label', 'pod', 'demo', 'k=v']);
    assert.equal(r.stdout.trim(), 'pod/demo labeled');
    r = await api.kubectl(['annotate', 'pod', 'demo', 'note=hello']);
    assert.equal(r.stdout.trim(), 'pod/demo annotated');
    const pod = await core.readNamespacedPod({ name: 'demo', namespace: 'default' });
    assert.deepEqual([pod.metadata?.labels?.m, pod.metadata?.labels?.j, pod.metadata?.labels?.k], ['1', '2', 'v']);
    assert.equal(pod.spec?.containers[0]?.image, 'nginx:1.29');
    assert.equal(pod.spec?.containers[0]?.ports?.[0]?.containerPort, 80, 'strategic merge keeps the other fields of a container');
    r = await api.kubectl(['get', 'pods', '-l', 'k=v,m in (1)', '-o', 'name']);
    assert.equal(r.stdout.trim(), 'pod/demo');
    r = await api.kubectl(['patch', 'pod', 'demo', '--type=merge', '-p', '{"spec":{"restartPolicy":"Never"}}']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /The Pod "demo" is invalid: spec: Forbidden: pod updates may not change fields other than/);
  });

  await t.test('generator commands (their bodies are protobuf): create namespace, configmap, secret, serviceaccount, service, deployment', async () => {
    for (const args of [
      ['create', 'namespace', 'gen'],
      ['create', 'configmap', 'cm1', '-n', 'gen', '--from-literal=a=b'],
      ['create', 'secret', 'generic', 's1', '-n', 'gen', '--from-literal=a=b'],
      ['create', 'serviceaccount', 'sa1', '-n', 'gen'],
      ['create', 'service', 'clusterip', 'svc1', '-n', 'gen', '--tcp=80:8080'],
      ['create', 'deployment', 'web', '-n', 'gen', '--image=nginx', '--replicas=2', '--port=8080'],
      ['run', 'runner', '-n', 'gen', '--image=nginx', '--port=8081'],
    ]) {
      const r = await api.kubectl(args);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stdout, / created$/m);
    }
    const r = await api.kubectl(['get', 'deploy,cm,secret,svc', '-n', 'gen']);
    assert.match(r.stdout, /^deployment\.apps\/web\s+0\/2\s+0\s+0\s+\S+$/m);
    assert.match(r.stdout, /^configmap\/cm1\s+1\s+\S+$/m);
    assert.match(r.stdout, /^secret\/s1\s+Opaque\s+1\s+\S+$/m);
    assert.match(r.stdout, /^service\/svc1\s+ClusterIP\s+10\.96\.\d+\.\d+\s+<none>\s+80\/TCP\s+\S+$/m);
    const s = await api.kubectl(['get', 'secret', 's1', '-n', 'gen', '-o', 'jsonpath={.data.a}']);
    assert.equal(Buffer.from(s.stdout, 'base64').toString(), 'b');
    const d = await api.kubectl(['get', 'deploy', 'web', '-n', 'gen', '-o', 'jsonpath={.spec.template.spec.containers[0].image} {.spec.selector.matchLabels.app}']);
    assert.equal(d.stdout, 'nginx web');
    // Protobuf carries Go's non-pointer zeros (hostPort, generation); they are not stored, as JSON would omit them.
    const tpl = JSON.parse((await api.kubectl(['get', 'deploy', 'web', '-n', 'gen', '-o', 'jsonpath={.spec.template}'])).stdout) as { metadata: Record<string, unknown>; spec: { containers: { ports: Record<string, unknown>[] }[] } };
    assert.deepEqual(tpl.spec.containers[0]!.ports, [{ containerPort: 8080, protocol: 'TCP' }]);
    assert.equal(tpl.metadata.generation, undefined);
    const run = JSON.parse((await api.kubectl(['get', 'pod', 'runner', '-n', 'gen', '-o', 'jsonpath={.spec.containers[0].ports}'])).stdout);
    assert.deepEqual(run, [{ containerPort: 8081, protocol: 'TCP' }]);
    const k = await api.kubectl(['get', 'svc', 'kubernetes', '-o', 'jsonpath={.spec.clusterIP}']);
    assert.equal(k.stdout, '10.96.0.1');
  });

  await t.test('describe shows the pod and its events', async () => {
    const pod = await core.readNamespacedPod({ name: 'demo', namespace: 'default' });
    await core.createNamespacedEvent({
      namespace: 'default',
      body: {
        metadata: { name: 'demo.1' },
        involvedObject: { kind: 'Pod', name: 'demo', namespace: 'default', uid: pod.metadata!.uid },
        reason: 'Checkpointed',
        message: 'saved',
        type: 'Normal',
        source: { component: 'kube32-checkpoint' },
        firstTimestamp: new Date(),
        lastTimestamp: new Date(),
        count: 1,
      },
    });
    await core.createNamespacedEvent({
      namespace: 'default',
      body: { metadata: { name: 'other.1' }, involvedObject: { kind: 'Pod', name: 'other', namespace: 'default' }, reason: 'Other', message: 'not mine', type: 'Normal' },
    });
    const r = await api.kubectl(['describe', 'pod', 'demo']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Name:\s+demo$/m);
    assert.match(r.stdout, /^Status:\s+Pending$/m);
    assert.match(r.stdout, /Normal\s+Checkpointed\s+\S+\s+kube32-checkpoint\s+saved/);
    assert.doesNotMatch(r.stdout, /not mine/);
    const ev = await api.kubectl(['get', 'events']);
    assert.match(ev.stdout, /^LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE$/m);
    assert.match(ev.stdout, /Normal\s+Checkpointed\s+pod\/demo\s+saved/);
  });

  await t.test('get -w prints a row per change', async () => {
    const child = spawn('kubectl', ['--kubeconfig', api.kubeconfigPath, '--cache-dir', join(api.dataDir, 'watch-cache'), 'get', 'pods', '-w'], { stdio: ['ignore', 'pipe', 'pipe'] });
    t.after(() => child.kill());
    const lines: string[] = [];
    createInterface(child.stdout!).on('line', (l) => lines.push(l));
    await until('the header', async () => lines.some((l) => l.startsWith('NAME')));
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'watched' }, spec: { containers: [{ name: 'c', image: 'x' }] } } });
    await until('the new row', async () => lines.some((l) => /^watched\s+0\/1\s+Pending/.test(l)));
    await core.deleteNamespacedPod({ name: 'watched', namespace: 'default' });
    await until('the deletion row', async () => lines.filter((l) => l.startsWith('watched')).length >= 2);
    child.kill();
  });

  await t.test('delete of an unbound pod is immediate', async () => {
    const r = await api.kubectl(['delete', 'pod', 'ssa']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'pod "ssa" deleted');
    const g = await api.kubectl(['get', 'pod', 'ssa']);
    assert.equal(g.code, 1);
    assert.match(g.stderr, /Error from server \(NotFound\): pods "ssa" not found/);
  });

  await t.test('cordon, uncordon and drain with evictions (move and delete)', async () => {
    for (const n of ['node-1', 'node-2']) {
      await core.createNode({ body: { metadata: { name: n, labels: { 'node-role.kubernetes.io/worker': '' } } } });
      await core.patchNodeStatus({
        name: n,
        body: { status: { conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1.32.0-kube32' }, addresses: [{ type: 'InternalIP', address: '127.0.0.9' }] } },
      }, undefinedMerge());
    }
    let r = await api.kubectl(['get', 'nodes']);
    assert.match(r.stdout, /^node-1\s+Ready\s+worker\s+\S+\s+v1\.32\.0-kube32$/m);
    r = await api.kubectl(['cordon', 'node-1']);
    assert.equal(r.stdout.trim(), 'node/node-1 cordoned');
    r = await api.kubectl(['get', 'nodes', 'node-1']);
    assert.match(r.stdout, /node-1\s+Ready,SchedulingDisabled/);
    r = await api.kubectl(['uncordon', 'node-1']);
    assert.equal(r.stdout.trim(), 'node/node-1 uncordoned');

    // Two running pods on node-1: "mover" can move (an eviction asks for a Checkpoint), "stayer" cannot (migration Never).
    const running = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] };
    for (const [name, ann] of [['mover', {}], ['stayer', { 'kube32.io/migration': 'Never' }]] as const) {
      await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name, annotations: ann }, spec: { nodeName: 'node-1', terminationGracePeriodSeconds: 30, containers: [{ name: 'c', image: 'x' }] } } });
      await core.patchNamespacedPodStatus({ name, namespace: 'default', body: { status: running } }, undefinedMerge());
    }
    const moverUid = (await core.readNamespacedPod({ name: 'mover', namespace: 'default' })).metadata!.uid!;
    const custom = api.kubeConfig.makeApiClient(CustomObjectsApi);
    // Play the checkpoint controller and the kubelet: move "mover" when its eviction Checkpoint appears; end "stayer" when it terminates.
    const playing = (async () => {
      const ckptName = `mover-evict-${moverUid.replace(/-/g, '').slice(0, 8)}`;
      const ck = (await until('the eviction checkpoint', async () => custom.getNamespacedCustomObject({ group: 'kube32.io', version: 'v1', namespace: 'default', plural: 'checkpoints', name: ckptName }), 30_000)) as {
        spec: { podName: string; action: string };
        metadata: { labels: Record<string, string> };
      };
      assert.deepEqual(ck.spec, { podName: 'mover', action: 'Move' });
      assert.equal(ck.metadata.labels['kube32.io/trigger'], 'eviction');
      const old = await core.readNamespacedPod({ name: 'mover', namespace: 'default' });
      const res = await fetchJson(api, 'POST', '/api/v1/namespaces/default/pods/mover/replace', { metadata: { name: 'mover', uid: old.metadata!.uid, labels: old.metadata!.labels }, spec: { ...old.spec, nodeName: 'node-2' } });
      assert.equal(res.status, 201);
      await until('stayer terminating', async () => (await core.readNamespacedPod({ name: 'stayer', namespace: 'default' })).metadata?.deletionTimestamp !== undefined);
      await core.deleteNamespacedPod({ name: 'stayer', namespace: 'default', gracePeriodSeconds: 0 });
    })();
    r = await api.kubectl(['drain', 'node-1', '--ignore-daemonsets', '--force', '--timeout=60s'], { timeoutMs: 90_000 });
    await playing;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /node\/node-1 cordoned/);
    assert.match(r.stdout, /pod\/mover evicted/);
    assert.match(r.stdout, /pod\/stayer evicted/);
    assert.match(r.stdout, /node\/node-1 drained/);
    const moved = await core.readNamespacedPod({ name: 'mover', namespace: 'default' });
    assert.equal(moved.spec?.nodeName, 'node-2');
    assert.notEqual(moved.metadata?.uid, moverUid);
  });

  await t.test('checkpoints print NAME POD ACTION PHASE NODE SIZE AGE, and TARGET NEW POD MESSAGE KIND with -o wide', async () => {
    const f = file(api, 'ckpt.yaml', 'apiVersion: kube32.io/v1\nkind: Checkpoint\nmetadata: {name: web-move}\nspec: {podName: demo, action: Move, target: {nodeName: node-2}}\n');
    let r = await api.kubectl(['create', '-f', f]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'checkpoint.kube32.io/web-move created');
    const status = { status: { phase: 'Completed', nodeName: 'node-1', sizeBytes: 10 * 1024 * 1024, targetNode: 'node-2', newPodName: 'demo', message: 'moved', snapshotKind: 'microvm' } };
    const s = await fetchJson(api, 'PATCH', '/apis/kube32.io/v1/namespaces/default/checkpoints/web-move/status', status, 'application/merge-patch+json');
    assert.equal(s.status, 200);
    r = await api.kubectl(['get', 'ckpt']);
    assert.match(r.stdout, /^NAME\s+POD\s+ACTION\s+PHASE\s+NODE\s+SIZE\s+AGE$/m);
    assert.match(r.stdout, /^web-move\s+demo\s+Move\s+Completed\s+node-1\s+10Mi\s+\d+s$/m);
    r = await api.kubectl(['get', 'checkpoints', '-o', 'wide']);
    assert.match(r.stdout, /^NAME\s+POD\s+ACTION\s+PHASE\s+NODE\s+SIZE\s+AGE\s+TARGET\s+NEW POD\s+MESSAGE\s+KIND$/m);
    assert.match(r.stdout, /^web-move\s+demo\s+Move\s+Completed\s+node-1\s+10Mi\s+\d+s\s+node-2\s+demo\s+moved\s+microvm$/m);
    // Status stays out of writes to the object.
    r = await api.kubectl(['apply', '-f', file(api, 'ckpt2.yaml', 'apiVersion: kube32.io/v1\nkind: Checkpoint\nmetadata: {name: web-move, labels: {a: b}}\nspec: {podName: demo, action: Move, target: {nodeName: node-2}}\nstatus: {phase: Failed}\n')]);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['get', 'ckpt', 'web-move', '-o', 'jsonpath={.status.phase} {.metadata.labels.a}']);
    assert.equal(r.stdout, 'Completed b');
  });

  await t.test('auth whoami and auth can-i, for the admin and a kubelet', async () => {
    let r = await api.kubectl(['auth', 'whoami']);
    assert.match(r.stdout, /Username\s+kube32-admin/);
    r = await api.kubectl(['auth', 'can-i', 'delete', 'nodes']);
    assert.equal(r.stdout.trim(), 'yes');
    const node = api.nodeKubeconfig('node-1');
    r = await api.kubectl(['--kubeconfig', node, 'auth', 'can-i', 'patch', 'nodes/node-2']);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /^no/);
    r = await api.kubectl(['--kubeconfig', node, 'auth', 'can-i', 'patch', 'nodes/node-1']);
    assert.equal(r.stdout.trim(), 'yes');
  });

  await t.test('explain describes checkpoints and every field of the built-in kinds from OpenAPI v3', async () => {
    let r = await api.kubectl(['explain', 'checkpoints.spec']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /KIND:\s+Checkpoint/);
    assert.match(r.stdout, /podName\s+<string> -required-/);
    r = await api.kubectl(['explain', 'ckpt.spec']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /action\s+<string>\n\s+Save \(the default\) or Move\./);
    // The built-in kinds in full, from client-node's models: types, required marks and descriptions.
    r = await api.kubectl(['explain', 'pod.spec']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /KIND:\s+Pod\nVERSION:\s+v1/);
    assert.match(r.stdout, /FIELD: spec <PodSpec>/);
    // Kube32's note (one module a pod) first, then Kubernetes' description.
    assert.match(r.stdout, /containers\s+<\[\]Container> -required-\n\s+Kube32 runs one WebAssembly module a pod:[\s\S]*?\n\s*\n\s+List of containers belonging to the pod\./);
    assert.match(r.stdout, /nodeSelector\s+<map\[string\]string>/);
    assert.match(r.stdout, /terminationGracePeriodSeconds\s+<integer>/);
    r = await api.kubectl(['explain', 'deploy.spec.replicas']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /GROUP:\s+apps\nKIND:\s+Deployment\nVERSION:\s+v1/);
    assert.match(r.stdout, /FIELD: replicas <integer>\n+DESCRIPTION:\n\s+Number of desired pods\./);
    r = await api.kubectl(['explain', 'pod.spec.containers.resources.limits']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /FIELD: limits <map\[string\]Quantity>/);
    assert.match(r.stdout, /Limits describes the maximum amount of compute resources allowed\./);
    r = await api.kubectl(['explain', 'deploy.spec.strategy.rollingUpdate.maxSurge']);
    assert.match(r.stdout, /FIELD: maxSurge <IntOrString>/);
    r = await api.kubectl(['explain', 'pod.metadata.creationTimestamp']);
    assert.match(r.stdout, /FIELD: creationTimestamp <string>/);
    r = await api.kubectl(['explain', 'events.regarding', '--api-version=events.k8s.io/v1']);
    assert.match(r.stdout, /GROUP:\s+events\.k8s\.io\nKIND:\s+Event\n[\s\S]*FIELD: regarding <ObjectReference>/);
    r = await api.kubectl(['explain', 'pod.spec.nope']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /field "nope" does not exist/);
    // The index names each document by a hash of its text, the same at every read.
    const index = async () => JSON.parse((await api.kubectl(['get', '--raw', '/openapi/v3'])).stdout).paths['api/v1'].serverRelativeURL as string;
    const url = await index();
    assert.match(url, /^\/openapi\/v3\/api\/v1\?hash=[0-9A-F]{64}$/);
    assert.equal(await index(), url);
    const doc = JSON.parse((await api.kubectl(['get', '--raw', url])).stdout);
    assert.deepEqual(doc.components.schemas['io.k8s.api.core.v1.Pod']['x-kubernetes-group-version-kind'], [{ group: '', version: 'v1', kind: 'Pod' }]);
  });

  await t.test('errors kubectl prints: Invalid, BadRequest (strict fields), NotFound', async () => {
    let r = await api.kubectl(['create', '-f', file(api, 'bad.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c}]}\n')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /The Pod "bad" is invalid: spec\.containers\[0\]\.image: Required value/);
    r = await api.kubectl(['create', '-f', file(api, 'unknown.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspex: {}\nspec: {containers: [{name: c, image: x}]}\n')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /Error from server \(BadRequest\).*unknown field "spex"/);
    r = await api.kubectl(['create', '-f', file(api, 'typo.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec: {containers: [{name: c, imge: x}]}\n')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /Error from server \(BadRequest\).*Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec\.containers\[0\]\.imge"/);
    r = await api.kubectl(['create', '--validate=false', '-f', file(api, 'typo2.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec: {containers: [{name: c, image: x, imge: x}]}\n')]);
    assert.equal(r.code, 0, `--validate=false sends fieldValidation=Ignore: ${r.stderr}`);
    // Strict validation judges what the client sends, not fields already stored (here, one a client stored with Ignore).
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'lenient' }, spec: { containers: [{ name: 'c', image: 'x' }], notAField: 1 } as never } });
    r = await api.kubectl(['apply', '-f', file(api, 'lenient.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: lenient, labels: {a: b}}\nspec: {containers: [{name: c, image: x}]}\n')]);
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['get', 'ckpt', 'nope']);
    assert.match(r.stderr, /Error from server \(NotFound\): checkpoints\.kube32\.io "nope" not found/);
    // Kubernetes' size bounds: 256 KiB of annotations on any object, 1 MiB of data in a ConfigMap.
    r = await api.kubectl(['create', '-f', file(api, 'annotated.yaml', `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: annotated, annotations: {big: ${'x'.repeat(300_000)}}}\n`)]);
    assert.equal(r.code, 1, 'an annotation over 256 KiB is refused');
    assert.match(r.stderr, /metadata\.annotations: Too long: must have at most 262144 bytes/);
    r = await api.kubectl(['create', 'configmap', 'huge', `--from-file=blob=${file(api, 'blob.txt', 'y'.repeat(1_100_000))}`]);
    assert.equal(r.code, 1, 'a ConfigMap over 1 MiB is refused');
    assert.match(r.stderr, /Too long: must have at most 1048576 bytes/);
    r = await api.kubectl(['create', '-f', file(api, 'bigtemplate.yaml', `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bigtemplate}\nspec: {selector: {matchLabels: {app: b}}, template: {metadata: {labels: {app: b}, annotations: {big: ${'x'.repeat(270_000)}}}, spec: {containers: [{name: c, image: x}]}}}\n`)]);
    assert.equal(r.code, 1, 'a template whose pods could never be made is refused itself');
    assert.match(r.stderr, /spec\.template\.metadata\.annotations: Too long: must have at most 262144 bytes/);
    assert.equal((await api.kubectl(['create', 'configmap', 'fits', `--from-file=blob=${file(api, 'fits.txt', 'y'.repeat(1_000_000))}`])).code, 0, 'a 1 MB ConfigMap fits');
    // No ephemeral containers: kubectl debug tells it from a missing pod by the 404's empty details (it crashed without them).
    r = await api.kubectl(['debug', 'typo', '--image=busybox']);
    assert.equal(r.code, 1, JSON.stringify(r));
    assert.match(r.stderr, /ephemeral containers are disabled for this cluster/);
    assert.doesNotMatch(r.stderr, /panic/);
  });

  await t.test('a container limit without a request makes the request, as Kubernetes defaults it', async () => {
    const r = await api.kubectl(['create', '-f', file(api, 'limited.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: limited}\nspec: {containers: [{name: c, image: x, resources: {limits: {memory: 64Mi}}}, {name: d, image: x, resources: {requests: {memory: 8Mi}, limits: {memory: 16Mi}}}]}\n')]);
    assert.equal(r.code, 0, r.stderr);
    const got = await api.kubectl(['get', 'pod', 'limited', '-o', 'jsonpath={.spec.containers[*].resources.requests.memory}']);
    assert.equal(got.stdout.trim(), '64Mi 8Mi', 'a request given stays; a missing one is the limit');
    const over = await api.kubectl(['create', '-f', file(api, 'over.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: over}\nspec: {containers: [{name: c, image: x, resources: {requests: {memory: 16Mi}, limits: {memory: 8Mi}}}]}\n')]);
    assert.equal(over.code, 1);
    assert.match(over.stderr, /spec\.containers\[0\]\.resources\.requests: Invalid value: "16Mi": must be less than or equal to memory limit of 8Mi/);
    const bad = await api.kubectl(['create', '-f', file(api, 'badlimit.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: badlimit}\nspec: {containers: [{name: c, image: x, resources: {limits: {memory: abc}}}]}\n')]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /resources\.limits\[memory\]/);
    assert.doesNotMatch(bad.stderr, /resources\.requests\[memory\]/, 'the limit is named, not a request made of it');
  });

  await t.test('cluster-info dump walks every namespace; a ReplicationController cannot be made', async () => {
    const dump = await api.kubectl(['cluster-info', 'dump', '--all-namespaces']);
    assert.equal(dump.code, 0, dump.stderr);
    assert.match(dump.stdout, /"kind": "ReplicationControllerList"/);
    const rc = await api.kubectl(['create', '-f', file(api, 'rc.yaml', 'apiVersion: v1\nkind: ReplicationController\nmetadata: {name: old}\nspec: {replicas: 1, selector: {app: a}, template: {metadata: {labels: {app: a}}, spec: {containers: [{name: c, image: x}]}}}\n')]);
    assert.equal(rc.code, 1);
    assert.match(rc.stderr, /does not run ReplicationControllers: use a Deployment/);
  });

  await t.test('a restart keeps every object', async () => {
    const before = await api.kubectl(['get', 'pods,ckpt,nodes', '-A', '-o', 'name']);
    await api.stop({ keepData: true });
    const again = await startApiServer(t, { dataDir: api.dataDir });
    const after = await again.kubectl(['get', 'pods,ckpt,nodes', '-A', '-o', 'name']);
    assert.equal(after.stdout, before.stdout);
    assert.match(after.stdout, /pod\/demo/);
    assert.match(after.stdout, /checkpoint\.kube32\.io\/web-move/);
    await again.stop();
  });
});

/** Options of client-node's patch calls that send a JSON merge patch. */
function undefinedMerge() {
  return setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
}

/** A raw request with the admin's credentials (for the subresources client-node has no method for). */
export async function fetchJson(api: TestApiServer, method: string, path: string, body: unknown, contentType = 'application/json'): Promise<{ status: number; body: Record<string, unknown> }> {
  const { request } = await import('node:https');
  const ca = (api.kubeConfig.getCurrentCluster()!.caData ?? '') as string;
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const u = new URL(api.url + path);
    const req = request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, method, ca: Buffer.from(ca, 'base64'), headers: { Authorization: `Bearer ${api.kubeConfig.getCurrentUser()!.token}`, 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(data) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}
