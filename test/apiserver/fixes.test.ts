/**
 * Fixes from a fresh user's trial of the API server, each checked with the real kubectl or raw
 * HTTPS against a real server: exec/attach/port-forward answer a Status that says what to use
 * instead; a module that does not load is refused at push; a deleted Module's bytes stay served by
 * digest while a pod names them; kube32-sim refuses a heap below one WebAssembly page; Table
 * watchers share one encoding of an event yet each gets the column definitions first.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { test } from 'node:test';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const COUNTER = join(ROOT, 'build/examples/counter.wasm');

/** The example counter as `npm run build` makes it, else the kubelet tests' counter fixture. */
function counterWasm(): Buffer {
  if (existsSync(COUNTER)) return readFileSync(COUNTER);
  const dir = mkdtempSync(join(tmpdir(), 'k32-fixes-'));
  try {
    execFileSync('wat2wasm', [join(ROOT, 'test/kubelet/fixtures/counter.wat'), '-o', join(dir, 'counter.wasm')]);
    return readFileSync(join(dir, 'counter.wasm'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Reply {
  status: number;
  body: Buffer;
  json(): Record<string, unknown>;
}

function raw(api: TestApiServer, method: string, path: string, body?: Buffer, type = 'application/octet-stream'): Promise<Reply> {
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const u = new URL(api.url + path);
  const headers: Record<string, string | number> = { Authorization: `Bearer ${api.kubeConfig.getCurrentUser()!.token}` };
  if (body) {
    headers['Content-Type'] = type;
    headers['Content-Length'] = body.length;
  }
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, ca, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const b = Buffer.concat(chunks);
        resolve({ status: res.statusCode ?? 0, body: b, json: () => JSON.parse(b.toString()) as Record<string, unknown> });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const podYaml = (name: string, image: string) => JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [{ name: 'main', image }] } });

test('API server fixes from the fresh-user trial', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const wasm = counterWasm();
  const sha = createHash('sha256').update(wasm).digest('hex');
  let r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/counter/data', wasm);
  assert.equal(r.status, 201, r.body.toString());

  await t.test('kubectl exec, attach and port-forward say they are not supported for WebAssembly pods and what to use', async () => {
    let k = await api.kubectl(['apply', '-f', '-'], { input: podYaml('echo', 'wasm://counter') });
    assert.equal(k.code, 0, k.stderr);
    // port-forward needs a Running pod (kubectl checks the phase before it asks the server)
    k = await api.kubectl(['patch', 'pod', 'echo', '--subresource=status', '--type=merge', '-p', '{"status":{"phase":"Running"}}']);
    assert.equal(k.code, 0, k.stderr);
    k = await api.kubectl(['exec', 'echo', '--', 'ls']);
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /exec is not supported for WebAssembly pods/, k.stderr);
    assert.match(k.stderr, /kubectl logs echo/);
    assert.doesNotMatch(k.stderr, /could not find the requested resource/);
    k = await api.kubectl(['attach', 'echo']);
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /attach is not supported for WebAssembly pods/, k.stderr);
    k = await api.kubectl(['port-forward', 'pod/echo', '18080:8080'], { timeoutMs: 30_000 });
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /port-forward is not supported for WebAssembly pods/, k.stderr);
    assert.match(k.stderr, /services\/<service>\/proxy/);
    // the raw answer is a metav1.Status
    r = await raw(api, 'POST', '/api/v1/namespaces/default/pods/echo/exec?command=ls&stdout=true');
    assert.equal(r.status, 400);
    assert.equal(r.json().kind, 'Status');
    assert.equal(r.json().reason, 'BadRequest');
    // a pod that does not exist is still NotFound, naming it
    r = await raw(api, 'POST', '/api/v1/namespaces/default/pods/nosuch/portforward');
    assert.equal(r.status, 404);
    assert.match(String(r.json().message), /pods "nosuch" not found/);
  });

  await t.test('kubectl exec and attach of a microVM pod not bound to a node say it has no host (they said it was a WebAssembly pod)', async () => {
    const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'vm' }, spec: { runtimeClassName: 'feos', containers: [{ name: 'main', image: '127.0.0.1:5000/busybox:1' }] } };
    let k = await api.kubectl(['apply', '-f', '-'], { input: JSON.stringify(pod) });
    assert.equal(k.code, 0, k.stderr);
    for (const args of [['exec', 'vm', '--', 'ls'], ['attach', 'vm']]) {
      k = await api.kubectl(args);
      assert.notEqual(k.code, 0);
      assert.match(k.stderr, /Error from server \(BadRequest\): pod vm does not have a host assigned/, `${args[0]}: ${k.stderr}`);
      assert.doesNotMatch(k.stderr, /WebAssembly/);
    }
    k = await api.kubectl(['logs', 'vm']);
    assert.match(k.stderr, /pod vm does not have a host assigned/, 'as kubectl logs says');
    k = await api.kubectl(['delete', 'pod', 'vm', '--wait=false']);
    assert.equal(k.code, 0, k.stderr);
  });

  await t.test('kubectl logs of a microVM pod being restored says its container is waiting to start (it said NotFound, then SUSPENDED)', async () => {
    const node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'feos-a', labels: { 'kube32.io/runtime': 'feos' } } };
    const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'vm-restoring' }, spec: { runtimeClassName: 'feos', nodeName: 'feos-a', containers: [{ name: 'main', image: '127.0.0.1:5000/busybox:1' }] } };
    let k = await api.kubectl(['apply', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [node, pod] }) });
    assert.equal(k.code, 0, k.stderr);
    // no status yet (the node has not written one): the node is asked, as kube-apiserver asks the kubelet;
    // this API server has no port for FeOS nodes, so it says where the log is (test/root/fleet/feos-streams
    // has the node's own answer for a pod it does not have)
    k = await api.kubectl(['logs', 'vm-restoring']);
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /Error from server \(ServiceUnavailable\): .*the log of pod vm-restoring is on FeOS node feos-a/, k.stderr);
    const status = { phase: 'Running', containerStatuses: [{ name: 'main', image: pod.spec.containers[0]!.image, imageID: '', ready: false, restartCount: 0, state: { waiting: { reason: 'ContainerCreating', message: 'restoring from its checkpoint' } } }] };
    const got = await raw(api, 'GET', '/api/v1/namespaces/default/pods/vm-restoring');
    const r = await raw(api, 'PUT', '/api/v1/namespaces/default/pods/vm-restoring/status', Buffer.from(JSON.stringify({ ...got.json(), status })), 'application/json');
    assert.equal(r.status, 200, r.body.toString());
    k = await api.kubectl(['logs', 'vm-restoring']);
    assert.match(k.stderr, /Error from server \(BadRequest\): container "main" in pod "vm-restoring" is waiting to start: ContainerCreating/, k.stderr);
    assert.doesNotMatch(k.stderr, /NotFound|SUSPENDED/);
    k = await api.kubectl(['delete', 'pod', 'vm-restoring', '--wait=false']);
    assert.equal(k.code, 0, k.stderr);
  });

  await t.test('a module that does not load is refused at push with the reason, and nothing is stored', async () => {
    const truncated = wasm.subarray(0, 100);
    r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/broken/data', truncated);
    assert.equal(r.status, 422, r.body.toString());
    assert.equal(r.json().reason, 'Invalid');
    assert.match(String(r.json().message), /Module\.kube32\.io "broken" is invalid: data: not a module a pod can run: the module does not (parse|validate)/);
    const tsha = createHash('sha256').update(truncated).digest('hex');
    assert.equal((await raw(api, 'GET', `/apis/kube32.io/v1/blobs/${tsha}`)).status, 404);
    assert.equal((await raw(api, 'GET', '/apis/kube32.io/v1/modules/broken')).status, 404);
    // an update of an existing Module with bad bytes keeps the old bytes
    r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/counter/data', truncated);
    assert.equal(r.status, 422);
    r = await raw(api, 'GET', '/apis/kube32.io/v1/modules/counter/data');
    assert.ok(r.body.equals(wasm));
    // valid bytes without a pod ABI export are refused too
    const empty = Buffer.from('0061736d01000000', 'hex');
    r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/empty/data', empty);
    assert.equal(r.status, 422);
    assert.match(String(r.json().message), /exports none of/);
    const k = await api.kubectl(['get', 'modules', '-o', 'name']);
    assert.equal(k.stdout.trim(), 'module.kube32.io/counter');
  });

  await t.test('a deleted Module\'s bytes stay served by digest while a pod names them', async () => {
    let k = await api.kubectl(['delete', 'mod', 'counter']);
    assert.equal(k.code, 0, k.stderr);
    k = await api.kubectl(['get', 'pod', 'echo', '-o', 'jsonpath={.metadata.annotations.kube32\\.io/image-sha256}']);
    assert.equal(k.stdout, sha);
    // a kubelet starting a replica or a moved pod fetches the image by the pod's digest
    r = await raw(api, 'GET', `/apis/kube32.io/v1/blobs/${sha}`);
    assert.equal(r.status, 200);
    assert.ok(r.body.equals(wasm));
    // and a new pod naming the digest is still accepted (a replica of a pod made before the delete)
    k = await api.kubectl(['apply', '-f', '-'], { input: podYaml('replica', `kube32.io/wasm-sha256:${sha}`) });
    assert.equal(k.code, 0, k.stderr);
  });
});

/** Opens a watch asking for Tables (as `kubectl get -w`) and answers a reader of its events. */
function tableWatch(api: TestApiServer, t: import('node:test').TestContext, rv: string): Promise<{ next(): Promise<{ type: string; object: Record<string, unknown> }> }> {
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const u = new URL(api.url);
  const headers = { Authorization: `Bearer ${api.kubeConfig.getCurrentUser()!.token}`, Accept: 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json' };
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: `/api/v1/namespaces/default/pods?watch=true&resourceVersion=${rv}`, ca, headers }, (res) => {
      const lines: string[] = [];
      let waiting: (() => void) | undefined;
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          if (buf.slice(0, nl).trim()) lines.push(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
        }
        waiting?.();
      });
      resolve({
        async next() {
          while (lines.length === 0) await new Promise<void>((r) => (waiting = r));
          return JSON.parse(lines.shift()!) as { type: string; object: Record<string, unknown> };
        },
      });
    });
    t.after(() => req.destroy());
    req.on('error', reject);
    req.end();
  });
}

test('Table watchers of one event each get the column definitions in their own first event only', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const rvOf = async () => String((JSON.parse((await raw(api, 'GET', '/api/v1/namespaces/default/pods?limit=1')).body.toString()) as { metadata: { resourceVersion: string } }).metadata.resourceVersion);
  const a = await tableWatch(api, t, await rvOf());
  let k = await api.kubectl(['apply', '-f', '-'], { input: podYaml('p1', `kube32.io/wasm-sha256:${'1'.repeat(64)}`) });
  assert.equal(k.code, 0, k.stderr);
  let e = await a.next();
  assert.equal(e.type, 'ADDED');
  assert.equal(e.object.kind, 'Table');
  assert.ok(Array.isArray(e.object.columnDefinitions) && e.object.columnDefinitions.length > 0, 'the first event carries the columns');
  const b = await tableWatch(api, t, await rvOf());
  const c = await tableWatch(api, t, await rvOf());
  k = await api.kubectl(['label', 'pod', 'p1', 'tier=web']);
  assert.equal(k.code, 0, k.stderr);
  e = await a.next();
  assert.equal(e.type, 'MODIFIED');
  assert.equal((e.object.columnDefinitions as unknown[] | undefined)?.length ?? 0, 0, 'a later event has rows only');
  for (const w of [b, c]) {
    e = await w.next();
    assert.equal(e.type, 'MODIFIED');
    assert.ok((e.object.columnDefinitions as unknown[]).length > 0, 'a new watcher\'s first event carries the columns');
    const row = (e.object.rows as { cells: unknown[]; object: { metadata: { labels: Record<string, string> } } }[])[0]!;
    assert.equal(row.cells[0], 'p1');
    assert.equal(row.object.metadata.labels.tier, 'web');
  }
});

test('kube32-sim refuses a heap below one 64 KiB WebAssembly page, naming the flag and value', { timeout: 120_000 }, async () => {
  const run = (heap: string) =>
    new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--heap', heap, '--kubeconfig', '/nonexistent/kubeconfig'], { timeout: 20_000 }, (err, _out, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr: String(stderr) });
      });
    });
  for (const heap of ['1', '65535', '63Ki']) {
    const { code, stderr } = await run(heap);
    assert.notEqual(code, 0, `--heap ${heap} was accepted`);
    assert.match(stderr, /--heap/);
    assert.match(stderr, new RegExp(`current value is "${heap}"`));
    assert.match(stderr, /at least one 64Ki WebAssembly page/);
  }
  // one page passes the flag check (and then fails only on the missing kubeconfig)
  const { stderr } = await run('64Ki');
  assert.doesNotMatch(stderr, /--heap/);
  assert.match(stderr, /nonexistent/);
});
