/**
 * Node loss without the five-minute wait (issue 26): a real API server, the controllers (the pod eviction
 * timeout left at 10 min, so only the fast path can restore in time) and real kube32-sim workers.
 *
 * - A worker cut off from the control plane but still running (its API connections go through a TCP
 *   proxy the test closes) fences its pod once it cannot renew its Lease for the grace period: the pod is
 *   frozen there (requests at its address are held, then 503). The controller restores it on the other
 *   worker from its periodic checkpoint; while that copy runs the cut-off one does not. Once the worker
 *   reaches the control plane again it learns the pod left, stops its copy and forwards to the new one.
 * - A worker SIGKILLed: its pod runs elsewhere from its latest periodic checkpoint.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import type { Checkpoint } from '../../src/api/index.ts';
import { unusedPort } from '../helpers/ports.ts';
import { counterPod, runPod, startControllersCluster } from './cluster.ts';

const PORT = 18480;

/** A TCP proxy to the API server that the test can cut and heal. */
async function cuttableProxy(target: { host: string; port: number }): Promise<{ port: number; cut(): Promise<void>; heal(): Promise<void>; close(): Promise<void> }> {
  const port = await unusedPort('127.0.0.1');
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  const open = () => new Promise<void>((resolve, reject) => {
    server = net.createServer((s) => {
      const up = net.connect(target.port, target.host);
      sockets.add(s);
      sockets.add(up);
      s.pipe(up).pipe(s);
      const end = () => {
        s.destroy();
        up.destroy();
        sockets.delete(s);
        sockets.delete(up);
      };
      s.on('error', end).on('close', end);
      up.on('error', end).on('close', end);
    });
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const cut = async () => {
    await new Promise<void>((resolve) => {
      server?.close(() => resolve());
      for (const s of sockets) s.destroy();
    });
    server = undefined;
  };
  await open();
  return { port, cut, heal: open, close: cut };
}

function view(host: string, path = '/view'): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = http.get({ host, port: PORT, path, agent: false, timeout: 30_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve({ status: 0, body: '' }));
  });
}

test('a worker cut off from the control plane fences its pod, which restores elsewhere and never runs twice; a SIGKILLed worker\'s pod restores elsewhere', { timeout: 300_000 }, async (t) => {
  const c = await startControllersCluster(t, { nodeMonitorGracePeriodMs: 20_000, podEvictionTimeoutMs: 600_000 });
  const api = new URL(c.rest.server);
  const proxy = await cuttableProxy({ host: api.hostname, port: Number(api.port) });
  t.after(() => proxy.close());
  // w1 reaches the API server through the proxy only.
  const kubeconfig = c.api.nodeKubeconfig('w1');
  const proxied = `${kubeconfig}.proxied`;
  writeFileSync(proxied, readFileSync(kubeconfig, 'utf8').replace(`:${api.port}`, `:${proxy.port}`), { mode: 0o600 });
  const w1 = await c.startWorker('w1', ['--kubeconfig', proxied, '--fence-after', '20s', '--hold-timeout', '300ms']);
  const w2 = await c.startWorker('w2', ['--fence-after', '20s', '--hold-timeout', '300ms']);

  await runPod(c, counterPod('keeper', PORT, { nodeName: 'w1', annotations: { 'kube32.io/checkpoint-interval': '10s' } }));
  for (let i = 0; i < 3; i++) assert.equal((await view(w1.address, '/count')).status, 200);
  // A periodic checkpoint taken after the three requests (the count is 3 in it).
  const after = Date.now();
  const saved = async (node: string) => c.until(`a Saved periodic checkpoint on ${node}`, async () => {
    const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
    return list.items.find((k) => k.status?.phase === 'Saved' && k.status.nodeName === node && Date.parse(k.status.takenAt ?? '') > after);
  }, 60_000);
  await saved('w1');

  // Cut off: w1 runs on but cannot renew its Lease. Once fenced, its pod answers 503 (held, then the bound).
  await proxy.cut();
  const cutAt = Date.now();
  await c.until('w1 to fence its pod', async () => (await view(w1.address)).status === 503, 60_000);
  await c.until('the pod to run on w2', async () => {
    const p = await c.getPod('keeper');
    return p?.spec?.nodeName === 'w2' && p.status?.phase === 'Running' ? p : undefined;
  }, 60_000);
  t.diagnostic(`cut off to running on w2: ${((Date.now() - cutAt) / 1000).toFixed(1)} s (grace 20 s; a figure, not checked)`);
  const restored = JSON.parse((await view(w2.address, '/count')).body) as { count: number; restored: number };
  assert.equal(restored.count, 4, 'restored from the checkpoint with the count of 3, then this request');
  assert.equal(restored.restored, 1);
  // The cut-off copy does not run while the new one does.
  assert.equal((await view(w1.address)).status, 503, 'the fenced copy on w1 does not answer');

  // Back in touch: w1 learns the pod left, and its old address forwards to w2.
  await proxy.heal();
  await c.until('w1 to forward to the pod on w2', async () => {
    const r = await view(w1.address);
    return r.status === 200 ? r : undefined;
  }, 90_000);
  const next = JSON.parse((await view(w1.address, '/count')).body) as { count: number };
  assert.equal(next.count, 5, 'one pod: the count goes on on w2');
  assert.equal(JSON.parse((await view(w2.address)).body).count, 5);

  // SIGKILL of w2: the pod runs on w1 again from its latest periodic checkpoint on w2.
  const afterKill = Date.now();
  await c.until('a Saved periodic checkpoint on w2 after the fifth request', async () => {
    const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
    return list.items.find((k) => k.status?.phase === 'Saved' && k.status.nodeName === 'w2' && Date.parse(k.status.takenAt ?? '') > afterKill);
  }, 60_000);
  w2.proc.kill('SIGKILL');
  await w2.exited;
  const killedAt = Date.now();
  await c.until('the pod to run on w1', async () => {
    const p = await c.getPod('keeper');
    return p?.spec?.nodeName === 'w1' && p.status?.phase === 'Running' ? p : undefined;
  }, 90_000);
  t.diagnostic(`SIGKILL to running on w1: ${((Date.now() - killedAt) / 1000).toFixed(1)} s (grace 20 s; a figure, not checked)`);
  const back = JSON.parse((await view(w1.address, '/count')).body) as { count: number };
  assert.equal(back.count, 6, 'restored from the checkpoint taken after the fifth request');
});
