// Small pieces of issue 9 without a VM: the registry link's QEMU arguments, the guest endpoints of
// forwarded registries, and the guest channel's streaming frames (FrameReader, AsyncQueue) over a real
// HTTP/2 connection (serveStreams and streamCall, a bidirectional echo and an error status).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { qemuArgs, registryEndpoints } from '../../src/feos/microvm/index.ts';
import { guestRegistryEndpoints } from '../../src/feos/pods/index.ts';
import { AsyncQueue, FrameReader, frameMessage, GrpcCode, GrpcError, serveStreams, streamCall } from '../../src/feos/guest/index.ts';

const base = { dir: '/tmp/x/vms/abc', guestDir: '/g', disk: '/d.qcow2', vcpus: 1, memoryBytes: 256n << 20n, accelerator: 'tcg' as const };

test('a microVM without a TAP gets a restricted registry link with one guestfwd per forward', () => {
  const args = qemuArgs({ ...base, registryForwards: ['127.0.0.1:5000', 'reg.local:443'] }).join(' ');
  assert.match(args, /-netdev user,id=registry,restrict=on,net=10\.0\.2\.0\/24,guestfwd=tcp:10\.0\.2\.100:5000-cmd:\/bin\/busybox nc 127\.0\.0\.1 5000,guestfwd=tcp:10\.0\.2\.100:5001-cmd:\/bin\/busybox nc reg\.local 443/);
  assert.match(args, /virtio-net-device,netdev=registry,mac=52:54:00:fe:00:01/);
  assert.doesNotMatch(qemuArgs(base).join(' '), /registry/);
  assert.throws(() => qemuArgs({ ...base, registryForwards: ['no-port'] }), RangeError);
  assert.deepEqual(registryEndpoints(['127.0.0.1:5000', 'r:1']), { '127.0.0.1:5000': 'http://10.0.2.100:5000', 'r:1': 'http://10.0.2.100:5001' });
});

test('a microVM with a TAP gets the registry link too: the pod network does not reach the node, and its NIC keeps the TAP', () => {
  const withTap = qemuArgs({ ...base, tap: { name: 'pod-abc', mac: '06:00:00:00:00:01' }, registryForwards: ['127.0.0.1:5000'] }).join(' ');
  assert.match(withTap, /-netdev tap,id=net0,ifname=pod-abc,script=no,downscript=no -device virtio-net-device,netdev=net0,mac=06:00:00:00:00:01/);
  assert.match(withTap, /-netdev user,id=registry,restrict=on,net=10\.0\.2\.0\/24,guestfwd=tcp:10\.0\.2\.100:5000-cmd:\/bin\/busybox nc 127\.0\.0\.1 5000/);
});

test('the guest endpoints: insecure registries over plain HTTP as named, forwards through the link (a registry both: the link)', () => {
  assert.deepEqual(guestRegistryEndpoints(['127.0.0.1:5000'], ['registry.lan:5000', '[2001:db8::5]:80', '127.0.0.1:5000']), {
    'registry.lan:5000': 'http://registry.lan:5000',
    '[2001:db8::5]:80': 'http://[2001:db8::5]:80',
    '127.0.0.1:5000': 'http://10.0.2.100:5000',
  });
  assert.deepEqual(guestRegistryEndpoints([], []), {});
});

test('FrameReader takes messages split and joined across chunks', () => {
  const r = new FrameReader();
  const a = frameMessage(Buffer.from('hello'));
  const b = frameMessage(Buffer.from(''));
  const c = frameMessage(Buffer.alloc(70_000, 7));
  const all = Buffer.concat([a, b, c]);
  const got: Uint8Array[] = [];
  for (let i = 0; i < all.length; i += 3001) got.push(...r.push(all.subarray(i, i + 3001)));
  assert.deepEqual(got.map((m) => m.length), [5, 0, 70_000]);
  assert.equal(Buffer.from(got[0]).toString(), 'hello');
  assert.equal(r.pending, 0);
  assert.throws(() => new FrameReader().push(Buffer.from([1, 0, 0, 0, 0])), GrpcError);
});

test('AsyncQueue yields what was pushed, then ends or throws', async () => {
  const q = new AsyncQueue<number>();
  q.push(1);
  setImmediate(() => {
    q.push(2);
    q.end(new Error('boom'));
  });
  const seen: number[] = [];
  await assert.rejects(async () => {
    for await (const n of q) seen.push(n);
  }, /boom/);
  assert.deepEqual(seen, [1, 2]);
});

test('streaming calls over HTTP/2: a bidirectional echo and an error status in the trailers', { timeout: 10_000 }, async (t) => {
  const server = http2.createServer();
  server.on('session', (s) =>
    serveStreams(
      s,
      new Map([
        [
          '/t.T/Echo',
          async (reqs: AsyncIterable<Uint8Array>, send: (m: Uint8Array) => void) => {
            for await (const m of reqs) send(Buffer.from(`echo:${Buffer.from(m).toString()}`));
          },
        ],
        [
          '/t.T/Fail',
          async (_r: AsyncIterable<Uint8Array>, send: (m: Uint8Array) => void) => {
            send(Buffer.from('partial'));
            throw new GrpcError(GrpcCode.FAILED_PRECONDITION, 'container x is exited');
          },
        ],
      ]),
    ),
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  t.after(() => {
    session.destroy();
    server.close();
  });
  const echo = streamCall(session, '/t.T/Echo');
  echo.send(Buffer.from('a'));
  echo.send(Buffer.from('b'));
  echo.end();
  const got: string[] = [];
  for await (const m of echo.messages) got.push(Buffer.from(m).toString());
  assert.deepEqual(got, ['echo:a', 'echo:b']);
  const fail = streamCall(session, '/t.T/Fail');
  fail.end();
  const partial: string[] = [];
  await assert.rejects(
    async () => {
      for await (const m of fail.messages) partial.push(Buffer.from(m).toString());
    },
    (err: unknown) => err instanceof GrpcError && err.code === GrpcCode.FAILED_PRECONDITION && err.message === 'container x is exited',
  );
  assert.deepEqual(partial, ['partial']);
});
