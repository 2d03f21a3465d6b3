// Findings of the second operator's trial (a clean clone, README and docs/feos as written), each pinned
// by what the operator saw: a pod memory the guest cannot boot in, a security group ID no group can
// have, volume sizes and labels feosctl sent on or dropped, the network commands against a feosd
// without a network, and what a FAILED guest attach says about its console. feosd runs without QEMU.
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { PodInfoSchema } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { unforwardedHint } from '../../src/feos/pods/index.ts';
import { attachFailureHint } from '../../src/feos/pods/index.ts';
import { feosctl, startFeosd, tempDir } from './harness.ts';

const code = (e: unknown) => (e as { code?: number }).code;
const MiB = 1024n * 1024n;

test('feosctl and CreatePod refuse what never boots or could never be put; nothing is recorded', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-optrial-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));

  await t.test('128 MiB (a guest that never attached: its agent killed for lack of memory) is refused', async () => {
    const cli = await feosctl(feosd.socket, ['pod', 'create', '--memory', '128Mi']);
    assert.equal(cli.code, 1, cli.stderr);
    assert.match(cli.stderr, /--memory "128Mi": want whole Mi from 192Mi to 65536Mi/);
    await assert.rejects(feosd.pods.createPod({ id: 'mempqd0aaaa', spec: { memoryBytes: 128n * MiB } }), (e) => {
      assert.equal(code(e), status.INVALID_ARGUMENT);
      assert.match(String(e), /memory_bytes 134217728: want 192 MiB to 64 GiB/);
      return true;
    });
    const ok = await feosctl(feosd.socket, ['pod', 'create', '--id', 'mempqd0aaab', '--memory', '192Mi', '-o', 'json']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).spec.memoryBytes, String(192n * MiB));
  });

  await t.test('a security group or name table ID no group can have is INVALID_ARGUMENT at create, naming the field', async () => {
    const file = join(dir, 'bad-group.yaml');
    writeFileSync(file, 'network:\n  securityGroups: [web, Bad_Name]\n');
    const cli = await feosctl(feosd.socket, ['pod', 'create', '--id', 'sgpqd0aaaaa', '-f', file]);
    assert.equal(cli.code, 1);
    assert.match(cli.stderr, /^feosctl: INVALID_ARGUMENT: spec: network\.security_groups\[1\] "Bad_Name": want 1 to 63 lowercase letters/);
    await assert.rejects(feosd.pods.createPod({ id: 'sgpqd0aaaab', spec: { network: { nameTables: ['-x'] } } }), (e) => {
      assert.equal(code(e), status.INVALID_ARGUMENT);
      assert.match(String(e), /network\.name_tables\[0\] "-x"/);
      return true;
    });
    assert.deepEqual(readdirSync(join(feosd.stateDir, 'pods')).filter((f) => f.startsWith('sg')), []);
  });

  await t.test("an image reference the guest could not parse is INVALID_ARGUMENT at create, not a pull's failure after a boot", async () => {
    const file = join(dir, 'bad-image.yaml');
    writeFileSync(file, 'containers:\n  - name: app\n    image: "Registry.example/App:1"\n');
    const cli = await feosctl(feosd.socket, ['pod', 'create', '--id', 'kmgpqd0aaaa', '-f', file]);
    assert.equal(cli.code, 1);
    assert.equal(cli.stderr, 'feosctl: INVALID_ARGUMENT: spec: containers[0].image: "Registry.example/App:1": not a reference registry/repository[:tag][@digest]\n');
    const ok = await feosctl(feosd.socket, ['pod', 'create', '--id', 'kmgpqd0aaab', '--image', '127.0.0.1:5000/busybox:1', '--image', `busybox@sha256:${'a'.repeat(64)}`, '-o', 'json']);
    assert.equal(ok.code, 0, ok.stderr);
    // Two images of one name are two containers (the second was "containers[1].name busybox: used twice").
    assert.deepEqual(JSON.parse(ok.stdout).spec.containers.map((c: { name: string }) => c.name), ['busybox', 'busybox-2']);
    // `pod get` shows them below the pod, with their states when the guest gave them ('-' here: no VM).
    const got = await feosctl(feosd.socket, ['pod', 'get', 'kmgpqd0aaab']);
    assert.match(got.stdout, /^ID\s+STATE.*\nkmgpqd0aaab\s.*\n\nCONTAINER\s+IMAGE\s+STATE\nbusybox\s+127\.0\.0\.1:5000\/busybox:1\s+-\nbusybox-2\s+busybox@sha256:a{64}\s+-\n$/);
  });

  await t.test('volume create: --size out of range, not a quantity, or too large to send, and a label given twice exit 1', async () => {
    const id = '0e9c4f3e-1111-4222-8333-444455556666';
    for (const [size, want] of [
      ['99999999999999999999999Gi', /--size "99999999999999999999999Gi": want whole Mi from 64Mi to 16Ti/],
      ['-1Gi', /--size "-1Gi": want a quantity such as 1Gi or 512Mi/],
      ['1e3Mi', /--size "1e3Mi": want a quantity/],
      ['10', /--size "10": want whole Mi from 64Mi to 16Ti/],
      ['17Ti', /--size "17Ti": want whole Mi/],
    ] as const) {
      const r = await feosctl(feosd.socket, ['volume', 'create', id, '--size', size]);
      assert.equal(r.code, 1, `${size}: ${r.stderr}`);
      assert.match(r.stderr, want);
      assert.doesNotMatch(r.stderr, /INTERNAL|serialization/);
    }
    const twice = await feosctl(feosd.socket, ['volume', 'create', id, '--size', '1Gi', '--label', 'a=b', '--label', 'a=c']);
    assert.equal(twice.code, 1, twice.stderr);
    assert.match(twice.stderr, /--label "a=c": label a given twice/);
    const list = await feosctl(feosd.socket, ['volume', 'list']);
    assert.equal(list.stdout, 'No volumes.\n');
    const made = await feosctl(feosd.socket, ['volume', 'create', id, '--size', '1.5Gi', '--label', 'a=b', '-o', 'json']);
    assert.equal(made.code, 0, made.stderr);
    assert.equal(JSON.parse(made.stdout).sizeBytes, String(1536n * MiB));
    // Sizes print as kubectl prints quantities: the largest unit that divides them (a 16 TiB volume printed 16777216Mi).
    const huge = await feosctl(feosd.socket, ['volume', 'create', '0e9c4f3e-1111-4222-8333-4444555566ff', '--size', '16Ti']);
    assert.equal(huge.code, 0, huge.stderr);
    assert.match(huge.stdout, /0e9c4f3e-1111-4222-8333-4444555566ff\s+AVAILABLE\s+16Ti\s+-\s+false\n$/);
    const table = await feosctl(feosd.socket, ['volume', 'get', id]);
    assert.match(table.stdout, /AVAILABLE\s+1536Mi\s/);
  });

  await t.test('security-group and name-table against a feosd without --pod-prefix say how to get a network', async () => {
    for (const args of [['security-group', 'list'], ['sg', 'get', 'web'], ['name-table', 'list'], ['traffic', 'watch']]) {
      const r = await feosctl(feosd.socket, args);
      assert.equal(r.code, 1, r.stderr);
      assert.equal(r.stderr, 'feosctl: UNIMPLEMENTED: feosd serves no network: start it with --pod-prefix (docs/feos/network.md)\n');
    }
    const noFile = await feosctl(feosd.socket, ['sg', 'put']);
    assert.equal(noFile.code, 1);
    assert.match(noFile.stderr, /--filename/);
    const missing = await feosctl(feosd.socket, ['sg', 'put', '-f', join(dir, 'nope.yaml')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /nope\.yaml: ENOENT/);
    const notGroup = join(dir, 'pod.yaml');
    writeFileSync(notGroup, 'vcpus: 2\n');
    const wrong = await feosctl(feosd.socket, ['sg', 'put', '-f', notGroup]);
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /pod\.yaml: not a SecurityGroup: key "vcpus" is unknown \(fields: id, version, ingress/);
    for (const tcp of ['nothing', '127.0.0.1:99999', '127.0.0.1:0']) {
      const r = await feosctl(feosd.socket, ['--tcp', tcp, 'pod', 'list']);
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /--tcp ".*": want host:port or \[IPv6\]:port with a port from 1 to 65535/);
    }
    const badVersion = await feosctl(feosd.socket, ['sg', 'members', 'web', '--from', '-1', '--to', '2']);
    assert.equal(badVersion.code, 1);
    assert.match(badVersion.stderr, /--from "-1": want a whole number/);
  });
});

test("a guest that did not attach: the reason names its console, and the kernel's kill for lack of memory in its last boot", async (t) => {
  const { dir, cleanup } = tempDir('feos-console-');
  t.after(cleanup);
  mkdirSync(join(dir, 'vm'));
  const log = join(dir, 'vm', 'serial.log');
  const boot = (extra: string) => `[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n[    2.1] feos-guest: starting the agent\n${extra}`;
  const oom = '[   14.172904] Out of memory: Killed process 122 (MainThread) total-vm:1418068kB, anon-rss:18160kB\nKilled\n[   14.21] feos-guest: the agent ended (137); starting it again\n';
  writeFileSync(log, boot(oom));
  assert.equal(await attachFailureHint(log), `; the guest ran out of memory (its kernel killed MainThread): give the pod more memory (--memory); its console: ${log}`);
  // An earlier boot's kill is not this one's.
  writeFileSync(log, boot(oom) + boot('[    9.0] nothing here\n'));
  assert.equal(await attachFailureHint(log), `; its console: ${log}`);
  assert.equal(await attachFailureHint(join(dir, 'none.log')), `; its console: ${join(dir, 'none.log')}`);
  // Without a kill, the accelerator it ran under and how to choose another.
  assert.equal(await attachFailureHint(log, 'kvm'), `; the microVM ran under KVM: where KVM hangs (nested), start feosd with --accel tcg; its console: ${log}`);
  assert.match(await attachFailureHint(log, 'tcg'), /; the microVM ran under TCG .*--accel kvm.*--guest-attach-timeout; its console: /);
});

test("a container's create that failed in a pod without a network names the registries feosd forwards", () => {
  const pod = create(PodInfoSchema, {
    id: 'hxntpqd0aaa',
    spec: { containers: [{ name: 'app', image: '127.0.0.1:5999/app:1' }, { name: 'web', image: '127.0.0.1:5000/web:1' }] },
  });
  assert.equal(
    unforwardedHint(pod, 'container app: create', ['127.0.0.1:5000']),
    '; a pod without a network reaches only the registries feosd forwards (--registry-forward: 127.0.0.1:5000), not 127.0.0.1:5999',
  );
  assert.equal(unforwardedHint(pod, 'container app: create', []), '; a pod without a network reaches only the registries feosd forwards (--registry-forward: none), not 127.0.0.1:5999');
  assert.equal(unforwardedHint(pod, 'container web: create', ['127.0.0.1:5000']), '', 'a forwarded registry failed for its own reason');
  assert.equal(unforwardedHint(pod, 'container app: start', []), '');
});
