// Findings of the second operator's trial with a real microVM (QEMU, TCG), as root, in a network
// namespace of its own: a StartPod while the pod's bring-up runs answers FAILED_PRECONDITION at once
// (it waited for the whole bring-up, then brought the pod up a second time); a pod of the least memory
// (192 MiB) boots; the security group a pod names is put with feosctl, cannot be deleted while the pod
// names it, and the pod's table uses it; delete leaves no QEMU and no TAP. One boot.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { feosctl, PodState, startFeosd, tempDir, waitForPod, routeOut } from '../../feos/harness.ts';
import { alive } from '../../helpers/processes.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'mptrqstart0';

function inNs(ns: string, args: string[]): { ok: boolean; out: string } {
  try {
    return { ok: true, out: execFileSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 20_000 }) };
  } catch (err: unknown) {
    return { ok: false, out: String((err as { stderr?: string }).stderr ?? err) };
  }
}

test('start while PENDING is refused at once; a 192 MiB pod with a security group put by feosctl boots; delete leaves nothing', { timeout: 600_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const ns = `feos-t-${randomBytes(3).toString('hex')}`;
  execFileSync('ip', ['netns', 'add', ns]);
  routeOut(ns); // what the pods' network needs of a node: a default route for each family
  const { dir, cleanup } = tempDir('feos-optrial-');
  const feosd = await startFeosd(dir, { guestDir: GUEST_DIR, netns: ns, extra: ['--pod-prefix', 'fd00:6b33:1::/64'] });
  let qemuPid = 0;
  t.after(async () => {
    await feosd.stop('SIGKILL');
    try {
      const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', ID, 'microvm.pb')));
      if (vm.pid > 0) qemuPid = vm.pid;
    } catch {}
    if (qemuPid > 0 && alive(qemuPid)) process.kill(qemuPid, 'SIGKILL');
    execFileSync('ip', ['netns', 'del', ns]);
    cleanup();
  });
  const sock = feosd.socket;

  const group = join(dir, 'web.yaml');
  writeFileSync(group, 'id: web\nversion: "1"\ningress:\n  - protocol: PROTOCOL_TCP\n    ports: [{ first: 80, last: 80 }]\n    group: web\negress:\n  - internet: true\n');
  const put = await feosctl(sock, ['security-group', 'put', '-f', group]);
  assert.equal(put.code, 0, put.stderr);
  assert.match(put.stdout, /^ID\s+VERSION\s+INGRESS\s+EGRESS\s+MEMBERS\nweb\s+1\s+tcp 80 from group web\s+any to internet\s+-\n$/);
  const spec = join(dir, 'pod.yaml');
  writeFileSync(spec, 'memoryBytes: "201326592"\nnetwork:\n  securityGroups: [web]\n');
  const created = await feosctl(sock, ['pod', 'create', '--id', ID, '-f', spec, '-o', 'json']);
  assert.equal(created.code, 0, created.stderr);
  assert.equal(JSON.parse(created.stdout).state, 'POD_STATE_PENDING');

  // The bring-up takes 20 s or more under TCG: a start now finds the pod PENDING.
  const t0 = Date.now();
  const start = await feosctl(sock, ['pod', 'start', ID, '--wait']);
  const tookMs = Date.now() - t0;
  assert.equal(start.code, 1, start.stdout);
  assert.match(start.stderr, new RegExp(`^feosctl: FAILED_PRECONDITION: pod ${ID} is PENDING: its bring-up runs`));
  assert.ok(tookMs < 15_000, `the start answered in ${tookMs} ms, not at once`);

  const named = await feosctl(sock, ['sg', 'delete', 'web']);
  assert.equal(named.code, 1);
  assert.match(named.stderr, /FAILED_PRECONDITION: .*web.*mptrqstart0/);

  const pod = await waitForPod(feosd, ID, (p) => p.state !== PodState.PENDING, 300_000);
  assert.equal(pod.state, PodState.RUNNING, `${pod.reason}\n${feosd.stderr().split('\n').slice(-20).join('\n')}`);
  assert.equal(pod.spec?.memoryBytes, 192n * 1024n * 1024n);
  assert.match(pod.reason, /^booted$/, 'brought up once');
  const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', ID, 'microvm.pb')));
  qemuPid = vm.pid;
  assert.ok(alive(qemuPid));
  assert.ok(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, 'the TAP device exists');
  const ruleset = inNs(ns, ['nft', 'list', 'table', 'inet', 'feos']).out;
  assert.match(ruleset, /set g-web\b/, "the pod's group is in the table");

  const del = await feosctl(sock, ['pod', 'delete', ID]);
  assert.equal(del.code, 0, del.stderr);
  assert.equal(alive(qemuPid), false, 'its QEMU is gone');
  assert.equal(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, false, 'its TAP device is gone');
  const gone = await feosctl(sock, ['sg', 'delete', 'web']);
  assert.equal(gone.code, 0, gone.stderr);
  assert.equal(gone.stdout, 'security group web deleted\n');
  const list = await feosctl(sock, ['sg', 'list', '-o', 'json']);
  assert.deepEqual(JSON.parse(list.stdout).groups.map((g: { id: string }) => g.id), ['default']);
});
