// The one mapping of FeOS's errors to gRPC statuses (issue 25): the microVM layer raises its own errors
// (src/feos/microvm/errors.ts) and the API gives each its code, message and, for a busy microVM, the
// VmBusy detail that clients (feosctl, the fleet) read; a call through a real gRPC server and client.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { HostService } from '../gen/feos/host/v1/host_pb.js';
import { MicroVmBusyError, MicroVmInvalidError, MicroVmNotFoundError, MicroVmStateError, VmmError } from '../microvm/index.ts';
import { addService, asFeosError, Code, codeName, FeosError, isVmBusy, makeClient, toGrpcStatus, vmBusy } from './index.ts';

const cases: [Error, keyof typeof Code, boolean][] = [
  [new MicroVmNotFoundError('abcdefghjkm'), 'NOT_FOUND', false],
  [new MicroVmStateError('abcdefghjkm', 'microVM abcdefghjkm is not suspended'), 'FAILED_PRECONDITION', false],
  [new MicroVmBusyError('abcdefghjkm', 'the snapshot was not written within 120 s; the microVM runs on'), 'UNAVAILABLE', true],
  [new MicroVmInvalidError('abcdefghjkm', 'state dir too long for unix sockets: /x'), 'INVALID_ARGUMENT', false],
  [new VmmError('abcdefghjkm', 'QEMU did not come up: no QMP'), 'INTERNAL', false],
];

test("the microVM layer's errors get their codes and messages, a busy one the VmBusy detail", { timeout: 10_000 }, () => {
  for (const [err, code, busy] of cases) {
    const s = toGrpcStatus(err);
    assert.equal(codeName(s.code), code, err.name);
    assert.equal(s.details, err.message);
    assert.equal(isVmBusy(s), busy, `${err.name}: VmBusy`);
    assert.equal(asFeosError(err)?.busy, busy);
  }
  assert.equal(new MicroVmNotFoundError('abcdefghjkm').message, 'microVM abcdefghjkm not found');
  assert.equal(new MicroVmBusyError('x', 'why').message, 'the VM is busy: why');
  // The busy marker is the one vmBusy gave before: same code, message form and detail.
  const before = toGrpcStatus(vmBusy('why'));
  const now = toGrpcStatus(new MicroVmBusyError('x', 'why'));
  assert.deepEqual([now.code, now.details, now.metadata?.get('grpc-status-details-bin')], [before.code, before.details, before.metadata?.get('grpc-status-details-bin')]);
  // Anything else stays UNKNOWN; a plain Error named like a layer's is not taken for one.
  assert.equal(toGrpcStatus(new Error('boom')).code, Code.UNKNOWN);
  assert.equal(toGrpcStatus(Object.assign(new Error('x'), { kind: 'busy' })).code, Code.UNKNOWN);
  assert.equal(asFeosError(new FeosError('ABORTED', 'y'))?.code, 'ABORTED');
});

test('a handler that throws a MicroVmBusyError answers UNAVAILABLE with VmBusy over gRPC', { timeout: 30_000 }, async (t) => {
  const server = new grpc.Server();
  let thrown: Error = new MicroVmBusyError('abcdefghjkm', 'the snapshot was not written within 1 s; the microVM runs on');
  addService(server, HostService, {
    getHostInfo: async () => {
      throw thrown;
    },
  } as never);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  t.after(() => server.forceShutdown());
  const client = makeClient(HostService, `127.0.0.1:${port}`);
  t.after(() => client.grpc.close());
  const call = () => client.getHostInfo({}, { deadline: Date.now() + 10_000 }).then(() => assert.fail('answered'), (err: unknown) => err as grpc.ServiceError);
  let err = await call();
  assert.equal(err.code, Code.UNAVAILABLE);
  assert.equal(err.details, 'the VM is busy: the snapshot was not written within 1 s; the microVM runs on');
  assert.ok(isVmBusy(err), 'VmBusy detail');
  thrown = new MicroVmStateError('abcdefghjkm', 'microVM abcdefghjkm does not run');
  err = await call();
  assert.equal(err.code, Code.FAILED_PRECONDITION);
  assert.equal(err.details, 'microVM abcdefghjkm does not run');
  assert.ok(!isVmBusy(err));
});
