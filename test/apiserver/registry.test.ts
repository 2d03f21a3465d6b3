/**
 * The registry's pure parts: patch formats (merge, JSON, strategic), label and field selectors, the
 * pod STATUS column, the checkpoint data store's bounds, and the protobuf decoder of kubectl's
 * generator bodies.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiError } from '../../src/apiserver/errors.ts';
import { decodeKubernetesProtobuf } from '../../src/apiserver/handlers/protobuf.ts';
import { CheckpointDataStore } from '../../src/apiserver/registry/checkpoints/data-store.ts';
import { jsonPatch, mergePatch, strategicMergePatch } from '../../src/apiserver/registry/patch.ts';
import { serverSideApply } from '../../src/apiserver/registry/apply.ts';
import { podStatusText } from '../../src/apiserver/registry/pods/index.ts';
import { parseFieldSelector, parseLabelSelector } from '../../src/apiserver/registry/selectors.ts';

test('merge patch: objects merge, null deletes, lists replace', () => {
  assert.deepEqual(mergePatch({ a: { b: 1, c: 2 }, l: [1, 2] }, { a: { b: null, d: 3 }, l: [3] }), { a: { c: 2, d: 3 }, l: [3] });
});

test('JSON patch: add, remove, replace, move, copy, test; a failed test is a BadRequest', () => {
  const doc = { a: [1, 2], b: { c: 'x' } };
  const out = jsonPatch(doc, [
    { op: 'add', path: '/a/-', value: 3 },
    { op: 'remove', path: '/a/0' },
    { op: 'replace', path: '/b/c', value: 'y' },
    { op: 'copy', from: '/b/c', path: '/d' },
    { op: 'move', from: '/d', path: '/e' },
    { op: 'test', path: '/e', value: 'y' },
  ]);
  assert.deepEqual(out, { a: [2, 3], b: { c: 'y' }, e: 'y' });
  assert.deepEqual(doc, { a: [1, 2], b: { c: 'x' } }, 'the target is not changed');
  assert.throws(() => jsonPatch(doc, [{ op: 'test', path: '/a/0', value: 9 }]), (e: unknown) => e instanceof ApiError && e.reason === 'BadRequest');
  assert.throws(() => jsonPatch(doc, [{ op: 'remove', path: '/nope' }]), ApiError);
});

test('strategic merge patch: containers by name, ports by containerPort, $patch delete, $setElementOrder, finalizers union', () => {
  const pod = {
    metadata: { labels: { a: '1', b: '2' }, finalizers: ['x'] },
    spec: { containers: [{ name: 'app', image: 'v1', ports: [{ containerPort: 80, protocol: 'TCP' }] }, { name: 'side', image: 's' }], tolerations: [{ key: 't' }] },
  };
  const out = strategicMergePatch(pod, {
    metadata: { labels: { b: null, c: '3' }, finalizers: ['y'] },
    spec: {
      '$setElementOrder/containers': [{ name: 'side' }, { name: 'app' }],
      containers: [{ name: 'app', image: 'v2', ports: [{ containerPort: 81 }] }, { name: 'side', $patch: 'delete' }],
      tolerations: [{ key: 'u' }],
    },
  }) as { metadata: { labels: Record<string, string>; finalizers: string[] }; spec: { containers: { name: string; image: string; ports: unknown[] }[]; tolerations: unknown[] } };
  assert.deepEqual(out.metadata.labels, { a: '1', c: '3' });
  assert.deepEqual(out.metadata.finalizers, ['x', 'y']);
  assert.deepEqual(out.spec.containers.map((c) => [c.name, c.image]), [['app', 'v2']]);
  assert.deepEqual(out.spec.containers[0]!.ports, [{ containerPort: 80, protocol: 'TCP' }, { containerPort: 81 }]);
  assert.deepEqual(out.spec.tolerations, [{ key: 'u' }], 'lists without a merge key are replaced');
  const node = strategicMergePatch({ spec: { unschedulable: true, podCIDR: 'x' } }, { spec: { unschedulable: null } });
  assert.deepEqual(node, { spec: { podCIDR: 'x' } }, 'uncordon removes the field');
});

test('label selectors: equality, sets, existence; bad ones are BadRequest', () => {
  const m = parseLabelSelector('app=web,tier!=db,env in (a, b),!legacy,team');
  assert.equal(m({ app: 'web', env: 'a', team: 'x' }), true);
  assert.equal(m({ app: 'web', env: 'c', team: 'x' }), false);
  assert.equal(m({ app: 'web', env: 'a', team: 'x', legacy: '1' }), false);
  assert.equal(m({ app: 'web', env: 'a', team: 'x', tier: 'db' }), false);
  assert.equal(parseLabelSelector('x notin (1)')({}), true);
  assert.equal(parseLabelSelector('')({ any: 'thing' }), true);
  assert.throws(() => parseLabelSelector('a in (b'), ApiError);
  assert.throws(() => parseLabelSelector('a=b c'), ApiError);
});

test('field selectors: terms in any order, != and escapes', () => {
  assert.deepEqual(parseFieldSelector('involvedObject.name=x,involvedObject.namespace==default,status.phase!=Failed'), [
    { field: 'involvedObject.name', op: '=', value: 'x' },
    { field: 'involvedObject.namespace', op: '=', value: 'default' },
    { field: 'status.phase', op: '!=', value: 'Failed' },
  ]);
  assert.deepEqual(parseFieldSelector('metadata.name=a\\,b'), [{ field: 'metadata.name', op: '=', value: 'a,b' }]);
  assert.throws(() => parseFieldSelector('nonsense'), ApiError);
});

test('the pod STATUS column follows kubectl: waiting reasons, Completed, Terminating, Init', () => {
  const pod = (status: unknown, meta: Record<string, unknown> = {}) => ({ metadata: { name: 'p', ...meta }, spec: { containers: [{ name: 'c' }], initContainers: [{ name: 'i' }] }, status });
  assert.equal(podStatusText(pod({ phase: 'Pending', containerStatuses: [{ state: { waiting: { reason: 'ContainerCreating' } } }] })), 'ContainerCreating');
  assert.equal(podStatusText(pod({ phase: 'Running', containerStatuses: [{ ready: true, state: { running: {} } }] }, { deletionTimestamp: 'x' })), 'Terminating');
  assert.equal(podStatusText(pod({ phase: 'Failed', containerStatuses: [{ state: { terminated: { reason: 'RestoreError', exitCode: 1 } } }] })), 'RestoreError');
  assert.equal(podStatusText(pod({ phase: 'Pending', initContainerStatuses: [{ state: { running: {} } }] })), 'Init:0/1');
  assert.equal(podStatusText(pod({ phase: 'Failed', reason: 'Evicted' })), 'Evicted');
});

test('the checkpoint data store drops the oldest other data first and refuses what never fits', async () => {
  const s = new CheckpointDataStore(100);
  assert.deepEqual(await s.put('a/a', 'ua', Buffer.alloc(40)), []);
  assert.deepEqual(await s.put('a/b', 'ub', Buffer.alloc(40)), []);
  assert.deepEqual(await s.put('a/c', 'uc', Buffer.alloc(40)), ['a/a']);
  assert.equal(s.get('a/a'), undefined);
  assert.equal(s.get('a/b', 'other-uid'), undefined, 'data of an older Checkpoint of the same name is not served');
  assert.deepEqual(await s.put('a/b', 'ub', Buffer.alloc(60)), [], 'replacing its own data frees it first');
  assert.equal(s.usedBytes, 100);
  await assert.rejects(s.put('a/d', 'ud', Buffer.alloc(101)), (e: unknown) => e instanceof ApiError && e.code === 413);
  assert.throws(() => new CheckpointDataStore(0), RangeError);
});

test('the checkpoint data store with a directory: the data is read back after a restart, within the bounds; what went is not', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32-ckdata-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = new CheckpointDataStore(100, dir);
  await a.put('ns/one', 'u1', Buffer.alloc(40, 1));
  await a.put('ns/two', 'u2', Buffer.alloc(40, 2));
  await a.put('ns/three', 'u3', Buffer.alloc(40, 3)); // drops ns/one, and its file
  a.delete('ns/two');
  await a.put('ns/four', 'u4', Buffer.alloc(10, 4));
  await until(() => readdirSync(dir).length === 2);
  const b = new CheckpointDataStore(100, dir);
  const kept = new Set(['ns/three u3', 'ns/four u4', 'ns/one u1']);
  assert.equal(b.load((key, uid) => kept.has(`${key} ${uid}`)), 2);
  assert.deepEqual(b.get('ns/three', 'u3'), Buffer.alloc(40, 3));
  assert.deepEqual(b.get('ns/four'), Buffer.alloc(10, 4));
  assert.equal(b.get('ns/one'), undefined);
  assert.equal(b.get('ns/two'), undefined);
  // A Checkpoint gone while the server was down: its file goes at the next start.
  const c = new CheckpointDataStore(100, dir);
  assert.equal(c.load((key) => key === 'ns/four'), 1);
  assert.deepEqual(readdirSync(dir), ['ns~four~u4.k32s']);
});

/** Polls `fn` until true, 5 s at most (file removals run in the background). */
async function until(fn: () => boolean): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('protobuf bodies of kubectl generator commands decode to JSON objects', () => {
  // A ConfigMap: k8s\0 + Unknown{typeMeta{apiVersion "v1", kind "ConfigMap"}, raw ConfigMap{metadata{name "cm"}, data{"a":"b"}}}
  const str = (f: number, s: string) => Buffer.concat([Buffer.from([(f << 3) | 2, Buffer.byteLength(s)]), Buffer.from(s)]);
  const msg = (f: number, b: Buffer) => Buffer.concat([Buffer.from([(f << 3) | 2, b.length]), b]);
  const raw = Buffer.concat([msg(1, str(1, 'cm')), msg(2, Buffer.concat([str(1, 'a'), str(2, 'b')]))]);
  const body = Buffer.concat([Buffer.from('k8s\0', 'latin1'), msg(1, Buffer.concat([str(1, 'v1'), str(2, 'ConfigMap')])), msg(2, raw)]);
  assert.deepEqual(decodeKubernetesProtobuf(body), { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm' }, data: { a: 'b' } });
  const other = Buffer.concat([Buffer.from('k8s\0', 'latin1'), msg(1, Buffer.concat([str(1, 'v1'), str(2, 'Binding')]))]);
  assert.throws(() => decodeKubernetesProtobuf(other), (e: unknown) => e instanceof ApiError && e.code === 415);
  assert.throws(() => decodeKubernetesProtobuf(Buffer.from('nope')), (e: unknown) => e instanceof ApiError && e.code === 400);
  // A body cut short (the raw ConfigMap's length says more than follows; a varint that never ends) is a 400 naming protobuf.
  const cut = body.subarray(0, body.length - 3);
  assert.throws(() => decodeKubernetesProtobuf(cut), (e: unknown) => e instanceof ApiError && e.code === 400 && /^protobuf: /.test(e.message));
  const endless = Buffer.concat([Buffer.from('k8s\0', 'latin1'), Buffer.from([0x08, 0xff, 0xff, 0xff])]);
  assert.throws(() => decodeKubernetesProtobuf(endless), (e: unknown) => e instanceof ApiError && e.code === 400 && /^protobuf: /.test(e.message));
});

test('server-side apply removes what the same manager no longer applies, keeps what others own', () => {
  const now = new Date('2026-01-01T00:00:00Z');
  const first = { metadata: { name: 'p', labels: { a: '1', b: '2' } }, spec: { containers: [{ name: 'app', image: 'v1' }, { name: 'side', image: 's' }] } };
  let live = serverSideApply({ metadata: { name: 'p', labels: { c: 'other' } }, spec: {} }, first, 'mgr', 'v1', now);
  live = serverSideApply(live, { metadata: { name: 'p', labels: { a: '1' } }, spec: { containers: [{ name: 'app', image: 'v2' }] } }, 'mgr', 'v1', now);
  assert.deepEqual(live.metadata.labels, { a: '1', c: 'other' });
  assert.deepEqual(live.spec, { containers: [{ name: 'app', image: 'v2' }] });
  const other = serverSideApply(live, { metadata: { name: 'p', labels: { a: '1' } } }, 'other', 'v1', now);
  const again = serverSideApply(other, { metadata: { name: 'p' }, spec: { containers: [{ name: 'app', image: 'v2' }] } }, 'mgr', 'v1', now);
  assert.deepEqual(again.metadata.labels, { a: '1', c: 'other' }, 'a label another manager applied stays');
  assert.deepEqual((again.metadata.managedFields as { manager: string }[]).map((m) => m.manager), ['other', 'mgr']);
});
