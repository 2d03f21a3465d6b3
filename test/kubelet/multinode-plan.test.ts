/**
 * The names, addresses, ports, data dirs and identities `kube32-sim --nodes N` gives its nodes
 * (planNodes, nextAddress), and the flag errors a user sees for what cannot be planned.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { MAX_NODES_PER_PROCESS, nextAddress, planNodes } from '../../src/kubelet/index.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

test('one node is the single worker: its own name, address, data dir and kubeconfig', () => {
  assert.deepEqual(planNodes({ name: 'w', count: 1, address: '127.0.0.2', kubeletPort: 10250, dataDir: '/d/w', kubeconfig: '/k/w.kubeconfig' }), [
    { nodeName: 'w', address: '127.0.0.2', kubeletPort: 10250, dataDir: '/d/w', kubeconfigPath: '/k/w.kubeconfig' },
  ]);
});

test('several nodes: <name>-i on consecutive addresses, one port each on its own address, <data-dir>/<node>, <kubeconfig-dir>/<node>.kubeconfig', () => {
  const plans = planNodes({ name: 'sim', count: 3, address: '127.0.0.254', kubeletPort: 0, dataDir: '/d', kubeconfigDir: '/k' });
  assert.deepEqual(plans.map((p) => [p.nodeName, p.address, p.kubeletPort, p.dataDir, p.kubeconfigPath]), [
    ['sim-1', '127.0.0.254', 0, join('/d', 'sim-1'), join('/k', 'sim-1.kubeconfig')],
    ['sim-2', '127.0.0.255', 0, join('/d', 'sim-2'), join('/k', 'sim-2.kubeconfig')],
    ['sim-3', '127.0.1.0', 0, join('/d', 'sim-3'), join('/k', 'sim-3.kubeconfig')],
  ]);
});

test('nextAddress counts through octets and refuses what is not IPv4 or passes the last address', () => {
  assert.equal(nextAddress('127.0.0.2', 0), '127.0.0.2');
  assert.equal(nextAddress('127.0.255.255', 1), '127.1.0.0');
  assert.equal(nextAddress('10.0.0.1', 999), '10.0.3.232');
  assert.throws(() => nextAddress('::1', 1), /IPv4 address.*"::1"/);
  assert.throws(() => nextAddress('localhost', 1), /IPv4 address.*"localhost"/);
  assert.throws(() => nextAddress('255.255.255.250', 6), /7 addresses from 255\.255\.255\.250 pass 255\.255\.255\.255/);
});

test('what cannot be planned is a RangeError naming the flag', () => {
  const base = { name: 'sim', address: '127.0.0.2', kubeletPort: 10250, dataDir: '/d' };
  assert.throws(() => planNodes({ ...base, count: 0, kubeconfigDir: '/k' }), /--nodes must be a whole number from 1 to 1000: current value is 0/);
  assert.throws(() => planNodes({ ...base, count: MAX_NODES_PER_PROCESS + 1, kubeconfigDir: '/k' }), /--nodes/);
  assert.throws(() => planNodes({ ...base, count: 2, kubeconfig: '/k/a' }), /--nodes 2 needs one identity per node.*--kubeconfig-dir/);
  assert.throws(() => planNodes({ ...base, count: 2, kubeconfig: '/k/a', kubeconfigDir: '/k' }), /exclude each other/);
  assert.throws(() => planNodes({ ...base, count: 2 }), /--kubeconfig-dir is required/);
  assert.throws(() => planNodes({ ...base, name: 'Sim', count: 2, kubeconfigDir: '/k' }), /DNS subdomain.*"Sim-2"/);
  assert.throws(() => planNodes({ ...base, address: '::1', count: 2, kubeconfigDir: '/k' }), /--address must be an IPv4 address/);
});

test('kube32-sim exits 2 with the reason for flags that cannot make several nodes, 1 with one line for a flag out of range, before starting anything', { timeout: 60_000 }, () => {
  const sim = (args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), ...args], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, KUBECONFIG: '' } });
  let r = sim(['--nodes', '2', '--kubeconfig', '/nonexistent/kubeconfig']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /kube32-sim: --nodes 2 needs one identity per node/);
  r = sim(['--nodes', '2', '--address', 'fe80::1', '--kubeconfig-dir', '/nonexistent']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--address must be an IPv4 address/);
  // Out of range is a flag error like any other: one `error:` line with the range, a pointer to the
  // help (not the whole help), exit 1, and no stack trace.
  const refused = (args: string[], flag: string, range: string) => {
    const out = sim(args);
    assert.equal(out.status, 1, `${args.join(' ')}: ${out.stderr}`);
    const lines = out.stderr.trim().split('\n');
    assert.match(lines[0]!, new RegExp(`^error: option '${flag} <n>' argument '${args[1]}' is invalid\\. expected a whole number of ${range}: current value is "${args[1]}"$`));
    assert.deepEqual(lines.slice(1), ['(kube32-sim --help lists the flags)']);
    assert.doesNotMatch(out.stderr, /RangeError|\bat /);
  };
  for (const v of ['-3', '1001', '1e3']) refused(['--nodes', v], '--nodes', '1 to 1000');
  for (const v of ['10001', '99999999999']) refused(['--pods-per-thread', v], '--pods-per-thread', '1 to 10000');
  r = sim(['--help']);
  assert.equal(r.status, 0);
  assert.match(r.stdout, /names {10}<name>-1 \.\.\. <name>-N/);
  assert.match(r.stdout, /credentials {4}--kubeconfig-dir DIR holding <node>\.kubeconfig/);
});
