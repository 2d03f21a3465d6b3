/**
 * Metrics as a user reads them (issue 19), against a real API server, the controllers and a real
 * `kube32-sim` worker: the kubelet's `/stats/summary` through the node proxy (a busy burner pod's CPU
 * counter grows, its memory is its linear memory and instance), `metrics.k8s.io` in discovery,
 * `kubectl top nodes`, `kubectl top pods [-A] [--containers] [-l]`, a named pod's PodMetrics, 404 for a
 * pod without metrics, and RBAC: a `view` user reads a namespace's pod metrics and not the nodes'.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { burnerContainer, pushBurner, startLoad } from './burner.ts';
import { startControllersCluster } from './cluster.ts';

interface SummaryPod {
  podRef: { name: string; namespace: string; uid: string };
  containers: { name: string; cpu: { usageCoreNanoSeconds: number; usageNanoCores: number }; memory: { workingSetBytes: number } }[];
  cpu: { usageCoreNanoSeconds: number };
}

test('kubectl top and the kubelet\'s /stats/summary', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const kubectl = c.api.kubectl;
  await pushBurner(c);
  await c.startWorker('worker-1');
  const manifest = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'burner', namespace: 'default', labels: { app: 'burner' } }, spec: { containers: [burnerContainer()] } };
  let r = await kubectl(['create', '-f', '-'], { input: JSON.stringify(manifest) });
  assert.equal(r.code, 0, r.stderr);
  const pod = await c.until('pod burner Running', async () => {
    const p = await c.getPod('burner');
    return p?.status?.phase === 'Running' && p.status.podIP ? p : undefined;
  }, 60_000);
  const load = startLoad([pod], 200);
  t.after(() => load.stop());

  await t.test('/stats/summary through the node proxy: the busy pod\'s CPU counter grows', async () => {
    const summary = async () => {
      const res = await kubectl(['get', '--raw', '/api/v1/nodes/worker-1/proxy/stats/summary']);
      assert.equal(res.code, 0, res.stderr);
      return JSON.parse(res.stdout) as { node: { nodeName: string; cpu: { usageCoreNanoSeconds: number }; memory: { workingSetBytes: number } }; pods: SummaryPod[] };
    };
    const first = await c.until('the burner in the summary with CPU used', async () => {
      const s = await summary();
      const p = s.pods.find((x) => x.podRef.name === 'burner');
      return p && p.cpu.usageCoreNanoSeconds > 0 ? { s, p } : undefined;
    });
    assert.equal(first.s.node.nodeName, 'worker-1');
    assert.equal(first.p.podRef.uid, pod.metadata?.uid);
    assert.equal(first.p.containers[0]!.name, 'burner');
    // Its linear memory (a 64 KiB page at least) and its instance.
    assert.ok(first.p.containers[0]!.memory.workingSetBytes >= 65_536, JSON.stringify(first.p.containers[0]));
    assert.ok(first.s.node.cpu.usageCoreNanoSeconds >= first.p.cpu.usageCoreNanoSeconds);
    // A busy pod's counter goes on growing between two readings.
    await c.until('the burner\'s CPU counter to grow', async () => {
      const p = (await summary()).pods.find((x) => x.podRef.name === 'burner');
      return p !== undefined && p.cpu.usageCoreNanoSeconds > first.p.cpu.usageCoreNanoSeconds + 100e6;
    });
  });

  await t.test('metrics.k8s.io in discovery', async () => {
    const res = await kubectl(['api-resources', '--api-group', 'metrics.k8s.io']);
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /^nodes\s+metrics\.k8s\.io\/v1beta1\s+false\s+NodeMetrics$/m);
    assert.match(res.stdout, /^pods\s+metrics\.k8s\.io\/v1beta1\s+true\s+PodMetrics$/m);
    const legacy = await kubectl(['get', '--raw', '/apis/metrics.k8s.io/v1beta1']);
    assert.equal(JSON.parse(legacy.stdout).groupVersion, 'metrics.k8s.io/v1beta1');
  });

  await t.test('kubectl top nodes', async () => {
    const res = await c.until('kubectl top nodes to list worker-1', async () => {
      const x = await kubectl(['top', 'nodes']);
      return x.code === 0 && /^worker-1\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%/m.test(x.stdout) ? x : undefined;
    });
    assert.match(res.stdout, /^NAME\s+CPU\(cores\)\s+CPU(%|\(%\))\s+MEMORY\(bytes\)\s+MEMORY(%|\(%\))/m);
  });

  await t.test('kubectl top pods: the busy pod uses a good part of a core', async () => {
    // One loop of 200 ms burns keeps its thread busy: well over 100m once the window holds the load.
    const res = await c.until('kubectl top pods to show the burner busy', async () => {
      const x = await kubectl(['top', 'pods']);
      const m = /^burner\s+(\d+)m\s+(\d+)Mi/m.exec(x.stdout);
      return m && Number(m[1]) >= 100 ? x : undefined;
    }, 30_000);
    assert.match(res.stdout, /^NAME\s+CPU\(cores\)\s+MEMORY\(bytes\)/m);
    const all = await kubectl(['top', 'pods', '-A', '--containers']);
    assert.equal(all.code, 0, all.stderr);
    assert.match(all.stdout, /^default\s+burner\s+burner\s+\d+m\s+\d+Mi/m);
    const sel = await kubectl(['top', 'pods', '-l', 'app=burner', '--no-headers']);
    assert.match(sel.stdout, /^burner\s+\d+m/m);
    const none = await kubectl(['top', 'pods', '-l', 'app=other']);
    assert.match(none.stderr + none.stdout, /No resources found|no pods? found|metrics not available/i);
  });

  await t.test('PodMetrics of one pod, and 404 for a pod without metrics', async () => {
    const res = await kubectl(['get', '--raw', '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burner']);
    assert.equal(res.code, 0, res.stderr);
    const pm = JSON.parse(res.stdout) as { kind: string; metadata: { name: string; labels: Record<string, string> }; window: string; containers: { name: string; usage: { cpu: string; memory: string } }[] };
    assert.equal(pm.kind, 'PodMetrics');
    assert.deepEqual(pm.metadata.labels, { app: 'burner' });
    assert.match(pm.window, /^\d+s$/);
    assert.match(pm.containers[0]!.usage.cpu, /^\d+n$/);
    assert.match(pm.containers[0]!.usage.memory, /^\d+Ki$/);
    const missing = await kubectl(['get', '--raw', '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nothing']);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /NotFound|not found/);
  });

  await t.test('a view user reads pod metrics in its namespace, not the nodes\'', async () => {
    r = await kubectl(['create', 'rolebinding', 'jane-view', '--clusterrole=view', '--user=jane', '-n', 'default']);
    assert.equal(r.code, 0, r.stderr);
    const pods = await c.until('jane to read the pod metrics', async () => {
      const x = await kubectl(['top', 'pods', '--as', 'jane', '-n', 'default']);
      return x.code === 0 && /^burner\s/m.test(x.stdout) ? x : undefined;
    });
    assert.match(pods.stdout, /^burner\s+\d+m/m);
    const nodes = await kubectl(['top', 'nodes', '--as', 'jane']);
    assert.notEqual(nodes.code, 0);
    assert.match(nodes.stderr, /forbidden/i);
    const can = await kubectl(['auth', 'can-i', 'list', 'pods.metrics.k8s.io', '--as', 'jane', '-n', 'default']);
    assert.equal(can.stdout.trim(), 'yes');
  });
});
