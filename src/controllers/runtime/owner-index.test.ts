import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import fc from 'fast-check';
import { pod } from '../testing/fakes.ts';
import { PodsByOwner } from './owner-index.ts';
import { controllerOf } from '../../api/index.ts';

test('PodsByOwner answers what a walk over the cache would, after any order of adds, updates (adoptions) and deletes', { timeout: 20_000 }, () => {
  const event = fc.record({
    verb: fc.constantFrom('add' as const, 'update' as const, 'delete' as const),
    name: fc.constantFrom('a', 'b', 'c', 'd'),
    namespace: fc.constantFrom('default', 'other'),
    owner: fc.option(fc.constantFrom('rs1', 'rs2'), { nil: undefined }),
  });
  fc.assert(
    fc.property(fc.array(event, { maxLength: 40 }), (events) => {
      const index = new PodsByOwner();
      const cache = new Map<string, V1Pod>();
      for (const e of events) {
        const p = pod(e.name, { namespace: e.namespace, owner: e.owner ? { kind: 'ReplicaSet', name: e.owner, uid: `uid-${e.owner}` } : undefined });
        index.observe(e.verb, p);
        if (e.verb === 'delete') cache.delete(`${e.namespace}/${e.name}`);
        else cache.set(`${e.namespace}/${e.name}`, p);
      }
      const names = (ps: V1Pod[]) => ps.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).sort();
      for (const uid of ['uid-rs1', 'uid-rs2']) {
        assert.deepEqual(names(index.owned(uid)), names([...cache.values()].filter((p) => controllerOf(p)?.uid === uid)));
      }
      for (const ns of ['default', 'other']) {
        assert.deepEqual(names(index.orphans(ns)), names([...cache.values()].filter((p) => !controllerOf(p) && p.metadata?.namespace === ns)));
      }
    }),
    { numRuns: 300 },
  );
});
