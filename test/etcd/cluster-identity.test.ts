/**
 * One cluster identity across several API servers on one etcd (issue 11, docs/etcd.md "One cluster
 * identity"): two `kube32-cli apiserver --storage etcd` started at the same moment on fresh data dirs
 * end with one CA and one token key (kept in etcd at /kube32/cluster-identity, never under /registry/);
 * a kubeconfig written by either works against both with the real kubectl; each serves its own
 * certificate naming its own address; `default/kubernetes` Endpoints list both and drop one killed
 * within its identity Lease; Services created through both at once get distinct cluster IPs. A data
 * dir holding another cluster's CA is refused and left as it was.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type PeerCertificate } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { CLUSTER_IDENTITY_KEY } from '../../src/apiserver/cluster-identity.ts';
import { createCertificateAuthority } from '../../src/apiserver/pki.ts';
import { issueNodeKubeconfig } from '../../src/apiserver/index.ts';
import { eventually, kubectl } from '../apiserver-etcd/control-plane.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';
import { type ApiServerProcess, apiRequest, kubernetesEndpoints, loopbackPrefix, startApiServer } from './apiserver-process.ts';

const LEASE_SECONDS = 3;

/** The serving certificate an API server presents, verified against `caPem`. */
function servingCertificate(url: string, caPem: string): Promise<PeerCertificate> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect({ host: u.hostname, port: Number(u.port), ca: caPem, servername: undefined, timeout: 10_000 }, () => {
      const cert = sock.getPeerCertificate();
      sock.end();
      resolve(cert);
    });
    sock.on('error', reject);
    sock.on('timeout', () => sock.destroy(new Error('TLS handshake: no answer within 10 s')));
  });
}

test('API servers started at once on one etcd share one identity; kubeconfigs, Endpoints and cluster IPs span them', { timeout: 120_000 }, async (t) => {
  const etcd = await startEtcd(t);
  const prefix = await loopbackPrefix();
  const args = ['--identity-lease-duration-seconds', String(LEASE_SECONDS)];
  const [a, b, c] = await Promise.all([2, 3, 4].map((i) => startApiServer(t, etcd.url, `${prefix}.${i}`, { extraArgs: args }))) as [ApiServerProcess, ApiServerProcess, ApiServerProcess];
  t.after(() => {
    if (process.exitCode) console.error(`--- a\n${a.logs()}\n--- b\n${b.logs()}\n--- c\n${c.logs()}`);
  });

  // Exactly one created the identity: both data dirs hold the same CA and token key, the one in etcd.
  for (const f of ['ca.crt', 'ca.key', 'token.key']) {
    for (const other of [b, c]) assert.equal(readFileSync(join(other.dataDir, 'pki', f), 'utf8'), readFileSync(join(a.dataDir, 'pki', f), 'utf8'), `pki/${f} is the same in every data dir`);
  }
  const client = new Etcd3({ hosts: etcd.url });
  t.after(() => client.close());
  const stored = JSON.parse((await client.get(CLUSTER_IDENTITY_KEY).string()) ?? '{}') as { caCertPem?: string; tokenKey?: string };
  assert.equal(stored.caCertPem, readFileSync(join(a.dataDir, 'pki', 'ca.crt'), 'utf8'));
  assert.equal(stored.tokenKey, readFileSync(join(a.dataDir, 'pki', 'token.key'), 'utf8').trim());
  // Nothing the API serves holds a key: no value under /registry/ has the CA key or the token key.
  const registry = await client.getAll().prefix('/registry/').strings();
  assert.ok(Object.keys(registry).length > 10, 'the objects are in etcd under /registry/');
  for (const [k, v] of Object.entries(registry)) {
    assert.ok(!v.includes('PRIVATE KEY') && !v.includes(stored.tokenKey!), `${k} holds no key`);
  }

  // A's admin kubeconfig works against B (and B's against A) with the real kubectl, TLS verified.
  for (const [from, to] of [[a, b], [b, a]] as const) {
    const r = await kubectl(from.kubeconfig, ['--server', to.url, 'get', 'namespace', 'kube-system', '-o', 'name']);
    assert.equal(r.code, 0, `kubeconfig of ${from.address} against ${to.url}: ${r.stderr}`);
    assert.equal(r.stdout.trim(), 'namespace/kube-system');
  }
  // A node kubeconfig minted from A's data dir is node w1 on B.
  const nodeDir = mkdtempSync(join(tmpdir(), 'k32-node-'));
  t.after(() => rmSync(nodeDir, { recursive: true, force: true }));
  const nodeKc = issueNodeKubeconfig(a.dataDir, 'w1', { path: join(nodeDir, 'w1.kubeconfig') });
  const who = await kubectl(nodeKc, ['--server', b.url, 'auth', 'whoami', '-o', 'jsonpath={.status.userInfo.username}']);
  assert.equal(who.code, 0, who.stderr);
  assert.equal(who.stdout, 'system:node:w1');
  // Each serves its own certificate, signed by the shared CA, naming its own address.
  const certA = await servingCertificate(a.url, b.caPem);
  const certB = await servingCertificate(b.url, a.caPem);
  assert.match(certA.subjectaltname ?? '', new RegExp(`IP Address:${a.address.replaceAll('.', '\\.')}(,|$)`));
  assert.match(certB.subjectaltname ?? '', new RegExp(`IP Address:${b.address.replaceAll('.', '\\.')}(,|$)`));
  assert.notEqual(certA.fingerprint256, certB.fingerprint256);

  // Services created through both at once: every cluster IP is different.
  const creates = Array.from({ length: 24 }, (_, i) => {
    const via = i % 2 === 0 ? a : b;
    return apiRequest(`${via.url}/api/v1/namespaces/default/services`, {
      ...via,
      method: 'POST',
      body: { apiVersion: 'v1', kind: 'Service', metadata: { name: `svc-${i}` }, spec: { ports: [{ port: 80 }] } },
    });
  });
  const made = await Promise.all(creates);
  for (const r of made) assert.equal(r.status, 201, JSON.stringify(r.body));
  const ips = made.map((r) => String((r.body.spec as { clusterIP?: string }).clusterIP));
  assert.equal(new Set(ips).size, ips.length, `distinct cluster IPs: ${ips.join(' ')}`);
  assert.ok(!ips.includes('10.96.0.1'), 'none takes the kubernetes service IP');
  // A requested IP already taken is Invalid, as in Kubernetes.
  const dup = await apiRequest(`${b.url}/api/v1/namespaces/default/services`, {
    ...b,
    method: 'POST',
    body: { apiVersion: 'v1', kind: 'Service', metadata: { name: 'dup' }, spec: { clusterIP: ips[0], ports: [{ port: 80 }] } },
  });
  assert.equal(dup.status, 422, JSON.stringify(dup.body));
  assert.match(String(dup.body.message), /provided IP is already allocated/);

  // default/kubernetes lists every API server; C stopped cleanly leaves them at once, B killed within its identity Lease.
  const endpoint = (s: ApiServerProcess) => `${s.address}:${new URL(s.url).port}`;
  const all = [a, b, c].map(endpoint).sort();
  await eventually('Endpoints list the three API servers', 10_000, () => kubernetesEndpoints(a), (e) => JSON.stringify(e) === JSON.stringify(all));
  c.proc.kill('SIGTERM');
  assert.equal(await c.exited, 0, c.logs());
  assert.deepEqual(await kubernetesEndpoints(b), [a, b].map(endpoint).sort(), 'a cleanly stopped API server has left the Endpoints when it exits');
  b.proc.kill('SIGKILL');
  await b.exited;
  const killedAt = Date.now();
  await eventually(
    'Endpoints list A alone',
    LEASE_SECONDS * 1000 + 2000,
    () => kubernetesEndpoints(a),
    (e) => JSON.stringify(e) === JSON.stringify([`${a.address}:${new URL(a.url).port}`]),
  );
  t.diagnostic(`a SIGKILLed API server left the kubernetes Endpoints ${Date.now() - killedAt} ms after its death (identity Lease ${LEASE_SECONDS} s)`);
});

test('the first API server brings its data dir\'s CA into etcd; a data dir of another cluster is refused and left as it was', { timeout: 120_000 }, async (t) => {
  const etcd = await startEtcd(t);
  const prefix = await loopbackPrefix();
  const seeded = async () => {
    const dir = mkdtempSync(join(tmpdir(), 'k32-identity-own-'));
    mkdirSync(join(dir, 'pki'), { mode: 0o700 });
    const ca = await createCertificateAuthority();
    writeFileSync(join(dir, 'pki', 'ca.crt'), ca.certPem);
    writeFileSync(join(dir, 'pki', 'ca.key'), ca.keyPem, { mode: 0o600 });
    return { dir, ca };
  };
  const first = await seeded();
  const a = await startApiServer(t, etcd.url, `${prefix}.2`, { dataDir: first.dir });
  assert.equal(a.caPem, first.ca.certPem, "the kubeconfig names the data dir's own CA");
  const client = new Etcd3({ hosts: etcd.url });
  t.after(() => client.close());
  const stored = JSON.parse((await client.get(CLUSTER_IDENTITY_KEY).string()) ?? '{}') as { caCertPem?: string };
  assert.equal(stored.caCertPem, first.ca.certPem, 'etcd keeps the first data dir\'s CA');

  const other = await seeded();
  const refused = startApiServer(t, etcd.url, `${prefix}.3`, { dataDir: other.dir });
  await assert.rejects(refused, (err: Error) => {
    assert.match(err.message, /exited 1/);
    assert.match(err.message, /pki\/ca\.crt is not the CA of the cluster in etcd/);
    assert.match(err.message, /use another --data-dir, or move .*pki away/);
    return true;
  });
  assert.equal(readFileSync(join(other.dir, 'pki', 'ca.crt'), 'utf8'), other.ca.certPem, 'the refused data dir keeps its CA');
  assert.throws(() => readFileSync(join(other.dir, 'pki', 'token.key')), /ENOENT/, 'and gets no token key');
  const ok = await apiRequest(`${a.url}/api/v1/namespaces`, a);
  assert.equal(ok.status, 200, 'the first API server serves on');

  // A record in etcd that is not an identity is refused, naming the key and the fault.
  await client.put(CLUSTER_IDENTITY_KEY).value(JSON.stringify({ version: 2 }));
  await assert.rejects(startApiServer(t, etcd.url, `${prefix}.4`), /etcd key \/kube32\/cluster-identity: not a Kube32 cluster identity: version 2 \(this API server reads version 1\)/);
});
