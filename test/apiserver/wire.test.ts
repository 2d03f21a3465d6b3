/**
 * Wire behaviour real clients rely on (issue 19 "Wire behaviour"), against a real API server process:
 * boolean query parameters read as kube-apiserver reads them (Convert_Slice_string_To_bool) (the official Python client sends
 * `watch=True`), its `watch.Watch().stream` seeing ADDED, MODIFIED and DELETED and a resumed watch too
 * old for the window surfacing 410; `"status": {}` on kinds created without one; a deeply nested body
 * is 400, not 500; a connection that sends half a header is closed after the header timeout; a Binding created
 * at the bindings resource (kubectl create -f, the Python client); a body that is not JSON refused in Go's
 * encoding/json words, a body of another media type 415, and pod log options kube-apiserver refuses 422.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { connect as tlsConnect } from 'node:tls';
import { test } from 'node:test';
import { type RawReply, rawRequest, startApiServer, type TestApiServer } from '../helpers/apiserver.ts';

const raw = (api: TestApiServer, method: string, path: string, body?: string, type = 'application/json') => rawRequest(api, method, path, body, { type });

/** Runs Debian's python3-kubernetes (`/usr/bin/python3`) on a script; answers its exit code and output. */
function python(script: string, env: Record<string, string>, timeoutMs = 60_000): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('/usr/bin/python3', ['-c', script], { timeout: timeoutMs, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

test('boolean query parameters are read as kube-apiserver reads them: 0 and false (any case) are false, anything else true', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const cm = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', JSON.stringify({ metadata: { name: 'b' }, data: { a: '1' } }));
  assert.equal(cm.status, 201, cm.text);
  // The official Python client sends watch=True; Convert_Slice_string_To_bool takes yes, the empty value and f as true.
  for (const v of ['1', 't', 'T', 'TRUE', 'true', 'True', 'yes', '', 'f', 'on']) {
    const r = await raw(api, 'GET', `/api/v1/namespaces/default/configmaps?watch=${v}&timeoutSeconds=1`);
    assert.equal(r.status, 200, `watch=${v}: ${r.text}`);
    const first = JSON.parse(r.text.split('\n')[0]!) as { type: string; object: { metadata: { name: string } } };
    assert.equal(first.type, 'ADDED', `watch=${v} streams events: ${r.text}`);
    assert.equal(first.object.metadata.name, 'b');
  }
  for (const v of ['0', 'FALSE', 'false', 'False', 'fAlSe']) {
    const r = await raw(api, 'GET', `/api/v1/namespaces/default/configmaps?watch=${v}`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json().kind, 'ConfigMapList', `watch=${v} is a list`);
  }
  // A repeated parameter: the first value counts.
  const twice = await raw(api, 'GET', '/api/v1/namespaces/default/configmaps?watch=false&watch=true');
  assert.equal(twice.json().kind, 'ConfigMapList');
  const del = await raw(api, 'DELETE', '/api/v1/namespaces/default/configmaps/b?orphanDependents=False');
  assert.equal(del.status, 200, del.text);
});

test("the official Python client's watch sees ADDED, MODIFIED, DELETED, and a too-old resumed watch gets 410", { timeout: 180_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--watch-window', '5'] });
  const script = `
import threading, sys, json
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config()
v1 = client.CoreV1Api()
rv = v1.list_namespaced_config_map('default').metadata.resource_version
seen = []
def run():
    w = watch.Watch()
    for e in w.stream(v1.list_namespaced_config_map, 'default', resource_version=rv, timeout_seconds=30):
        if e['object'].metadata.name == 'py':
            seen.append((e['type'], e['object'].data))
            if e['type'] == 'DELETED':
                w.stop()
th = threading.Thread(target=run)
th.start()
v1.create_namespaced_config_map('default', client.V1ConfigMap(metadata=client.V1ObjectMeta(name='py'), data={'a': '1'}))
v1.patch_namespaced_config_map('py', 'default', {'data': {'a': '2'}})
v1.delete_namespaced_config_map('py', 'default')
th.join(40)
print(json.dumps({'events': seen}))
# Push the window past rv: more than 5 writes, then resume from rv.
for i in range(8):
    v1.create_namespaced_config_map('default', client.V1ConfigMap(metadata=client.V1ObjectMeta(name='f%d' % i)))
try:
    for e in watch.Watch().stream(v1.list_namespaced_config_map, 'default', resource_version=rv, timeout_seconds=10):
        pass
    print(json.dumps({'resumed': 'no error'}))
except ApiException as e:
    print(json.dumps({'resumed': e.status, 'reason': e.reason}))
`;
  const r = await python(script, { KUBECONFIG: api.kubeconfigPath, HOME: api.dataDir });
  assert.equal(r.code, 0, r.stderr);
  const [events, resumed] = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(events!.events, [
    ['ADDED', { a: '1' }],
    ['MODIFIED', { a: '2' }],
    ['DELETED', { a: '2' }],
  ]);
  assert.equal(resumed!.resumed, 410, JSON.stringify(resumed));
  assert.match(String(resumed!.reason), /^Expired: /);
});

test('kinds created without a status are answered with the status kube-apiserver gives them', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const tpl = { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'c', image: 'counter' }] } };
  const sel = { matchLabels: { app: 'x' } };
  const cases: [string, Record<string, unknown>, unknown][] = [
    ['/apis/apps/v1/namespaces/default/deployments', { metadata: { name: 'd' }, spec: { selector: sel, template: tpl } }, {}],
    ['/apis/apps/v1/namespaces/default/replicasets', { metadata: { name: 'r' }, spec: { selector: sel, template: tpl } }, { replicas: 0 }],
    ['/apis/apps/v1/namespaces/default/daemonsets', { metadata: { name: 'ds' }, spec: { selector: sel, template: tpl } }, { currentNumberScheduled: 0, numberMisscheduled: 0, desiredNumberScheduled: 0, numberReady: 0 }],
    ['/apis/batch/v1/namespaces/default/jobs', { metadata: { name: 'j' }, spec: { template: { spec: { ...tpl.spec, restartPolicy: 'Never' } } } }, {}],
    ['/apis/batch/v1/namespaces/default/cronjobs', { metadata: { name: 'cj' }, spec: { schedule: '* * * * *', jobTemplate: { spec: { template: { spec: { ...tpl.spec, restartPolicy: 'Never' } } } } } }, {}],
    ['/apis/policy/v1/namespaces/default/poddisruptionbudgets', { metadata: { name: 'pdb' }, spec: { minAvailable: 1, selector: sel } }, { disruptionsAllowed: 0, currentHealthy: 0, desiredHealthy: 0, expectedPods: 0 }],
  ];
  for (const [path, body, status] of cases) {
    const r = await raw(api, 'POST', path, JSON.stringify(body));
    assert.equal(r.status, 201, `${path}: ${r.text}`);
    const created = r.json();
    // A controller may already have written a status by the GET; the create's answer is the strategy's.
    assert.deepEqual(created.status, status, `${path} status on create`);
  }
  // Kinds that have one already: Service, Namespace; kinds without a status get none.
  const svc = (await raw(api, 'POST', '/api/v1/namespaces/default/services', JSON.stringify({ metadata: { name: 's' }, spec: { ports: [{ port: 80 }] } }))).json();
  assert.deepEqual(svc.status, { loadBalancer: {} });
  const cm = (await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', JSON.stringify({ metadata: { name: 'c' } }))).json();
  assert.equal('status' in cm, false);
  // The client that crashed reading it: client-node sees the field.
  const { AppsV1Api } = await import('@kubernetes/client-node');
  const d = await api.kubeConfig.makeApiClient(AppsV1Api).readNamespacedDeployment({ name: 'd', namespace: 'default' });
  assert.ok(d.status !== undefined);
});

test('a deeply nested body is 400 with a clear message, and the server goes on', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  for (const [type, body] of [
    ['application/json', '['.repeat(100_000)],
    ['application/json', `{"metadata":{"name":"n"},"data":${'['.repeat(2000)}${']'.repeat(2000)}}`],
    ['application/yaml', `metadata: {name: n}\ndata: ${'['.repeat(100_000)}`],
  ] as const) {
    const r = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', body, type);
    assert.equal(r.status, 400, `${type}: ${r.text.slice(0, 300)}`);
    const s = r.json();
    assert.equal(s.reason, 'BadRequest');
    assert.match(String(s.message), /nests arrays or objects deeper than 1000 levels \(exceeded max depth\)/);
  }
  // A patch too.
  const ok = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', JSON.stringify({ metadata: { name: 'n' } }));
  assert.equal(ok.status, 201, ok.text);
  const p = await raw(api, 'PATCH', '/api/v1/namespaces/default/configmaps/n', '['.repeat(100_000), 'application/merge-patch+json');
  assert.equal(p.status, 400, p.text.slice(0, 300));
  // Deep but within the limit: an ordinary decode error or a validation answer, never a 500.
  const deep = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', `{"metadata":{"name":"m","annotations":${'['.repeat(999)}${']'.repeat(999)}}}`);
  assert.ok(deep.status >= 400 && deep.status < 500, `${deep.status}: ${deep.text.slice(0, 300)}`);
  assert.equal((await raw(api, 'GET', '/api/v1/namespaces/default/configmaps/n')).status, 200);
});

test('a connection that sends half a header is closed after the header timeout', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--headers-timeout', '1s'] });
  const u = new URL(api.url);
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const closed = await new Promise<{ answer: string }>((resolve, reject) => {
    const sock = tlsConnect({ host: u.hostname, port: Number(u.port), ca, servername: 'localhost' }, () => {
      sock.write('GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Half: ');
    });
    let answer = '';
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      answer += d;
    });
    sock.on('error', () => undefined);
    sock.on('close', () => resolve({ answer }));
    // The test's bound: far past the 1 s timeout (Node's default would keep it for ever with requestTimeout 0).
    setTimeout(() => {
      sock.destroy();
      reject(new Error('the half-header connection was still open after 30 s'));
    }, 30_000).unref();
  });
  assert.match(closed.answer, /^HTTP\/1\.1 408/, `answer before the close: ${JSON.stringify(closed.answer)}`);
  // A well-behaved client on a kept-alive connection is not cut: a watch outlives the header timeout.
  const w = await raw(api, 'GET', '/api/v1/namespaces?watch=true&timeoutSeconds=3');
  assert.equal(w.status, 200);
  assert.match(w.text, /"type":"ADDED"/);
});

test('a Binding is created at /api/v1/namespaces/NS/bindings, with kubectl create -f and the Python client, as pods/NAME/binding binds', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const node = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } }) });
  assert.equal(node.code, 0, node.stderr);
  for (const name of ['by-kubectl', 'by-python']) {
    const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { schedulerName: 'nobody', containers: [{ name: 'c', image: 'counter' }] } };
    assert.equal((await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(pod) })).code, 0);
  }
  const resources = await api.kubectl(['api-resources', '--api-group', '']);
  assert.match(resources.stdout, /^bindings\s+v1\s+true\s+Binding$/m);
  // kubectl validates on the client a kind whose OpenAPI v3 has no PATCH (/openapi/v2, empty, says there is no schema).
  const binding = (name: string) => JSON.stringify({ apiVersion: 'v1', kind: 'Binding', metadata: { name }, target: { kind: 'Node', name: 'n1' } });
  const made = await api.kubectl(['create', '-f', '-'], { input: binding('by-kubectl') });
  assert.equal(made.code, 0, made.stderr);
  const bound = await api.kubectl(['get', 'pod', 'by-kubectl', '-o', 'jsonpath={.spec.nodeName}']);
  assert.equal(bound.stdout, 'n1');
  const again = await api.kubectl(['create', '-f', '-'], { input: binding('by-kubectl') });
  assert.match(again.stderr, /Error from server \(Conflict\): .*pod by-kubectl is already assigned to node "n1"/);
  const missing = await api.kubectl(['create', '-f', '-'], { input: binding('no-such-pod') });
  assert.match(missing.stderr, /Error from server \(NotFound\): .*pods "no-such-pod" not found/);
  const r = await python(
    `
from kubernetes import client, config
config.load_kube_config()
v1 = client.CoreV1Api()
try:
    v1.create_namespaced_binding('default', client.V1Binding(metadata=client.V1ObjectMeta(name='by-python'), target=client.V1ObjectReference(kind='Node', name='n1')), _preload_content=False)
except Exception as e:
    print('error', e)
print(v1.read_namespaced_pod('by-python', 'default').spec.node_name)
`,
    { KUBECONFIG: api.kubeconfigPath, HOME: api.dataDir },
  );
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'n1');
  const v2 = await raw(api, 'GET', '/openapi/v2');
  assert.equal(v2.status, 200);
  assert.equal(v2.json().swagger, '2.0');
});

/** A refused request's code, and its Status' reason and message. */
function failure(r: RawReply): { code: number; reason: unknown; message: unknown } {
  const s = r.json();
  return { code: r.status, reason: s.reason, message: s.message };
}

const CONFIGMAPS = '/api/v1/namespaces/default/configmaps';

test("a body that is not JSON is refused 400 in the words of kube-apiserver: Go's encoding/json error, the kind, the body summarized", { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  // Go's encoding/json words the syntax error; transformDecodeError names the kind and summarizes the body.
  assert.deepEqual(failure(await raw(api, 'POST', CONFIGMAPS, 'xyz')), {
    code: 400,
    reason: 'BadRequest',
    message: "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: invalid character 'x' looking for beginning of value (78797a)",
  });
  assert.deepEqual(failure(await raw(api, 'POST', CONFIGMAPS, '{"metadata": {"name": "a",}}')), {
    code: 400,
    reason: 'BadRequest',
    message: `the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: invalid character '}' looking for beginning of object key string ({"metadata": {"name": "a",}})`,
  });
  const made = await raw(api, 'POST', CONFIGMAPS, JSON.stringify({ metadata: { name: 'a' } }));
  assert.equal(made.status, 201, made.text);
  const long = `{"metadata": {"name": "a"}, "data": {"k": tru}}`;
  assert.deepEqual(failure(await raw(api, 'PUT', `${CONFIGMAPS}/a`, long)), {
    code: 400,
    reason: 'BadRequest',
    message: `the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: invalid character '}' in literal true (expecting 'e') (${long.slice(0, 30)} ...)`,
  });
});

test('a body of a media type kube-apiserver does not decode is refused 415 naming the media types it takes', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const made = await raw(api, 'POST', CONFIGMAPS, JSON.stringify({ metadata: { name: 'a' } }));
  assert.equal(made.status, 201, made.text);
  // Another media type than the serializers': 415 naming them (a create, an update), or the patch types (a patch).
  const unknownFormat = 'the body of the request was in an unknown format - accepted media types include: ';
  for (const [method, path, type] of [
    ['POST', CONFIGMAPS, 'text/plain'],
    ['PUT', `${CONFIGMAPS}/a`, 'text/plain'],
    ['POST', CONFIGMAPS, 'application/x-www-form-urlencoded'],
  ] as const) {
    assert.deepEqual(failure(await raw(api, method, path, JSON.stringify({ metadata: { name: 'a' } }), type)), {
      code: 415,
      reason: 'UnsupportedMediaType',
      message: `${unknownFormat}application/json, application/yaml, application/vnd.kubernetes.protobuf`,
    }, `${method} ${type}`);
  }
  assert.deepEqual(failure(await raw(api, 'PATCH', `${CONFIGMAPS}/a`, '{"data": {"k": "v"}}', 'text/plain')), {
    code: 415,
    reason: 'UnsupportedMediaType',
    message: `${unknownFormat}application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml`,
  });
  const still = await raw(api, 'GET', `${CONFIGMAPS}/a`);
  assert.deepEqual(still.json().data, undefined, 'nothing written by the refused requests');
});

test('pod log options kube-apiserver refuses are 422 Invalid (PodLogOptions) or 400 when not an integer, before the pod is looked up', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  // Pod log options: checked as ValidatePodLogOptions checks them, before the pod is looked up.
  const pod = await raw(api, 'POST', '/api/v1/namespaces/default/pods', JSON.stringify({ metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'busybox' }] } }));
  assert.equal(pod.status, 201, pod.text);
  const log = (query: string, name = 'p') => raw(api, 'GET', `/api/v1/namespaces/default/pods/${name}/log?${query}`);
  for (const [query, field, message] of [
    ['tailLines=-5', 'tailLines', 'Invalid value: -5: must be greater than or equal to 0'],
    ['limitBytes=0', 'limitBytes', 'Invalid value: 0: must be greater than 0'],
    ['sinceSeconds=-10', 'sinceSeconds', 'Invalid value: -10: must be greater than 0'],
  ]) {
    const r = await log(query!);
    assert.deepEqual({ ...failure(r), details: r.json().details }, {
      code: 422,
      reason: 'Invalid',
      message: `PodLogOptions "p" is invalid: ${field}: ${message}`,
      details: { name: 'p', kind: 'PodLogOptions', causes: [{ reason: 'FieldValueInvalid', message, field }] },
    }, query);
  }
  assert.deepEqual(failure(await log('tailLines=-1&limitBytes=-2', 'not-there')), {
    code: 422,
    reason: 'Invalid',
    message: 'PodLogOptions "not-there" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: -2: must be greater than 0]',
  });
  assert.deepEqual(failure(await log('sinceSeconds=10&sinceTime=2026-01-01T00:00:00Z')), {
    code: 422,
    reason: 'Invalid',
    message: 'PodLogOptions "p" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified',
  });
  // Not an integer: the conversion's error, a 400.
  assert.deepEqual(failure(await log('tailLines=ten')), { code: 400, reason: 'BadRequest', message: 'strconv.ParseInt: parsing "ten": invalid syntax' });
  assert.deepEqual(failure(await log('limitBytes=99999999999999999999')), { code: 400, reason: 'BadRequest', message: 'strconv.ParseInt: parsing "99999999999999999999": value out of range' });
  // Valid options go on to the pod: it has no node yet.
  assert.deepEqual(failure(await log('tailLines=0&limitBytes=1&sinceSeconds=1')), { code: 400, reason: 'BadRequest', message: 'pod p does not have a host assigned' });
  // kubectl shows the server's answer as it shows any Invalid.
  const k = await api.kubectl(['get', '--raw', '/api/v1/namespaces/default/pods/p/log?tailLines=-5']);
  assert.notEqual(k.code, 0);
  assert.equal(k.stderr.trim(), 'The PodLogOptions "p" is invalid: tailLines: Invalid value: -5: must be greater than or equal to 0');
});
