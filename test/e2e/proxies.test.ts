/**
 * The API server's proxies to a pod's HTTP, as a user reaches a pod without its address: the Service
 * proxy (with and without a trailing slash, by port name or number) and the pod proxy, through the
 * real kubectl (`kubectl get --raw`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COUNTER_DIR, COUNTER_WASM, counterManifest, getPods, podReady, skipUnlessBuilt, startCluster, waitFor } from './cluster.ts';

test('the service and pod proxies reach the counter at /, and name what is wrong', { timeout: 240_000, skip: skipUnlessBuilt({ counter: true }) }, async (t) => {
  const c = await startCluster(t, { workers: 1 });
  const m = counterManifest();
  assert.equal((await c.cli(['push', COUNTER_WASM, '--name', m.moduleName])).code, 0);
  const apply = await c.kubectl(['apply', '-f', COUNTER_DIR]);
  assert.equal(apply.code, 0, apply.stderr);
  const pod = await waitFor('the counter pod Ready', 90_000, async () => {
    const [p] = await getPods(c, ['-l', m.selector]);
    return podReady(p) ? p : undefined;
  });
  const ns = '/api/v1/namespaces/default';
  const raw = async (path: string) => c.kubectl(['get', '--raw', path]);
  const count = (text: string) => (JSON.parse(text) as { count: number }).count;

  // The proxy's root is the pod's `/`, with or without the trailing slash; never `//`.
  const viaService = await waitFor('the Service proxy to answer (endpoints)', 60_000, async () => {
    const r = await raw(`${ns}/services/${m.service}/proxy/`);
    return r.code === 0 ? r : undefined;
  });
  const first = count(viaService.stdout);
  const byPort = await raw(`${ns}/services/${m.service}:${m.servicePort}/proxy/count`);
  assert.equal(byPort.code, 0, byPort.stderr);
  assert.equal(count(byPort.stdout), first + 1);

  const viaPod = await raw(`${ns}/pods/${pod.metadata.name}/proxy/`);
  assert.equal(viaPod.code, 0, viaPod.stderr);
  assert.equal(count(viaPod.stdout), first + 2, 'the pod proxy reaches the same pod');
  const viaPodPort = await raw(`${ns}/pods/${pod.metadata.name}:${m.containerPort}/proxy/`);
  assert.equal(viaPodPort.code, 0, viaPodPort.stderr);
  assert.equal(count(viaPodPort.stdout), first + 3);

  // A port the pod does not declare, and a pod that does not exist: clear refusals.
  const badPort = await raw(`${ns}/pods/${pod.metadata.name}:nosuch/proxy/`);
  assert.notEqual(badPort.code, 0);
  assert.match(badPort.stderr, /has no container port "nosuch"/);
  const noPod = await raw(`${ns}/pods/nosuch/proxy/`);
  assert.notEqual(noPod.code, 0);
  assert.match(noPod.stderr, /not found/i);
});
