/**
 * Memory admission (docs/feos/feosd.md, "Memory admission"): a pod whose memory the node cannot give is
 * refused up front with RESOURCE_EXHAUSTED naming what it asks for and what is left, and nothing is
 * recorded. Against a real feosd without a guest through feosctl (a fresh user's `--memory 60Gi` on a
 * smaller host was accepted, and the pod went FAILED when QEMU could not allocate it), and the sums of
 * the pods that boot or run, without feosd.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { PodInfoSchema, PodSpecSchema, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { formatMemory, MemoryAdmission } from '../../src/feos/pods/index.ts';
import { feosctl, startFeosd, tempDir } from './harness.ts';

const MiB = 1024n * 1024n;
const GiB = 1024n * MiB;

test('a pod with more memory than the node has is refused by CreatePod: RESOURCE_EXHAUSTED, nothing recorded', { timeout: 120_000 }, async (t) => {
  const total = BigInt(os.totalmem());
  // The most a spec may ask is 64 GiB: a larger host cannot be asked for more than it has.
  const asked = (total / GiB + 1n) * GiB;
  if (asked > 64n * GiB) return t.skip(`the host has ${formatMemory(total)}: no pod of 64 GiB or less exceeds it`);
  const { dir, cleanup } = tempDir('memory-admission-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop());
  const before = await feosctl(feosd.socket, ['pod', 'list', '-o', 'json']);
  assert.equal(before.code, 0, before.stderr);
  const r = await feosctl(feosd.socket, ['pod', 'create', '--id', 'memadm0aaaa', '--memory', `${asked / MiB}Mi`]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  assert.equal(
    r.stderr,
    `feosctl: RESOURCE_EXHAUSTED: CreatePod: pod memadm0aaaa asks for ${asked / GiB} GiB of memory and this node has ${formatMemory(total)} for it: ` +
      `${formatMemory(total)} allocatable (the host's memory), no other pod holds any; give the pod less memory (--memory), or stop pods first\n`,
  );
  // Nothing new: not listed, no record, no disk.
  const after = await feosctl(feosd.socket, ['pod', 'list', '-o', 'json']);
  assert.equal(after.code, 0, after.stderr);
  assert.deepEqual(JSON.parse(after.stdout), JSON.parse(before.stdout));
  const get = await feosctl(feosd.socket, ['pod', 'get', 'memadm0aaaa']);
  assert.equal(get.code, 1);
  assert.match(get.stderr, /NOT_FOUND/);
  const records = join(feosd.stateDir, 'pods');
  assert.deepEqual(existsSync(records) ? readdirSync(records) : [], []);
  assert.ok(!existsSync(join(feosd.stateDir, 'disks', 'memadm0aaaa.qcow2')));
  // A pod that fits is taken (it then fails for want of a guest, which holds no memory).
  const ok = await feosctl(feosd.socket, ['pod', 'create', '--id', 'memadm0aaab', '--memory', '256Mi', '-o', 'json']);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(JSON.parse(ok.stdout).id, 'memadm0aaab');
});

test('the admission counts the pods that boot or run and those admitted, never one twice', () => {
  const pod = (id: string, state: PodState, mib: bigint) => create(PodInfoSchema, { id, state, spec: create(PodSpecSchema, { memoryBytes: mib * MiB }) });
  const pods = [
    pod('aaaaaaaaaaa', PodState.RUNNING, 512n),
    pod('bbbbbbbbbbb', PodState.PENDING, 256n),
    // These hold no memory: their QEMU is gone.
    pod('ccccccccccc', PodState.SUSPENDED, 4096n),
    pod('ddddddddddd', PodState.STOPPED, 4096n),
    pod('eeeeeeeeeee', PodState.FAILED, 4096n),
    pod('fffffffffff', PodState.HIBERNATED, 4096n),
  ];
  const a = new MemoryAdmission(() => pods, () => 1n * GiB);
  assert.deepEqual(a.held('new'), { bytes: 768n * MiB, pods: 2 });
  // Its own record does not count against it (a StartPod of a pod recorded PENDING by then).
  assert.deepEqual(a.held('aaaaaaaaaaa'), { bytes: 256n * MiB, pods: 1 });
  assert.throws(
    () => a.admit('ccccccccccc', 512n * MiB, 'ResumePod'),
    (e: { code?: string; message?: string }) =>
      e.code === 'RESOURCE_EXHAUSTED' &&
      e.message ===
        'ResumePod: pod ccccccccccc asks for 512 MiB of memory and this node has 256 MiB for it: 1 GiB allocatable (the host\'s memory), 2 other pods that boot or run hold 768 MiB; give the pod less memory (--memory), or stop pods first',
  );
  // Two admitted at once: the second sees the first.
  const release = a.admit('ggggggggggg', 200n * MiB, 'CreatePod');
  assert.throws(() => a.admit('hhhhhhhhhhh', 100n * MiB, 'CreatePod'), /this node has 56 MiB for it: .* 3 other pods that boot or run hold 968 MiB/);
  // Admitted and then recorded PENDING: counted once.
  pods.push(pod('ggggggggggg', PodState.PENDING, 200n));
  assert.deepEqual(a.held('new'), { bytes: 968n * MiB, pods: 3 });
  release();
  release();
  assert.deepEqual(a.held('new'), { bytes: 968n * MiB, pods: 3 });
  pods.pop();
  assert.deepEqual(a.held('new'), { bytes: 768n * MiB, pods: 2 });
  a.admit('hhhhhhhhhhh', 256n * MiB, 'CreatePod');
  assert.equal(formatMemory(23n * GiB + 400n * MiB), '23.4 GiB');
});
