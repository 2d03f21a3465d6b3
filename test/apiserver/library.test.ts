/**
 * The API server as a library (`createApiServer`), as the control-plane process starts it: options
 * checked up front, plain HTTP on loopback with the memory store, and a clean close.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createApiServer } from '../../src/apiserver/index.ts';
import { createLogger } from '../../src/lib/index.ts';

test('createApiServer refuses bad options with a RangeError naming them', async () => {
  await assert.rejects(createApiServer({ storage: 'memory', insecureHttp: true, bindAddress: '0.0.0.0' }), /plain HTTP is only allowed on a loopback address: current bind address is 0\.0\.0\.0/);
  await assert.rejects(createApiServer({ storage: 'sqlite' }), /the sqlite storage needs a data dir/);
  await assert.rejects(createApiServer({ storage: 'memory' }), /HTTPS needs a data dir/);
  await assert.rejects(createApiServer({ storage: 'memory', insecureHttp: true, maxBodyBytes: 0 }), /maxBodyBytes must be a positive integer: current value is 0/);
});

test('in-process, plain HTTP on loopback with the memory store: serves, then closes its streams', { timeout: 30_000 }, async (t) => {
  const server = await createApiServer({ storage: 'memory', insecureHttp: true, port: 0, watchHeartbeatMs: 100, logger: createLogger('apiserver-test', {}) });
  t.after(() => server.close());
  assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  const v = (await (await fetch(`${server.url}/version`)).json()) as { major: string; minor: string };
  assert.deepEqual([v.major, v.minor], ['1', '32']);
  const created = await fetch(`${server.url}/api/v1/namespaces/default/pods`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'x' }] } }) });
  assert.equal(created.status, 201);
  // A quiet watch gets bookmarks with the current resourceVersion (or bare newlines without allowWatchBookmarks).
  const rv = ((await (await fetch(`${server.url}/api/v1/namespaces/default/pods`)).json()) as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
  const quiet = await fetch(`${server.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=1`);
  const lines = (await quiet.text()).trim().split('\n').map((l) => JSON.parse(l) as { type: string; object: { kind: string; metadata: { resourceVersion: string } } });
  assert.ok(lines.length >= 2, 'several bookmarks in a second');
  assert.deepEqual(lines[0], { type: 'BOOKMARK', object: { apiVersion: 'v1', kind: 'Pod', metadata: { resourceVersion: rv } } });
  const plain = await fetch(`${server.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion=${rv}&timeoutSeconds=1`);
  assert.match(await plain.text(), /^\n+$/);
  // A watch that is open when the server closes ends instead of holding the close.
  const watch = await fetch(`${server.url}/api/v1/pods?watch=true`);
  assert.equal(watch.status, 200);
  const reader = watch.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  assert.match(first, /"type":"ADDED"/);
  // A second server on the same port fails with a message naming the address, and leaves nothing behind.
  await assert.rejects(createApiServer({ storage: 'memory', insecureHttp: true, port: Number(new URL(server.url).port), logger: createLogger('apiserver-test', {}) }), /cannot listen on 127\.0\.0\.1:\d+: listen EADDRINUSE/);
  await server.close();
  await assert.rejects(async () => {
    for (;;) if ((await reader.read()).done) throw new Error('ended');
  }, /ended|terminated|other side closed/);
});
