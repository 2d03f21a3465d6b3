/**
 * The framing under `kubectl exec` and `kubectl port-forward` of microVM pods (docs/feos/fleet.md,
 * "Logs, exec and port-forward of microVM pods"): the WebSocket server side with Node's own WebSocket
 * client (undici), and the SPDY/3.1 server side with header blocks compressed by a real zlib context
 * with the SPDY dictionary, as spdystream writes them. kubectl itself is in test/root/fleet/feos-streams.test.ts.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { test } from 'node:test';
import zlib from 'node:zlib';
import { headerBlock, SPDY_DICTIONARY, spdyServer, type SpdyStream } from './spdy.ts';
import { acceptWebSocket, isWebSocketUpgrade, offeredProtocols } from './websocket.ts';

test('the WebSocket server agrees a subprotocol, echoes binary messages whole, and closes cleanly', { timeout: 20_000 }, async (t) => {
  const server = createServer();
  const seen: string[][] = [];
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    assert.ok(isWebSocketUpgrade(req));
    seen.push(offeredProtocols(req));
    const ws = acceptWebSocket(req, socket, head, 'v5.channel.k8s.io');
    ws.onMessage((m) => {
      if (m.toString() === 'bye') ws.close(1000, 'done');
      else ws.send(Buffer.concat([Buffer.from([1]), m]));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.after(() => server.close());
  const ws = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}/`, ['v5.channel.k8s.io', 'v4.channel.k8s.io']);
  ws.binaryType = 'arraybuffer';
  const got: Buffer[] = [];
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.addEventListener('close', (e) => resolve({ code: e.code, reason: e.reason })));
  ws.addEventListener('message', (e) => got.push(Buffer.from(e.data as ArrayBuffer)));
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener('open', () => resolve());
    ws.addEventListener('error', () => reject(new Error('the WebSocket did not open')));
  });
  assert.equal(ws.protocol, 'v5.channel.k8s.io');
  assert.deepEqual(seen, [['v5.channel.k8s.io', 'v4.channel.k8s.io']]);
  const big = Buffer.alloc(200_000, 7);
  ws.send(Buffer.from('small'));
  ws.send(big);
  const deadline = Date.now() + 10_000;
  while (got.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20)); // poll the echoes, bounded
  assert.equal(got[0]!.toString('latin1'), '\u0001small');
  assert.equal(got[1]!.length, big.length + 1);
  assert.ok(got[1]!.subarray(1).equals(big), 'a 200 kB message comes back whole');
  ws.send('bye');
  assert.deepEqual(await closed, { code: 1000, reason: 'done' });
});

/** A control frame of SPDY/3. */
function control(type: number, flags: number, body: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(0x8003, 0);
  h.writeUInt16BE(type, 2);
  h.writeUInt32BE((flags << 24) | body.length, 4);
  return Buffer.concat([h, body]);
}

test("the SPDY server inflates the client's header blocks in one zlib context, replies, carries data both ways, answers PING", { timeout: 20_000 }, async () => {
  // The client's side, as spdystream: one deflate context with the dictionary, a sync flush per block.
  const deflate = zlib.createDeflate({ dictionary: SPDY_DICTIONARY, level: 9 });
  const deflated: Buffer[] = [];
  deflate.on('data', (d: Buffer) => deflated.push(d));
  const compress = (h: Record<string, string>) =>
    new Promise<Buffer>((resolve) => {
      deflate.write(headerBlock(h));
      deflate.flush(zlib.constants.Z_SYNC_FLUSH, () => resolve(Buffer.concat(deflated.splice(0))));
    });
  const syn = async (id: number, h: Record<string, string>, flags = 0) => {
    const b = Buffer.alloc(10);
    b.writeUInt32BE(id, 0);
    return control(1, flags, Buffer.concat([b, await compress(h)]));
  };
  const sent: Buffer[] = [];
  const streams: SpdyStream[] = [];
  const fromClient: string[] = [];
  const session = spdyServer(
    (b) => sent.push(b),
    (why) => assert.fail(why),
    (s) => {
      streams.push(s);
      s.onData((d) => fromClient.push(`${s.id}:${d.toString()}`));
      s.onEnd((reset) => fromClient.push(`${s.id}:${reset ? 'reset' : 'fin'}`));
    },
  );
  const headers = { streamtype: 'error', port: '8080', requestid: '0' };
  const data = Buffer.alloc(8);
  data.writeUInt32BE(3, 0);
  data.writeUInt32BE((1 << 24) | 5, 4);
  // Fed in odd pieces: frames are taken whole whatever the WebSocket messages cut.
  const all = Buffer.concat([await syn(1, headers, 1), await syn(3, { ...headers, streamtype: 'data' }), data, Buffer.from('hello'), control(6, 0, Buffer.from([0, 0, 0, 1]))]);
  for (let i = 0; i < all.length; i += 7) session.receive(all.subarray(i, i + 7));
  const deadline = Date.now() + 5000;
  while (streams.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10)); // poll the async inflation, bounded
  assert.deepEqual(
    streams.map((s) => s.headers),
    [headers, { ...headers, streamtype: 'data' }],
  );
  assert.deepEqual(fromClient, ['1:fin', '3:hello', '3:fin']);
  streams[1]!.write(Buffer.from('pong'));
  streams[1]!.end();
  // Our frames: SYN_REPLY 1, SYN_REPLY 3, PING echo, DATA 3 "pong", DATA 3 FIN; the replies' header blocks inflate as one zlib stream.
  const out = Buffer.concat(sent);
  const frames: Buffer[] = [];
  for (let off = 0; off < out.length; ) {
    const len = out.readUInt32BE(off + 4) & 0xffffff;
    frames.push(out.subarray(off, off + 8 + len));
    off += 8 + len;
  }
  const types = frames.map((f) => (f[0]! & 0x80 ? `ctl${f.readUInt16BE(2)}` : `data${f.readUInt32BE(0)}/${f[4]}`));
  assert.deepEqual(types, ['ctl2', 'ctl2', 'ctl6', 'data3/0', 'data3/1']);
  assert.equal(frames[3]!.subarray(8).toString(), 'pong');
  const inflate = zlib.createInflate({ dictionary: SPDY_DICTIONARY });
  const blocks: Buffer[] = [];
  inflate.on('data', (d: Buffer) => blocks.push(d));
  for (const f of frames.slice(0, 2)) {
    inflate.write(f.subarray(12));
    await new Promise<void>((r) => inflate.flush(zlib.constants.Z_SYNC_FLUSH, () => r()));
  }
  assert.deepEqual(Buffer.concat(blocks), Buffer.alloc(8), 'two empty header blocks (a count of 0 each)');
  session.closed();
});
