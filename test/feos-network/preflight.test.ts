// What the pods' network needs of the node (src/feos/network/preflight.ts): a default route for each
// family, not a reject route, and forwarding; read from /proc as a namespace of these machines has it.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { hasIpv4DefaultRoute, hasIpv6DefaultRoute, nodeNetworkReason, readNodeNetwork } from '../../src/feos/network/index.ts';

const V4_HEADER = 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n';
// A new namespace: only the kernel's reject entry on lo.
const V6_EMPTY = '00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n';
const V6_DEFAULT = '00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 00000400 00000001 00000000 00000001 feos-out\n';

test('default routes: up and not reject; the kernel reject entry and an unreachable route are not routes out', () => {
  assert.equal(hasIpv4DefaultRoute(V4_HEADER), false);
  assert.equal(hasIpv4DefaultRoute(`${V4_HEADER}*\t0000000A\t00000000\t0201\t0\t0\t0\t000000FF\t0\t0\t0\n`), false);
  assert.equal(hasIpv4DefaultRoute(`${V4_HEADER}*\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0\n`), false, 'unreachable default');
  assert.equal(hasIpv4DefaultRoute(`${V4_HEADER}eth0\t00000000\t0100000B\t0003\t0\t0\t0\t00000000\t0\t0\t0\n`), true);
  assert.equal(hasIpv6DefaultRoute(V6_EMPTY), false);
  assert.equal(hasIpv6DefaultRoute(V6_EMPTY + V6_DEFAULT), true);
});

test('what is missing is named with how to add it; nothing missing is no reason', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'feos-preflight-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const net = join(dir, 'net');
  const sys = join(dir, 'sys');
  mkdirSync(net);
  mkdirSync(join(sys, 'net/ipv4'), { recursive: true });
  mkdirSync(join(sys, 'net/ipv6/conf/all'), { recursive: true });
  writeFileSync(join(net, 'route'), V4_HEADER);
  writeFileSync(join(net, 'ipv6_route'), V6_EMPTY);
  writeFileSync(join(sys, 'net/ipv4/ip_forward'), '1\n');
  writeFileSync(join(sys, 'net/ipv6/conf/all/forwarding'), '0\n');
  const paths = { net, sys };
  assert.deepEqual(readNodeNetwork(paths), { ipv4Route: false, ipv6Route: false, ipv4Forwarding: true, ipv6Forwarding: false });
  const reason = nodeNetworkReason(paths) ?? '';
  assert.match(reason, /^the node lacks what the pods' network needs: no IPv4 default route \(the kernel answers a pod's ARP for its gateway 169\.254\.0\.1 only with a route out, so its DNS and metadata would time out\): add one, such as `ip route add default via GATEWAY`/);
  assert.match(reason, /; no IPv6 default route .*; IPv6 forwarding is off \(net\.ipv6\.conf\.all\.forwarding is not 1\)$/);
  assert.doesNotMatch(reason, /IPv4 forwarding/);
  writeFileSync(join(net, 'route'), `${V4_HEADER}feos-out\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n`);
  writeFileSync(join(net, 'ipv6_route'), V6_EMPTY + V6_DEFAULT);
  writeFileSync(join(sys, 'net/ipv6/conf/all/forwarding'), '1\n');
  assert.equal(nodeNetworkReason(paths), undefined);
  // Files that cannot be read are missing, not an error.
  assert.match(nodeNetworkReason({ net: join(dir, 'none'), sys: join(dir, 'none') }) ?? '', /no IPv4 default route.*IPv4 forwarding is off/);
});
