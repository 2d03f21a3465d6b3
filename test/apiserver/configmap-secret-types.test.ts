/**
 * ConfigMaps and Secrets with a field of the wrong type, as kube-apiserver's decoder refuses them: 400
 * BadRequest with Go's words (`json: cannot unmarshal number into Go struct field ConfigMap.data of type
 * string`, `illegal base64 data at input byte 3`), never stored (a binaryData that is not base64, a
 * stringData number, a Secret type or immutable of the wrong type were stored). An update of an
 * `immutable: true` one is 422 Invalid with kube's message (`data: Forbidden: field is immutable when
 * `immutable` is set`; a Secret's data could change).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readBytes } from '../../src/api/index.ts';
import { ControlPlane } from '../../src/kubelet/client.ts';
import { startApiServer } from '../helpers/apiserver.ts';

interface Status { kind?: string; code?: number; reason?: string; message?: string }

test('ConfigMaps and Secrets: a wrong-typed field is 400 BadRequest, kubectl and raw; an immutable one\'s update is 422 with kube\'s message', { timeout: 90_000 }, async (t) => {
  const api = await startApiServer(t);
  const admin = new ControlPlane(api.kubeConfig);
  const post = async (plural: string, body: unknown): Promise<{ status: number; body: Status }> => {
    const res = await admin.request('POST', `/api/v1/namespaces/default/${plural}`, { body });
    return { status: res.status, body: JSON.parse((await readBytes(res.body)).toString()) as Status };
  };
  const cm = (name: string, more: Record<string, unknown>) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, ...more });
  const secret = (name: string, more: Record<string, unknown>) => ({ apiVersion: 'v1', kind: 'Secret', metadata: { name }, ...more });

  await t.test('raw requests', async () => {
    const bad: Array<[string, unknown, RegExp]> = [
      ['configmaps', cm('n1', { data: { a: 1 } }), /ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap\.data of type string$/],
      ['configmaps', cm('n2', { data: ['a'] }), /json: cannot unmarshal array into Go struct field ConfigMap\.data of type map\[string\]string$/],
      ['configmaps', cm('n3', { binaryData: { a: 'not base64!!' } }), /cannot be handled as a ConfigMap: illegal base64 data at input byte 3$/],
      ['configmaps', cm('n4', { binaryData: { a: 7 } }), /json: cannot unmarshal number into Go struct field ConfigMap\.binaryData of type \[\]uint8$/],
      ['configmaps', cm('n5', { immutable: 'yes' }), /json: cannot unmarshal string into Go struct field ConfigMap\.immutable of type bool$/],
      ['secrets', secret('s1', { data: { a: '%%%' } }), /Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0$/],
      ['secrets', secret('s2', { stringData: { a: 5 } }), /json: cannot unmarshal number into Go struct field Secret\.stringData of type string$/],
      ['secrets', secret('s3', { type: 5 }), /json: cannot unmarshal number into Go struct field Secret\.type of type v1\.SecretType$/],
      ['secrets', secret('s4', { immutable: 1 }), /json: cannot unmarshal number into Go struct field Secret\.immutable of type bool$/],
    ];
    for (const [plural, body, message] of bad) {
      const r = await post(plural, body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.kind, 'Status');
      assert.equal(r.body.reason, 'BadRequest');
      assert.match(r.body.message ?? '', message);
    }
    for (const name of ['n1', 'n2', 'n3', 'n4', 'n5']) assert.equal((await admin.request('GET', `/api/v1/namespaces/default/configmaps/${name}`)).status, 404, `${name} not stored`);
    for (const name of ['s1', 's2', 's3', 's4']) assert.equal((await admin.request('GET', `/api/v1/namespaces/default/secrets/${name}`)).status, 404, `${name} not stored`);
    // What decodes is taken: base64 with padding, a null value (Go's zero value).
    assert.equal((await post('configmaps', cm('ok', { binaryData: { a: 'aGk=' }, data: { b: 'x' } }))).status, 201);
    assert.equal((await post('secrets', secret('ok', { data: { a: 'aGk=' }, stringData: { b: 'y' } }))).status, 201);
  });

  await t.test('kubectl', async () => {
    const r = await api.kubectl(['create', '-f', '-'], { input: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k1}\ndata: {a: 1}\n' });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /Error from server \(BadRequest\): .*ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap\.data of type string/);
    const b = await api.kubectl(['apply', '-f', '-'], { input: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k2}\nbinaryData: {a: "not base64!!"}\n' });
    assert.equal(b.code, 1, b.stderr);
    assert.match(b.stderr, /Error from server \(BadRequest\): .*illegal base64 data at input byte 3/);
  });

  await t.test('an immutable ConfigMap or Secret: its data and its immutable stay; other changes are taken', async () => {
    assert.equal((await api.kubectl(['create', 'configmap', 'frozen', '--from-literal=a=1'])).code, 0);
    assert.equal((await api.kubectl(['patch', 'configmap', 'frozen', '-p', '{"immutable":true}'])).code, 0);
    let r = await api.kubectl(['patch', 'configmap', 'frozen', '-p', '{"data":{"a":"2"}}']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /The ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set/);
    r = await api.kubectl(['patch', 'configmap', 'frozen', '-p', '{"immutable":false}']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /immutable: Forbidden: field is immutable when `immutable` is set/);
    r = await api.kubectl(['patch', 'configmap', 'frozen', '-p', '{"binaryData":{"b":"aGk="}}']);
    assert.match(r.stderr, /binaryData: Forbidden: field is immutable when `immutable` is set/);
    assert.equal((await api.kubectl(['label', 'configmap', 'frozen', 'x=y'])).code, 0, 'metadata may change');

    assert.equal((await api.kubectl(['create', 'secret', 'generic', 'sealed', '--from-literal=a=1'])).code, 0);
    assert.equal((await api.kubectl(['patch', 'secret', 'sealed', '-p', '{"immutable":true}'])).code, 0);
    r = await api.kubectl(['patch', 'secret', 'sealed', '-p', '{"stringData":{"a":"2"}}']);
    assert.equal(r.code, 1, 'the data of an immutable Secret changed');
    assert.match(r.stderr, /The Secret "sealed" is invalid: data: Forbidden: field is immutable when `immutable` is set/);
    const got = await api.kubectl(['get', 'secret', 'sealed', '-o', 'jsonpath={.data.a}']);
    assert.equal(Buffer.from(got.stdout, 'base64').toString(), '1');

    // A raw PUT: 422 Invalid, the cause on the field.
    const cur = await admin.json<Record<string, unknown>>('GET', '/api/v1/namespaces/default/configmaps/frozen');
    const res = await admin.request('PUT', '/api/v1/namespaces/default/configmaps/frozen', { body: { ...cur, data: { a: '3' } } });
    const st = JSON.parse((await readBytes(res.body)).toString()) as Status & { details?: { causes?: Array<{ reason?: string; field?: string }> } };
    assert.equal(res.status, 422);
    assert.equal(st.reason, 'Invalid');
    assert.deepEqual(st.details?.causes?.map((c) => [c.reason, c.field]), [['FieldValueForbidden', 'data']]);
  });
});
