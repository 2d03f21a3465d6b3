// FeOS pods that run containers, as root, with real microVMs (QEMU, TCG here) and a local registry
// (Debian's docker-registry on loopback behind the test's token gate, an image built here from busybox
// with umoci, pushed with skopeo: nothing comes from the internet). feosd reaches the registry for the
// pods through --registry-forward. Two pods boot side by side:
//   - one with two containers (a public image, anonymous, and a private one, with the right pull
//     token), one that runs and one that exits with a code computed from what it wrote in its rootfs
//     and in a volume; GetPod reports both; stopped and started without a token, its containers are
//     adopted from its disk with what they wrote (the code changes accordingly);
//   - one whose private image's pull token is wrong: FAILED with the registry's refusal as the reason.
// Through feosctl: exec (output, stderr, exit codes, stdin, a terminal), logs (all, tail, follow) and
// a port forward to the running container. Neither token appears in any record, the microVMs' logs,
// or feosd's log.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync, spawn } from 'node:child_process';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { VolumeService } from '../../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { makeClient } from '../../../src/feos/api/index.ts';
import { FEOSCTL, feosctl, PodState, startFeosd, tempDir, until, waitForPod } from '../../feos/harness.ts';
import { buildBusyboxLayout, push, startRegistry } from '../../feos/registry.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const GOOD = 'ctr-good-token-5be07d1c';
const WRONG = 'ctr-wrong-token-a41f9e22';
const POD = 'ctrpdtest00';
const BAD_POD = 'ctrbadtest0';
const VOLUME = 'dddddddd-3333-4444-8555-666666666666';
const BOOT_MS = 420_000;

test('pods run containers from a local registry, with and without pull tokens', { timeout: 900_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const { dir, cleanup } = tempDir('feos-ctr-');
  const reg = await startRegistry(dir, GOOD);
  const layout = buildBusyboxLayout(dir);
  push(layout, reg.direct, 'public/busybox', '1');
  push(layout, reg.direct, 'private/busybox', '1');
  const feosd = await startFeosd(dir, { guestDir: GUEST_DIR, extra: ['--registry-forward', reg.gated] });
  t.after(async () => {
    await feosd.stop('SIGKILL');
    for (const id of [POD, BAD_POD]) {
      try {
        const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', id, 'microvm.pb')));
        if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
      } catch {}
    }
    await reg.stop();
    cleanup();
  });
  /** feosctl with `input` on its stdin. */
  const ctl = (args: string[], input: string) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
      });
      p.stderr.setEncoding('utf8').on('data', (d: string) => {
        stderr += d;
      });
      p.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
      p.stdin.end(input);
    });
  const diag = () => `\nfeosd:\n${feosd.stderr().split('\n').slice(-25).join('\n')}`;
  const serial = (id: string) => {
    try {
      return readFileSync(join(feosd.stateDir, 'vms', id, 'serial.log'), 'utf8');
    } catch {
      return '';
    }
  };

  const volumes = makeClient(VolumeService, `unix:${feosd.socket}`);
  await volumes.createVolume({ id: VOLUME, sizeBytes: 64n * 1024n * 1024n });
  volumes.grpc.close();
  // c2's exit code counts the lines it appended: 10 per line in its own rootfs, 1 per line in the volume.
  const count = 'echo x >> /marks; echo y >> /vol/marks; exit $(( $(wc -l < /marks) * 10 + $(wc -l < /vol/marks) ))';
  const spec = {
    vcpus: 1,
    memoryBytes: 256n * 1024n * 1024n,
    volumes: [{ name: 'data', volumeId: VOLUME }],
    containers: [
      {
        name: 'web',
        image: `${reg.gated}/public/busybox:1`,
        command: ['/bin/sh', '-c'],
        // Serves "pong" on port 8080, one connection after another.
        args: ['echo "web $FEOS_IMAGE $GREETING"; while true; do echo pong | nc -l -p 8080; done'],
        env: { GREETING: 'hello' },
      },
      { name: 'counter', image: `${reg.gated}/private/busybox:1`, command: ['/bin/sh', '-c', count], volumeMounts: [{ name: 'data', path: '/vol' }] },
    ],
  };
  const badSpec = { vcpus: 1, memoryBytes: 256n * 1024n * 1024n, containers: [{ name: 'app', image: `${reg.gated}/private/busybox:1` }] };
  // Both boot side by side: a boot costs most of this suite's time.
  const [created, badCreated] = await Promise.all([
    feosd.pods.createPod({ id: POD, spec, pullToken: GOOD }),
    feosd.pods.createPod({ id: BAD_POD, spec: badSpec, pullToken: WRONG }),
  ]);
  assert.equal(created.pod?.state, PodState.PENDING);
  assert.equal(badCreated.pod?.state, PodState.PENDING);
  const [pod, bad] = await Promise.all([
    waitForPod(feosd, POD, (p) => p.state !== PodState.PENDING, BOOT_MS),
    waitForPod(feosd, BAD_POD, (p) => p.state !== PodState.PENDING, BOOT_MS),
  ]);
  assert.equal(pod.state, PodState.RUNNING, `${pod.reason}${diag()}\n${serial(POD).slice(-3000)}`);
  assert.equal(bad.state, PodState.FAILED, bad.reason);
  assert.match(bad.reason, /container app: create: .*private\/busybox: the registry refused the pull \(HTTP 401: the pull token was not accepted\)/);
  assert.ok(reg.seenAuth.includes(`Bearer ${WRONG}`), 'the wrong token went to the registry');

  const states = async () => {
    const got = (await feosd.pods.getPod({ id: POD })).pod!;
    assert.equal(got.guest?.answered, true, got.guest?.reason ?? '');
    return got.containers.map((c) => `${c.name}=${c.state}:${c.exitCode}`);
  };
  /**
   * The containers' states once the counter shows `counter` (GetPod asks the guest), within 60 s; past
   * that, as they are. The counter ends soon after its start, but a shell under TCG on a loaded machine
   * may take seconds, which 50 GetPods in a row (a second or two here) could miss.
   */
  const statesOnce = (counter: string) =>
    until(
      `the counter is ${counter}`,
      async () => {
        const now = await states();
        return now[1] === counter ? now : undefined;
      },
      60_000,
    ).catch(() => states());
  let s = await statesOnce('counter=exited:11');
  const logs = async (c: string, more: string[] = []) => (await feosctl(feosd.socket, ['pod', 'logs', POD, '-c', c, ...more])).stdout;
  assert.deepEqual(s, ['web=running:0', 'counter=exited:11'], `web: ${await logs('web')}\ncounter: ${await logs('counter')}`);
  assert.match(serial(POD), /container web created/);

  // Exec: output, stderr, exit codes, stdin, a terminal; and a container that is not running.
  const ex = await feosctl(feosd.socket, ['pod', 'exec', POD, '-c', 'web', '--', 'sh', '-c', 'echo "out $GREETING"; echo err >&2; exit 7']);
  assert.deepEqual([ex.code, ex.stdout, ex.stderr], [7, 'out hello\n', 'err\n']);
  const piped = await ctl(['pod', 'exec', POD, '-i', '--', 'sh', '-c', 'cat; echo done'], 'piped in\n');
  assert.deepEqual([piped.code, piped.stdout], [0, 'piped in\ndone\n']);
  const tty = await feosctl(feosd.socket, ['pod', 'exec', POD, '-t', '--', 'sh', '-c', 'test -t 1 && echo on-a-tty']);
  assert.equal(tty.code, 0, tty.stderr);
  assert.match(tty.stdout, /on-a-tty/);
  const notRunning = await feosctl(feosd.socket, ['pod', 'exec', POD, '-c', 'counter', '--', 'true']);
  assert.equal(notRunning.code, 1);
  assert.match(notRunning.stderr, /FAILED_PRECONDITION: container counter is exited/);

  // Logs: all, the tail, and followed while the container writes.
  assert.equal(await logs('web'), 'web busybox hello\n');
  await feosctl(feosd.socket, ['pod', 'exec', POD, '--', 'sh', '-c', 'echo second line >> /proc/1/fd/1']);
  assert.equal(await logs('web', ['--tail', '1']), 'second line\n');
  const follower = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'logs', POD, '-f', '--tail', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => follower.kill('SIGKILL'));
  let followed = '';
  follower.stdout.setEncoding('utf8').on('data', (d: string) => {
    followed += d;
  });
  await until('the follower prints the tail', async () => (followed.includes('second line') ? true : undefined), 30_000);
  await feosctl(feosd.socket, ['pod', 'exec', POD, '--', 'sh', '-c', 'echo followed line >> /proc/1/fd/1']);
  await until('the follower prints the new line', async () => (followed.includes('followed line\n') ? true : undefined), 30_000);
  follower.kill('SIGINT');

  // Port forward: a local port to the web container's 8080.
  const fwd = spawn(process.execPath, [FEOSCTL, '--socket', feosd.socket, 'pod', 'port-forward', POD, '0:8080'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => fwd.kill('SIGKILL'));
  let fwdOut = '';
  fwd.stdout.setEncoding('utf8').on('data', (d: string) => {
    fwdOut += d;
  });
  const localPort = await until('port-forward listens', async () => /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/.exec(fwdOut)?.[1], 30_000);
  const pong = await new Promise<string>((resolve, reject) => {
    const sock = net.connect(Number(localPort), '127.0.0.1');
    let got = '';
    // nc answers once connected and ends after the answer; the client ends its side once it has it.
    sock.setEncoding('utf8').on('data', (d: string) => {
      got += d;
      if (got.endsWith('\n')) sock.end();
    });
    sock.on('close', () => resolve(got));
    sock.on('error', reject);
  });
  assert.equal(pong, 'pong\n');
  fwd.kill('SIGTERM');

  // Stopped and started without a token: the containers are adopted (no pull: the private image needs
  // none) with what they wrote, so the counter counts 2 lines in its rootfs and 2 in the volume.
  const stopped = await feosd.pods.stopPod({ id: POD });
  assert.equal(stopped.pod?.state, PodState.STOPPED);
  const started = await feosd.pods.startPod({ id: POD });
  assert.equal(started.pod?.state, PodState.RUNNING, `${started.pod?.reason}${diag()}`);
  s = await statesOnce('counter=exited:22');
  assert.deepEqual(s, ['web=running:0', 'counter=exited:22']);
  assert.match(serial(POD), /container counter adopted/);

  // No token anywhere: the records, the microVMs' files and logs, feosd's log.
  const leaks = (token: string) => {
    try {
      return execFileSync('grep', ['-r', '-a', '-l', token, feosd.stateDir], { encoding: 'utf8' });
    } catch {
      return '';
    }
  };
  for (const token of [GOOD, WRONG]) {
    assert.equal(leaks(token), '', `${token} is in no file of the state dir`);
    assert.ok(!feosd.stderr().includes(token), `${token} is not in feosd's log`);
  }
});
