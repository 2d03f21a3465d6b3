/**
 * Checkpoint data across several API servers on one etcd (issue 11, seed 002 "Checkpoint objects
 * and data"): the snapshot stays in memory, copied by the API server that received the PUT to its
 * live peers; one that holds no copy proxies GET to a holder. PUT through A, GET through B byte for
 * byte; a later PUT through B wins on A; A stopped, B still answers; A restarted (holding nothing)
 * answers through B; both restarted (the whole control plane), the data is gone: 404. With data dirs
 * (issue 26) each keeps its copy on disk too and reads it back after the whole control plane restarted.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { type ApiServer, createApiServer } from '../../src/apiserver/index.ts';
import { encodeSnapshot, type SnapshotState } from '../../src/k32s/index.ts';
import { createLogger } from '../../src/lib/index.ts';
import { startEtcd } from './etcd-server.ts';

function snapshot(fill: number, pages: number): Buffer {
  const state: SnapshotState = {
    imageSha256: createHash('sha256').update('module').digest(),
    memory: new Uint8Array(pages * 65536).map((_, i) => (i * 31 + fill) & 0xff),
    memoryPages: pages,
    podTimeMs: BigInt(1000 + fill),
    unixTimeMs: 0n,
    globals: [],
    tables: [],
    channels: [],
    events: [],
  };
  return Buffer.concat([...encodeSnapshot(state)].map((c) => Buffer.from(c)));
}

const DATA = '/apis/kube32.io/v1/namespaces/default/checkpoints/c1/data';

async function putData(s: ApiServer, bytes: Buffer): Promise<Record<string, unknown>> {
  const r = await fetch(`${s.url}${DATA}`, { method: 'PUT', body: bytes, headers: { 'Content-Type': 'application/octet-stream' }, signal: AbortSignal.timeout(20_000) });
  assert.equal(r.status, 200, await r.clone().text());
  return (await r.json()) as Record<string, unknown>;
}

async function getData(s: ApiServer): Promise<{ status: number; bytes: Buffer; sha: string | null }> {
  const r = await fetch(`${s.url}${DATA}`, { signal: AbortSignal.timeout(40_000) });
  return { status: r.status, bytes: Buffer.from(await r.arrayBuffer()), sha: r.headers.get('x-kube32-snapshot-sha256') };
}

test('checkpoint data PUT through one API server is answered by the others, and outlives it but not the whole control plane', { timeout: 90_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const logger = createLogger('apiserver-etcd-test', { level: 'error' });
  let a = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: 0, logger });
  t.after(() => a.close());
  let b = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: 0, logger });
  t.after(() => b.close());

  const created = await fetch(`${a.url}/apis/kube32.io/v1/namespaces/default/checkpoints`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'c1' }, spec: { podName: 'p1' } }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  assert.equal((await getData(b)).status, 404, 'no data yet');

  const first = snapshot(1, 3);
  const answered = await putData(a, first);
  const holders = String((answered.metadata as { annotations: Record<string, string> }).annotations['kube32.io/checkpoint-data-holders']).split(', ');
  assert.deepEqual(holders.map((h) => h.split(' ')[0]), [a.url, b.url], 'A holds it and copied it to B');
  const viaB = await getData(b);
  assert.equal(viaB.status, 200);
  assert.ok(viaB.bytes.equals(first), `B answered ${viaB.bytes.length} bytes, A holds ${first.length}`);
  assert.equal(viaB.sha, (answered.status as { snapshotSha256: string }).snapshotSha256);
  assert.ok((await getData(a)).bytes.equals(first));

  // A newer snapshot through B: A answers it.
  const second = snapshot(2, 2);
  await putData(b, second);
  assert.ok((await getData(a)).bytes.equals(second), 'A answers the newer data PUT through B');

  // A stops: B still holds the data. A restarted holds nothing and proxies to B.
  const [portA, portB] = [a.port, b.port];
  await a.close();
  assert.ok((await getData(b)).bytes.equals(second), 'the data outlives the API server that received it');
  a = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: portA, logger });
  assert.ok((await getData(a)).bytes.equals(second), 'a restarted API server answers through a holder');

  // The whole control plane restarts: the data is lost, the Checkpoint stays (seed: "a control plane restart loses the data").
  await a.close();
  await b.close();
  a = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: portA, logger });
  b = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: portB, logger });
  assert.equal((await getData(a)).status, 404);
  assert.equal((await getData(b)).status, 404);
  const ckpt = await fetch(`${b.url}/apis/kube32.io/v1/namespaces/default/checkpoints/c1`);
  assert.equal(ckpt.status, 200);
});

test('with data dirs, checkpoint data outlives a restart of the whole control plane: each holder reads its copy back (issue 26)', { timeout: 90_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const logger = createLogger('apiserver-etcd-test', { level: 'error' });
  const dirs = [mkdtempSync(join(tmpdir(), 'k32-ckdata-a-')), mkdtempSync(join(tmpdir(), 'k32-ckdata-b-'))];
  t.after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const start = (dataDir: string, port: number) => createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port, logger, dataDir });
  let a = await start(dirs[0]!, 0);
  let b = await start(dirs[1]!, 0);
  t.after(() => a.close());
  t.after(() => b.close());
  const created = await fetch(`${a.url}/apis/kube32.io/v1/namespaces/default/checkpoints`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'c1' }, spec: { podName: 'p1' } }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  const bytes = snapshot(3, 2);
  await putData(a, bytes);
  const [portA, portB] = [a.port, b.port];
  await a.close();
  await b.close();
  a = await start(dirs[0]!, portA);
  b = await start(dirs[1]!, portB);
  // Each answers from its own copy: B is asked first, with A's copy also on disk.
  assert.ok((await getData(b)).bytes.equals(bytes), 'B read its copy back');
  assert.ok((await getData(a)).bytes.equals(bytes), 'A read its copy back');
  // Deleted through one server: every copy goes, and its file.
  const del = await fetch(`${a.url}/apis/kube32.io/v1/namespaces/default/checkpoints/c1`, { method: 'DELETE' });
  assert.equal(del.status, 200);
  const gone = async (d: string) => {
    const deadline = Date.now() + 10_000;
    while (readdirSync(join(d, 'checkpoint-data')).some((f) => f.endsWith('.k32s'))) {
      if (Date.now() > deadline) throw new Error(`${d}: the snapshot file is still there`);
      await new Promise((r) => setTimeout(r, 20)); // polling a condition with a deadline
    }
  };
  await gone(dirs[0]!);
  await gone(dirs[1]!);
});
