/**
 * kube32-cli with a wrong kubeconfig, against a real API server, beside the real kubectl: a token the
 * server does not know is kubectl's `error: You must be logged in to the server (Unauthorized)`, and a
 * certificate-authority-data of another CA is kubectl's `x509: certificate signed by unknown authority`,
 * with what to fix; both exit 1. And `kubeconfig user --out` refusing a path it cannot write, with what to fix.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CLI, COUNTER_WASM, KUBECTL, run } from '../e2e/cluster.ts';
import { startApiServer } from '../helpers/apiserver.ts';

test('a wrong token or a wrong CA in the kubeconfig: kubectl-style messages, exit 1', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const dir = mkdtempSync(join(tmpdir(), 'kube32-kc-errors-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const admin = readFileSync(api.kubeconfigPath, 'utf8');
  const env = { PATH: process.env.PATH, HOME: dir, KUBECACHEDIR: join(dir, 'cache') };
  const cli = (kc: string) => run(process.execPath, [CLI, 'push', COUNTER_WASM, '--name', 'counter', '--kubeconfig', kc], { env, timeoutMs: 30_000 });
  const kubectl = (kc: string) => run(KUBECTL, ['get', 'pods', '--kubeconfig', kc], { env, timeoutMs: 30_000 });

  const badToken = join(dir, 'token.kubeconfig');
  assert.match(admin, /token: \S+/);
  writeFileSync(badToken, admin.replace(/token: \S+/, 'token: k32.not-a-token'), { mode: 0o600 });
  const [ours, theirs] = await Promise.all([cli(badToken), kubectl(badToken)]);
  // kubectl's last line (before it, a fresh discovery cache logs its 401s); in its parentheses the
  // server's Status message ("Unauthorized") or, from discovery, client-go's own words.
  assert.equal(theirs.code, 1);
  assert.match(theirs.stderr.trim().split('\n').at(-1)!, /^error: You must be logged in to the server \(.+\)$/);
  assert.equal(ours.code, 1, ours.stderr);
  assert.equal(ours.stderr, 'error: You must be logged in to the server (Unauthorized)\n');

  // Another CA (a self-signed one of openssl's) in place of the cluster's.
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=other-ca', '-keyout', join(dir, 'ca.key'), '-out', join(dir, 'ca.crt')], { stdio: 'ignore' });
  const otherCa = readFileSync(join(dir, 'ca.crt')).toString('base64');
  const badCa = join(dir, 'ca.kubeconfig');
  assert.match(admin, /certificate-authority-data: \S+/);
  writeFileSync(badCa, admin.replace(/certificate-authority-data: \S+/, `certificate-authority-data: ${otherCa}`), { mode: 0o600 });
  const [ours2, theirs2] = await Promise.all([cli(badCa), kubectl(badCa)]);
  assert.equal(theirs2.code, 1);
  assert.match(theirs2.stderr, /Unable to connect to the server: tls: failed to verify certificate: x509: certificate signed by unknown authority/);
  assert.equal(ours2.code, 1, ours2.stderr);
  assert.match(ours2.stderr, /^Unable to connect to the server: tls: failed to verify certificate: x509: certificate signed by unknown authority \(.+\): the kubeconfig's certificate-authority-data is not this server's CA\n$/);
});

test('kubeconfig user --out: a missing directory, a file as the directory, or a directory as the file is refused with what to fix; a good path is written 0600', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const dir = mkdtempSync(join(tmpdir(), 'kube32-kc-out-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const user = (out: string) => run(process.execPath, [CLI, 'kubeconfig', 'user', 'alice', '--data-dir', api.dataDir, '--out', out], { env: { PATH: process.env.PATH, HOME: dir }, timeoutMs: 30_000 });
  const missing = await user(join(dir, 'nosuch', 'alice.kubeconfig'));
  assert.equal(missing.code, 1);
  assert.equal(missing.stderr, `error: --out ${join(dir, 'nosuch', 'alice.kubeconfig')}: the directory ${join(dir, 'nosuch')} does not exist: create it first, or pass another --out\n`);
  writeFileSync(join(dir, 'file'), 'x');
  const underFile = await user(join(dir, 'file', 'alice.kubeconfig'));
  assert.equal(underFile.code, 1);
  assert.equal(underFile.stderr, `error: --out ${join(dir, 'file', 'alice.kubeconfig')}: ${join(dir, 'file')} is not a directory: pass another --out\n`);
  const isDir = await user(dir);
  assert.equal(isDir.code, 1);
  assert.equal(isDir.stderr, `error: --out ${dir}: it is a directory: name a file in it, as ${join(dir, 'kubeconfig')}\n`);
  assert.deepEqual(readdirSync(dir).sort(), ['file'], 'no temp file is left behind');
  const ok = await user(join(dir, 'alice.kubeconfig'));
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(statSync(join(dir, 'alice.kubeconfig')).mode & 0o777, 0o600);
  const can = await run(KUBECTL, ['auth', 'whoami', '-o', 'jsonpath={.status.userInfo.username}', '--kubeconfig', join(dir, 'alice.kubeconfig')], { env: { PATH: process.env.PATH, HOME: dir }, timeoutMs: 30_000 });
  assert.equal(can.code, 0, can.stderr);
  assert.equal(can.stdout, 'alice');
});
