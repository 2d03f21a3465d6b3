/**
 * Authorization as Kubernetes users meet it (issue 19 "Authorization"), with the real kubectl, the
 * official Python client (Debian's python3-kubernetes) and raw HTTPS against a real API server process:
 * the admin, a `view` user (ClusterRoleBinding to a group) and a namespace `edit` user (RoleBinding),
 * each with a kubeconfig from `kube32-cli kubeconfig user`; `kubectl auth can-i` and `--list`;
 * Secrets and Checkpoint data refused to `view`; kube-apiserver's 403 message; impersonation only for
 * those allowed it; a kubelet refused another node's pod's Secret; aggregation of ClusterRoles; bound
 * ServiceAccount tokens (`kubectl create token --audience --duration`); kube-root-ca.crt in a new namespace.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { test } from 'node:test';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

function run(cmd: string, args: string[], env: Record<string, string> = {}, input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { timeout: 60_000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
    if (input !== undefined) child.stdin!.end(input);
    else child.stdin?.end();
  });
}

/** kubectl with another kubeconfig (a fresh cache dir each time). */
let cacheN = 0;
function kubectlAs(api: TestApiServer, kubeconfig: string, args: string[], input?: string) {
  return run('kubectl', ['--kubeconfig', kubeconfig, '--cache-dir', join(api.dataDir, `cache-${cacheN++}`), ...args], { KUBECONFIG: kubeconfig }, input);
}

function rawWithToken(api: TestApiServer, token: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const u = new URL(api.url + path);
  const data = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string | number> = { Authorization: `Bearer ${token}` };
  if (data) {
    headers['Content-Type'] = 'application/json';
    headers['Content-Length'] = Buffer.byteLength(data);
  }
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, ca, headers, timeout: 20_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(text) as Record<string, unknown>;
        } catch {
          json = { text };
        }
        resolve({ status: res.statusCode ?? 0, json });
      });
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 20 s')));
    req.on('error', reject);
    req.end(data);
  });
}

test('RBAC with kubectl: admin, a view user, a namespace edit user; nodes; tokens; Python', { timeout: 300_000 }, async (t) => {
  const api = await startApiServer(t);
  const admin = (args: string[], input?: string) => api.kubectl(args, { input });
  const mint = async (name: string, groups: string[]) => {
    const out = join(api.dataDir, `${name}.kubeconfig`);
    const r = await run(process.execPath, [join(ROOT, 'bin/kube32-cli.js'), 'kubeconfig', 'user', name, ...groups.flatMap((g) => ['--group', g]), '--data-dir', api.dataDir, '--out', out]);
    assert.equal(r.code, 0, r.stderr);
    return out;
  };
  const viewer = await mint('vera', ['auditors']);
  const editor = await mint('ed', []);
  const nobody = await mint('nobody', []);

  await t.test('the default roles exist and the bindings are made with kubectl', async () => {
    const roles = await admin(['get', 'clusterroles', '-o', 'name']);
    for (const r of ['cluster-admin', 'admin', 'edit', 'view', 'system:basic-user', 'system:discovery', 'system:kube-controller-manager', 'system:kube-scheduler']) {
      assert.match(roles.stdout, new RegExp(`^clusterrole.rbac.authorization.k8s.io/${r}$`, 'm'));
    }
    assert.equal((await admin(['create', 'namespace', 'team'])).code, 0);
    assert.equal((await admin(['create', 'clusterrolebinding', 'auditors-view', '--clusterrole', 'view', '--group', 'auditors'])).code, 0);
    const rb = await admin(['create', 'rolebinding', 'ed-edit', '--clusterrole', 'edit', '--user', 'ed', '-n', 'team']);
    assert.equal(rb.code, 0, rb.stderr);
    assert.equal((await admin(['create', 'secret', 'generic', 's1', '--from-literal', 'k=v', '-n', 'team'])).code, 0);
    const ck = await admin(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'c1', namespace: 'team' }, spec: { podName: 'p', action: 'Save' } }));
    assert.equal(ck.code, 0, ck.stderr);
  });

  await t.test('a user without bindings gets 403 in kube-apiserver words', async () => {
    const r = await kubectlAs(api, nobody, ['get', 'pods', '-n', 'default']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Error from server \(Forbidden\): pods is forbidden: User "nobody" cannot list resource "pods" in API group "" in the namespace "default"/);
    const d = await kubectlAs(api, nobody, ['get', 'deployment', 'web', '-n', 'team']);
    assert.match(d.stderr, /deployments\.apps "web" is forbidden: User "nobody" cannot get resource "deployments" in API group "apps" in the namespace "team"/);
    const who = await kubectlAs(api, nobody, ['auth', 'whoami', '-o', 'json']);
    assert.equal(who.code, 0, who.stderr);
    assert.deepEqual((JSON.parse(who.stdout) as { status: { userInfo: { groups: string[] } } }).status.userInfo.groups, ['system:authenticated']);
  });

  await t.test('the view user reads but not Secrets nor Checkpoint data, and writes nothing', async () => {
    assert.equal((await kubectlAs(api, viewer, ['get', 'pods', '-A'])).code, 0);
    assert.equal((await kubectlAs(api, viewer, ['get', 'checkpoints', '-n', 'team'])).code, 0);
    const s = await kubectlAs(api, viewer, ['get', 'secret', 's1', '-n', 'team']);
    assert.match(s.stderr, /secrets "s1" is forbidden: User "vera" cannot get resource "secrets" in API group "" in the namespace "team"/);
    const data = await kubectlAs(api, viewer, ['get', '--raw', '/apis/kube32.io/v1/namespaces/team/checkpoints/c1/data']);
    assert.match(data.stderr, /Forbidden/);
    const c = await kubectlAs(api, viewer, ['create', 'configmap', 'x', '-n', 'team']);
    assert.match(c.stderr, /configmaps is forbidden: User "vera" cannot create resource "configmaps"/);
    assert.equal((await kubectlAs(api, viewer, ['auth', 'can-i', 'get', 'secrets', '-n', 'team'])).stdout.trim(), 'no');
    assert.equal((await kubectlAs(api, viewer, ['auth', 'can-i', 'get', 'checkpoints', '--subresource', 'data', '-n', 'team'])).stdout.trim(), 'no');
    assert.equal((await kubectlAs(api, viewer, ['auth', 'can-i', 'list', 'pods', '-A'])).stdout.trim(), 'yes');
    const list = await kubectlAs(api, viewer, ['auth', 'can-i', '--list', '-n', 'team']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^pods\s+\[\]\s+\[\]\s+\[get list watch\]$/m);
    assert.match(list.stdout, /^checkpoints\.kube32\.io\s+\[\]\s+\[\]\s+\[get list watch\]$/m);
    assert.doesNotMatch(list.stdout, /^secrets\s/m);
    assert.doesNotMatch(list.stdout, /checkpoints\.kube32\.io\/data/);
  });

  await t.test('the edit user works in its namespace only, Secrets and Checkpoint data included', async () => {
    const c = await kubectlAs(api, editor, ['create', 'deployment', 'web', '--image', 'counter', '-n', 'team']);
    assert.equal(c.code, 0, c.stderr);
    assert.equal((await kubectlAs(api, editor, ['get', 'secret', 's1', '-n', 'team'])).code, 0);
    assert.equal((await kubectlAs(api, editor, ['auth', 'can-i', 'get', 'checkpoints', '--subresource', 'data', '-n', 'team'])).stdout.trim(), 'yes');
    const other = await kubectlAs(api, editor, ['get', 'pods', '-n', 'default']);
    assert.match(other.stderr, /pods is forbidden: User "ed" cannot list resource "pods" in API group "" in the namespace "default"/);
    assert.equal((await kubectlAs(api, editor, ['auth', 'can-i', 'create', 'rolebindings', '-n', 'team'])).stdout.trim(), 'no');
    const list = await kubectlAs(api, editor, ['auth', 'can-i', '--list', '-n', 'team']);
    assert.match(list.stdout, /^deployments\.apps\s+\[\]\s+\[\]\s+\[create delete deletecollection patch update get list watch\]$/m);
    assert.match(list.stdout, /^secrets\s/m);
    const none = await kubectlAs(api, editor, ['auth', 'can-i', '--list', '-n', 'default']);
    assert.doesNotMatch(none.stdout, /^deployments\.apps/m);
  });

  await t.test('the admin can do anything; --list says so; impersonation is the admin\'s', async () => {
    const list = await admin(['auth', 'can-i', '--list']);
    assert.match(list.stdout, /^\*\.\*\s+\[\]\s+\[\]\s+\[\*\]$/m);
    const as = await admin(['get', 'pods', '-n', 'default', '--as', 'ed']);
    assert.match(as.stderr, /pods is forbidden: User "ed" cannot list resource "pods"/);
    assert.equal((await admin(['get', 'secrets', '-n', 'team', '--as', 'vera', '--as-group', 'auditors'])).code !== 0, true);
    assert.equal((await admin(['auth', 'can-i', 'get', 'pods', '-n', 'team', '--as', 'vera', '--as-group', 'auditors'])).stdout.trim(), 'yes');
    const denied = await kubectlAs(api, editor, ['get', '--raw', '/api/v1/namespaces/team/pods', '--as', 'vera']);
    assert.match(denied.stderr, /users "vera" is forbidden: User "ed" cannot impersonate resource "users" in API group "" at the cluster scope/);
  });

  await t.test('a namespace admin grants only what it holds: no escalation through Roles or bindings', async () => {
    const boss = await mint('boss', []);
    assert.equal((await admin(['create', 'rolebinding', 'boss-admin', '--clusterrole', 'admin', '--user', 'boss', '-n', 'team'])).code, 0);
    const ok = await kubectlAs(api, boss, ['create', 'role', 'reader', '--verb', 'get,list', '--resource', 'secrets,pods', '-n', 'team']);
    assert.equal(ok.code, 0, ok.stderr);
    const bindEdit = await kubectlAs(api, boss, ['create', 'rolebinding', 'ed-too', '--clusterrole', 'edit', '--user', 'ed', '-n', 'team']);
    assert.equal(bindEdit.code, 0, bindEdit.stderr);
    // admin holds nothing of nodes (cluster-scoped: no namespace's role grants them).
    const role = await kubectlAs(api, boss, ['create', 'role', 'node-writer', '--verb', 'create', '--resource', 'nodes', '-n', 'team']);
    assert.equal(role.code, 1);
    assert.match(role.stderr, /roles\.rbac\.authorization\.k8s\.io "node-writer" is forbidden: user "boss" \(groups=\["system:authenticated"\]\) is attempting to grant RBAC permissions not currently held:\n\{APIGroups:\[""\], Resources:\["nodes"\], Verbs:\["create"\]\}/);
    const bind = await kubectlAs(api, boss, ['create', 'rolebinding', 'boss-root', '--clusterrole', 'cluster-admin', '--user', 'boss', '-n', 'team']);
    assert.equal(bind.code, 1);
    assert.match(bind.stderr, /rolebindings\.rbac\.authorization\.k8s\.io "boss-root" is forbidden: user "boss" .* is attempting to grant RBAC permissions not currently held/);
    // A patch is checked as a create is: the Role grows by a rule admin lacks.
    const patch = await kubectlAs(api, boss, ['patch', 'role', 'reader', '-n', 'team', '--type', 'json', '-p', '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["nodes"],"verbs":["delete"]}}]']);
    assert.equal(patch.code, 1);
    assert.match(patch.stderr, /is attempting to grant RBAC permissions not currently held:\n\{APIGroups:\[""\], Resources:\["nodes"\], Verbs:\["delete"\]\}/);
    const missing = await kubectlAs(api, boss, ['create', 'rolebinding', 'ghost', '--clusterrole', 'no-such-role', '--user', 'ed', '-n', 'team']);
    assert.match(missing.stderr, /clusterroles\.rbac\.authorization\.k8s\.io "no-such-role" not found/);
    // With bind granted on cluster-admin in the namespace, the binding is allowed; escalate lets a Role hold more.
    const grant = { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'binder', namespace: 'team' }, rules: [{ apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterroles', 'roles'], verbs: ['bind', 'escalate'] }] };
    assert.equal((await admin(['apply', '-f', '-'], JSON.stringify(grant))).code, 0);
    assert.equal((await admin(['create', 'rolebinding', 'boss-binder', '--role', 'binder', '--user', 'boss', '-n', 'team'])).code, 0);
    const bound = await kubectlAs(api, boss, ['create', 'rolebinding', 'boss-root', '--clusterrole', 'cluster-admin', '--user', 'ed', '-n', 'team']);
    assert.equal(bound.code, 0, bound.stderr);
    const escalated = await kubectlAs(api, boss, ['create', 'role', 'node-writer', '--verb', 'create', '--resource', 'nodes', '-n', 'team']);
    assert.equal(escalated.code, 0, escalated.stderr);
  });

  await t.test('a ClusterRole labelled aggregate-to-view extends view', async () => {
    const r = await admin(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'extra-view', labels: { 'rbac.authorization.k8s.io/aggregate-to-view': 'true' } }, rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list'] }] }));
    assert.equal(r.code, 0, r.stderr);
    await waitFor('view to include nodes', 20_000, async () => (await kubectlAs(api, viewer, ['auth', 'can-i', 'list', 'nodes'])).stdout.trim() === 'yes');
  });

  await t.test("a kubelet reads its pods' Secrets, not another node's pod's", async () => {
    for (const [pod, node, secret] of [['p1', 'n1', 'sec1'], ['p2', 'n2', 'sec2']] as const) {
      assert.equal((await admin(['create', 'secret', 'generic', secret, '--from-literal', 'k=v'])).code, 0);
      const body = { apiVersion: 'v1', kind: 'Pod', metadata: { name: pod }, spec: { nodeName: node, containers: [{ name: 'c', image: 'counter', env: [{ name: 'K', valueFrom: { secretKeyRef: { name: secret, key: 'k' } } }] }] } };
      const c = await admin(['create', '-f', '-'], JSON.stringify(body));
      assert.equal(c.code, 0, c.stderr);
    }
    const n1 = api.nodeKubeconfig('n1');
    assert.equal((await kubectlAs(api, n1, ['get', 'secret', 'sec1'])).code, 0);
    const other = await kubectlAs(api, n1, ['get', 'secret', 'sec2']);
    assert.match(other.stderr, /secrets "sec2" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'n1' and this object/);
    assert.match((await kubectlAs(api, n1, ['get', 'secrets'])).stderr, /Forbidden/);
    assert.match((await kubectlAs(api, n1, ['get', 'secret', 's1', '-n', 'team'])).stderr, /Forbidden/);
    // What a kubelet needs still works: reading pods and nodes.
    assert.equal((await kubectlAs(api, n1, ['get', 'pods', '-A'])).code, 0);
  });

  await t.test('kubectl create token mints a bound ServiceAccount token; RBAC binds the account', async () => {
    assert.equal((await admin(['create', 'serviceaccount', 'bot', '-n', 'team'])).code, 0);
    const tok = await admin(['create', 'token', 'bot', '-n', 'team', '--duration', '15m']);
    assert.equal(tok.code, 0, tok.stderr);
    const token = tok.stdout.trim();
    const who = await rawWithToken(api, token, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' });
    assert.equal(who.status, 201, JSON.stringify(who.json));
    const sa = JSON.parse((await admin(['get', 'serviceaccount', 'bot', '-n', 'team', '-o', 'json'])).stdout) as { metadata: { uid: string } };
    assert.deepEqual(who.json.status, { userInfo: { username: 'system:serviceaccount:team:bot', uid: sa.metadata.uid, groups: ['system:serviceaccounts', 'system:serviceaccounts:team', 'system:authenticated'] } });
    assert.equal((await rawWithToken(api, token, 'GET', '/api/v1/namespaces/team/pods')).status, 403);
    assert.equal((await admin(['create', 'rolebinding', 'bot-view', '--clusterrole', 'view', '--serviceaccount', 'team:bot', '-n', 'team'])).code, 0);
    await waitFor('the bot to list pods', 20_000, async () => (await rawWithToken(api, token, 'GET', '/api/v1/namespaces/team/pods')).status === 200);
    // Another audience is not the API server's; too short a duration is refused; a deleted account's token dies.
    const vault = (await admin(['create', 'token', 'bot', '-n', 'team', '--audience', 'vault'])).stdout.trim();
    assert.equal((await rawWithToken(api, vault, 'GET', '/api/v1/namespaces/team/pods')).status, 401);
    const short = await admin(['create', 'token', 'bot', '-n', 'team', '--duration', '1m']);
    assert.match(short.stderr, /may not specify a duration less than 10 minutes/);
    const req = await rawWithToken(api, (api.kubeConfig.getCurrentUser()!.token)!, 'POST', '/api/v1/namespaces/team/serviceaccounts/bot/token', { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 1200 } });
    assert.equal(req.status, 201);
    const exp = Date.parse(String((req.json.status as { expirationTimestamp: string }).expirationTimestamp));
    assert.ok(exp > Date.now() + 1100_000 && exp < Date.now() + 1300_000, `expiry ${new Date(exp).toISOString()}`);
    assert.equal((await admin(['delete', 'serviceaccount', 'bot', '-n', 'team'])).code, 0);
    assert.equal((await rawWithToken(api, token, 'GET', '/api/v1/namespaces/team/pods')).status, 401);
  });

  await t.test('every namespace has kube-root-ca.crt with the cluster CA', async () => {
    const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64').toString();
    const cm = await waitFor('kube-root-ca.crt in team', 20_000, async () => {
      const r = await admin(['get', 'configmap', 'kube-root-ca.crt', '-n', 'team', '-o', 'json']);
      return r.code === 0 ? (JSON.parse(r.stdout) as { data: Record<string, string> }) : undefined;
    });
    assert.equal(cm.data['ca.crt'], ca);
    assert.equal((await admin(['delete', 'configmap', 'kube-root-ca.crt', '-n', 'team'])).code, 0);
    await waitFor('kube-root-ca.crt made again', 20_000, async () => (await admin(['get', 'configmap', 'kube-root-ca.crt', '-n', 'team'])).code === 0);
  });

  await t.test("the official Python client with a user's kubeconfig: allowed and refused", async () => {
    const script = `
import json
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config()
v1 = client.CoreV1Api()
out = {'pods': len(v1.list_namespaced_pod('team').items)}
try:
    v1.read_namespaced_secret('s1', 'team')
    out['secret'] = 'read'
except ApiException as e:
    out['secret'] = e.status
    out['message'] = json.loads(e.body)['message']
print(json.dumps(out))
`;
    const r = await run('/usr/bin/python3', ['-c', script], { KUBECONFIG: viewer, HOME: api.dataDir });
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim()) as { pods: number; secret: unknown; message: string };
    assert.equal(out.secret, 403);
    assert.equal(out.message, 'secrets "s1" is forbidden: User "vera" cannot get resource "secrets" in API group "" in the namespace "team"');
  });
});
