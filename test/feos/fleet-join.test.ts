// The join's checks before the token leaves the node (seed 000, "The control plane"): a stand-in
// control plane with a certificate of another CA than the token pins, one naming another name, one
// without the URI never receives the token (it records every call); a refused token is not sent again
// until the file holds another; a missing token file, one others may read and a corrupt node.json are logged
// with what to fix, and the socket serves on. Real feosd processes, no microVM.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startFeosd, tempDir, until, type FeosdProcess } from './harness.ts';
import { joinToken, joiningHandlers, makeCa, serverCert, startStandIn, type StandIn, type TestCa } from './fleet-standin.ts';

const SECRET = 'abcdef-0123456789abcdef';
const OTHER = 'zzzzzz-0123456789abcdef';
const { dir, cleanup } = tempDir('k32t-fleetj-');
const ca = await makeCa();
const good = { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] };
const running: { feosd?: FeosdProcess; cp?: StandIn }[] = [];
after(async () => {
  for (const r of running) {
    await r.feosd?.stop('SIGKILL');
    await r.cp?.close();
  }
  cleanup();
});

/** A stand-in with `sans` from `issuer`, and a feosd joining it with a token for `ca` in `name`/. */
async function run(name: string, issuer: TestCa, sans: Parameters<typeof serverCert>[1], token = joinToken(SECRET, ca), defaultNodeDir = false) {
  const cp = await startStandIn(issuer, await serverCert(issuer, sans), joiningHandlers(issuer, { secret: SECRET }));
  const base = join(dir, name);
  const tokenFile = join(base, 'join-token');
  // Without --node-dir: <state-dir>/node.
  const nodeDir = defaultNodeDir ? join(base, 'state', 'node') : join(base, 'node');
  const r: { feosd?: FeosdProcess; cp?: StandIn } = { cp };
  running.push(r);
  const { mkdirSync } = await import('node:fs');
  mkdirSync(base, { recursive: true });
  if (token) {
    writeFileSync(tokenFile, token);
    chmodSync(tokenFile, 0o600);
  }
  r.feosd = await startFeosd(base, {
    extra: ['--control-plane', cp.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, ...(defaultNodeDir ? [] : ['--node-dir', nodeDir]), '--node-name', name],
  });
  return { cp, feosd: r.feosd, tokenFile, nodeDir };
}

const logged = (p: FeosdProcess, what: RegExp) => until(`feosd logs ${what}`, async () => (what.test(p.stderr()) ? true : undefined), 30_000);

test('a server of another CA than the token pins never receives the token', { timeout: 60_000 }, async () => {
  const other = await makeCa('other-ca');
  const { cp, feosd } = await run('pin', other, good);
  await logged(feosd, /does not hold the root the join token pins/);
  assert.equal(cp.calls.length, 0, 'no call reached the stand-in');
  assert.doesNotMatch(feosd.stderr(), /readable by group or others/, 'a token file of mode 0600 is not warned about');
  assert.deepEqual((await feosd.pods.listPods({})).pods, [], 'the socket serves on');
});

test('a server whose certificate names another name never receives the token', { timeout: 60_000 }, async () => {
  const { cp, feosd } = await run('name', ca, { dns: ['other.test'], ip: ['127.0.0.2'], uri: ['spiffe://feos.local/ferun'] });
  await logged(feosd, /does not name cp\.test/);
  assert.equal(cp.calls.length, 0);
});

test('a server certificate without the URI (or with another) never receives the token', { timeout: 60_000 }, async () => {
  const { cp, feosd } = await run('nouri', ca, { dns: ['cp.test'] });
  await logged(feosd, /carries no URI, not exactly spiffe:\/\/feos\.local\/ferun/);
  assert.equal(cp.calls.length, 0);
  const two = await run('twouri', ca, { dns: ['cp.test'], uri: ['spiffe://feos.local/ferun', 'spiffe://feos.local/other'] });
  await logged(two.feosd, /carries the URIs spiffe:\/\/feos\.local\/ferun, spiffe:\/\/feos\.local\/other/);
  assert.equal(two.cp.calls.length, 0);
});

test('a refused token is not sent again until the file holds another (the node directory by default in the state dir)', { timeout: 90_000 }, async () => {
  const { cp, feosd, tokenFile, nodeDir } = await run('refused', ca, good, joinToken(OTHER, ca), true);
  await logged(feosd, /the join token was refused/);
  await logged(feosd, /waiting for another token in the file/);
  // The same text written again is no new token.
  writeFileSync(tokenFile, joinToken(OTHER, ca));
  writeFileSync(tokenFile, joinToken(SECRET, ca));
  await until('node.json', async () => (existsSync(join(nodeDir, 'node.json')) ? true : undefined), 30_000);
  assert.deepEqual(
    cp.calls.filter((c) => c.method === 'Join').map((c) => (c.request as { tokenSecret: string }).tokenSecret),
    [OTHER, SECRET],
  );
});

test('a missing token file is logged with what to do; a corrupt node.json is rebuilt from chain.pem', { timeout: 90_000 }, async () => {
  const { cp, feosd, tokenFile, nodeDir } = await run('missing', ca, good, '');
  await logged(feosd, /join-token does not exist: put the join token/);
  assert.equal(cp.calls.length, 0);
  writeFileSync(tokenFile, joinToken(SECRET, ca));
  chmodSync(tokenFile, 0o644);
  await logged(feosd, /join-token holds a secret and is readable by group or others \(mode 0644\): chmod 600 it/);
  await until('node.json', async () => (existsSync(join(nodeDir, 'node.json')) ? true : undefined), 30_000);
  const rec = JSON.parse(readFileSync(join(nodeDir, 'node.json'), 'utf8'));
  await feosd.stop('SIGTERM');
  writeFileSync(join(nodeDir, 'node.json'), '{ not json');
  rmSync(tokenFile);
  const again = await startFeosd(join(dir, 'missing'), {
    extra: ['--control-plane', cp.address, '--control-plane-name', 'cp.test', '--join-token-file', tokenFile, '--node-dir', nodeDir, '--node-name', 'missing'],
  });
  running.push({ feosd: again });
  await logged(again, /node\.json is not the node's record .*rebuilt from chain\.pem/);
  const reports = cp.calls.filter((c) => c.method === 'Report').length;
  await until('reports again, with no new join', async () => (cp.calls.filter((c) => c.method === 'Report').length > reports ? true : undefined), 30_000);
  assert.equal(cp.calls.filter((c) => c.method === 'Join').length, 1, 'the same identity');
  const fixed = JSON.parse(readFileSync(join(nodeDir, 'node.json'), 'utf8'));
  assert.equal(fixed.name, rec.name);
  assert.equal(fixed.spiffeId, rec.spiffeId);
  assert.equal(fixed.notAfter, rec.notAfter);
});

test('feosd refuses a --control-plane or --node-name it cannot use, saying what to give', { timeout: 60_000 }, async () => {
  const { execFile } = await import('node:child_process');
  const { FEOSD } = await import('./harness.ts');
  const runFeosd = (args: string[]) =>
    new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [FEOSD, '--state-dir', join(dir, 'flags'), ...args], { timeout: 30_000 }, (err, _o, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr })),
    );
  const cp = await runFeosd(['--control-plane', 'cp.example.com']);
  assert.notEqual(cp.code, 0);
  assert.match(cp.stderr, /--control-plane "cp\.example\.com": want HOST:PORT/);
  const nn = await runFeosd(['--control-plane', '127.0.0.1:7443', '--node-name', 'bad_name']);
  assert.notEqual(nn.code, 0);
  assert.match(nn.stderr, /--node-name "bad_name": want a DNS-1123 subdomain/);
});
