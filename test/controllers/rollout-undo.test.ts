/**
 * Deployment rollouts as the real kubectl v1.32 sees them, against a control plane (API server and
 * controllers, no workers: pods stay Pending, which is all a rollout's ReplicaSets and revisions need):
 *
 * - going back to an old template reuses its ReplicaSet with the next revision, the old number kept in
 *   `deployment.kubernetes.io/revision-history` (Kubernetes' `getNewReplicaSet`/`SetNewReplicaSetAnnotations`),
 *   so `kubectl rollout history` lists what Kubernetes lists and `kubectl rollout undo` goes back;
 * - the template `kubectl create deployment` sends (protobuf: zero `generation`, zero `hostPort`) and the one
 *   `kubectl rollout undo` sends (JSON, without them) are the same template: one ReplicaSet, never a third;
 * - `kubectl describe deploy` shows the controller's `ScalingReplicaSet` events in v1.32's words.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Deployment, V1ReplicaSet } from '@kubernetes/client-node';
import { startControllersCluster } from './cluster.ts';

const REVISION = 'deployment.kubernetes.io/revision';
const HISTORY = 'deployment.kubernetes.io/revision-history';

test('kubectl rollout history and undo after image A → B → A; ScalingReplicaSet events', { timeout: 180_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const kubectl = async (...args: string[]) => {
    const r = await c.api.kubectl(args);
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const replicaSets = async () =>
    (await c.rest.json<{ items: V1ReplicaSet[] }>({ method: 'GET', path: '/apis/apps/v1/namespaces/default/replicasets' })).items.filter((rs) =>
      rs.metadata?.ownerReferences?.some((o) => o.kind === 'Deployment' && o.name === 'web'),
    );
  const deployment = () => c.rest.json<V1Deployment>({ method: 'GET', path: '/apis/apps/v1/namespaces/default/deployments/web' });
  const image = async () => (await deployment()).spec?.template.spec?.containers[0]?.image;
  /** Waits until the Deployment is at `revision` with `image`, and returns its ReplicaSets by revision. */
  const settled = (revision: string, img: string) =>
    c.until(`web at revision ${revision} with ${img}`, async () => {
      const d = await deployment();
      const rss = await replicaSets();
      const current = rss.find((rs) => rs.spec?.template?.spec?.containers[0]?.image === img);
      return d.metadata?.annotations?.[REVISION] === revision && current?.metadata?.annotations?.[REVISION] === revision && (await image()) === img
        ? new Map(rss.map((rs) => [rs.metadata?.annotations?.[REVISION] ?? '', rs]))
        : undefined;
    });
  /** The REVISION column of `kubectl rollout history`. */
  const history = async () =>
    (await kubectl('rollout', 'history', 'deployment/web'))
      .split('\n')
      .map((l) => /^(\d+)\s/.exec(l)?.[1])
      .filter((r) => r !== undefined);

  const module = await c.rest.json<{ spec: { sha256: string } }>({ method: 'GET', path: '/apis/kube32.io/v1/modules/counter-fixture' });
  const A = 'wasm://counter-fixture';
  const B = `kube32.io/wasm-sha256:${module.spec.sha256}`; // the same module, another image: another template

  // Revision 1: kubectl create deployment sends protobuf (its template carries generation 0 and hostPort 0).
  await kubectl('create', 'deployment', 'web', `--image=${A}`, '--replicas=2', '--port=8080');
  const r1 = (await settled('1', A)).get('1')!;
  const container = (await deployment()).spec!.template.spec!.containers[0]!.name;

  // Revision 2: image B (a strategic merge patch), with a change cause kubectl shows.
  await kubectl('annotate', 'deployment/web', 'kubernetes.io/change-cause=image B');
  await kubectl('set', 'image', 'deployment/web', `${container}=${B}`);
  const at2 = await settled('2', B);
  assert.equal(at2.size, 2);
  const r2 = at2.get('2')!;

  // Back to A by hand: the first ReplicaSet again, revision 3, its old number kept.
  await kubectl('set', 'image', 'deployment/web', `${container}=${A}`);
  const at3 = await settled('3', A);
  assert.equal(at3.size, 2, 'no third ReplicaSet');
  assert.equal(at3.get('3')!.metadata?.name, r1.metadata?.name);
  assert.equal(at3.get('3')!.metadata?.annotations?.[HISTORY], '1');
  assert.deepEqual(await history(), ['2', '3']);
  const listed = await kubectl('rollout', 'history', 'deployment/web');
  assert.match(listed, /^2\s+image B$/m, `the change cause of revision 2:\n${listed}`);

  // kubectl rollout undo: back to B (revision 2's template, sent as JSON), which becomes revision 4.
  assert.match(await kubectl('rollout', 'undo', 'deployment/web'), /deployment\.apps\/web rolled back/);
  const at4 = await settled('4', B);
  assert.equal(at4.size, 2);
  assert.equal(at4.get('4')!.metadata?.name, r2.metadata?.name);
  assert.equal(at4.get('4')!.metadata?.annotations?.[HISTORY], '2');
  assert.deepEqual(await history(), ['3', '4']);

  // Undo to revision 3 (the template kubectl create sent, now JSON-borne): the first ReplicaSet, revision 5.
  assert.match(await kubectl('rollout', 'undo', 'deployment/web', '--to-revision=3'), /rolled back/);
  const at5 = await settled('5', A);
  assert.equal(at5.size, 2, 'the undone template hashes as the created one: no third ReplicaSet');
  assert.equal(at5.get('5')!.metadata?.name, r1.metadata?.name);
  assert.equal(at5.get('5')!.metadata?.annotations?.[HISTORY], '1,3');
  assert.deepEqual(await history(), ['4', '5']);
  const tpl = (await deployment()).spec!.template;
  assert.equal(tpl.metadata?.generation, undefined, 'no zero generation stored in the template');
  assert.equal(tpl.spec?.containers[0]?.ports?.[0]?.hostPort, undefined, 'no zero hostPort stored in the template');

  // Undo with nothing to undo to a revision that does not exist: kubectl's own error.
  const missing = await c.api.kubectl(['rollout', 'undo', 'deployment/web', '--to-revision=1']);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /unable to find specified revision 1 in history/);

  // kubectl describe deploy: the ScalingReplicaSet events, v1.32's "from N to M".
  const describe = await c.until('the ScalingReplicaSet events in kubectl describe', async () => {
    const out = await kubectl('describe', 'deployment', 'web');
    return /Scaled down replica set/.test(out) ? out : undefined;
  });
  const events = describe.slice(describe.indexOf('Events:'));
  assert.match(events, new RegExp(`Normal\\s+ScalingReplicaSet\\s+.*deployment-controller\\s+Scaled up replica set ${r1.metadata?.name} from 0 to 2`), events);
  assert.match(events, new RegExp(`ScalingReplicaSet\\s+.*Scaled up replica set ${r2.metadata?.name} from 0 to 1`), events);
  assert.match(events, new RegExp(`ScalingReplicaSet\\s+.*Scaled down replica set ${r1.metadata?.name} from 2 to 0`), events);
  assert.match(describe, new RegExp(`NewReplicaSet:\\s+${r1.metadata?.name} \\(`), 'kubectl finds the new ReplicaSet');
});
