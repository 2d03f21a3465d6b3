/**
 * An empty body of a create, update or patch (of a resource or of its status, binding or eviction
 * subresource) is refused as kube-apiserver refuses it: a 400 BadRequest Status in kube's words (its
 * decoder's `couldn't get version/kind`, its patchers' `unexpected end of JSON input`), and nothing
 * stored. Checked with the real kubectl (`--raw` with an empty file) and raw HTTPS.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rawRequest, startApiServer } from '../helpers/apiserver.ts';

const EOF = 'unexpected end of JSON input';
const unrecognized = (kind: string) => `the object provided is unrecognized (must be of type ${kind}): couldn't get version/kind; json parse error: ${EOF} (<empty>)`;

test('an empty write body is a 400 in kube-apiserver\'s words and stores nothing', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default' }, spec: { containers: [{ name: 'c', image: 'x' }] } };
  let k = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(pod) });
  assert.equal(k.code, 0, k.stderr);
  const before = (await rawRequest(api, 'GET', '/api/v1/namespaces/default/pods/p')).json();
  const rv = (before.metadata as { resourceVersion: string }).resourceVersion;

  /** Sends `method path` with an empty body of `type`, and checks the 400 Status. */
  const refused = async (method: string, path: string, type: string, message: string) => {
    const r = await rawRequest(api, method, path, '', { type });
    assert.equal(r.status, 400, `${method} ${path} (${type}): ${r.text}`);
    const s = r.json();
    assert.deepEqual({ kind: s.kind, status: s.status, reason: s.reason, code: s.code, message: s.message }, { kind: 'Status', status: 'Failure', reason: 'BadRequest', code: 400, message }, `${method} ${path} (${type})`);
  };

  await t.test('kubectl create --raw and replace --raw of an empty file', async () => {
    k = await api.kubectl(['create', '--raw', '/api/v1/namespaces/default/pods', '-f', '-'], { input: '' });
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /the object provided is unrecognized \(must be of type Pod\): couldn't get version\/kind; json parse error: unexpected end of JSON input \(<empty>\)/);
    k = await api.kubectl(['replace', '--raw', '/api/v1/namespaces/default/pods/p', '-f', '-'], { input: '' });
    assert.notEqual(k.code, 0);
    assert.match(k.stderr, /must be of type Pod\): couldn't get version\/kind/);
  });

  await t.test('create, update and their subresources', async () => {
    await refused('POST', '/api/v1/namespaces/default/pods', 'application/json', unrecognized('Pod'));
    await refused('POST', '/api/v1/namespaces/default/configmaps', 'application/yaml', unrecognized('ConfigMap'));
    await refused('POST', '/api/v1/namespaces/default/pods', 'application/vnd.kubernetes.protobuf', 'the object provided is unrecognized (must be of type Pod): empty data (<empty>)');
    await refused('PUT', '/api/v1/namespaces/default/pods/p', 'application/json', unrecognized('Pod'));
    await refused('PUT', '/api/v1/namespaces/default/pods/p/status', 'application/json', unrecognized('Pod'));
    await refused('POST', '/api/v1/namespaces/default/pods/p/binding', 'application/json', unrecognized('Binding'));
    await refused('POST', '/api/v1/namespaces/default/pods/p/eviction', 'application/json', unrecognized('Eviction'));
    await refused('POST', '/apis/apps/v1/namespaces/default/deployments', 'application/json', unrecognized('Deployment'));
    // White space only is as empty to Go's encoding/json; kube's summary shows its bytes in hex.
    const r = await rawRequest(api, 'POST', '/api/v1/namespaces/default/pods', ' \n', { type: 'application/json' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json().message, `the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse error: ${EOF} (200a)`);
  });

  await t.test('patches: strategic, merge and JSON, of the pod and of its status', async () => {
    for (const path of ['/api/v1/namespaces/default/pods/p', '/api/v1/namespaces/default/pods/p/status']) {
      await refused('PATCH', path, 'application/strategic-merge-patch+json', EOF);
      await refused('PATCH', path, 'application/merge-patch+json', `error decoding patch: ${EOF}`);
      await refused('PATCH', path, 'application/json-patch+json', `error decoding patch: ${EOF}`);
      await refused('PATCH', `${path}?fieldValidation=Strict`, 'application/merge-patch+json', `error decoding patch: ${EOF}`);
      await refused('PATCH', `${path}?fieldValidation=Ignore`, 'application/merge-patch+json', 'Invalid JSON Patch');
      await refused('PATCH', `${path}?fieldValidation=Ignore`, 'application/json-patch+json', EOF);
      await refused('PATCH', `${path}?fieldValidation=Ignore`, 'application/strategic-merge-patch+json', EOF);
    }
    await refused('PATCH', '/api/v1/namespaces/default/pods/p?fieldManager=me', 'application/apply-patch+yaml', 'error decoding YAML: the body is empty: send the object to apply');
  });

  await t.test('nothing was stored', async () => {
    const after = (await rawRequest(api, 'GET', '/api/v1/namespaces/default/pods/p')).json();
    assert.equal((after.metadata as { resourceVersion: string }).resourceVersion, rv);
    assert.deepEqual(after.status, before.status);
    assert.equal(rec(after.spec).nodeName, undefined);
    k = await api.kubectl(['get', 'pods,configmaps,deployments', '-o', 'name']);
    assert.equal(k.code, 0, k.stderr);
    assert.deepEqual(k.stdout.trim().split('\n').filter((l) => !l.startsWith('configmap/kube-root-ca.crt')), ['pod/p']);
  });
});

function rec(v: unknown): Record<string, unknown> {
  return v && typeof v === 'object' ? (v as Record<string, unknown>) : {};
}
