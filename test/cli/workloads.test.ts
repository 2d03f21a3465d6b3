/**
 * kube32-cli push, move and checkpoint as real processes against a recording stand-in API server:
 * which cluster and namespace they pick (kubectl's kubeconfig rules), what they send, and what they
 * print and exit with for each outcome (moved, refused with blockers, not found, unreachable).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CLI, run } from '../e2e/cluster.ts';
import { type Seen, startFakeApiServer, status } from './fake-apiserver.ts';

const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  run(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, HOME: '/nonexistent', ...env }, timeoutMs: 30_000 });

const pod = (ns: string, name: string, node: string, phase = 'Running') => ({
  status: 200,
  body: {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, uid: 'u1' },
    spec: { ...(node ? { nodeName: node } : {}), containers: [{ name: 'main', image: `wasm://${name}` }] },
    status: { phase },
  },
});
const node = (name: string) => ({ status: 200, body: { apiVersion: 'v1', kind: 'Node', metadata: { name } } });

/** A checkpoint collection that answers any created Checkpoint with `status` on the next list. */
function checkpointRoutes(ns: string, finalStatus: Record<string, unknown>) {
  let created: Record<string, unknown> | undefined;
  const path = `/apis/kube32.io/v1/namespaces/${ns}/checkpoints`;
  return {
    [`POST ${path}`]: (req: Seen) => {
      created = JSON.parse(req.body.toString()) as Record<string, unknown>;
      return { status: 201, body: created };
    },
    [`GET ${path}`]: () => ({
      status: 200,
      body: { kind: 'CheckpointList', apiVersion: 'kube32.io/v1', metadata: { resourceVersion: '7' }, items: created ? [{ ...created, status: finalStatus }] : [] },
    }),
  };
}

test('move: creates a Move Checkpoint in the context namespace and prints the Moved event', { timeout: 120_000 }, async (t) => {
  const ns = 'team-a';
  const api = await startFakeApiServer(t, {
    [`GET /api/v1/namespaces/${ns}/pods/counter`]: pod(ns, 'counter', 'worker-1'),
    'GET /api/v1/nodes/worker-2': node('worker-2'),
    ...checkpointRoutes(ns, { phase: 'Completed', nodeName: 'worker-1', targetNode: 'worker-2', newPodName: 'counter' }),
    [`GET /api/v1/namespaces/${ns}/events`]: () => ({
      status: 200,
      body: {
        items: [
          {
            metadata: { name: 'e1' },
            involvedObject: { kind: 'Pod', name: 'counter' },
            reason: 'Moved',
            message: 'counter-move-x: moved from worker-1 to worker-2 in 412 ms from the freeze to Running',
            lastTimestamp: new Date().toISOString(),
          },
        ],
      },
    }),
  });
  const kc = api.kubeconfig({ namespace: ns });
  const r = await cli(['move', 'counter', '--to', 'worker-2', '--kubeconfig', kc]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /pod\/counter moved from worker-1 to worker-2 in 412 ms from the freeze \(checkpoint counter-move-[a-z0-9]{5}\)/);
  const post = api.seen.find((s) => s.method === 'POST')!;
  const body = JSON.parse(post.body.toString());
  assert.equal(body.apiVersion, 'kube32.io/v1');
  assert.equal(body.kind, 'Checkpoint');
  assert.deepEqual(body.spec, { podName: 'counter', action: 'Move', target: { nodeName: 'worker-2' } });
  assert.match(body.metadata.name, /^counter-move-[a-z0-9]{5}$/);
  assert.equal(post.headers.authorization, 'Bearer tok', 'the kubeconfig user token is sent');
});

test('move: a refusal exits 1 and lists every blocker; -o json still prints the Checkpoint', { timeout: 120_000 }, async (t) => {
  const blockers = ['annotation kube32.io/migration: Never', 'open file /data/log.txt (descriptor 3)'];
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/default/pods/echo': pod('default', 'echo', 'worker-1'),
    ...checkpointRoutes('default', { phase: 'Failed', message: 'the pod cannot move', blockers }),
  });
  const kc = api.kubeconfig();
  const r = await cli(['move', 'echo', '--kubeconfig', kc]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /pod\/echo did not move: the pod cannot move/);
  for (const b of blockers) assert.ok(r.stderr.includes(`  - ${b}`), r.stderr);
  const j = await cli(['move', 'echo', '--kubeconfig', kc, '-o', 'json']);
  assert.equal(j.code, 1);
  const printed = JSON.parse(j.stdout);
  assert.equal(printed.status.phase, 'Failed');
  assert.deepEqual(printed.status.blockers, blockers);
});

test('move: a missing pod is kubectl\'s NotFound; -n picks the namespace; an unknown node is refused before any Checkpoint', { timeout: 120_000 }, async (t) => {
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/other/pods/ghost': status(404, 'NotFound', 'pods "ghost" not found'),
    'GET /api/v1/namespaces/default/pods/p': pod('default', 'p', 'worker-1'),
    'GET /api/v1/nodes/nowhere': status(404, 'NotFound', 'nodes "nowhere" not found'),
  });
  const kc = api.kubeconfig();
  const r = await cli(['move', 'ghost', '-n', 'other', '--kubeconfig', kc]);
  assert.equal(r.code, 1);
  assert.equal(r.stderr.trim(), 'Error from server (NotFound): pods "ghost" not found');
  const r2 = await cli(['move', 'p', '--to', 'nowhere', '--kubeconfig', kc]);
  assert.equal(r2.code, 1);
  assert.equal(r2.stderr.trim(), 'Error from server (NotFound): nodes "nowhere" not found');
  assert.ok(!api.seen.some((s) => s.method === 'POST'), 'no Checkpoint created');
});

test('checkpoint: a Save Checkpoint, followed to Saved, with its facts printed', { timeout: 120_000 }, async (t) => {
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/default/pods/counter': pod('default', 'counter', 'worker-1'),
    ...checkpointRoutes('default', { phase: 'Saved', nodeName: 'worker-1', sizeBytes: 66_000, podTimeMs: 5123, snapshotSha256: 'ab'.repeat(32) }),
  });
  const r = await cli(['checkpoint', 'counter', '--name', 'c1', '--kubeconfig', api.kubeconfig()]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /checkpoint\.kube32\.io\/c1 saved: 64KiB from worker-1, pod clock 5123 ms/);
  const body = JSON.parse(api.seen.find((s) => s.method === 'POST')!.body.toString());
  assert.deepEqual(body.spec, { podName: 'counter', action: 'Save' });
  const y = await cli(['checkpoint', 'counter', '--name', 'c2', '--kubeconfig', api.kubeconfig(), '-o', 'yaml']);
  assert.equal(y.code, 0, y.stderr);
  assert.match(y.stdout, /phase: Saved/);
});

test('push: PUTs the bytes as octet-stream to the module store and prints the digest', { timeout: 120_000 }, async (t) => {
  const wasm = Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);
  const digest = createHash('sha256').update(wasm).digest('hex');
  const api = await startFakeApiServer(t, {
    'PUT /apis/kube32.io/v1/modules/hello/data': (req) => ({
      status: 200,
      body: {
        apiVersion: 'kube32.io/v1',
        kind: 'Module',
        metadata: { name: 'hello' },
        spec: { sha256: createHash('sha256').update(req.body).digest('hex'), sizeBytes: req.body.length },
      },
    }),
  });
  const file = join(api.dir, 'hello.wasm');
  writeFileSync(file, wasm);
  const r = await cli(['push', file, '--kubeconfig', api.kubeconfig()]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), `module.kube32.io/hello pushed: sha256:${digest} (8B); image: wasm://hello`);
  const put = api.seen.find((s) => s.method === 'PUT')!;
  assert.equal(put.headers['content-type'], 'application/octet-stream');
  assert.equal(put.headers['content-length'], '8');
  assert.deepEqual(put.body, wasm);

  const notWasm = join(api.dir, 'x.wasm');
  writeFileSync(notWasm, 'hello');
  const bad = await cli(['push', notWasm, '--kubeconfig', api.kubeconfig()]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /is not a WebAssembly binary module/);
  const badName = await cli(['push', file, '--name', 'Hello_World', '--kubeconfig', api.kubeconfig()]);
  assert.equal(badName.code, 1);
  assert.match(badName.stderr, /invalid module name "Hello_World"/);
  const dir = await cli(['push', api.dir, '--name', 'm', '--kubeconfig', api.kubeconfig()]);
  assert.equal(dir.code, 1);
  assert.equal(dir.stderr.trim(), `error: ${api.dir} is a directory: pass the module's .wasm file`);
  const emptyName = await cli(['push', file, '--name', '', '--kubeconfig', api.kubeconfig()]);
  assert.equal(emptyName.code, 1);
  assert.doesNotMatch(emptyName.stderr, /pass --name/, '--name was passed');
  assert.equal(api.seen.filter((s) => s.method === 'PUT').length, 1, 'nothing sent for bad input');
});

test('kubeconfig: $KUBECONFIG merges files, the first wins; --context switches; kubectl\'s errors otherwise', { timeout: 120_000 }, async (t) => {
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/ns-first/pods/p': pod('ns-first', 'p', 'n1'),
    'GET /api/v1/namespaces/ns-second/pods/p': pod('ns-second', 'p', 'n1'),
  });
  const first = api.kubeconfig({ context: 'one', namespace: 'ns-first' });
  const second = api.kubeconfig({ context: 'two', namespace: 'ns-second' });
  // --no-wait: stop after creating the Checkpoint (404 here, which the test only reads from the log).
  await cli(['checkpoint', 'p', '--no-wait'], { KUBECONFIG: `${first}:/does/not/exist:${second}` });
  assert.ok(api.seen.some((s) => s.path === '/api/v1/namespaces/ns-first/pods/p'), 'current-context of the first file');
  await cli(['checkpoint', 'p', '--no-wait', '--context', 'two'], { KUBECONFIG: `${first}:${second}` });
  assert.ok(api.seen.some((s) => s.path === '/api/v1/namespaces/ns-second/pods/p'), '--context from the second file');

  const noCtx = await cli(['move', 'p', '--kubeconfig', first, '--context', 'nope']);
  assert.equal(noCtx.code, 1);
  assert.match(noCtx.stderr, /context was not found for specified context: nope/);
  const noFile = await cli(['move', 'p', '--kubeconfig', '/nope/config']);
  assert.match(noFile.stderr, /stat \/nope\/config: no such file or directory/);
  const none = await cli(['move', 'p']);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /no kubeconfig found .*kube32-cli up/);
  // A local cluster's kubeconfig (what `up` writes in its data dir, which kubectl's rules do not read) is named.
  const dataDir = join(api.dir, 'kube32-data');
  mkdirSync(dataDir);
  copyFileSync(first, join(dataDir, 'kubeconfig'));
  const local = await cli(['move', 'p'], { KUBE32_DATA_DIR: dataDir });
  assert.equal(local.code, 1);
  assert.equal(local.stderr.trim(), `error: no kubeconfig found (looked at /nonexistent/.kube/config); "kube32-cli up" wrote one for its local cluster: export KUBECONFIG=${dataDir}/kubeconfig (or pass --kubeconfig ${dataDir}/kubeconfig)`);
  const refused = await cli(['move', 'p', '--kubeconfig', api.kubeconfig({ server: 'http://127.0.0.1:1' })]);
  assert.equal(refused.code, 1);
  assert.equal(refused.stderr.trim(), 'The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?');
});

test('move refuses, before creating anything, what cannot move: a Pending pod, an unknown container, an empty --to, its own node, an empty pod name, a --timeout longer than a timer waits', { timeout: 180_000 }, async (t) => {
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/default/pods/waiting': pod('default', 'waiting', '', 'Pending'),
    'GET /api/v1/namespaces/default/pods/done': pod('default', 'done', 'worker-1', 'Succeeded'),
    'GET /api/v1/namespaces/default/pods/p': pod('default', 'p', 'worker-1'),
    'GET /api/v1/nodes/worker-1': node('worker-1'),
    'GET /api/v1/nodes/worker-2': node('worker-2'),
    ...checkpointRoutes('default', { phase: 'Completed' }),
  });
  const kc = api.kubeconfig();
  const cases: [string[], RegExp][] = [
    [['move', 'waiting'], /^error: pod waiting is Pending and not bound to a node yet: only a Running pod can move/],
    [['move', 'done'], /^error: pod done is Succeeded on node worker-1: only a Running pod can move/],
    [['move', 'p', '-c', 'nosuch'], /^error: container "nosuch" is not valid for pod p: its containers are main/],
    [['move', 'p', '--to', ''], /^error: --to needs a node name: pass --to NODE, or leave --to out/],
    [['move', 'p', '--to', 'worker-1'], /^error: pod p already runs on node worker-1: a move goes to another node/],
    [['checkpoint', 'waiting'], /^error: pod waiting is Pending and not bound to a node yet: only a Running pod can be checkpointed/],
    [['checkpoint', 'p', '-c', 'nosuch'], /^error: container "nosuch" is not valid for pod p/],
    // An empty name read the pods list as a pod: "pod  is Pending and not bound to a node yet".
    [['move', ''], /^error: resource name may not be empty\n$/],
    [['checkpoint', ' '], /^error: resource name may not be empty\n$/],
    // Past Node's longest timer (2^31-1 ms) AbortSignal.timeout fired after 1 ms: the Checkpoint was
    // created, then "timed out waiting"; past 2^32-1 ms it threw "The value of "delay" is out of range".
    [['move', 'p', '--timeout', '700h'], /^error: invalid argument "700h" for "--timeout" flag: duration "700h" is too long: at most 596h31m23\.647s/],
    [['move', 'p', '--timeout', '99999999999h'], /^error: invalid argument "99999999999h" for "--timeout" flag: duration .* is too long/],
    [['checkpoint', 'p', '--timeout', '700h'], /^error: invalid argument "700h" for "--timeout" flag: duration "700h" is too long/],
  ];
  for (const [args, message] of cases) {
    const r = await cli([...args, '--kubeconfig', kc]);
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
  }
  assert.ok(!api.seen.some((s) => s.method === 'POST'), 'no Checkpoint created');
  // What passes the checks is sent as asked.
  const ok = await cli(['move', 'p', '-c', 'main', '--to', 'worker-2', '--no-wait', '--kubeconfig', kc]);
  assert.equal(ok.code, 0, ok.stderr);
  const body = JSON.parse(api.seen.find((s) => s.method === 'POST')!.body.toString());
  assert.deepEqual(body.spec, { podName: 'p', action: 'Move', containerName: 'main', target: { nodeName: 'worker-2' } });
});

test('checkpoint --name explains the naming rule, as push does, and sends nothing', { timeout: 120_000 }, async (t) => {
  const api = await startFakeApiServer(t, { 'GET /api/v1/namespaces/default/pods/p': pod('default', 'p', 'worker-1') });
  for (const bad of ['BAD NAME', 'a_b', '-a', 'x'.repeat(254)]) {
    const r = await cli(['checkpoint', 'p', '--name', bad, '--kubeconfig', api.kubeconfig()]);
    assert.equal(r.code, 1, bad);
    assert.ok(r.stderr.startsWith(`error: invalid checkpoint name "${bad}": `), r.stderr);
    assert.match(r.stderr, bad.length > 253 ? /must be no more than 253 characters/ : /lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '\.'/);
  }
  assert.equal(api.seen.length, 0, 'nothing sent for a bad name');
  // Without --name, a pod that does not exist is what is wrong, not the name made from it.
  const missing = await cli(['checkpoint', 'Bad_Name!', '--kubeconfig', api.kubeconfig()]);
  assert.equal(missing.code, 1);
  assert.doesNotMatch(missing.stderr, /invalid checkpoint name/, missing.stderr);
  assert.match(missing.stderr, /^Error from server \(NotFound\)/, missing.stderr);
  assert.ok(!api.seen.some((s) => s.method === 'POST'), 'no Checkpoint created');
});

test('a wait that times out says the Checkpoint goes on and how to follow it, and exits 1', { timeout: 120_000 }, async (t) => {
  const api = await startFakeApiServer(t, {
    'GET /api/v1/namespaces/default/pods/counter': pod('default', 'counter', 'worker-1'),
    ...checkpointRoutes('default', { phase: 'Saving', nodeName: 'worker-1' }),
  });
  const r = await cli(['checkpoint', 'counter', '--name', 'slow', '--timeout', '1s', '--kubeconfig', api.kubeconfig()]);
  assert.equal(r.code, 1, r.stdout);
  // It said only "timed out waiting ... (phase Saving)", as if the Checkpoint had stopped.
  assert.match(r.stderr, /^error: timed out waiting for checkpoint\.kube32\.io\/slow to finish \(phase Saving\); it goes on: kubectl get checkpoint slow -n default -w\n$/m);
});
