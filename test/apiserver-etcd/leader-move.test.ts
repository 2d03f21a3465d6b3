/**
 * The leader dies during a move (issue 11, seed 002 "Moves" and "Limits"): two `kube32-cli
 * control-plane --storage etcd --leader-elect` on one etcd, two kube32-sim workers (talking to the
 * standby's API server), the counter Deployment. A Move Checkpoint is created; the moment it turns
 * Moving the leader's process is killed (SIGKILL). The standby takes the Lease and the move completes
 * or rolls back; either way the count carries over, and a watch that saw every change of the
 * Deployment's pods never saw two of them at once, nor none at the end.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { askCounter, COUNTER_WASM, type CounterReply, counterManifest, run, skipUnlessBuilt } from '../e2e/cluster.ts';
import { type ControlPlaneProcess, CLI, eventually, kubectl, ROOT, startControlPlane } from './control-plane.ts';
import { startEtcd } from './etcd-server.ts';

const SKIP = skipUnlessBuilt({ counter: true });

interface PodLite {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: { podIP?: string; phase?: string; conditions?: { type: string; status: string }[] };
}

async function startSim(t: TestContext, cp: ControlPlaneProcess, name: string, address: string): Promise<void> {
  const { issueWorkerKubeconfig } = await import('../../src/cli/node-credentials.ts');
  const dir = join(cp.dataDir, 'nodes', name);
  mkdirSync(dir, { recursive: true });
  const kc = await issueWorkerKubeconfig(cp.dataDir, name, join(dir, 'kubeconfig'));
  const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', kc, '--name', name, '--address', address, '--kubelet-port', '0', '--data-dir', dir], {
    stdio: 'ignore',
    env: { ...process.env, LOG_LEVEL: 'warn' },
  });
  const exited = new Promise((r) => proc.once('exit', r));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
  });
  await eventually(`node ${name} Ready`, 60_000, async () => (await kubectl(cp.kubeconfig, ['get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'])).stdout, (s) => s === 'True');
}

const ready = (p: PodLite | undefined) => !!p && !p.metadata.deletionTimestamp && !!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

test('the leader killed while a move is Moving: the move completes or rolls back, the count carries over, one pod throughout', { timeout: 180_000, skip: SKIP }, async (t) => {
  const { url } = await startEtcd(t);
  // One cluster identity: the second shares the first's CA and token key, so that the leader's node
  // proxy (as system:kube-apiserver) is accepted by kubelets whose API server is the other one.
  const cp1 = await startControlPlane(t, url, 'cp1');
  const cps = { cp1, cp2: await startControlPlane(t, url, 'cp2', { sharePkiFrom: cp1.dataDir }) };
  const leaseHolder = (kubeconfig: string) => async () => (await kubectl(kubeconfig, ['get', 'lease', 'kube32-controllers', '-n', 'kube-system', '-o', 'jsonpath={.spec.holderIdentity}'])).stdout;
  const leader = (await eventually('a leader', 30_000, leaseHolder(cps.cp1.kubeconfig), (h) => h === 'cp1' || h === 'cp2')) as 'cp1' | 'cp2';
  const standbyName = leader === 'cp1' ? 'cp2' : 'cp1';
  const standby = cps[standbyName];
  const kc = standby.kubeconfig;
  t.after(() => {
    if (process.exitCode) console.error(`--- ${leader}\n${cps[leader].logs()}\n--- ${standbyName}\n${standby.logs()}`);
  });

  const prefix = `127.${30 + Math.floor(Math.random() * 200)}.${1 + Math.floor(Math.random() * 250)}`;
  await Promise.all([startSim(t, standby, 'w1', `${prefix}.2`), startSim(t, standby, 'w2', `${prefix}.3`)]);
  const m = counterManifest();
  const push = await run(process.execPath, [CLI, 'push', COUNTER_WASM, '--name', m.moduleName], { env: { ...process.env, KUBECONFIG: kc } });
  assert.equal(push.code, 0, push.stderr);

  // Every change of the Deployment's pods, through the standby's API server, from before the first one.
  const pods = new Map<string, PodLite>();
  let most = 0;
  const config = new KubeConfig();
  config.loadFromFile(kc);
  const watching = await new Watch(config).watch(
    '/api/v1/namespaces/default/pods',
    { labelSelector: m.selector.replace(/^-l\s*/, '') },
    (type: string, obj: PodLite) => {
      if (type === 'DELETED') pods.delete(obj.metadata.uid);
      else if (type === 'ADDED' || type === 'MODIFIED') pods.set(obj.metadata.uid, obj);
      most = Math.max(most, pods.size);
    },
    () => {},
  );
  t.after(() => watching.abort());

  const applied = await kubectl(kc, ['apply', '-f', '-'], m.docs.map((d) => JSON.stringify(d)).join('\n'));
  assert.equal(applied.code, 0, applied.stderr);
  const first = (await eventually('the counter Ready', 60_000, async () => [...pods.values()].find(ready), (p) => !!p)) as PodLite;
  let before: CounterReply | undefined;
  for (let i = 0; i < 3; i++) before = await askCounter(first.status!.podIP!, m.containerPort);

  // Move it; the moment its Checkpoint is Moving, the leader's process dies.
  const target = first.spec.nodeName === 'w1' ? 'w2' : 'w1';
  const ckpt = { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'move-1', namespace: 'default' }, spec: { podName: first.metadata.name, action: 'Move', target: { nodeName: target } } };
  let killedAt = '';
  const phases: string[] = [];
  const ckWatch = await new Watch(config).watch(
    '/apis/kube32.io/v1/namespaces/default/checkpoints',
    {},
    (_type: string, obj: { status?: { phase?: string; message?: string } }) => {
      const phase = obj.status?.phase ?? '';
      if (phases.at(-1) !== phase) phases.push(phase === 'Failed' ? `Failed (${obj.status?.message})` : phase);
      if (phase === 'Moving' && !killedAt) {
        killedAt = phase;
        cps[leader].proc.kill('SIGKILL');
      }
    },
    () => {},
  );
  t.after(() => ckWatch.abort());
  const created = await kubectl(kc, ['create', '-f', '-'], JSON.stringify(ckpt));
  assert.equal(created.code, 0, created.stderr);
  await eventually('the Checkpoint Moving', 60_000, async () => `${killedAt}: ${phases.join(' → ')}`, (k) => k.startsWith('Moving'));
  await cps[leader].exited;

  await eventually(`${standbyName} leads`, 40_000, leaseHolder(kc), (h) => h === standbyName);
  const phase = await eventually(
    'the move to end',
    100_000,
    async () => (await kubectl(kc, ['get', 'checkpoint', 'move-1', '-o', 'jsonpath={.status.phase}'])).stdout,
    (p) => p === 'Completed' || p === 'Failed',
  );
  const after = await eventually('one counter Ready', 60_000, async () => [...pods.values()].filter(ready), (ps) => ps.length === 1 && pods.size === 1);
  const pod = after[0]!;
  if (phase === 'Completed') {
    assert.equal(pod.spec.nodeName, target, `a completed move runs the pod on ${target}`);
    assert.notEqual(pod.metadata.uid, first.metadata.uid);
  } else {
    assert.equal(pod.spec.nodeName, first.spec.nodeName, 'a rolled-back move keeps the pod where it was');
  }
  t.diagnostic(`move ${phase}: ${phases.join(' → ')}; the pod runs on ${pod.spec.nodeName}`);
  const reply = await askCounter(pod.status!.podIP!, m.containerPort);
  assert.equal(reply.count, before!.count + 1, `the count carries over (${phase}; phases ${phases.join(' → ')})`);
  assert.ok(reply.podTimeMs >= before!.podTimeMs, 'the pod clock never goes backward');
  assert.equal(most, 1, 'never more than one pod of the Deployment at once');
  const list = JSON.parse((await kubectl(kc, ['get', 'pods', '-l', 'app=counter', '-o', 'json'])).stdout) as { items: PodLite[] };
  assert.equal(list.items.length, 1);
});
