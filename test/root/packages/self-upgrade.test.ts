// A self-upgrade hands the resolver's sockets to the new binary (seed 000, "DNS", "feosd"; issue 23), as
// root, in a network namespace, without a microVM: the sockets are bound before the node holds the
// address (IP_FREEBIND) and handed to feosd as systemd does (LISTEN_FDS, LISTEN_FDNAMES=dns:dns);
// HostService.UpgradeFeosBinary execs the new binary with the same pid; a query sent while it starts is
// answered by it on the same sockets.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeClient } from '../../../src/feos/api/index.ts';
import { HostService } from '../../../src/feos/gen/feos/host/v1/host_pb.js';
import { RESOLVER_PAIR, handOverArgs } from '../../helpers/listen-fds.ts';
import { waitFor } from '../../helpers/wait.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const NS = `k32upg${process.pid}`;

const run = (cmd: string, args: string[], timeout = 120_000) =>
  new Promise<string>((resolve, reject) => execFile(cmd, args, { encoding: 'utf8', timeout }, (err, out, errOut) => (err ? reject(new Error(`${cmd}: ${err.message}\n${out}\n${errOut}`)) : resolve(out))));

test("a self-upgrade execs the new feosd with the same pid and the resolver's sockets; a query sent meanwhile is answered", { timeout: 240_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const dir = mkdtempSync(join(tmpdir(), 'k32t-upgrade-'));
  execFileSync('ip', ['netns', 'add', NS]);
  execFileSync('ip', ['-n', NS, 'link', 'set', 'lo', 'up']);
  let log = '';
  const feosd = spawn(
    'nsenter',
    [`--net=/run/netns/${NS}`, '--', 'python3', ...handOverArgs(RESOLVER_PAIR, [process.execPath, join(REPO, 'bin/feosd.js'), '--state-dir', join(dir, 'state'), '--run-dir', join(dir, 'run'), '--guest-dir', join(dir, 'guest'), '--accel', 'tcg', '--pod-prefix', '2001:db8:78::/64', '--self-upgrade'])],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  for (const s of [feosd.stdout!, feosd.stderr!]) s.on('data', (d: Buffer) => (log += d.toString()));
  t.after(async () => {
    feosd.kill('SIGKILL');
    if (feosd.exitCode === null && feosd.signalCode === null) await new Promise((r) => feosd.once('exit', r));
    execFileSync('ip', ['netns', 'del', NS]);
    rmSync(dir, { recursive: true, force: true });
  });
  const socket = join(dir, 'run/api.sock');
  const dig = (...a: string[]) => run('nsenter', [`--net=/run/netns/${NS}`, 'dig', '@169.254.0.53', '+tries=1', ...a]);
  const took = () => log.split('the resolver took the sockets it was handed (LISTEN_FDS)').length - 1;
  await waitFor('feosd serving on the sockets handed over', 60_000, () => log.includes('"feosd serving"') && took() === 1, { describe: () => log });
  // The resolver refuses a source that is no pod of its own: an answer on the handed-over socket.
  assert.match(await dig('+time=20', 'example.test'), /status: REFUSED/);
  const host = makeClient(HostService, `unix:${socket}`);
  const before = await host.getHostInfo({});
  // The "new binary": a script that runs this checkout's feosd with the arguments it is given.
  const exe = Buffer.from(`#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(REPO, 'bin/feosd.js'))} "$@"\n`);
  await host.upgradeFeosBinary([{ part: { case: 'header', value: { size: BigInt(exe.length), sha256: createHash('sha256').update(exe).digest('hex') } } }, { part: { case: 'chunk', value: exe } }]);
  host.grpc.close();
  await waitFor('the API down while the new binary starts', 30_000, async () => {
    const h = makeClient(HostService, `unix:${socket}`);
    try {
      await h.getHostInfo({}, { deadline: Date.now() + 500 });
      return false;
    } catch {
      return true;
    } finally {
      h.grpc.close();
    }
  });
  // Sent now, while no feosd serves: it waits in the socket and the new feosd answers it.
  assert.match(await dig('+time=90', 'example.test'), /status: REFUSED/);
  await waitFor('the new feosd took the sockets', 60_000, () => took() === 2, { describe: () => log });
  assert.match(await dig('+tcp', '+time=20', 'example.test'), /status: REFUSED/);
  const h = makeClient(HostService, `unix:${socket}`);
  const after = await h.getHostInfo({});
  h.grpc.close();
  assert.equal(after.pid, before.pid, 'the same pid');
  assert.notDeepEqual(after.startedAt, before.startedAt, 'started anew');
  assert.doesNotMatch(log, /sockets are not handed on/);
});
