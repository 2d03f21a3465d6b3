// The pods' addresses (seed: "Addresses"): property tests over create/delete/restart sequences.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { AddressAllocator, parsePrefix, type PodAddresses } from '../../src/feos/network/index.ts';

const podPrefix = parsePrefix('2001:db8:0:1::/64');
const podIpv4Range = parsePrefix('10.9.0.0/29'); // 6 addresses for pods: .1 to .6

type Op = { kind: 'create' } | { kind: 'delete'; pick: number } | { kind: 'restart'; lose: number };

test('no address is ever held by two pods, IPv6 never twice, IPv4 lowest first then free the longest', { timeout: 120_000 }, async (t) => {
  const dirs: string[] = [];
  t.after(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));
  const op = fc.oneof(
    { weight: 5, arbitrary: fc.constant<Op>({ kind: 'create' }) },
    { weight: 3, arbitrary: fc.nat(100).map<Op>((pick) => ({ kind: 'delete', pick })) },
    { weight: 1, arbitrary: fc.nat(100).map<Op>((lose) => ({ kind: 'restart', lose })) },
  );
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
      const dir = await mkdtemp(join(tmpdir(), 'k32t-addr-'));
      dirs.push(dir);
      let clock = 1_000;
      const now = () => clock++;
      let alloc = await AddressAllocator.open({ podsDir: dir, podPrefix, podIpv4Range, now });
      const live = new Map<string, PodAddresses>();
      const everV6 = new Set<string>();
      const everV4 = new Set<string>();
      const freeOrder: string[] = []; // the model: the longest free first
      let n = 0;
      for (const o of ops) {
        if (o.kind === 'create') {
          const id = `p${n++}`;
          try {
            const a = await alloc.allocate(id);
            assert.ok(a.ipv6 && a.ipv4);
            assert.ok(!everV6.has(a.ipv6), `IPv6 ${a.ipv6} handed out twice`);
            everV6.add(a.ipv6);
            for (const other of live.values()) assert.notEqual(other.ipv4, a.ipv4, `IPv4 ${a.ipv4} held twice`);
            if (!everV4.has(a.ipv4)) {
              // Never handed out: the lowest, and only while no address was reused yet.
              const lowest = [1, 2, 3, 4, 5, 6].map((i) => `10.9.0.${i}`).find((x) => !everV4.has(x));
              assert.equal(a.ipv4, lowest);
            } else {
              assert.equal(a.ipv4, freeOrder[0], 'the address free the longest comes first');
              freeOrder.shift();
            }
            everV4.add(a.ipv4);
            live.set(id, a);
          } catch (err: unknown) {
            assert.equal((err as { code?: string }).code, 'RESOURCE_EXHAUSTED');
            assert.equal(live.size, 6);
          }
        } else if (o.kind === 'delete' && live.size > 0) {
          const id = [...live.keys()][o.pick % live.size];
          await alloc.release(id);
          freeOrder.push(live.get(id)!.ipv4!);
          live.delete(id);
        } else if (o.kind === 'restart') {
          // A pod whose delete feosd could not record: its record is gone, the file holds it.
          if (o.lose % 3 === 0 && live.size > 0) {
            const id = [...live.keys()][o.lose % live.size];
            freeOrder.push(live.get(id)!.ipv4!);
            live.delete(id);
          }
          alloc = await AddressAllocator.open({ podsDir: dir, podPrefix, podIpv4Range, now, keptPods: live.entries() });
          for (const [id, a] of live) assert.deepEqual(alloc.get(id), a);
        }
      }
    }),
    { numRuns: 60 },
  );
});

test('the files are written before an address is handed out', { timeout: 10_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'k32t-addr-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const alloc = await AddressAllocator.open({ podsDir: dir, podPrefix, podIpv4Range });
  const a = await alloc.allocate('abcdefghjkm');
  assert.deepEqual(a, { ipv6: '2001:db8:0:1::2', ipv4: '10.9.0.1' });
  assert.equal((await readFile(join(dir, 'next-ipv6-address'), 'utf8')).trim(), '2001:db8:0:1::3');
  // A kept pod's address beyond the counter moves the counter past it.
  const b = await AddressAllocator.open({
    podsDir: dir,
    podPrefix,
    podIpv4Range,
    keptPods: [['abcdefghjkm', a], ['bcdefghjkmn', { ipv6: '2001:db8:0:1::40', ipv4: '10.9.0.2' }]],
  });
  assert.deepEqual(await b.allocate('cdefghjkmnp'), { ipv6: '2001:db8:0:1::41', ipv4: '10.9.0.3' });
  assert.equal(b.holder('2001:db8:0:1:0::41'), 'cdefghjkmnp');
});

test('an exhausted prefix fails with RESOURCE_EXHAUSTED and hands out nothing', { timeout: 10_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'k32t-addr-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const alloc = await AddressAllocator.open({ podsDir: dir, podPrefix: parsePrefix('2001:db8::/126'), podIpv4Range });
  await alloc.allocate('a1');
  await alloc.allocate('a2');
  await assert.rejects(alloc.allocate('a3'), { code: 'RESOURCE_EXHAUSTED' });
});
