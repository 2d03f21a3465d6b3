/**
 * Several simulated nodes in one kube32-sim process (`--nodes 3`) against the whole control plane:
 * three Ready Nodes with their own addresses, Leases and identities; pods run on each; `kubectl
 * drain` of one moves a Deployment's counting pod to another node of the same process with its
 * count; SIGTERM drains every node of the process and it exits 0. The process runs with
 * `--pods-per-thread 2`, so pods of different nodes share the runtime's threads. And a process whose
 * one node cannot start leaves none running.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Lease, V1Node, V1Pod } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { claimLoopbackRange, refusedPort, unusedPort } from '../helpers/ports.ts';
import { type Cluster, fixturePod, startCluster } from './cluster.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

interface Count { count: number; restored: number }

interface Sim {
  proc: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** Three consecutive loopback addresses of a /24 claimed for this process, so that suites run side by side. */
async function addresses(): Promise<string[]> {
  const prefix = await claimLoopbackRange();
  return [2, 3, 4].map((i) => `${prefix}.${i}`);
}

/** Starts `kube32-sim --nodes N ...` with its output kept; killed in `t.after` if still running. */
function startSim(t: TestContext, args: string[]): Sim {
  const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'info' },
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
  });
  return { proc, stdout: () => out, stderr: () => err, exited };
}

/** Node kubeconfigs `<dir>/<node>.kubeconfig` for each name, as `kube32-cli apiserver --issue-node-kubeconfig` writes them. */
async function issueAll(c: Cluster, names: string[]): Promise<string> {
  const paths = await Promise.all(names.map((n) => c.nodeKubeconfig(n)));
  return dirname(paths[0]!);
}

function kubectl(c: Cluster, args: string[], timeoutMs = 90_000): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('kubectl', ['--kubeconfig', c.kubeconfigPath, ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

async function count(address: string, port: number): Promise<Count> {
  const res = await fetch(`http://${address}:${port}/count`, { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200);
  return (await res.json()) as Count;
}

const ready = (n: V1Node | undefined) => n?.status?.conditions?.find((x) => x.type === 'Ready')?.status;

test('kube32-sim --nodes 3: three nodes in one process run pods, a drain moves a pod between them with its count, SIGTERM drains them all', { timeout: 150_000 }, async (t) => {
  const c = await startCluster(t, { controllers: true });
  const names = ['m-1', 'm-2', 'm-3'];
  const addrs = await addresses();
  const dir = await issueAll(c, names);
  const sim = startSim(t, ['--nodes', '3', '--name', 'm', '--address', addrs[0]!, '--kubelet-port', '0', '--kubeconfig-dir', dir,
    '--data-dir', join(c.tmp, 'sim'), '--interp-mops', '1000', '--drain-timeout', '5s', '--pods-per-thread', '2']);
  await c.until('three nodes ready', () => {
    if (sim.proc.exitCode !== null) throw new Error(`kube32-sim exited ${sim.proc.exitCode}: ${sim.stderr().slice(-2000)}`);
    return sim.stdout().includes('3 nodes ready');
  }, 60_000);

  // Three Nodes, each Ready at its own address with its own kubelet port, Lease and data dir.
  const ports = new Set<number>();
  for (const [i, name] of names.entries()) {
    const n = await c.until(`${name} Ready`, async () => {
      const node = await c.admin.json<V1Node>('GET', `/api/v1/nodes/${name}`);
      return ready(node) === 'True' ? node : undefined;
    });
    assert.equal(n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address, addrs[i]);
    ports.add(n.status?.daemonEndpoints?.kubeletEndpoint?.Port ?? 0);
    const lease = await c.admin.json<V1Lease>('GET', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`);
    assert.equal(lease.spec?.holderIdentity, readFileSync(join(c.tmp, 'sim', name, 'lease-holder-identity'), 'utf8').trim(), 'the holder identity kept in its own data dir');
    assert.ok(existsSync(join(c.tmp, 'sim', name, 'kube32-sim.lock')), `${name} has its own data dir`);
    assert.match(sim.stdout(), new RegExp(`node ${name} ready: pods at ${addrs[i]!.replaceAll('.', '\\.')}, kubelet endpoint http://`));
  }
  assert.equal(ports.size, 3, 'each node has a kubelet endpoint of its own');

  // A pod bound to each node serves at that node's address, all on one port.
  const port = await unusedPort(addrs);
  for (const name of names) await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod(`on-${name}`, name, port) });
  for (const [i, name] of names.entries()) {
    await c.until(`on-${name} Running`, async () => {
      const p = await c.getPod(`on-${name}`);
      return p?.status?.phase === 'Running' && p.status.podIP === addrs[i];
    }, 30_000);
    assert.equal((await count(addrs[i]!, port)).count, 1);
  }
  for (const name of names) await c.admin.json('DELETE', `/api/v1/namespaces/default/pods/on-${name}`);
  await c.until('the bound pods gone', async () => {
    const list = await c.admin.json<{ items: V1Pod[] }>('GET', '/api/v1/namespaces/default/pods');
    return list.items.length === 0;
  }, 30_000);

  // A Deployment's counting pod, drained off its node with kubectl, moves to another node of the process.
  const template = fixturePod('counter', '', port);
  delete template.spec!.nodeName;
  await c.admin.json('POST', '/apis/apps/v1/namespaces/default/deployments', {
    body: {
      apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'counter', namespace: 'default' },
      spec: { replicas: 1, selector: { matchLabels: { app: 'counter' } }, template: { metadata: { labels: { app: 'counter' } }, spec: template.spec } },
    },
  });
  const counterPods = async () => (await c.admin.json<{ items: V1Pod[] }>('GET', '/api/v1/namespaces/default/pods?labelSelector=app%3Dcounter')).items.filter((p) => !p.metadata?.deletionTimestamp);
  const first = await c.until('the counter Running', async () => {
    const [p, ...more] = await counterPods();
    return p && more.length === 0 && p.status?.phase === 'Running' ? p : undefined;
  }, 60_000);
  const source = first.spec!.nodeName!;
  assert.ok(names.includes(source));
  assert.equal((await count(first.status!.podIP!, port)).count, 1);
  assert.equal((await count(first.status!.podIP!, port)).count, 2);
  const drain = await kubectl(c, ['drain', source, '--ignore-daemonsets', '--timeout=60s']);
  assert.equal(drain.code, 0, drain.stderr);
  const moved = await c.until('the counter Running on another node of the process', async () => {
    const [p, ...more] = await counterPods();
    return p && more.length === 0 && p.spec?.nodeName !== source && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
  }, 60_000);
  assert.ok(names.includes(moved.spec!.nodeName!));
  assert.equal(moved.metadata?.name, first.metadata?.name, 'moved, not recreated');
  assert.equal(moved.status?.podIP, addrs[names.indexOf(moved.spec!.nodeName!)]);
  const after = await count(moved.status!.podIP!, port);
  assert.equal(after.count, 3, 'the count goes on after the move');
  assert.equal(after.restored, 1);

  // SIGTERM: every node of the process drains (cordoned, marked left, Ready False) and it exits 0.
  sim.proc.kill('SIGTERM');
  assert.equal(await sim.exited, 0, sim.stderr().slice(-2000));
  // Every node of the process drains at once, so the counting pod has no node left to move to: as the
  // API server decides, its eviction deletes it or is refused (429) until the drain's timeout.
  for (const name of names) assert.match(sim.stdout(), new RegExp(`node ${name} drained: \\d+ evicted, \\d+ left behind`));
  for (const name of names) {
    const n = await c.admin.json<V1Node>('GET', `/api/v1/nodes/${name}`);
    assert.equal(n.spec?.unschedulable, true, `${name} cordoned`);
    assert.equal(n.metadata?.annotations?.['kube32.io/left'], 'true', `${name} marked left`);
    assert.equal(ready(n), 'False', `${name} NotReady`);
  }
});

test('kube32-sim --nodes 3 with one node that cannot start leaves none running and names it', { timeout: 60_000 }, async (t) => {
  const c = await startCluster(t, { controllers: false });
  const names = ['f-1', 'f-2', 'f-3'];
  const dir = await issueAll(c, names);
  // f-2's kubeconfig is f-1's identity: the API server refuses to let it take Lease f-2 (or register Node f-2).
  copyFileSync(join(dir, 'f-1.kubeconfig'), join(dir, 'f-2.kubeconfig'));
  const addrs = await addresses();
  const sim = startSim(t, ['--nodes', '3', '--name', 'f', '--address', addrs[0]!, '--kubelet-port', '0', '--kubeconfig-dir', dir,
    '--data-dir', join(c.tmp, 'sim'), '--interp-mops', '1000']);
  assert.equal(await sim.exited, 1);
  // The node takes its Lease before it registers its Node: the Lease is what the API server refuses first.
  assert.match(sim.stderr(), /nodes could not start, so none runs:\n {2}node f-2: .*forbidden.*may only create its own Lease/);
  assert.doesNotMatch(sim.stderr(), /node f-[13]:/, 'only the node that failed is named');
  assert.doesNotMatch(sim.stdout(), /ready:/, 'no node is announced ready');
  for (const name of names) {
    assert.ok(!existsSync(join(c.tmp, 'sim', name, 'kube32-sim.lock')), `${name}'s data dir is unlocked`);
    const node = await c.admin.json<V1Node>('GET', `/api/v1/nodes/${name}`).catch(() => undefined);
    assert.notEqual(ready(node), 'True', `${name} is not left Ready`);
  }
});

test('kube32-sim --nodes 2 waiting for its API server: a signal during the start is held for the drain, a second one stops at once', { timeout: 60_000 }, async (t) => {
  const c = await startCluster(t, { controllers: false });
  const dir = await issueAll(c, ['s-1', 's-2']);
  // The nodes' kubeconfigs name a port where no API server listens: the start waits, retrying.
  const closed = await refusedPort('127.0.0.1');
  for (const n of ['s-1', 's-2']) {
    const path = join(dir, `${n}.kubeconfig`);
    writeFileSync(path, readFileSync(path, 'utf8').replace(/server: \S+/, `server: https://127.0.0.1:${closed}`));
  }
  const sim = startSim(t, ['--nodes', '2', '--name', 's', '--address', (await addresses())[0]!, '--kubelet-port', '0', '--kubeconfig-dir', dir,
    '--data-dir', join(c.tmp, 'sim'), '--interp-mops', '1000']);
  await c.until('the nodes to retry their registration', () => sim.stderr().includes('the API server is not reachable; retrying'), 30_000);
  sim.proc.kill('SIGTERM');
  await c.until('the signal to be held', () => sim.stderr().includes('signal during the start'), 10_000);
  assert.equal(sim.proc.exitCode, null, 'the first signal does not end the start');
  sim.proc.kill('SIGTERM');
  assert.equal(await sim.exited, 1);
  assert.match(sim.stderr(), /second signal: stopping without waiting for the drain/);
  assert.doesNotMatch(sim.stdout(), /ready:/);
});
