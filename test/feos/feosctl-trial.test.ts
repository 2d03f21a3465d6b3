/**
 * feosctl's answers a fresh user meets first (docs/feos/feosctl.md), against a real feosd without a guest
 * (its bring-ups fail, which these checks do not mind) or none:
 * - a failure to connect names the address tried and how to point feosctl elsewhere (no socket, a socket
 *   it may not open, nothing answering over TCP);
 * - `feosctl get pods` (kubectl's order) says feosctl's form;
 * - a `--pull-token-file` that is missing or empty is a usage error naming the flag;
 * - `pod list -o wide` and `pod get -o wide` add the images, the guest version, STARTED and CHECKPOINT;
 * - `pod events -o yaml` prints a YAML document per event.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import YAML from 'yaml';
import { connectFailureMessage } from '../../src/feos/ctl/index.ts';
import { FEOSCTL, feosctl, startFeosd, tempDir } from './harness.ts';

const ELSEWHERE = 'to reach another feosd, pass --socket PATH (its <run-dir>/api.sock), --tcp HOST:PORT or --kubeconfig FILE --node NAME';

test('feosctl names the address it tried and how to point it elsewhere when it cannot reach feosd', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feosctl-trial-');
  t.after(cleanup);
  const none = await feosctl(join(dir, 'none.sock'), ['pod', 'list'], 20_000);
  assert.equal(none.code, 1);
  assert.equal(none.stderr, `feosctl: UNAVAILABLE: is feosd running? no socket at ${join(dir, 'none.sock')}; ${ELSEWHERE}\n`);
  const tcp = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const c = spawn(process.execPath, [FEOSCTL, '--tcp', '127.0.0.1:1', '--timeout', '10', 'pod', 'list'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    c.stderr!.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    c.once('exit', (code) => resolve({ code, stderr: err }));
  });
  assert.equal(tcp.code, 1);
  assert.equal(tcp.stderr, `feosctl: UNAVAILABLE: is feosd running? nothing answers at 127.0.0.1:1; ${ELSEWHERE}\n`);
  // A socket nothing listens on (a feosd killed), and permission denied (a user outside the group feos on
  // feosd's 0660 socket): said as such.
  assert.equal(
    connectFailureMessage('No connection established. Last error: connect ECONNREFUSED /run/feos/api.sock', { socket: '/run/feos/api.sock' }),
    `UNAVAILABLE: is feosd running? nothing listens on /run/feos/api.sock; ${ELSEWHERE}`,
  );
  assert.equal(
    connectFailureMessage('No connection established. Last error: connect EACCES /run/feos/api.sock (2026-12-07T03:00:00.000Z)', { socket: '/run/feos/api.sock' }),
    `UNAVAILABLE: permission denied on the socket /run/feos/api.sock: it is for root and the group feos (run feosctl as root or as a member of feos); ${ELSEWHERE}`,
  );
});

test("kubectl's verb first (feosctl get pods -o wide) is a usage error saying feosctl's form", { timeout: 30_000 }, async () => {
  const r = await feosctl('/nonexistent.sock', ['get', 'pods', '-o', 'wide'], 20_000);
  assert.equal(r.code, 1);
  assert.equal(r.stderr, "error: unknown command 'get': feosctl puts the noun first (feosctl pod list [-o wide], feosctl pod get ID)\n");
  const other = await feosctl('/nonexistent.sock', ['frob'], 20_000);
  assert.equal(other.stderr, "error: unknown command 'frob'\n");
});

test('a --pull-token-file that is missing or empty is a usage error naming the flag', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feosctl-trial-');
  t.after(cleanup);
  const missing = await feosctl(join(dir, 'none.sock'), ['pod', 'create', '--pull-token-file', join(dir, 'nope')], 20_000);
  assert.equal(missing.code, 1);
  assert.equal(missing.stderr, `feosctl: --pull-token-file ${join(dir, 'nope')}: no such file or directory (ENOENT): give a file that holds the registry's Bearer token\n`);
  const empty = join(dir, 'empty');
  writeFileSync(empty, '\n');
  chmodSync(empty, 0o600);
  const r = await feosctl(join(dir, 'none.sock'), ['pod', 'start', 'abcdefghjkm', '--pull-token-file', empty], 20_000);
  assert.equal(r.code, 1);
  assert.equal(r.stderr, `feosctl: --pull-token-file ${empty}: the file is empty: put the registry's Bearer token in it\n`);
});

test('pod list/get -o wide add the images, guest, STARTED and CHECKPOINT; pod events -o yaml prints a document per event', { timeout: 90_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feosctl-trial-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const created = await feosctl(feosd.socket, ['pod', 'create', '--id', 'wdpqd0aaaaa', '--image', '127.0.0.1:5000/busybox:1', '--image', 'nginx:1.27'], 30_000);
  assert.equal(created.code, 0, created.stderr);
  const list = await feosctl(feosd.socket, ['pod', 'list', '-o', 'wide'], 30_000);
  assert.equal(list.code, 0, list.stderr);
  const [head, row] = list.stdout.split('\n');
  assert.match(head ?? '', /^ID\s+STATE\s+VCPUS\s+MEMORY\s+IPV6\s+IPV4\s+AGE\s+IMAGES\s+GUEST\s+STARTED\s+CHECKPOINT\s+REASON$/);
  assert.match(row ?? '', /^wdpqd0aaaaa\s+\S+\s+1\s+256Mi\s+-\s+-\s+\S+\s+127\.0\.0\.1:5000\/busybox:1,nginx:1\.27\s+\S+\s+\S+\s+-\s/);
  const get = await feosctl(feosd.socket, ['pod', 'get', 'wdpqd0aaaaa', '-o', 'wide'], 30_000);
  assert.equal(get.code, 0, get.stderr);
  assert.match(get.stdout, /^ID\s+STATE\s+.*\s+IMAGES\s+GUEST\s+STARTED\s+CHECKPOINT\s+REASON\n/);
  // The table without -o wide is as it was.
  assert.match((await feosctl(feosd.socket, ['pod', 'list'], 30_000)).stdout, /^ID\s+STATE\s+VCPUS\s+MEMORY\s+IPV6\s+IPV4\s+AGE\s+REASON\n/);

  const child = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'events', 'wdpqd0aaaaa', '-o', 'yaml'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    out += d;
  });
  // The first event is the pod as it is now (initial); a delete then ends its stream of changes.
  while (!out.includes('initial: true')) {
    if (child.exitCode !== null) assert.fail(`feosctl pod events exited: ${out}`);
    await once(child.stdout!, 'data');
  }
  assert.equal((await feosctl(feosd.socket, ['pod', 'delete', 'wdpqd0aaaaa'], 60_000)).code, 0);
  while (!out.includes('deleted: true')) {
    if (child.exitCode !== null) break;
    await once(child.stdout!, 'data');
  }
  const docs = YAML.parseAllDocuments(out).map((d) => d.toJS() as { podId: string; initial: boolean; deleted: boolean; pod: { id: string; spec?: { containers?: { image: string }[] } } | null });
  assert.ok(docs.length >= 2, out);
  assert.equal(docs[0]!.podId, 'wdpqd0aaaaa');
  assert.equal(docs[0]!.initial, true);
  assert.equal(docs[0]!.pod?.spec?.containers?.[0]?.image, '127.0.0.1:5000/busybox:1');
  assert.equal(docs.at(-1)!.deleted, true);
});
