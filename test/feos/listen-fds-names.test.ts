// feosd given sockets by systemd's protocol (LISTEN_FDS) that are not feosd.socket's pair named dns
// (seed "DNS"; docs/feos/packages.md): it says what to fix and exits 1 before it starts, rather than
// bind resolver sockets of its own that the handed ones would block. Debian's python3 hands the
// sockets over as systemd does (fds from 3, LISTEN_PID its own pid, then exec), on 127.0.0.1.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const FEOSD = join(import.meta.dirname, '../../bin/feosd.js');
/** argv[1]: the names, colon-separated; argv[2]: udp, tcp or both; the rest: the program. */
const HAND_OVER = `
import os, socket, sys
names, kinds, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
fds = []
for kind in ((socket.SOCK_DGRAM,) if kinds == "udp" else (socket.SOCK_DGRAM, socket.SOCK_STREAM)):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        s.listen(16)
    fds.append(s.detach())
for i, fd in enumerate(fds):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)
os.environ.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=names)
os.execv(argv[0], argv)
`;

test('feosd handed sockets not named dns, or half the pair, says so and exits 1', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32t-fdnames-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const feosd = (names: string, kinds: string) =>
    new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn('/usr/bin/python3', ['-c', HAND_OVER, names, kinds, process.execPath, FEOSD, '--state-dir', join(dir, 'state'), '--run-dir', join(dir, 'run')], { stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.once('close', (code) => resolve({ code, err }));
    });
  const misnamed = await feosd('resolver:resolver', 'both');
  assert.equal(misnamed.code, 1, misnamed.err);
  assert.match(misnamed.err, /feosd: LISTEN_FDS handed 2 socket\(s\) named "resolver:resolver" \(LISTEN_FDNAMES\), but the resolver takes a UDP socket and a listening TCP socket both named dns: name them so \(FileDescriptorName=dns in feosd\.socket/);
  const half = await feosd('dns', 'udp');
  assert.equal(half.code, 1, half.err);
  assert.match(half.err, /feosd: LISTEN_FDS handed 1 socket\(s\) named "dns"/);
  // Nothing started: no API socket.
  assert.doesNotMatch(misnamed.err + half.err, /feosd serving/);
});
