// feosd's network options and the pods' specs (seed: "The pods' network", "DNS", "Metadata",
// "Devices and routes"): defaults, refusals naming the option, upstream checks, names and MACs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { canonicalAddress, checkMetadata, checkPodUpstreams, formatPrefix, parseNetworkFlags, podMac, tapName } from '../../src/feos/network/index.ts';

test('the defaults', () => {
  const s = parseNetworkFlags({});
  assert.equal(s.podPrefix, undefined);
  assert.equal(formatPrefix(s.podIpv4Range), '169.254.16.0/20');
  assert.equal(s.dnsAddress, '169.254.0.53');
  assert.equal(s.otlpAddress, '169.254.169.1');
  assert.deepEqual(s.dnsUpstreams, ['2001:4860:4860::8888', '2606:4700:4700::1111', '8.8.8.8', '1.1.1.1']);
});

test('bad flags are refused with the option and the value', () => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ podPrefix: '2001:db8::/121' }, /--pod-prefix 2001:db8::\/121: the length must be 1 to 120/],
    [{ podPrefix: '10.0.0.0/8' }, /--pod-prefix .*IPv6/],
    [{ podPrefix: '2001:db8::1/64' }, /host bits/],
    [{ podIpv4Range: '10.0.0.0/31' }, /--pod-ipv4-range 10.0.0.0\/31: the length must be 1 to 30/],
    [{ podIpv4Range: '169.254.0.0/24' }, /holds the resolver's address/],
    [{ podIpv4Range: '169.254.0.0/30', dnsAddress: '10.0.0.53' }, /holds the pods' gateway 169.254.0.1/],
    [{ dnsAddress: '169.254.0.1' }, /--dns-address 169.254.0.1/],
    [{ dnsAddress: 'fd00::53' }, /--dns-address fd00::53: must be an IPv4 address/],
    [{ otlpAddress: '169.254.169.254' }, /metadata/],
    [{ otlpAddress: '169.254.16.9' }, /in the pods' IPv4 range/],
    [{ otlpAddress: '10.1.2.3', denyPrefixes: ['10.0.0.0/8'] }, /in the denied prefix 10.0.0.0\/8/],
    [{ dnsUpstreams: ['dns.google'] }, /--dns-upstream dns.google: not an IP address/],
    [{ denyPrefixes: ['10.0.0.0/33'] }, /--deny-prefix 10.0.0.0\/33/],
  ];
  for (const [flags, re] of cases) assert.throws(() => parseNetworkFlags(flags), (err: Error) => err instanceof RangeError && re.test(err.message), JSON.stringify(flags));
});

test("a pod's upstreams: IP addresses that are none of the node's, the pods', the resolver or special", () => {
  const s = parseNetworkFlags({ podPrefix: '2001:db8:1::/64', denyPrefixes: ['203.0.113.0/24'] });
  assert.deepEqual(checkPodUpstreams(['2001:4860:4860:0::8888', '9.9.9.9'], s, ['192.0.2.1']), ['2001:4860:4860::8888', '9.9.9.9']);
  for (const [u, re] of [
    ['resolver.example', /not an IP address/],
    ['169.254.0.53', /the resolver itself/],
    ['127.0.0.1', /loopback/],
    ['fe80::1', /link-local/],
    ['224.0.0.251', /multicast/],
    ['203.0.113.9', /denied prefix/],
    ['2001:db8:1::5', /a pod's address/],
    ['169.254.16.7', /the resolver itself|link-local|a pod's address/],
    ['192.0.2.1', /the node's addresses/],
  ] as const) {
    assert.throws(() => checkPodUpstreams([u], s, ['192.0.2.1']), re, u);
  }
});

test('metadata: keys of 1 to 128 letters, digits, - _ and ., at most 32 KiB as JSON', () => {
  checkMetadata({ role: 'web', 'a.b-c_d': 'x' });
  assert.throws(() => checkMetadata({ 'has space': 'x' }), /metadata key "has space"/);
  assert.throws(() => checkMetadata({ ['k'.repeat(129)]: 'x' }), /must be 1 to 128/);
  assert.throws(() => checkMetadata({ big: 'x'.repeat(33 * 1024) }), /more than 32768/);
});

test('TAP names and MAC addresses from the ID', () => {
  assert.equal(tapName('abcdefghjkm'), 'pod-abcdefghjkm');
  assert.equal(tapName('22222222-3333-4444-5555-666666666666'), 'pod-22222222');
  const h = createHash('sha256').update('abcdefghjkm').digest('hex');
  assert.equal(podMac('abcdefghjkm'), `06:00:${h.slice(0, 2)}:${h.slice(2, 4)}:${h.slice(4, 6)}:${h.slice(6, 8)}`);
  assert.equal(podMac('22222222-3333-4444-5555-666666666666'), '06:00:22:22:22:22');
  for (const bad of ['Abcdefghjkm', '1bcdefghjkm', 'abcdefghijk', 'abc']) assert.throws(() => tapName(bad), RangeError, bad);
  assert.equal(canonicalAddress('2001:DB8:0:0:1:0:0:1'), '2001:db8::1:0:0:1');
  assert.equal(canonicalAddress('::ffff:192.0.2.1'), '::ffff:c000:201');
});
