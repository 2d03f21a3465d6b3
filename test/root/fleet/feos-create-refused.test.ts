/**
 * A FeOS node that refuses a Pod's microVM (docs/feos/cluster-pods.md, "When the node refuses the pod"), as
 * root: a real `kube32-cli control-plane --feos-listen`, a real feosd joined from a network namespace of its
 * own, real QEMU (TCG here) for the pod that runs in the end, a local registry. What a user checks, with
 * kubectl:
 * - a Pod bound to the node asking for more memory than a microVM takes (100Gi): CreatePod answers
 *   INVALID_ARGUMENT; `kubectl describe pod` shows the Warning `FailedCreatePodSandBox` with the gRPC code and
 *   feosd's message, the container waits `CreateContainerConfigError`; the kubelet tries again on a back-off
 *   (10 s, then 20 s: the event's count and times, never a hot loop);
 * - a Pod whose image is no reference (`Busybox:1`): `InvalidImageName` with the same event; `kubectl set
 *   image` to a real one: tried at once, and refused FAILED_PRECONDITION (`CreateContainerError`) while the
 *   node lacks an IPv6 default route, which the pods' network needs; the route added, the next try Runs it;
 * - at the end no QEMU of the suite runs.
 * One microVM boots.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { processesInNetns, processesNaming, processName } from '../../helpers/processes.ts';
import { addIpv6Default, applyText, createToken, forwardTo, freePort, keepLog, kubectl, readyOf, startControlPlane, startNode, suiteRegistry, until, fleetSuite, GUEST_DIR } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const CP_NAME = 'feos-cp.test';
/** A boot under TCG on a loaded machine. */
const BOOT_MS = 600_000;

interface Pod {
  metadata: { name: string; uid: string };
  status: {
    phase?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { name: string; state: { running?: object; waiting?: { reason: string; message?: string } } }[];
  };
}

interface KEvent {
  reason: string;
  type: string;
  message: string;
  count?: number;
  firstTimestamp?: string;
  lastTimestamp?: string;
  source?: { component?: string; host?: string };
}

test('a Pod whose microVM its FeOS node refuses: FailedCreatePodSandBox with the code and message, tries on a back-off, Runs once fixed', { timeout: 1_500_000 }, async (t) => {
  const { nets, dir, nodes } = fleetSuite(t, 'feos-refused');
  const net = await nets.add('r');
  // No IPv6 default route yet: a pod with a network is FAILED_PRECONDITION until one is added (below).
  const { reg } = await suiteRegistry(t, 'k32t-feos-refused-reg-', 'unused-token', 'public/busybox');
  const registry = await forwardTo(t, net.host, reg.gated);
  const image = `${registry}/public/busybox:1`;

  const port = await freePort();
  const cp = await startControlPlane(t, ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${net.host}:${port}`, '--feos-server-name', CP_NAME]);
  t.after(() => keepLog('feos-refused-control-plane', cp.logs()));
  const k = (...args: string[]) => kubectl(cp.kubeconfig, ...args);
  const getPod = async (name: string): Promise<Pod | undefined> => {
    const r = await k('get', 'pod', name, '-o', 'json');
    return r.code === 0 ? (JSON.parse(r.stdout) as Pod) : undefined;
  };
  const waiting = async (name: string) => (await getPod(name))?.status.containerStatuses?.[0]?.state.waiting;
  /** The pod's FailedCreatePodSandBox events. */
  const refusals = async (name: string): Promise<KEvent[]> => {
    const r = await k('get', 'events', '--field-selector', `involvedObject.name=${name},reason=FailedCreatePodSandBox`, '-o', 'json');
    return r.code === 0 ? (JSON.parse(r.stdout) as { items: KEvent[] }).items : [];
  };
  const tries = (evs: KEvent[]) => evs.reduce((n, e) => n + (e.count ?? 1), 0);

  const step = steps(t, () => [
    `control plane:\n${cp.logs().split('\n').filter((l) => /feos-kubelet|CreatePod/.test(l)).slice(-30).join('\n')}`,
    ...nodes.map((n) => `feosd ${n.name}:\n${n.proc.stderr().split('\n').slice(-30).join('\n')}`),
  ]);

  await step('a feosd joins: its Node is Ready', async () => {
    const token = await createToken(cp.kubeconfig, '--ttl', '1h');
    nodes.push(await startNode(join(dir, 'r'), 'fleet-r', net, port, CP_NAME, token, ['--pod-prefix', '2001:db8:19::/64', '--registry-forward', registry], GUEST_DIR));
    await until('fleet-r Ready', async () => (await readyOf(cp.kubeconfig, 'fleet-r')) === 'True', 90_000);
  });

  await step('two Pods the node refuses are created', async () => {
    // Bound by its spec (the scheduler would not place 100Gi on the node); feosd takes at most 64 GiB.
    const big = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'big' }, spec: { runtimeClassName: 'feos', nodeName: 'fleet-r', containers: [{ name: 'app', image, resources: { limits: { memory: '100Gi' } } }] } };
    let r = await applyText(cp.kubeconfig, dir, JSON.stringify(big));
    assert.equal(r.code, 0, r.stderr);
    const badref = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'badref' }, spec: { runtimeClassName: 'feos', containers: [{ name: 'app', image: 'Busybox:1', command: ['/bin/sh', '-c', 'while true; do echo tick; sleep 1; done'], resources: { limits: { cpu: '1', memory: '256Mi' } } }] } };
    // Scheduled once big is gone (big's 100Gi counts against the node's memory).
    r = await applyText(cp.kubeconfig, dir, JSON.stringify(badref));
    assert.equal(r.code, 0, r.stderr);
  });

  await step('too much memory: FailedCreatePodSandBox with the gRPC code and feosd\'s message, the container waits CreateContainerConfigError', async () => {
    const [ev] = await until('a FailedCreatePodSandBox event of big', async () => {
      const evs = await refusals('big');
      return evs.length > 0 ? evs : undefined;
    }, 60_000);
    assert.equal(ev.type, 'Warning');
    assert.equal(ev.message, 'Failed to create pod sandbox: rpc error: code = InvalidArgument desc = spec: memory_bytes 107374182400: want 192 MiB to 64 GiB');
    assert.deepEqual([ev.source?.component, ev.source?.host], ['kubelet', 'fleet-r']);
    const w = await until('big waits CreateContainerConfigError', async () => {
      const x = await waiting('big');
      return x?.reason === 'CreateContainerConfigError' ? x : undefined;
    }, 30_000);
    assert.match(w.message ?? '', /^FeOS node fleet-r refused the pod's microVM \(CreatePod: InvalidArgument: spec: memory_bytes 107374182400: want 192 MiB to 64 GiB\); trying again in \d+s$/);
    const d = await k('describe', 'pod', 'big');
    assert.match(d.stdout, /Reason:\s+CreateContainerConfigError/);
    assert.match(d.stdout, /Warning\s+FailedCreatePodSandBox\s+.*Failed to create pod sandbox: rpc error: code = InvalidArgument desc = spec: memory_bytes 107374182400: want 192 MiB to 64 GiB/);
    assert.equal((await getPod('big'))?.status.phase, 'Pending');
  });

  await step('the refused create is tried again on a back-off (10 s, then 20 s), counted in one event', async () => {
    // The second and third tries, whenever they come: the back-off sets the least time between them.
    const second = await until('a second try', async () => {
      const evs = await refusals('big');
      return tries(evs) >= 2 ? evs : undefined;
    }, 90_000);
    assert.equal(second.length, 1, 'the same refusal counts in one event');
    assert.equal(tries(second), 2, 'no hot loop: one try more since the first');
    const first = Date.parse(second[0].firstTimestamp ?? '');
    const at2 = Date.parse(second[0].lastTimestamp ?? '');
    // Seconds resolution: 10 s of back-off shows as 9 s at the least.
    assert.ok(at2 - first >= 9_000, `the second try ${at2 - first} ms after the first`);
    const third = await until('a third try', async () => {
      const evs = await refusals('big');
      return tries(evs) >= 3 ? evs : undefined;
    }, 120_000);
    assert.equal(tries(third), 3);
    const at3 = Date.parse(third[0].lastTimestamp ?? '');
    assert.ok(at3 - at2 >= 19_000, `the third try ${at3 - at2} ms after the second: the back-off doubles`);
    assert.match((await k('describe', 'pod', 'big')).stdout, /Warning\s+FailedCreatePodSandBox\s+\S+ \(x3 over \S+\)\s+kubelet/);
    assert.equal((await k('delete', 'pod', 'big', '--wait=true', '--timeout=60s')).code, 0);
  });

  await step('an image that is no reference: InvalidImageName; fixed with kubectl set image, then refused FAILED_PRECONDITION; the node fixed, the Pod Runs', async () => {
    const w = await until('badref waits InvalidImageName', async () => {
      const x = await waiting('badref');
      return x?.reason === 'InvalidImageName' ? x : undefined;
    }, 60_000);
    assert.match(w.message ?? '', /CreatePod: InvalidArgument: spec: containers\[0\]\.image: "Busybox:1": not a reference/);
    const [ev] = await refusals('badref');
    assert.match(ev?.message ?? '', /^Failed to create pod sandbox: rpc error: code = InvalidArgument desc = spec: containers\[0\]\.image: "Busybox:1": not a reference/);
    const r = await k('set', 'image', 'pod/badref', `app=${image}`);
    assert.equal(r.code, 0, r.stderr);
    // Tried at once with the new image (not after the back-off): the node lacks an IPv6 default route.
    const pre = await until('badref waits CreateContainerError', async () => {
      const x = await waiting('badref');
      return x?.reason === 'CreateContainerError' ? x : undefined;
    }, 30_000);
    assert.match(pre.message ?? '', /^FeOS node fleet-r refused the pod's microVM \(CreatePod: FailedPrecondition: pods with a network cannot run on this node: the node lacks what the pods' network needs: .*IPv6.*\); trying again in 10s$/);
    const evs = await refusals('badref');
    assert.equal(evs.length, 2, 'a refusal of another message is another event');
    assert.ok(evs.some((e) => /^Failed to create pod sandbox: rpc error: code = FailedPrecondition desc = pods with a network cannot run on this node: /.test(e.message)), JSON.stringify(evs));
    const before = tries(evs);
    addIpv6Default(net.ns);
    const running = await until('badref Running and Ready', async () => {
      const p = await getPod('badref');
      return p?.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
    }, BOOT_MS);
    assert.ok(running.status.containerStatuses?.[0]?.state.running);
    // Made at the first try after the route was added (one more refusal at most, had a try come between).
    assert.ok(tries(await refusals('badref')) <= before + 1);
    const pulls = (await k('get', 'events', '--field-selector', 'involvedObject.name=badref,reason=Pulling', '-o', 'jsonpath={.items[*].message}')).stdout;
    assert.equal(pulls, `Pulling image "${image}"`);
  });

  await step('the Pod deleted: no QEMU of the suite is left', async () => {
    assert.equal((await k('delete', 'pod', 'badref', '--wait=true', '--timeout=180s')).code, 0);
    await until('no QEMU in the node\'s namespace', async () => (await processesInNetns(net.ns)).every((p) => !/qemu/.test(p.name ?? '')), 60_000);
  });

  t.after(() => {
    // After the nodes' end (the first t.after): nothing of the suite runs a microVM.
    const left = processesNaming(dir).filter((pid) => /qemu/.test(processName(pid) ?? ''));
    assert.deepEqual(left, [], 'no QEMU of the suite runs');
  });
});
