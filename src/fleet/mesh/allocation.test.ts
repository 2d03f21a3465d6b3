/** The mesh's addresses and JoinMesh's change to the record (./allocation.ts), without a cluster. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { BlockList } from 'node:net';
import test from 'node:test';
import { emptyRecord, joinRecord, MeshArgumentError, MeshExhausted, MeshKeyTaken, newClusterPrefix, nodePrefix, prefixIndex } from './allocation.ts';

const key = () => randomBytes(32).toString('base64');

test('a new cluster prefix is a ULA /64 with a random Global ID', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 50; i++) {
    const p = newClusterPrefix();
    assert.match(p, /^fd[0-9a-f]{2}(:[0-9a-f]{1,4}){0,3}(::)?\/64$/, p);
    seen.add(p);
  }
  assert.ok(seen.size > 45, 'random');
});

test('the /96s of a /64 are written as RFC 5952 writes them, and read back', () => {
  assert.equal(nodePrefix('fd12:3456:789a:1::/64', 1), 'fd12:3456:789a:1:0:1::/96');
  assert.equal(nodePrefix('fd12:3456:789a:1::/64', 0x10000), 'fd12:3456:789a:1:1::/96');
  assert.equal(nodePrefix('fd00:0:0:0::/64', 5), 'fd00::5:0:0/96');
  assert.equal(nodePrefix('fd12:3456:789a:1::/64', 0xffffffff), 'fd12:3456:789a:1:ffff:ffff::/96');
  for (const i of [1, 2, 0xffff, 0x10000, 123456789]) assert.equal(prefixIndex(nodePrefix('fdab:cdef:1234:5678::/64', i)), i);
  const ula = new BlockList();
  ula.addSubnet('fdab:cdef:1234:5678::', 64, 'ipv6');
  assert.ok(ula.check(nodePrefix('fdab:cdef:1234:5678::/64', 77).split('/')[0]!, 'ipv6'));
});

test('JoinMesh: the /64 once, a /96 kept per node, the next free one after a freed one, the limit', () => {
  const ka = key();
  const a = joinRecord(emptyRecord(), 'a', 'uid-a', ka, '192.0.2.1:51820', 2);
  assert.ok(a.next && a.clusterPrefix && a.nodePrefix);
  assert.equal(prefixIndex(a.nodePrefix), 1);
  assert.equal(joinRecord(a.next, 'a', 'uid-a', ka, '192.0.2.1:51820', 2).next, undefined, 'the same: nothing to write');
  const moved = joinRecord(a.next, 'a', 'uid-a', ka, '192.0.2.9:51820', 2);
  assert.equal(moved.nodePrefix, a.nodePrefix, 'a new endpoint keeps the /96');
  assert.equal(moved.next!.generation, a.next.generation + 1n);
  const b = joinRecord(moved.next!, 'b', 'uid-b', key(), '[2001:db8::1]:51820', 2);
  assert.equal(b.clusterPrefix, a.clusterPrefix);
  assert.equal(prefixIndex(b.nodePrefix), 2);
  assert.throws(() => joinRecord(b.next!, 'c', 'uid-c', key(), '192.0.2.3:51820', 2), MeshExhausted);
  assert.throws(() => joinRecord(b.next!, 'c', 'uid-c', ka, '192.0.2.3:51820', 3), MeshKeyTaken);
  // A Node made anew under a's name: a's /96 is freed and another given.
  const again = joinRecord(b.next!, 'a', 'uid-a2', ka, '192.0.2.1:51820', 3);
  assert.equal(prefixIndex(again.nodePrefix), 3);
  // Without a key: the node leaves; meshed all the same.
  const left = joinRecord(again.next!, 'b', 'uid-b', '', '', 3);
  assert.deepEqual([left.clusterPrefix, left.nodePrefix], [a.clusterPrefix, '']);
  assert.deepEqual(Object.keys(left.next!.nodes), ['a']);
  assert.deepEqual(joinRecord(emptyRecord(), 'x', 'u', '', '', 3), { clusterPrefix: '', nodePrefix: '' });
});

test('JoinMesh refuses a key or an endpoint that does not parse', () => {
  for (const [k, e] of [
    [randomBytes(32).toString('base64url'), '192.0.2.1:1'],
    [randomBytes(33).toString('base64'), '192.0.2.1:1'],
    [key(), 'node.example:51820'],
    [key(), '2001:db8::1:51820'],
    [key(), '[192.0.2.1]:51820'],
    [key(), '192.0.2.1:65536'],
    [key(), '[fe80::1%eth0]:51820'],
  ]) {
    assert.throws(() => joinRecord(emptyRecord(), 'n', 'u', k!, e!, 4), MeshArgumentError, `${k} ${e}`);
  }
});
