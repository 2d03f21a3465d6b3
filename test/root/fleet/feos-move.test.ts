/**
 * A microVM pod moved by the Kube32 control plane (issue 18 "Moving them"; docs/feos/cluster-pods.md
 * "Moving a microVM pod"), as root: a real `kube32-cli control-plane --feos-listen`, two real feosds joined
 * from network namespaces of their own, sharing one object store (`--object-store file://` in the suite's
 * tmp dir), real QEMU microVMs (TCG here), a local registry behind the test's token gate. What a user checks:
 * - a Deployment of one microVM pod whose busybox container counts into its log runs on fleet-a;
 * - `kube32-cli move` moves it to fleet-b: the Checkpoint ends Completed with `snapshotKind: microvm`
 *   (`kubectl get ckpt -o wide` shows KIND microvm), the pod keeps its name with a new uid on fleet-b, the
 *   `Moved` event gives the time from the freeze, the Deployment counts one pod throughout;
 * - the count goes on (`kubectl logs` of the new pod continues above the last number seen before the move)
 *   and so does the guest's uptime (`kubectl exec ... cat /proc/uptime`);
 * - the source's FeOS pod goes once the move is done (the sweep of orphans), the target's runs;
 * - `kubectl drain fleet-b` moves it back (the eviction's Move Checkpoint), its count going on;
 * - a move to a third feosd that cannot restore it (no guest installed: RestorePod refuses before it claims
 *   the checkpoint) rolls it back to fleet-a, where it restores from its HIBERNATED record and goes on.
 * One microVM boots (on fleet-a); the moves restore it (fleet-b, fleet-a, fleet-a again).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { addIpv6Default, applyText, CLI, createToken, eventsOf, eventsWithSource, feosDeployment, feosctlNode, forwardTo, freePort, keepLog, kubectl, pullSecret, readyOf, run, startControlPlane, startNode, suiteRegistry, until, fleetSuite, GUEST_DIR } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const CP_NAME = 'feos-move-cp.test';
const TOKEN = 'feos-move-pull-5b2e81c4';
/** A boot under TCG on a loaded machine. */
const BOOT_MS = 600_000;
/** A move: the hibernation (suspend, upload) and the restore (download, QEMU's load) under TCG. */
const MOVE_MS = 600_000;

interface Pod {
  metadata: { name: string; uid: string; deletionTimestamp?: string; annotations?: Record<string, string> };
  spec: { nodeName?: string };
  status: { phase?: string; conditions?: { type: string; status: string }[] };
}

test('a microVM pod of a Deployment moves to another FeOS node with kube32-cli move, its count and uptime going on', { timeout: 2_400_000 }, async (t) => {
  const { nets, dir, nodes } = fleetSuite(t, 'feos-move');
  const netA = await nets.add('a');
  const netB = await nets.add('b');
  for (const ns of [netA.ns, netB.ns]) addIpv6Default(ns);
  // The registry on the host's loopback, reached from each node's namespace through its veth's host side.
  // fleet-b pulls nothing (a restore brings the pod's disk from the store), but a microVM restores only
  // with the devices it was suspended with: --registry-forward gives it a user-mode NIC on both nodes.
  const { reg } = await suiteRegistry(t, 'k32t-feos-move-reg-', TOKEN, 'private/busybox');
  const registry = await forwardTo(t, netA.host, reg.gated);
  const registryB = await forwardTo(t, netB.host, reg.gated);
  const store = `file://${join(dir, 'store')}`;

  const port = await freePort();
  // Both nodes reach the control plane on their own veth's host side: it listens on every address.
  const cp = await startControlPlane(t, ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${netA.host}:${port}`, '--feos-server-name', CP_NAME]);
  t.after(() => keepLog('feos-move-control-plane', cp.logs()));
  const k = (...args: string[]) => kubectl(cp.kubeconfig, ...args);
  const apply = (text: string) => applyText(cp.kubeconfig, dir, text);
  const webPods = async (): Promise<Pod[]> => {
    const r = await k('get', 'pods', '-l', 'app=counter', '-o', 'json');
    return (JSON.parse(r.stdout || '{"items":[]}') as { items: Pod[] }).items;
  };
  const runningReady = (p: Pod | undefined) => p?.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  /** The last number the pod's container wrote into its log. */
  const lastCount = async (name: string): Promise<number | undefined> => {
    const r = await k('logs', name, '--tail', '5');
    if (r.code !== 0) return undefined;
    const nums = r.stdout.split('\n').filter((l) => /^\d+$/.test(l.trim())).map(Number);
    return nums.length > 0 ? nums[nums.length - 1] : undefined;
  };
  const uptime = async (name: string): Promise<number | undefined> => {
    const r = await k('exec', name, '--', 'cat', '/proc/uptime');
    return r.code === 0 ? Number.parseFloat(r.stdout) : undefined;
  };
  const events = (name: string) => eventsOf(cp.kubeconfig, name);

  const step = steps(t, () => [
    `control plane:\n${cp.logs().split('\n').filter((l) => /feos-kubelet|checkpoint|fleet/.test(l)).slice(-40).join('\n')}`,
    ...nodes.map((n) => `feosd ${n.name}:\n${n.proc.stderr().split('\n').slice(-30).join('\n')}`),
  ]);

  await step('two feosds with one object store join: their Nodes are Ready', async () => {
    const token = await createToken(cp.kubeconfig, '--ttl', '1h');
    nodes.push(await startNode(join(dir, 'a'), 'fleet-a', netA, port, CP_NAME, token, ['--pod-prefix', '2001:db8:18a::/64', '--registry-forward', registry, '--object-store', store], GUEST_DIR));
    const tokenB = await createToken(cp.kubeconfig, '--ttl', '1h');
    nodes.push(await startNode(join(dir, 'b'), 'fleet-b', netB, port, CP_NAME, tokenB, ['--pod-prefix', '2001:db8:18b::/64', '--registry-forward', registryB, '--object-store', store], GUEST_DIR));
    for (const n of ['fleet-a', 'fleet-b']) await until(`${n} Ready`, async () => (await readyOf(cp.kubeconfig, n)) === 'True', 90_000);
  });

  let before: Pod;
  let countBefore = 0;
  let uptimeBefore = 0;
  await step('a Deployment of one microVM pod that counts runs on fleet-a', async () => {
    // fleet-b cordoned while the pod is placed, so that it lands on fleet-a (the node with the registry).
    assert.equal((await k('cordon', 'fleet-b')).code, 0);
    let r = await apply(pullSecret(registry, TOKEN));
    assert.equal(r.code, 0, r.stderr);
    r = await apply(feosDeployment('counter', `${registry}/private/busybox:1`, 'i=0; while true; do i=$((i+1)); echo $i; sleep 1; done'));
    assert.equal(r.code, 0, r.stderr);
    before = await until('the counter pod Running and Ready', async () => (await webPods()).find(runningReady), BOOT_MS);
    assert.equal(before.spec.nodeName, 'fleet-a');
    assert.equal((await k('uncordon', 'fleet-b')).code, 0);
    // Counted for a while: a container started afresh after the move would be far below.
    countBefore = await until('the count at 15', async () => {
      const n = await lastCount(before.metadata.name);
      return n !== undefined && n >= 15 ? n : undefined;
    }, 120_000);
    uptimeBefore = await until('the guest\'s uptime', () => uptime(before.metadata.name), 60_000);
  });

  let after: Pod;
  await step('kube32-cli move: the pod hibernates on fleet-a and is restored on fleet-b with its name, a new uid', async () => {
    let most = 0;
    let watching = true;
    // The Deployment counts one pod at every step: no second pod appears while the move runs.
    const watch = (async () => {
      while (watching) {
        const pods = (await webPods()).filter((p) => !p.metadata.deletionTimestamp);
        most = Math.max(most, pods.length);
        await new Promise((r) => setTimeout(r, 500)); // sampling interval of an observation, not a synchronisation
      }
    })();
    const moved = await run(process.execPath, [CLI, 'move', before.metadata.name, '--to', 'fleet-b', '--timeout', '10m', '--kubeconfig', cp.kubeconfig], MOVE_MS + 60_000);
    watching = false;
    await watch;
    assert.equal(moved.code, 0, `${moved.stderr}${moved.stdout}`);
    after = await until('the pod Running and Ready on fleet-b', async () => {
      const p = (await webPods()).find((x) => x.metadata.name === before.metadata.name);
      return p && p.spec.nodeName === 'fleet-b' && runningReady(p) ? p : undefined;
    }, 120_000);
    assert.notEqual(after.metadata.uid, before.metadata.uid, 'the replacement has a new uid');
    assert.equal(after.metadata.annotations?.['feos.kube32.io/pod-id'], before.metadata.uid, 'it names the FeOS pod it restored');
    assert.equal(after.metadata.annotations?.['kube32.io/restore-from'], undefined, 'the annotation goes once it runs');
    assert.equal(most, 1, 'one pod of the Deployment throughout');
    const ev = await events(after.metadata.name);
    assert.match(ev, /^Moved\s+\S+: moved from fleet-a to fleet-b in \d+ ms from the freeze to Running$/m);
    // The kubelet's events of the restored container (the new uid's; the source pod's are its own): Pulled and
    // Restored (from where), not Created and Started.
    const mine = (await eventsWithSource(cp.kubeconfig, after.metadata.name, after.metadata.uid)).split('\n').filter((l) => /^\S+\s+kubelet\s/.test(l));
    assert.ok(mine.some((l) => /^Pulled\s+kubelet\s+Container image ".*" already present on machine$/.test(l)), mine.join('\n'));
    assert.ok(mine.some((l) => /^Restored\s+kubelet\s+Restored container app from Checkpoint \S+, taken on node fleet-a$/.test(l)), mine.join('\n'));
    assert.ok(!mine.some((l) => /^(Created|Started)\s/.test(l)), `no Created or Started: ${mine.join('\n')}`);
    t.diagnostic(`kube32-cli move: ${moved.stdout.trim()}`);
    const wide = await k('get', 'ckpt', '-o', 'wide');
    assert.match(wide.stdout, /^NAME\s+POD\s+ACTION\s+PHASE\s+NODE\s+SIZE\s+AGE\s+TARGET\s+NEW POD\s+MESSAGE\s+KIND$/m);
    assert.match(wide.stdout, new RegExp(`^\\S+\\s+${before.metadata.name}\\s+Move\\s+Completed\\s+fleet-a\\s+.*fleet-b\\s+${before.metadata.name}\\s+moved in \\d+ ms from the freeze\\s+microvm$`, 'm'));
  });

  await step('the count and the guest\'s uptime go on; the source\'s FeOS pod goes, the target\'s runs', async () => {
    const count = await until('a count in the new pod\'s log', () => lastCount(after.metadata.name), 60_000);
    assert.ok(count > countBefore, `the count goes on: ${count} after the move, ${countBefore} before`);
    const up = await until('the guest\'s uptime', () => uptime(after.metadata.name), 60_000);
    assert.ok(up > uptimeBefore, `the guest's uptime goes on: ${up} s after, ${uptimeBefore} s before`);
    const id = before.metadata.uid;
    const onB = await feosctlNode(cp.kubeconfig, 'fleet-b', 'pod', 'list');
    assert.match(onB.stdout, new RegExp(`^${id}\\s+RUNNING\\s`, 'm'));
    await until('the source\'s HIBERNATED record deleted', async () => {
      const r = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
      return r.code === 0 && !r.stdout.includes(id);
    }, 120_000);
    countBefore = count;
    uptimeBefore = up;
  });

  let back: Pod;
  await step('kubectl drain of fleet-b moves the pod back to fleet-a (an eviction\'s Move), its count going on', async () => {
    const r = await run('kubectl', ['--kubeconfig', cp.kubeconfig, 'drain', 'fleet-b', '--ignore-daemonsets', '--timeout', '8m'], MOVE_MS);
    assert.equal(r.code, 0, `${r.stderr}${r.stdout}`);
    back = await until('the pod Running and Ready on fleet-a', async () => {
      const p = (await webPods()).find((x) => x.metadata.name === before.metadata.name);
      return p && p.spec.nodeName === 'fleet-a' && runningReady(p) ? p : undefined;
    }, 120_000);
    assert.notEqual(back.metadata.uid, after.metadata.uid);
    const ck = await k('get', 'ckpt', '-l', 'kube32.io/trigger=eviction', '-o', 'jsonpath={.items[0].status.phase} {.items[0].status.snapshotKind} {.items[0].status.targetNode}');
    assert.equal(ck.stdout, 'Completed microvm fleet-a');
    const count = await until('a count in the pod\'s log', () => lastCount(back.metadata.name), 60_000);
    assert.ok(count > countBefore, `the count goes on: ${count} after the drain, ${countBefore} before`);
    const up = await until('the guest\'s uptime', () => uptime(back.metadata.name), 60_000);
    assert.ok(up > uptimeBefore, `the guest's uptime goes on: ${up} s after, ${uptimeBefore} s before`);
    assert.equal((await k('uncordon', 'fleet-b')).code, 0);
    countBefore = count;
    uptimeBefore = up;
  });

  await step('a restore that fails on the target (no guest installed on fleet-c) rolls the pod back to fleet-a, where it goes on', async () => {
    const token = await createToken(cp.kubeconfig, '--ttl', '1h');
    const netC = await nets.add('c');
    nodes.push(await startNode(join(dir, 'c'), 'fleet-c', netC, port, CP_NAME, token, ['--object-store', store]));
    await until('fleet-c Ready', async () => (await readyOf(cp.kubeconfig, 'fleet-c')) === 'True', 90_000);
    const r = await run(process.execPath, [CLI, 'move', back.metadata.name, '--to', 'fleet-c', '--timeout', '10m', '--kubeconfig', cp.kubeconfig], MOVE_MS + 60_000);
    assert.equal(r.code, 1, `${r.stderr}${r.stdout}`);
    assert.match(r.stderr, /the replacement on fleet-c failed: RestoreError: .*; rolled back to fleet-a/);
    const again = await until('the pod Running and Ready on fleet-a again', async () => {
      const p = (await webPods()).find((x) => x.metadata.name === before.metadata.name);
      return p && p.spec.nodeName === 'fleet-a' && p.metadata.uid !== back.metadata.uid && runningReady(p) ? p : undefined;
    }, 180_000);
    const count = await until('a count in the pod\'s log', () => lastCount(again.metadata.name), 60_000);
    assert.ok(count > countBefore, `the count goes on after the rollback: ${count}, ${countBefore} before`);
    const up = await until('the guest\'s uptime', () => uptime(again.metadata.name), 60_000);
    assert.ok(up > uptimeBefore, `the guest's uptime goes on: ${up} s after, ${uptimeBefore} s before`);
    assert.match(await eventsWithSource(cp.kubeconfig, again.metadata.name), /^Restored\s+kube32-controller-manager\s+restored from checkpoint \S+, taken/m);
  });
});
