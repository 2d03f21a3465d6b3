/**
 * `kubectl create poddisruptionbudget` (alias `pdb`) sends its body as protobuf, as every kubectl
 * generator command does: the API server decodes `policy/v1` PodDisruptionBudget bodies. Found by a
 * user: `kubectl create pdb counter --selector=app=counter --min-available=1` failed with "the body of
 * the request was in an unknown format - a protobuf policy/v1/PodDisruptionBudget is not decoded by
 * this server: send application/json", while the kind is served and honoured by evictions.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

test('kubectl create pdb (protobuf): minAvailable or maxUnavailable, a number or a percentage, and the selector', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  let r = await api.kubectl(['create', 'pdb', 'keep-one', '--selector=app=counter,tier=web', '--min-available=1']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^poddisruptionbudget\.policy\/keep-one created$/m);
  r = await api.kubectl(['create', 'poddisruptionbudget', 'quarter', '--selector=app=x', '--max-unavailable=25%']);
  assert.equal(r.code, 0, r.stderr);
  const spec = async (name: string) => JSON.parse((await api.kubectl(['get', 'pdb', name, '-o', 'jsonpath={.spec}'])).stdout) as Record<string, unknown>;
  assert.deepEqual(await spec('keep-one'), { minAvailable: 1, selector: { matchLabels: { app: 'counter', tier: 'web' } } });
  assert.deepEqual(await spec('quarter'), { maxUnavailable: '25%', selector: { matchLabels: { app: 'x' } } });
  r = await api.kubectl(['create', 'pdb', 'half', '--selector=app=y', '--min-available=50%']);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(await spec('half'), { minAvailable: '50%', selector: { matchLabels: { app: 'y' } } });
  r = await api.kubectl(['get', 'pdb']);
  assert.match(r.stdout, /^keep-one\s+1\s+N\/A\s+\d+\s+\S+$/m, r.stdout);
});
