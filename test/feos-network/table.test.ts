// The table's compilation (seed: "The table", "Security groups"): what a pod's groups become,
// and the choice between replacing the table and updating set elements.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { Protocol, SecurityGroupSchema, type SecurityGroup } from '../../src/feos/gen/feos/network/v1/network_pb.js';
import { compileTable, parsePrefix, subtractPrefixes, formatPrefix, normalizePrefixes, tableUpdate, type TableInput } from '../../src/feos/network/index.ts';

const web = create(SecurityGroupSchema, {
  id: 'web',
  version: 1n,
  members: ['2001:db8:9::/64'],
  ingress: [
    { protocol: Protocol.TCP, ports: [{ first: 80 }, { first: 8000, last: 8080 }], peer: { case: 'group', value: 'web' } },
    { protocol: Protocol.UDP, peer: { case: 'block', value: { cidr: '10.0.0.0/8', except: [] } } },
  ],
  egress: [
    { protocol: Protocol.ICMP, icmpTypes: [8], peer: { case: 'block', value: { cidr: '11.0.0.0/8', except: ['11.1.0.0/16'] } } },
    { protocol: Protocol.ICMP, peer: { case: 'group', value: 'web' } },
  ],
});

function input(groups: SecurityGroup[], podGroups: string[][]): TableInput {
  return {
    podIpv4Range: parsePrefix('169.254.16.0/20'),
    dnsAddress: '169.254.0.53',
    otlpAddress: '169.254.169.1',
    metadataPort: 8169,
    denied: [parsePrefix('169.254.0.0/16'), parsePrefix('169.254.0.53/32'), parsePrefix('fe80::/10'), parsePrefix('192.0.2.7')],
    groups: new Map(groups.map((g) => [g.id, g])),
    pods: podGroups.map((g, i) => ({ tap: `pod-p${i}`, ipv6: `2001:db8::${i + 2}`, groups: g })),
  };
}

function rulesOf(commands: Array<Record<string, unknown>>, chain: string): string[] {
  return commands
    .map((c) => (c.add as { rule?: { chain: string; expr: unknown[] } }).rule)
    .filter((r) => r?.chain === chain)
    .map((r) => JSON.stringify(r!.expr));
}

test('a pod with no group gets the default group: out to the internet, nothing in', () => {
  const c = compileTable(input([], [[]]));
  const out = rulesOf(c.commands, 'out-pod-p0');
  assert.ok(out.some((r) => r.includes('@internet4') && r.includes('"return"')));
  assert.ok(out.some((r) => r.includes('@internet6') && r.includes('"return"')));
  const inn = rulesOf(c.commands, 'in-pod-p0');
  assert.ok(!inn.some((r) => r.includes('"return"')), 'nothing in');
  assert.match(inn.at(-1)!, /"drop"/);
  assert.deepEqual(c.sets.get('g-default')?.elements ?? [], []);
});

test("a group's rules: ports, ICMP of IPv4 alone, blocks without exceptions, IPv4 blocks ignored in rules in", () => {
  const c = compileTable(input([web], [['web']]));
  const inn = rulesOf(c.commands, 'in-pod-p0');
  assert.ok(inn.some((r) => r.includes('@g-web') && r.includes('"range":[8000,8080]') && r.includes('80')));
  assert.ok(!inn.some((r) => r.includes('"udp"')), 'an IPv4 block counts in rules out only');
  const out = rulesOf(c.commands, 'out-pod-p0');
  const icmpBlock = out.find((r) => r.includes('"icmp"') && r.includes('@b-'));
  assert.ok(icmpBlock?.includes('"set":[8]'));
  assert.ok(!out.some((r) => r.includes('@g-web') && r.includes('icmp')), 'an ICMP rule has no IPv6 peer');
  const block = [...c.sets].find(([n]) => n.startsWith('b-'))![1];
  assert.equal(block.family, 4);
  assert.ok(!block.elements.includes('11.1.0.0/16') && block.elements.includes('11.0.0.0/16') && block.elements.includes('11.128.0.0/9'));
  assert.deepEqual(c.sets.get('g-web')?.elements, ['2001:db8::2/128', '2001:db8:9::/64'], "members: the group's and the pods that name it");
});

test('deny sets: of one family each, covered prefixes folded, the pods range in deny4', () => {
  const c = compileTable(input([], [[]]));
  assert.deepEqual(c.sets.get('deny4')?.elements, ['169.254.0.0/16', '192.0.2.7/32']);
  assert.deepEqual(c.sets.get('deny6')?.elements, ['fe80::/10']);
  const out = rulesOf(c.commands, 'out-pod-p0');
  assert.match(out[0], /@deny4.*"limit":"lim-pod-p0-deny".*"log":\{"prefix":"deny","group":2\}/);
});

test('a change of members alone is a set-element batch; another change replaces the table', () => {
  const before = compileTable(input([web], [['web']]));
  const moreMembers = create(SecurityGroupSchema, { ...web, members: ['2001:db8:9::/64', '2001:db8:a::1'] });
  const after = compileTable(input([moreMembers], [['web']]));
  const batch = tableUpdate(before, after)!;
  assert.deepEqual(batch, [{ add: { element: { family: 'inet', table: 'feos', name: 'g-web', elem: ['2001:db8:a::1'] } } }]);
  assert.equal(tableUpdate(after, after), undefined, 'nothing differs');
  const twoPods = compileTable(input([web], [['web'], []]));
  const replace = tableUpdate(after, twoPods)!;
  assert.deepEqual(replace.slice(0, 2), [{ add: { table: { family: 'inet', name: 'feos' } } }, { delete: { table: { family: 'inet', name: 'feos' } } }]);
});

test('prefix arithmetic: a block without exceptions, folded prefixes', () => {
  const r = subtractPrefixes(parsePrefix('10.0.0.0/24'), [parsePrefix('10.0.0.0/25'), parsePrefix('10.0.0.192/26')]).map(formatPrefix);
  assert.deepEqual(r, ['10.0.0.128/26']);
  assert.deepEqual(normalizePrefixes([parsePrefix('10.1.0.0/16'), parsePrefix('10.0.0.0/8'), parsePrefix('2001:db8::/32')].filter((p) => p.family === 4)).map(formatPrefix), ['10.0.0.0/8']);
});
