/**
 * Several API servers on one etcd (issue 11): two `createApiServer({ storage: 'etcd' })` serve the
 * same cluster. What kubectl writes through one, a watch on the other sees, in order, with the
 * resourceVersions the writer answered; and both answer the same list.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { createApiServer } from '../../src/apiserver/index.ts';
import { createLogger } from '../../src/lib/index.ts';
import { startEtcd } from './etcd-server.ts';

/** kubectl, asynchronously: the API servers run in this process. */
const kubectl = async (server: string, ...args: string[]) => (await promisify(execFile)('kubectl', ['--server', server, ...args], { encoding: 'utf8', timeout: 20_000 })).stdout;

test('a write through one API server is seen by a watch on the other, in order', { timeout: 60_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const logger = createLogger('apiserver-etcd-test', { level: 'warn' });
  const a = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: 0, logger });
  t.after(() => a.close());
  const b = await createApiServer({ storage: 'etcd', etcdEndpoints: [url], insecureHttp: true, port: 0, logger });
  t.after(() => b.close());

  const list = JSON.parse(await kubectl(b.url, 'get', 'configmaps', '-n', 'default', '-o', 'json')) as { metadata: { resourceVersion: string } };
  const ac = new AbortController();
  t.after(() => ac.abort());
  const watch = await fetch(`${b.url}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=${list.metadata.resourceVersion}`, { signal: ac.signal });
  assert.equal(watch.status, 200);
  const lines: { type: string; object: { metadata: { name: string; resourceVersion: string } } }[] = [];
  const reading = (async () => {
    const dec = new TextDecoder();
    let buf = '';
    for await (const chunk of watch.body!) {
      buf += dec.decode(chunk as Uint8Array, { stream: true });
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) lines.push(JSON.parse(line));
        if (lines.length >= 4) return;
        nl = buf.indexOf('\n');
      }
    }
  })();
  reading.catch(() => {}); // an abort at cleanup ends it

  const out: string[] = [];
  for (const [server, args] of [
    [a.url, ['create', 'configmap', 'one', '--from-literal=k=1']],
    [b.url, ['create', 'configmap', 'two', '--from-literal=k=2']],
    [a.url, ['patch', 'configmap', 'two', '-p', '{"data":{"k":"3"}}']],
    [b.url, ['delete', 'configmap', 'one']],
  ] as const) {
    out.push(await kubectl(server, '-n', 'default', ...args, ...(args[0] === 'delete' ? [] : ['-o', 'jsonpath={.metadata.resourceVersion}'])));
  }
  await Promise.race([reading, new Promise((_, reject) => setTimeout(() => reject(new Error(`watch saw ${JSON.stringify(lines.map((l) => l.type))}`)), 15_000).unref())]);
  assert.deepEqual(lines.map((l) => `${l.type} ${l.object.metadata.name}`), ['ADDED one', 'ADDED two', 'MODIFIED two', 'DELETED one']);
  const rvs = lines.map((l) => Number(l.object.metadata.resourceVersion));
  assert.deepEqual(rvs, [...rvs].sort((x, y) => x - y));
  // The resourceVersions the writers answered are those the other server's watch delivered.
  assert.deepEqual(rvs.slice(0, 3), out.slice(0, 3).map(Number));
  assert.equal(await kubectl(a.url, 'get', 'configmap', 'two', '-n', 'default', '-o', 'jsonpath={.data.k}'), '3');
  assert.equal(await kubectl(b.url, 'get', 'configmaps', '-n', 'default', '-o', 'name'), await kubectl(a.url, 'get', 'configmaps', '-n', 'default', '-o', 'name'));
});
