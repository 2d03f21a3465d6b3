import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EndpointError } from './http/status.ts';
import { MAX_STAGED_BYTES, type StagedSnapshot, StagedRestores } from './staged-restores.ts';
import { loadModule, PodInstance, type PodModule, type PreparedRestore } from '../wasm/index.ts';
import { get, snapshotBytes, stateNumbers, wat } from '../../test/wasm/helpers.ts';

/** Bytes ending with a K32S-like trailer: the SHA-256 of the bytes before it. */
function withTrailer(n: number): { bytes: Buffer; sha: string } {
  const body = Buffer.alloc(n, 7);
  const sha = createHash('sha256').update(body).digest();
  return { bytes: Buffer.concat([body, sha]), sha: sha.toString('hex') };
}

const at = { ns: 'default', pod: 'p', container: 'c', checkpoint: 'm1' };

/**
 * Sends `bytes` to a real HTTP server whose handler stages the request body, as the kubelet's
 * `/restore-data` endpoint does; `cut` ends the request after that many bytes.
 */
async function push(staged: StagedRestores, bytes: Buffer, sha: string, opts: { length?: number; cut?: number } = {}): Promise<StagedSnapshot | EndpointError> {
  let answer!: (v: StagedSnapshot | EndpointError) => void;
  const result = new Promise<StagedSnapshot | EndpointError>((r) => { answer = r; });
  let arrived!: () => void;
  const seen = new Promise<void>((r) => { arrived = r; });
  const server = createServer((req: IncomingMessage, res) => {
    arrived();
    staged.receive(req, at, Number(req.headers['content-length']), sha).then(answer, answer);
    req.on('end', () => res.end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', headers: { 'content-length': opts.length ?? bytes.length } });
  req.on('error', () => {});
  req.on('response', (r) => r.resume());
  if (opts.cut !== undefined) {
    req.write(bytes.subarray(0, opts.cut));
    // Cut once the server has the request (a request destroyed before it is sent never reaches it).
    void seen.then(() => req.destroy());
  } else {
    req.end(bytes);
  }
  const v = await result;
  server.closeAllConnections();
  server.close();
  return v;
}

test('a whole push is staged and taken once, its pieces the bytes sent', { timeout: 10_000 }, async () => {
  const staged = new StagedRestores();
  const { bytes, sha } = withTrailer((5 << 19) + 1000);
  const s = await push(staged, bytes, sha);
  assert.ok(!(s instanceof EndpointError));
  assert.equal(await s.whole, true);
  assert.equal(staged.stagedBytes, bytes.length);
  const taken = await staged.take('default', 'p', 'c', 'm1');
  assert.ok(taken);
  assert.ok(Buffer.concat(taken.pieces).equals(bytes));
  // Gathered into 1 MiB chunks that own their buffers (a restore transfers them without a copy).
  assert.deepEqual(taken.pieces.map((p) => p.byteLength), [1 << 20, 1 << 20, bytes.length - (2 << 20)]);
  assert.ok(taken.pieces.every((p) => p.byteOffset === 0 && p.byteLength === p.buffer.byteLength));
  assert.equal(taken.sha256, sha);
  assert.equal(staged.stagedBytes, 0);
  assert.equal(await staged.take('default', 'p', 'c', 'm1'), undefined, 'taken once');
  assert.equal(await staged.take('default', 'p', 'c', 'other'), undefined, 'another Checkpoint has none');
});

test('a push whose trailer is not the named SHA-256, or that is cut short, is not staged', { timeout: 10_000 }, async () => {
  const staged = new StagedRestores();
  const { bytes } = withTrailer(100_000);
  const wrong = await push(staged, bytes, 'a'.repeat(64));
  assert.ok(!(wrong instanceof EndpointError));
  assert.equal(await wrong.whole, false);
  assert.equal(await staged.take('default', 'p', 'c', 'm1'), undefined);
  const good = withTrailer(100_000);
  const cut = await push(staged, good.bytes, good.sha, { cut: 50_000 });
  assert.ok(!(cut instanceof EndpointError));
  assert.equal(await cut.whole, false);
  assert.equal(await staged.take('default', 'p', 'c', 'm1'), undefined);
  assert.equal(staged.stagedBytes, 0);
});

test('a push past the node\'s staged bytes is refused with 413; bad lengths and digests with 400', { timeout: 10_000 }, async () => {
  const staged = new StagedRestores();
  const { bytes, sha } = withTrailer(1000);
  const big = await push(staged, bytes, sha, { length: MAX_STAGED_BYTES + 1 });
  assert.ok(big instanceof EndpointError);
  assert.equal(big.code, 413);
  const bad = await push(staged, bytes, 'not-hex');
  assert.ok(bad instanceof EndpointError);
  assert.equal(bad.code, 400);
});

test('a push that names no digest is named by its trailer', { timeout: 10_000 }, async () => {
  const staged = new StagedRestores();
  const { bytes, sha } = withTrailer(70_000);
  const s = await push(staged, bytes, '');
  assert.ok(!(s instanceof EndpointError));
  assert.equal(await s.whole, true);
  assert.equal(s.sha256, sha, "the trailer, as the control plane's ETag names the stored data");
});

/** A real pod's snapshot (test/fixtures/wasm/state.wat after 2 requests), and its module. */
async function podSnapshot(): Promise<{ module: PodModule; bytes: Buffer; stop: () => Promise<unknown> }> {
  const module = await loadModule(wat('state.wat'), { memoryLimitBytes: 1 << 20 });
  const src = await PodInstance.start({ module, namespace: 'default', podName: 'p', containerName: 'c' });
  await src.handle(get('/x'));
  await src.handle(get('/x'));
  await src.freeze();
  return { module, bytes: Buffer.from(await snapshotBytes(src)), stop: () => src.terminate() };
}

test('with a prepare hook, the restore is prepared from the pieces as they arrive and taken with them; a copy dropped cancels it', { timeout: 30_000 }, async (t) => {
  const { module, bytes, stop } = await podSnapshot();
  t.after(stop);
  const made: PreparedRestore[] = [];
  const staged = new StagedRestores(async (where, pieces) => {
    assert.deepEqual(where, at);
    const p = await PodInstance.prepareRestore({ module, namespace: where.ns, podName: where.pod, containerName: where.container, restoreFrom: pieces, restoreTransfer: true });
    made.push(p);
    return p;
  });
  const s = await push(staged, bytes, '');
  assert.ok(!(s instanceof EndpointError));
  const taken = await staged.take('default', 'p', 'c', 'm1');
  assert.ok(taken);
  const prepared = await taken.prepared;
  assert.ok(prepared, 'prepared while the bytes came');
  assert.equal(taken.consumed, true, 'its pieces went to the pod thread');
  await prepared.restored;
  const pod = await prepared.commit({ module, namespace: 'default', podName: 'p', containerName: 'c' });
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/x'))).requests, 3, 'counts on from the pushed snapshot');

  // A second push of the same key replaces the first: its prepared restore is cancelled, nothing of it ran.
  await push(staged, bytes, '');
  await push(staged, bytes, '');
  assert.equal(made.length, 3);
  await assert.rejects(made[1]!.commit({ module, namespace: 'default', podName: 'p', containerName: 'c' }), /the prepared restore was cancelled/, 'the replaced copy\'s restore was cancelled');
  await staged.clear();
  await assert.rejects(made[2]!.commit({ module, namespace: 'default', podName: 'p', containerName: 'c' }), /the prepared restore was cancelled/, 'cleared with the node');
});
