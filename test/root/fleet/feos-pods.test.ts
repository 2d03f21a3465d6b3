/**
 * MicroVM pods run by the Kube32 control plane (issue 18 "Running microVM pods", "Bad input";
 * docs/feos/cluster-pods.md), as root: a real `kube32-cli control-plane --feos-listen`, a real feosd joined
 * from a network namespace of its own (its pods' network with --pod-prefix), real QEMU microVMs (TCG here)
 * and a local registry (Debian's docker-registry behind the test's token gate, reached by the pods through
 * feosd's --registry-forward). What a user checks, with kubectl:
 * - a pod of RuntimeClass feos before any FeOS node joined: Pending, FailedScheduling naming the class;
 * - an unknown RuntimeClass, a Wasm image under feos, a Wasm pod bound to the FeOS node: refused at create;
 * - a Deployment of a microVM pod with a private image and its imagePullSecret: Running with its podIP and
 *   hostIP (`kubectl get pods -o wide`), the events Scheduled, Pulling, Pulled, Created, Started; its FeOS
 *   pod RUNNING on the node (feosctl --node), made once;
 * - a pod whose image does not exist: ErrImagePull, then ImagePullBackOff; force-deleted: its FeOS pod goes;
 * - the control plane restarted: the pod adopted (the same FeOS pod, still Running and Ready);
 * - the Deployment deleted: Killing, the FeOS pod stopped and deleted, the Pod gone.
 * Two microVMs boot, side by side.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { addIpv6Default, applyText, createToken, eventsOf, type FleetNode, feosDeployment, feosctlNode, forwardTo, freePort, keepLog, kubectl, pullSecret, readyOf, startControlPlane, startNode, suiteRegistry, until, fleetSuite, GUEST_DIR } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const CP_NAME = 'feos-cp.test';
const TOKEN = 'feos-pods-pull-3c1d9e7a';
/** A boot under TCG on a loaded machine, two side by side. */
const BOOT_MS = 600_000;

interface Pod {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status: {
    phase?: string;
    podIP?: string;
    hostIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { name: string; ready: boolean; imageID: string; restartCount: number; state: { running?: { startedAt: string }; waiting?: { reason: string; message?: string } } }[];
  };
}

test('microVM pods of a Deployment run on a FeOS node through the control plane; bad inputs are refused', { timeout: 2_400_000 }, async (t) => {
  const { nets, dir, nodes } = fleetSuite(t, 'feos-pods');
  const netA = await nets.add('a');
  addIpv6Default(netA.ns);
  // The registry on the host's loopback, reached from the node's namespace through the veth's host side.
  const { reg } = await suiteRegistry(t, 'k32t-feos-pods-reg-', TOKEN, 'private/busybox');
  const registry = await forwardTo(t, netA.host, reg.gated);

  const port = await freePort();
  const cpArgs = ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${netA.host}:${port}`, '--feos-server-name', CP_NAME];
  let cp = await startControlPlane(t, cpArgs);
  const first = cp;
  t.after(() => keepLog('feos-pods-control-plane', first.logs()));
  const k = (...args: string[]) => kubectl(cp.kubeconfig, ...args);
  const apply = (text: string) => applyText(cp.kubeconfig, dir, text);
  const getPod = async (name: string): Promise<Pod | undefined> => {
    const r = await k('get', 'pod', name, '-o', 'json');
    return r.code === 0 ? (JSON.parse(r.stdout) as Pod) : undefined;
  };
  const webPod = async (): Promise<Pod | undefined> => {
    const r = await k('get', 'pods', '-l', 'app=web', '-o', 'json');
    return (JSON.parse(r.stdout || '{"items":[]}') as { items: Pod[] }).items.find((p) => !p.metadata.deletionTimestamp);
  };
  const events = (name: string) => eventsOf(cp.kubeconfig, name);

  const step = steps(t, () => [
    `control plane:\n${cp.logs().split('\n').filter((l) => /feos-kubelet|fleet/.test(l)).slice(-30).join('\n')}`,
    ...nodes.map((n) => `feosd ${n.name}:\n${n.proc.stderr().split('\n').slice(-30).join('\n')}`),
  ]);

  await step('no FeOS node yet: a pod of RuntimeClass feos stays Pending with a FailedScheduling event naming the class', async () => {
    const r = await k('run', 'lonely', '--image=busybox:1.36', '--overrides', '{"spec":{"runtimeClassName":"feos"}}');
    assert.equal(r.code, 0, r.stderr);
    const ev = await until('FailedScheduling', async () => {
      const e = await events('lonely');
      return /FailedScheduling/.test(e) ? e : undefined;
    });
    assert.match(ev, /FailedScheduling\s+0\/0 nodes are available\. RuntimeClass "feos" runs the pod on nodes labelled kube32\.io\/runtime=feos \(FeOS nodes, joined with feosd --control-plane\)\./);
    assert.equal((await getPod('lonely'))?.status.phase, 'Pending');
    assert.equal((await k('delete', 'pod', 'lonely', '--wait=true')).code, 0);
  });

  let a: FleetNode;
  await step('a feosd joins: its Node is Ready', async () => {
    const token = await createToken(cp.kubeconfig, '--ttl', '1h');
    a = await startNode(join(dir, 'a'), 'fleet-a', netA, port, CP_NAME, token, ['--pod-prefix', '2001:db8:18::/64', '--registry-forward', registry], GUEST_DIR);
    nodes.push(a);
    await until('fleet-a Ready', async () => (await readyOf(cp.kubeconfig, 'fleet-a')) === 'True', 90_000);
  });

  await step('bad inputs are refused at create, saying what to fix', async () => {
    let r = await k('run', 'x', '--image=busybox:1.36', '--overrides', '{"spec":{"runtimeClassName":"gvisor"}}');
    assert.notEqual(r.code, 0);
    assert.equal(r.stderr.trim(), 'Error from server (Forbidden): pods "x" is forbidden: pod rejected: RuntimeClass "gvisor" not found');
    r = await k('run', 'w', `--image=kube32.io/wasm-sha256:${'ab'.repeat(32)}`, '--overrides', '{"spec":{"runtimeClassName":"feos"}}');
    assert.match(r.stderr, /RuntimeClass "feos" runs OCI container images in FeOS microVMs; a Wasm module .* runs on Kube32's Wasm workers/);
    r = await k('run', 'w2', `--image=kube32.io/wasm-sha256:${'ab'.repeat(32)}`, '--overrides', '{"spec":{"nodeName":"fleet-a"}}');
    assert.match(r.stderr, /spec\.nodeName: Invalid value: "fleet-a": node "fleet-a" is a FeOS node: it runs OCI container images in microVMs/);
  });

  await step('a Deployment of a microVM pod with a private image, and a pod whose image does not exist, are created', async () => {
    let r = await apply(pullSecret(registry, TOKEN));
    assert.equal(r.code, 0, r.stderr);
    r = await apply(
      feosDeployment('web', `${registry}/private/busybox:1`, 'while true; do echo tick; sleep 1; done', {
        pod: { terminationGracePeriodSeconds: 20 },
        container: { env: [{ name: 'GREETING', value: 'hello' }] },
      }),
    );
    assert.equal(r.code, 0, r.stderr);
    r = await k('run', 'badimg', `--image=${registry}/public/missing:1`, '--overrides', '{"spec":{"runtimeClassName":"feos"}}');
    assert.equal(r.code, 0, r.stderr);
  });

  let web: Pod;
  await step('the Deployment\'s pod is Running with its podIP on fleet-a, with the events a kubelet writes', async () => {
    web = await until(
      'the web pod Running and Ready',
      async () => {
        const p = await webPod();
        return p?.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
      },
      BOOT_MS,
    );
    assert.equal(web.spec.nodeName, 'fleet-a');
    assert.match(web.status.podIP ?? '', /^2001:db8:18:/, 'its address on the pods\' network');
    assert.equal(web.status.hostIP, netA.node);
    const cs = web.status.containerStatuses?.[0];
    assert.equal(cs?.ready, true);
    assert.equal(cs?.imageID, `${registry}/private/busybox:1`);
    assert.ok(cs?.state.running?.startedAt);
    for (const type of ['Ready', 'ContainersReady']) assert.equal(web.status.conditions?.find((c) => c.type === type)?.status, 'True');
    const wide = await k('get', 'pods', '-o', 'wide', '-l', 'app=web');
    assert.match(wide.stdout, new RegExp(`^${web.metadata.name}\\s+1/1\\s+Running\\s+0\\s+\\S+\\s+${web.status.podIP!.replace(/\./g, '\\.')}\\s+fleet-a\\s`, 'm'));
    const ev = await events(web.metadata.name);
    for (const [reason, message] of [
      ['Scheduled', `Successfully assigned default/${web.metadata.name} to fleet-a`],
      ['Pulling', `Pulling image "${registry}/private/busybox:1"`],
      ['Pulled', `Successfully pulled image "${registry}/private/busybox:1"`],
      ['Created', 'Created container: app'],
      ['Started', 'Started container app'],
    ]) {
      assert.ok(ev.split('\n').some((l) => l.startsWith(reason) && l.includes(message)), `${reason} ${message} in:\n${ev}`);
    }
    const list = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
    assert.match(list.stdout, new RegExp(`^${web.metadata.uid}\\s+RUNNING\\s`, 'm'), 'its FeOS pod has the Pod\'s uid as its ID');
    // The pull token reached the registry, from the imagePullSecret.
    assert.ok(reg.seenAuth.includes(`Bearer ${TOKEN}`));
  });

  await step('an image that cannot be pulled: ErrImagePull, then ImagePullBackOff; force-deleted, its FeOS pod goes', async () => {
    const waiting = async () => (await getPod('badimg'))?.status.containerStatuses?.[0]?.state.waiting?.reason;
    await until('ErrImagePull', async () => (await waiting()) === 'ErrImagePull', BOOT_MS);
    await until('ImagePullBackOff', async () => (await waiting()) === 'ImagePullBackOff', 60_000);
    const ev = await events('badimg');
    assert.match(ev, /^Failed\s+Failed to pull image ".*\/public\/missing:1": container badimg: create: pull: .*HTTP 404/m);
    assert.match(ev, /^Failed\s+Error: ErrImagePull$/m);
    assert.match(ev, /^BackOff\s+Back-off pulling image ".*\/public\/missing:1"$/m);
    const uid = (await getPod('badimg'))!.metadata.uid;
    assert.equal((await k('delete', 'pod', 'badimg', '--grace-period=0', '--force')).code, 0);
    await until('the FeOS pod of badimg deleted', async () => {
      const r = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
      return r.code === 0 && !r.stdout.includes(uid);
    }, 120_000);
  });

  await step('the control plane restarted: the running pod is adopted, not made again', async () => {
    const before = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'get', web.metadata.uid, '-o', 'json');
    assert.equal(before.code, 0, before.stderr);
    const startedBefore = (JSON.parse(before.stdout) as { startedAt?: string }).startedAt;
    await cp.stop();
    cp = await startControlPlane(t, cpArgs, cp.dataDir);
    await until('fleet-a Ready again', async () => (await readyOf(cp.kubeconfig, 'fleet-a')) === 'True', 90_000);
    // The kubelet's look at the adopted pod writes its status once: still Running and Ready, the same pod.
    const again = await until('the web pod Running and Ready after the restart', async () => {
      const p = await webPod();
      return p?.metadata.uid === web.metadata.uid && p.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
    }, 90_000);
    assert.equal(again.status.podIP, web.status.podIP);
    await until('the FeOS kubelet looked at the node', async () => /FeOS kubelet started/.test(cp.logs()), 30_000);
    // The node redials its node connections with a back-off (up to 16 s here): feosctl --node answers once one is back.
    const after = await until('feosctl --node fleet-a answers after the restart', async () => {
      const r = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'get', web.metadata.uid, '-o', 'json');
      return r.code === 0 ? r : undefined;
    }, 60_000);
    assert.equal((JSON.parse(after.stdout) as { startedAt?: string }).startedAt, startedBefore, 'the same microVM runs: never brought up again');
    const list = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
    assert.equal(list.stdout.trim().split('\n').length, 2, `one FeOS pod on the node:\n${list.stdout}`);
  });

  await step('the Deployment deleted: Killing, the FeOS pod stopped and deleted, then the Pod gone', async () => {
    assert.equal((await k('delete', 'deployment', 'web')).code, 0);
    await until('the web pod gone', async () => (await getPod(web.metadata.name)) === undefined, 180_000);
    assert.match(await events(web.metadata.name), /^Killing\s+Stopping container app$/m);
    const r = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!r.stdout.includes(web.metadata.uid), `the FeOS pod is gone:\n${r.stdout}`);
  });
});
