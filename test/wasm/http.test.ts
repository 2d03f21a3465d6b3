/** serveHttp with a real HTTP server and client: the message a pod gets, and 502/503 (pod-abi.md). */
import assert from 'node:assert/strict';
import { createServer, request, type Server } from 'node:http';
import { test } from 'node:test';
import { loadModule, parseHttpResponse, serveHttp, type PodInstance } from '../../src/wasm/index.ts';
import { example, startPod, wat } from './helpers.ts';

async function listen(getPod: () => PodInstance | undefined, errors: string[] = []): Promise<{ server: Server; url: string }> {
  const server = createServer(serveHttp(getPod, { onError: (m) => errors.push(m) }));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${addr.port}` };
}

/** Sends a chunked POST with the raw http client. */
function chunkedPost(url: string, parts: string[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/echo?q=1`, { method: 'POST', headers: { 'X-Mixed-Case': 'Value', 'Transfer-Encoding': 'chunked' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    for (const p of parts) req.write(p);
    req.end();
  });
}

test('a pod gets lower-case headers and a de-chunked body with content-length', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await loadModule(example('echo')));
  t.after(() => pod.terminate());
  const { server, url } = await listen(() => pod);
  t.after(() => server.close());
  const res = await chunkedPost(url, ['hel', 'lo ', 'world']);
  assert.equal(res.status, 200);
  const echoed = JSON.parse(res.body) as { method: string; path: string; headers: Record<string, string>; body: string };
  assert.equal(echoed.method, 'POST');
  assert.equal(echoed.path, '/echo?q=1');
  assert.equal(echoed.body, 'hello world');
  assert.equal(echoed.headers['x-mixed-case'], 'Value');
  assert.equal(echoed.headers['content-length'], '11');
  assert.equal(echoed.headers['transfer-encoding'], undefined);
});

test('503 with Retry-After while frozen or absent; 502 on a trap and on a response that does not parse', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await loadModule(example('echo')));
  t.after(() => pod.terminate());
  let current: PodInstance | undefined = pod;
  const errors: string[] = [];
  const { server, url } = await listen(() => current, errors);
  t.after(() => server.close());
  await pod.freeze();
  let r = await fetch(url);
  assert.equal(r.status, 503);
  assert.equal(r.headers.get('retry-after'), '1');
  await pod.thaw();
  assert.equal((await fetch(url)).status, 200);
  current = undefined;
  r = await fetch(url);
  assert.equal(r.status, 503);
  assert.equal(r.headers.get('retry-after'), '1');

  const bad = await startPod(await loadModule(wat(`(module (memory (export "memory") 1) (data (i32.const 0) "garbage")
    (func (export "k32_alloc") (param i32) (result i32) i32.const 1024)
    (func (export "k32_handle") (param i32 i32) (result i64)
      (if (i32.eq (i32.load8_u (i32.add (local.get 0) (i32.const 5))) (i32.const 116)) (then unreachable))
      (i64.const 0x0000000700000000)))`)), { podName: 'bad' });
  t.after(() => bad.terminate());
  current = bad;
  r = await fetch(`${url}/x`);
  assert.equal(r.status, 502);
  assert.match(errors.at(-1)!, /^pod test\/bad: k32_handle's response does not parse/);
  r = await fetch(`${url}/t`);
  assert.equal(r.status, 502);
  assert.match(await r.text(), /unreachable/);
  assert.equal((await bad.exited).reason, 'Trap');
});

test('parseHttpResponse reads status, headers, content-length and chunked bodies', () => {
  const enc = new TextEncoder();
  const a = parseHttpResponse(enc.encode('HTTP/1.1 201 Created\r\nX-A: 1\r\ncontent-length: 2\r\n\r\nhiEXTRA'));
  assert.equal(a.status, 201);
  assert.equal(a.reason, 'Created');
  assert.deepEqual(a.headers, [['X-A', '1'], ['content-length', '2']]);
  assert.equal(Buffer.from(a.body).toString(), 'hi');
  const b = parseHttpResponse(enc.encode('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n'));
  assert.equal(Buffer.from(b.body).toString(), 'abcde');
  const c = parseHttpResponse(enc.encode('HTTP/1.1 204 No Content\r\n\r\n'));
  assert.equal(c.body.length, 0);
  assert.throws(() => parseHttpResponse(enc.encode('hello')), /no empty line/);
  assert.throws(() => parseHttpResponse(enc.encode('HTTP/2 200\r\n\r\n')), /status line/);
  assert.throws(() => parseHttpResponse(enc.encode('HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab')), /content-length is 9/);
});
