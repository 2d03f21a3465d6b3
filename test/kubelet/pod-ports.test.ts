/**
 * The node's pod ports (src/kubelet/pod-ports.ts) at their door: two nodes' `PodPorts` on loopback
 * addresses of their own, a real API server saying where the pod is bound, a real pod instance (the
 * state.wat fixture, which answers how many requests it ran) behind the port, and real HTTP clients.
 *
 * The case: a pod moves back to a node it left within 250 ms of that node's last lookup of where it
 * runs. That node still believes the pod is at the other one, and the other one, which the pod just
 * left, finds it bound back here: with the cached lookup trusted, the request went to and fro until
 * the fourth forward answered 503 "forwarded too often".
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { RestClient } from '../../src/api/index.ts';
import { ControlPlane } from '../../src/kubelet/client.ts';
import { FORWARDED_HEADER, MAX_FORWARDS, PodPorts, type PortHolder } from '../../src/kubelet/pod-ports.ts';
import { loadModule, type PodInstance } from '../../src/wasm/index.ts';
import { startApiServer } from '../helpers/apiserver.ts';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';
import { startPod, wat } from '../wasm/helpers.ts';
import { pino } from 'pino';

const KEY = 'default/p';

/** One GET on a connection of its own; never rejects (a failure is status 0). */
function get(host: string, port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = http.get({ host, port, path, headers, agent: false, timeout: 20_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ status: 0, body: err.message }));
  });
}

/** A holder of the port for the pod uid `uid`: what its requests meet is `serving()`. */
function holder(uid: string, serving: () => PodInstance | 'hold'): PortHolder {
  return { uid, key: KEY, serving };
}

/** Claims `port` on `ports` for `h` and waits until the node listens on it. */
function claim(ports: PodPorts, port: number, h: PortHolder): Promise<void> {
  return new Promise((resolve, reject) => {
    ports.claim(port, h, { listening: resolve, error: reject });
  });
}

test('a pod moved back within 250 ms of the last lookup: a request at its old address is held, not sent to and fro, and runs once where the pod runs; the fourth forward is still refused', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const admin = new RestClient(api.kubeConfig);
  t.after(() => admin.close());
  const prefix = await claimLoopbackRange();
  const addr = { a: `${prefix}.2`, b: `${prefix}.3` };
  const port = 18290;
  for (const [n, address] of Object.entries(addr)) {
    await admin.json({ method: 'POST', path: '/api/v1/nodes', body: { apiVersion: 'v1', kind: 'Node', metadata: { name: n } } });
    await admin.json({ method: 'PATCH', path: `/api/v1/nodes/${n}/status`, body: { status: { addresses: [{ type: 'InternalIP', address }] } }, contentType: 'application/merge-patch+json' });
  }
  const module = wat('state.wat');
  const pushed = await admin.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/m/data', body: Readable.from([Buffer.from(module)]), contentType: 'application/octet-stream', contentLength: module.length });
  pushed.body.resume();
  assert.ok(pushed.status < 300, `pushing the module: ${pushed.status}`);
  const running = (ip: string) => admin.json({ method: 'PATCH', path: '/api/v1/namespaces/default/pods/p/status', body: { status: { phase: 'Running', podIP: ip } }, contentType: 'application/merge-patch+json' });
  const created = await admin.json<V1Pod>({
    method: 'POST', path: '/api/v1/namespaces/default/pods',
    body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { nodeName: 'b', containers: [{ name: 'c', image: 'wasm://m', ports: [{ containerPort: port }] }] } },
  });
  await running(addr.b);

  const log = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
  const node = (name: 'a' | 'b') => {
    const kc = new KubeConfig();
    kc.loadFromFile(api.nodeKubeconfig(name));
    const cp = new ControlPlane(kc);
    const ports = new PodPorts({ cp, nodeName: name, address: addr[name], log: log.child({ node: name }) });
    t.after(async () => {
      await ports.stop();
      cp.close();
    });
    return ports;
  };
  const a = node('a');
  const b = node('b');
  const pod = await startPod(await loadModule(module, { memoryLimitBytes: 1 << 20 }));
  t.after(() => pod.terminate());

  // The pod left a (its port forwards) and runs at b.
  const left = holder('u0', () => 'hold');
  await claim(a, port, left);
  a.release(port, left, { forward: true });
  let at: { ports: PodPorts; name: 'a' | 'b'; holder: PortHolder } = { ports: b, name: 'b', holder: holder('u1', () => pod) };
  let away: { ports: PodPorts; name: 'a' | 'b' } = { ports: a, name: 'a' };
  await claim(b, port, at.holder);
  let current = created;
  let count = 0;
  // Three moves back to the node the pod left (a to b and back, then b to a...): each is a chance for
  // the two nodes' lookups to point at each other (the move must come within 250 ms of the last lookup).
  for (let round = 1; round <= 3; round++) {
    // A request at the old address finds the pod where it runs; the old node keeps that lookup 250 ms.
    const first = await get(addr[away.name], port, '/x');
    assert.equal(first.status, 200, first.body);
    assert.equal(Number(first.body.split(' ')[0]), ++count);

    // At once the pod moves back: bound there, restoring (not running yet); where it ran lets its port go (forwards).
    current = await admin.json<V1Pod>({
      method: 'POST', path: '/api/v1/namespaces/default/pods/p/replace',
      body: {
        apiVersion: 'v1', kind: 'Pod',
        metadata: { name: 'p', namespace: 'default', uid: current.metadata?.uid, annotations: { 'kube32.io/restore-from': `m${round}` } },
        spec: { ...current.spec, nodeName: away.name },
      },
    });
    at.ports.release(port, at.holder, { forward: true });
    let held = false;
    const second = get(addr[away.name], port, '/x');
    // The old node believes the pod is where it left (a young lookup), which finds it bound back: held, not bounced.
    const early = second.then((r) => {
      if (!held) assert.fail(`round ${round}: answered before the pod ran: ${r.status} ${r.body}`);
    });
    await Promise.race([early, waitFor(`round ${round}: the request to be held while the pod moves`, 20_000, () => a.heldCount(KEY) + b.heldCount(KEY) > 0)]);
    held = true;
    // The replacement takes the port (restoring: held), then runs, and the API server says so.
    let restoring = true;
    const replacement = holder(`u${round + 1}`, () => (restoring ? 'hold' : pod));
    await claim(away.ports, port, replacement);
    restoring = false;
    away.ports.kick(replacement.uid);
    await running(addr[away.name]);
    const r = await second;
    await early;
    assert.equal(r.status, 200, r.body);
    assert.equal(Number(r.body.split(' ')[0]), ++count, `round ${round}: the request ran once, where the pod runs`);
    current = await admin.json<V1Pod>({ method: 'PATCH', path: '/api/v1/namespaces/default/pods/p', body: { metadata: { annotations: { 'kube32.io/restore-from': null } } }, contentType: 'application/merge-patch+json' });
    const from = at;
    at = { ports: away.ports, name: away.name, holder: replacement };
    away = { ports: from.ports, name: from.name };
  }

  // The bound stays the last resort: a request forwarded MAX_FORWARDS times already is refused at a port that forwards.
  at.ports.release(port, at.holder, { forward: true });
  const looped = await get(addr[at.name], port, '/x', { [FORWARDED_HEADER]: String(MAX_FORWARDS) });
  assert.equal(looped.status, 503);
  assert.match(looped.body, /forwarded too often/);
});
