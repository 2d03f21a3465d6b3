/**
 * One cluster, two kinds of pod (issue 18, "Done when"; docs/feos/cluster-pods.md), as root, brought up
 * as a user does: `kube32-cli up --workers 2 --feos-nodes 2 --feos-registry <a loopback registry>` (a
 * control plane, two kube32-sim Wasm workers, two feosds in network namespaces of their own sharing up's
 * object store, real QEMU microVMs under TCG). What a user checks, with kubectl:
 * - both kinds run side by side: the Wasm counter (examples/counter) on a Wasm worker, a microVM pod of
 *   RuntimeClass feos (examples/feos-counter's image: busybox counting into its log) on a FeOS node;
 * - `kubectl logs` and `kubectl exec` into the microVM pod;
 * - `kubectl drain` of the microVM pod's node moves it to the other FeOS node with its count going on;
 * - `kubectl drain` of the Wasm pod's worker moves the Wasm pod to the other worker with its count going on.
 * One microVM boots; the drain restores it. About 6 minutes (351 s) on the 2-core build machine under TCG.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CLI, kubectl, run, startUp, suiteRegistry, until } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
/** A boot and the pull in the guest under TCG on a loaded machine. */
const BOOT_MS = 600_000;
/** A move: the hibernation (suspend, copy into the store) and the restore under TCG. */
const MOVE_MS = 600_000;

interface Pod {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status: { phase?: string; conditions?: { type: string; status: string }[] };
}

test('one cluster runs a Wasm pod and a microVM pod; kubectl drain moves each with its count going on', { timeout: 2_400_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const { reg, dir } = await suiteRegistry(t, 'k32t-mixed-', 'mixed-unused-token');
  execFileSync('bash', [join(REPO, 'examples/feos-counter/build-image.sh'), reg.direct], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });

  const up = await startUp(t, ['--workers', '2', '--feos-nodes', '2', '--feos-accel', 'tcg', '--feos-registry', reg.direct, '--ready-timeout', '300'], 1_200_000);
  const k = (...args: string[]) => kubectl(up.kubeconfig, ...args);
  const pods = async (app: string): Promise<Pod[]> => {
    const r = await k('get', 'pods', '-l', `app=${app}`, '-o', 'json');
    return (JSON.parse(r.stdout || '{"items":[]}') as { items: Pod[] }).items.filter((p) => !p.metadata.deletionTimestamp);
  };
  const runningReady = (p: Pod | undefined) => p?.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  /** The microVM pod's last `count N` in its log. */
  const vmCount = async (name: string): Promise<number | undefined> => {
    const r = await k('logs', name, '--tail', '5');
    const nums = r.stdout.split('\n').map((l) => /^count (\d+)$/.exec(l.trim())?.[1]).filter((x): x is string => x !== undefined).map(Number);
    return r.code === 0 && nums.length > 0 ? nums[nums.length - 1] : undefined;
  };
  /** The Wasm counter's count, through the API server's service proxy (each ask counts one). */
  const wasmCount = async (): Promise<number | undefined> => {
    const r = await k('get', '--raw', '/api/v1/namespaces/default/services/counter/proxy/count');
    return r.code === 0 ? (JSON.parse(r.stdout) as { count: number }).count : undefined;
  };

  const step = steps(t, () => [
    `up:\n${up.out().split('\n').slice(-30).join('\n')}`,
  ]);

  await step('kubectl get nodes: two Wasm workers and two FeOS nodes, Ready', async () => {
    const r = await k('get', 'nodes', '-L', 'kube32.io/runtime', '--no-headers');
    assert.equal(r.code, 0, r.stderr);
    for (const n of ['worker-1', 'worker-2']) assert.match(r.stdout, new RegExp(`^${n}\\s+Ready\\s`, 'm'));
    for (const n of ['feos-1', 'feos-2']) assert.match(r.stdout, new RegExp(`^${n}\\s+Ready\\s.*\\sfeos\\s*$`, 'm'));
  });

  let vm: Pod;
  let wasm: Pod;
  let vmBefore = 0;
  let wasmBefore = 0;
  await step('both kinds run: the Wasm counter on a worker, the microVM counter on a FeOS node', async () => {
    const push = await run(process.execPath, [CLI, 'push', join(REPO, 'build/examples/counter.wasm'), '--name', 'counter', '--kubeconfig', up.kubeconfig]);
    assert.equal(push.code, 0, push.stderr);
    let r = await k('apply', '-f', join(REPO, 'examples/counter/counter.yaml'));
    assert.equal(r.code, 0, r.stderr);
    const yaml = join(dir, 'feos-counter.yaml');
    writeFileSync(yaml, execFileSync('sed', [`s|127.0.0.1:5000|${reg.direct}|`, join(REPO, 'examples/feos-counter/counter.yaml')], { encoding: 'utf8' }));
    r = await k('apply', '-f', yaml);
    assert.equal(r.code, 0, r.stderr);
    wasm = await until('the Wasm counter Running and Ready', async () => (await pods('counter')).find(runningReady), 120_000);
    assert.match(wasm.spec.nodeName ?? '', /^worker-[12]$/);
    vm = await until('the microVM counter Running and Ready', async () => (await pods('feos-counter')).find(runningReady), BOOT_MS);
    assert.match(vm.spec.nodeName ?? '', /^feos-[12]$/);
    const wide = await k('get', 'pods', '-o', 'wide', '--no-headers');
    assert.match(wide.stdout, new RegExp(`^${wasm.metadata.name}\\s+1/1\\s+Running\\s.*\\s${wasm.spec.nodeName}\\s`, 'm'));
    assert.match(wide.stdout, new RegExp(`^${vm.metadata.name}\\s+1/1\\s+Running\\s.*\\s${vm.spec.nodeName}\\s`, 'm'));
    for (let i = 0; i < 3; i++) wasmBefore = (await until('the Wasm counter answers', wasmCount, 30_000)) ?? 0;
  });

  await step('kubectl logs and kubectl exec into the microVM pod', async () => {
    vmBefore = await until('the count at 10 in kubectl logs', async () => {
      const n = await vmCount(vm.metadata.name);
      return n !== undefined && n >= 10 ? n : undefined;
    }, 120_000);
    const r = await k('exec', vm.metadata.name, '--', 'sh', '-c', 'cat /etc/os-release 2>/dev/null; uname -s; echo exec-ok');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Linux$/m);
    assert.match(r.stdout, /^exec-ok$/m);
    // Wasm pods keep refusing exec, with what to use instead.
    const w = await k('exec', wasm.metadata.name, '--', 'sh');
    assert.notEqual(w.code, 0);
  });

  await step('kubectl drain of the microVM pod\'s node moves it to the other FeOS node, its count going on', async () => {
    const from = vm.spec.nodeName!;
    const to = from === 'feos-1' ? 'feos-2' : 'feos-1';
    const r = await run('kubectl', ['--kubeconfig', up.kubeconfig, 'drain', from, '--ignore-daemonsets', '--timeout', '9m'], MOVE_MS);
    assert.equal(r.code, 0, `${r.stderr}${r.stdout}`);
    const after = await until(`the microVM pod Running and Ready on ${to}`, async () => {
      const p = (await pods('feos-counter')).find((x) => x.metadata.name === vm.metadata.name);
      return p && p.spec.nodeName === to && runningReady(p) ? p : undefined;
    }, 180_000);
    assert.notEqual(after.metadata.uid, vm.metadata.uid, 'the replacement has a new uid');
    const count = await until('a count in the moved pod\'s log', () => vmCount(after.metadata.name), 60_000);
    assert.ok(count > vmBefore, `the count goes on: ${count} after the drain, ${vmBefore} before`);
    const ck = await k('get', 'ckpt', '-l', 'kube32.io/trigger=eviction', '-o', 'jsonpath={range .items[*]}{.spec.podName} {.status.phase} {.status.snapshotKind} {.status.targetNode}{"\\n"}{end}');
    assert.match(ck.stdout, new RegExp(`^${vm.metadata.name} Completed microvm ${to}$`, 'm'));
    assert.equal((await k('uncordon', from)).code, 0);
  });

  await step('kubectl drain of the Wasm pod\'s worker moves it to the other worker, its count going on', async () => {
    const from = wasm.spec.nodeName!;
    const to = from === 'worker-1' ? 'worker-2' : 'worker-1';
    const r = await run('kubectl', ['--kubeconfig', up.kubeconfig, 'drain', from, '--ignore-daemonsets', '--timeout', '2m'], 180_000);
    assert.equal(r.code, 0, `${r.stderr}${r.stdout}`);
    const after = await until(`the Wasm pod Running and Ready on ${to}`, async () => {
      const p = (await pods('counter')).find((x) => x.metadata.name === wasm.metadata.name);
      return p && p.spec.nodeName === to && runningReady(p) ? p : undefined;
    }, 120_000);
    assert.notEqual(after.metadata.uid, wasm.metadata.uid);
    const count = await until('the moved Wasm counter answers', wasmCount, 60_000);
    assert.ok(count > wasmBefore, `the count goes on: ${count} after the drain, ${wasmBefore} before`);
    assert.equal((await k('uncordon', from)).code, 0);
  });

  await step('up stops on SIGTERM, its FeOS nodes first', async () => {
    assert.equal(await up.stop(), 0, up.out());
  });
});
