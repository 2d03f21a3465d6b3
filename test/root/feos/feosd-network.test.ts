// A pod with a network, as root, in a network namespace of the test's own: feosd runs the pods' network
// (src/feos/network) with --pod-prefix; the pod boots with its TAP device, its guest is pushed its
// addresses, and answers the node's neighbor discovery and ARP for them with its MAC address; a
// hibernation takes it off the network (TAP device and addresses released, seed "Addresses"), and its
// restore gives it new addresses, which its resumed guest answers for; delete takes the TAP device away.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { feosctl, PodState, startFeosd, tempDir, routeOut, until, waitForPod } from '../../feos/harness.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'netpqd0test';

function inNs(ns: string, args: string[]): { ok: boolean; out: string } {
  try {
    return { ok: true, out: execFileSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 20_000 }) };
  } catch (err: unknown) {
    return { ok: false, out: String((err as { stderr?: string }).stderr ?? err) };
  }
}

test('a pod with a network boots and its guest answers for its addresses on its TAP device', { timeout: 600_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const ns = `feos-t-${randomBytes(3).toString('hex')}`;
  execFileSync('ip', ['netns', 'add', ns]);
  routeOut(ns); // what the pods' network needs of a node: a default route for each family
  const { dir, cleanup } = tempDir('feos-net-');
  const feosd = await startFeosd(dir, { guestDir: GUEST_DIR, netns: ns, extra: ['--pod-prefix', '2001:db8:6::/64', '--object-store', pathToFileURL(join(dir, 'store')).href] });
  t.after(async () => {
    await feosd.stop('SIGKILL');
    try {
      const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', ID, 'microvm.pb')));
      if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
    } catch {}
    execFileSync('ip', ['netns', 'del', ns]);
    cleanup();
  });
  const created = await feosctl(feosd.socket, ['pod', 'create', '--id', ID, '--network', '-o', 'json']);
  assert.equal(created.code, 0, created.stderr);
  const pod = await waitForPod(feosd, ID, (p) => p.state !== PodState.PENDING, 300_000);
  assert.equal(pod.state, PodState.RUNNING, `${pod.reason}\n${feosd.stderr().split('\n').slice(-20).join('\n')}`);
  assert.match(pod.ipv6Address, /^2001:db8:6:/);
  assert.match(pod.ipv4Address, /^169\.254\./);
  assert.ok(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, 'the TAP device exists');
  // The node's table lets nothing of the pod's in but neighbor discovery (the seed's "The table": the
  // default group has nothing in), so the node checks the guest's addresses by its neighbor answers: a
  // ping's neighbor solicitation (IPv6) and ARP request (IPv4) are answered with the pod's MAC address.
  const mac = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', ID, 'microvm.pb'))).macAddress;
  assert.match(mac, /^06:00:/);
  const answersFor = async (ipv6: string, ipv4: string) => {
    for (const [family, address] of [['-6', ipv6], ['-4', ipv4]] as const) {
      await until(
        `the guest answers for ${address}`,
        async () => {
          inNs(ns, ['busybox', family === '-6' ? 'ping6' : 'ping', '-c', '1', '-W', '1', address]);
          const neigh = inNs(ns, ['ip', family, 'neigh', 'show', address, 'dev', `pod-${ID}`]).out;
          return neigh.includes(`lladdr ${mac}`) ? neigh : undefined;
        },
        60_000,
      );
    }
  };
  await answersFor(pod.ipv6Address, pod.ipv4Address);

  const hibernated = (await feosd.pods.hibernatePod({ id: ID })).pod!;
  assert.equal(hibernated.state, PodState.HIBERNATED);
  assert.equal(hibernated.ipv6Address, '', 'its addresses are released');
  assert.equal(hibernated.ipv4Address, '');
  assert.equal(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, false, 'its TAP device is gone');
  const restored = (await feosd.pods.restorePod({ id: ID })).pod!;
  assert.equal(restored.state, PodState.RUNNING, restored.reason);
  assert.match(restored.ipv6Address, /^2001:db8:6:/);
  assert.notEqual(restored.ipv6Address, pod.ipv6Address, 'a restored pod has new addresses (an IPv6 address is never handed out twice)');
  assert.ok(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, 'its TAP device is back');
  await answersFor(restored.ipv6Address, restored.ipv4Address);
  // Its old addresses, still in its memory, are removed by the push (IPv6 ones go with eth0's down and
  // up already; an IPv4 address stays on a link that goes down): asked for its old IPv4 address over its
  // TAP device (a route the test adds), the guest no longer answers.
  assert.notEqual(restored.ipv4Address, pod.ipv4Address);
  inNs(ns, ['ip', 'route', 'replace', `${pod.ipv4Address}/32`, 'dev', `pod-${ID}`]);
  inNs(ns, ['busybox', 'ping', '-c', '2', '-W', '2', pod.ipv4Address]);
  const old = inNs(ns, ['ip', '-4', 'neigh', 'show', pod.ipv4Address, 'dev', `pod-${ID}`]).out;
  assert.doesNotMatch(old, new RegExp(`lladdr ${mac}`), `the guest still answers for its old address: ${old}`);
  const del = await feosctl(feosd.socket, ['pod', 'delete', ID]);
  assert.equal(del.code, 0, del.stderr);
  assert.equal(inNs(ns, ['ip', 'link', 'show', `pod-${ID}`]).ok, false, 'the TAP device is gone');
});
