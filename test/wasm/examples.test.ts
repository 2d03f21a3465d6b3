/**
 * The examples, built from source by the real compilers (asc, clang), through a round trip:
 * requests, freeze, snapshot, restore in a fresh runtime; the state carries over.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { loadModule } from '../../src/wasm/index.ts';
import { ROOT, body, decode, example, get, pieces, snapshotBytes, startPod } from './helpers.ts';

for (const name of ['counter', 'counter-c'] as const) {
  test(`${name}: counts, and a restore on another node continues the count and the clock`, { timeout: 30_000 }, async (t) => {
    const mod = await loadModule(example(name), { memoryLimitBytes: 1 << 20 });
    assert.equal(mod.kind, 'request');
    const pod = await startPod(mod, { env: { NODE_NAME: 'node-a' }, tickIntervalMs: 5 });
    t.after(() => pod.terminate());
    let last: { count: number; ticks: number; podTimeMs: number; node: string; restores: number } | undefined;
    for (let i = 1; i <= 3; i++) {
      last = JSON.parse(body(await pod.handle(get('/')))) as typeof last;
      assert.equal(last!.count, i);
      assert.equal(last!.node, 'node-a');
    }
    assert.equal(JSON.parse(body(await pod.handle(get('/count')))).count, 4);
    assert.match(body(await pod.handle(get('/nope'))), /not found/);
    // Wait (polling the pod) for a tick to show in the answer.
    while (JSON.parse(body(await pod.handle(get('/')))).ticks === 0) await new Promise((r) => setTimeout(r, 5));
    await pod.freeze();
    const bytes = await snapshotBytes(pod);
    const A = await decode(bytes);
    assert.deepEqual(await snapshotBytes(pod), bytes, 'the same frozen pod gives the same bytes');
    const logs: string[] = [];
    const moved = await startPod(mod, { env: { NODE_NAME: 'node-b' }, restoreFrom: pieces(bytes, 10_000), onLog: (e) => logs.push(e.line) });
    t.after(() => moved.terminate());
    // The state as restored (only k32_restored has run since): tables equal; for C, whose counters
    // live in linear memory, the globals too (the stack pointer is back where it was) and the
    // memory but for the bytes k32_restored wrote (its counter and its stack frame).
    await moved.freeze();
    const B = await decode(await snapshotBytes(moved));
    assert.deepEqual(B.tables, A.tables);
    assert.equal(B.header.memoryPages, A.header.memoryPages);
    if (name === 'counter-c') {
      assert.deepEqual(B.globals, A.globals);
      let differ = 0;
      for (let i = 0; i < A.header.memoryBytes; i++) if (A.memory![i] !== B.memory![i]) differ++;
      assert.ok(differ > 0 && differ < 128, `${differ} bytes differ`);
    }
    await moved.thaw();
    const after = JSON.parse(body(await moved.handle(get('/'))));
    const before = JSON.parse(body(await pod.thaw().then(() => pod.handle(get('/')))));
    assert.equal(after.count, before.count, 'the moved pod continues the count exactly as the original would');
    assert.equal(after.node, 'node-b');
    assert.equal(after.restores, 1);
    assert.ok(after.ticks >= 1);
    assert.ok(after.podTimeMs >= Number(A.header.podTimeMs), 'the pod clock carries over');
    assert.ok(logs.some((l) => /restored at count/.test(l)), 'k32_restored ran');
    assert.ok(!logs.some((l) => /started afresh/.test(l)), 'k32_init did not run');
  });
}

test('echo: a restore in a fresh runtime holds exactly the same memory, globals and tables', { timeout: 30_000 }, async (t) => {
  const mod = await loadModule(example('echo'));
  const pod = await startPod(mod);
  t.after(() => pod.terminate());
  for (let i = 0; i < 5; i++) assert.match(body(await pod.handle(get(`/req-${i}`))), new RegExp(`"path":"/req-${i}"`));
  await pod.freeze();
  const A = await decode(await snapshotBytes(pod));
  const copy = await startPod(mod, { restoreFrom: pieces(await snapshotBytes(pod), 4096) });
  t.after(() => copy.terminate());
  await copy.freeze();
  const B = await decode(await snapshotBytes(copy));
  assert.deepEqual(B.memory!.subarray(0, B.header.memoryBytes), A.memory!.subarray(0, A.header.memoryBytes));
  assert.deepEqual(B.globals, A.globals);
  assert.deepEqual(B.tables, A.tables);
  assert.ok(A.globals.length > 0);
  await copy.thaw();
  assert.match(body(await copy.handle(get('/after'))), /"path":"\/after"/);
});

test('the example manifests can all run on one node, and their comments say only what Kube32 supports', { timeout: 10_000 }, () => {
  // A pod serves on its node's address, so two pods on one node cannot share a containerPort
  // (the scheduler refuses: "didn't have free ports"): each example has its own.
  const owner = new Map<number, string>();
  for (const name of ['echo', 'counter', 'counter-c', 'burner']) {
    const file = join(ROOT, 'examples', name, `${name}.yaml`);
    const text = readFileSync(file, 'utf8');
    const comments = text.split('\n').filter((l) => l.startsWith('#')).join('\n');
    assert.doesNotMatch(comments.replace(/\(kubectl port-forward is not supported[^)]*\)|`kubectl port-forward` is not supported/g, ''), /port-forward|node ?port/i, `${file} recommends what Kube32 does not serve`);
    const docs = parseAllDocuments(text).map((d) => d.toJS() as { kind: string; spec: Record<string, unknown> });
    for (const d of docs) {
      if (d.kind === 'Service') {
        const dep = docs.find((x) => x.kind === 'Deployment')!;
        const ports = (dep.spec.template as { spec: { containers: Array<{ ports: Array<{ containerPort: number }> }> } }).spec.containers[0]!.ports.map((p) => p.containerPort);
        for (const p of d.spec.ports as Array<{ targetPort: number }>) assert.ok(ports.includes(p.targetPort), `${file}: Service targetPort ${p.targetPort} is not a containerPort`);
        continue;
      }
      if (d.kind === 'HorizontalPodAutoscaler') continue;
      const podSpec = (d.kind === 'Pod' ? d.spec : (d.spec.template as { spec: Record<string, unknown> }).spec) as { containers?: Array<{ ports?: Array<{ containerPort: number }> }> };
      for (const c of podSpec.containers ?? []) {
        for (const p of c.ports ?? []) {
          assert.equal(owner.get(p.containerPort) ?? name, name, `${file}: containerPort ${p.containerPort} is also ${owner.get(p.containerPort)}'s`);
          owner.set(p.containerPort, name);
          if (comments.includes('curl')) assert.ok(comments.includes(`:${p.containerPort}`) || comments.includes('/proxy/'), `${file}: the curl in its comments names another port`);
        }
      }
    }
  }
  assert.equal(owner.size, 4);
});
