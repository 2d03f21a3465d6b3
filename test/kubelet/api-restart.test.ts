/**
 * kube32-sim and an API server that goes away: a worker started before its control plane waits
 * for it and registers; a worker whose control plane restarts keeps its pods running, watches
 * again (backing off while it is away), starts pods bound to it after the restart, and keeps its Node Ready.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { ControlPlane } from '../../src/kubelet/client.ts';
import { unusedPort } from '../helpers/ports.ts';
import { buildWat, fixturePod, freePort } from './cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

const until = <T>(what: string, fn: () => Promise<T | undefined | false>, ms = 20_000): Promise<T> => waitFor(what, ms, fn);

test('a worker waits for its API server, and survives the API server restarting', { timeout: 120_000 }, async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'k32-kubelet-restart-'));
  // The API server restarts on the port its kubeconfigs name: one below the ephemeral range, which no
  // outgoing connection can take while the server is away (one from --port 0 could be, and the restart
  // would then fail with EADDRINUSE).
  // (Another fixture picking from that range may bind the same port first: then another one.)
  let port = 0;
  let first: TestApiServer | undefined;
  for (let attempt = 1; !first; attempt++) {
    port = await unusedPort('127.0.0.1');
    first = await startApiServer(t, { args: ['--port', String(port)] }).catch((err: unknown) => {
      if (attempt < 3 && /EADDRINUSE|already in use/i.test(String(err))) return undefined;
      throw err;
    });
  }
  let api = first;
  const { dataDir } = api;
  const kubeconfig = api.nodeKubeconfig('r1');
  const admin = new ControlPlane(api.kubeConfig);
  await admin.json('PUT', '/apis/kube32.io/v1/modules/counter-fixture/data', { body: buildWat('counter', tmp), contentType: 'application/octet-stream' });
  await api.stop({ keepData: true });

  const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', kubeconfig, '--name', 'r1', '--address', '127.0.0.6', '--kubelet-port', '0', '--data-dir', join(tmp, 'r1'), '--interp-mops', '1000'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise((r) => proc.once('exit', r));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(tmp, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  });
  await until('the worker to retry', async () => err.includes('the API server is not reachable; retrying'));
  assert.equal(proc.exitCode, null, 'the worker waits instead of exiting');

  api = await startApiServer(t, { dataDir, args: ['--port', String(port)] });
  await until('the worker to register', async () => out.includes('ready:'));
  const podPort = await freePort('127.0.0.6');
  await admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('before', 'r1', podPort) });
  await until('before Running', async () => (await admin.json<V1Pod>('GET', '/api/v1/namespaces/default/pods/before')).status?.phase === 'Running');
  assert.equal((await fetch(`http://127.0.0.6:${podPort}/count`)).status, 200);

  await api.stop({ keepData: true });
  // The pod keeps serving while the control plane is away.
  assert.equal((await fetch(`http://127.0.0.6:${podPort}/count`)).status, 200);
  // The pod watch retries with back-off (it retried every 500 ms: 'connect' reset it before each list).
  const retries = () => [...`${out}${err}`.matchAll(/"retryMs":(\d+)[^\n]*"msg":"pod watch failed; listing again"/g)].map((m) => Number(m[1]));
  await until('three pod watch retries', async () => retries().length >= 3, 20_000);
  assert.deepEqual(retries().slice(0, 3), [500, 1000, 2000], 'the pod watch backs off while the API server is away');
  // So does the node watch of the channel fan-out (it retried every 2 s, with no end).
  const nodeRetries = () => [...`${out}${err}`.matchAll(/"retryMs":(\d+)[^\n]*"msg":"node watch failed \(channel fan-out\); retrying"/g)].map((m) => Number(m[1]));
  await until('three node watch retries', async () => nodeRetries().length >= 3, 20_000);
  assert.deepEqual(nodeRetries().slice(0, 3), [500, 1000, 2000], 'the node watch backs off while the API server is away');
  api = await startApiServer(t, { dataDir, args: ['--port', String(port)] });
  const port2 = await freePort('127.0.0.6');
  await admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('after', 'r1', port2) });
  await until('after Running (the watch came back)', async () => (await admin.json<V1Pod>('GET', '/api/v1/namespaces/default/pods/after')).status?.phase === 'Running', 40_000);
  const body = (await (await fetch(`http://127.0.0.6:${podPort}/count`)).json()) as { count: number };
  assert.equal(body.count, 3, 'the first pod ran on, with its state, through the restart');
  const node = await admin.json<V1Node>('GET', '/api/v1/nodes/r1');
  assert.equal(node.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
  await api.stop();
});
