/**
 * `kubectl logs`, `kubectl exec` and `kubectl port-forward` into a microVM pod through the node
 * connection (issue 18; docs/feos/fleet.md, "Logs, exec and port-forward"), as root, with real parts:
 * `kube32-cli control-plane --feos-listen`, a real feosd joined with a token (in the host's network
 * namespace: its pods pull from the test's registry on loopback through --registry-forward), one real
 * microVM (QEMU, TCG) running two busybox containers, and the real kubectl (1.32: WebSocket first).
 * The FeOS pod is made with feosd's CreatePod (the FeOS kubelet that makes them from Pods is another
 * issue's part); the Pod object is bound to the FeOS node with `feos.kube32.io/pod-id` naming it.
 * A Pod bound to a Node that is not a FeOS node keeps the WebAssembly refusals of exec and port-forward.
 * Without --pod-prefix the node is meshed: its mesh device, a name and a UDP port of the suite's own
 * (wireguard-go's UAPI sockets are the machine's; 51820 in the host's namespace may be another's), is a wireguard-go in the host's namespace, a daemon that outlives feosd by
 * design: the suite ends it, and none of it is left.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { PodState, startFeosd, tempDir, waitForPod, type FeosdProcess } from '../../feos/harness.ts';
import { buildBusyboxLayout, push, startRegistry } from '../../feos/registry.ts';
import { unusedUdpPort } from '../../helpers/ports.ts';
import { endProcesses, processesNaming, processName } from '../../helpers/processes.ts';
import { createToken, freePort, keepLog, kubectl, ROOT, readyOf, run, startControlPlane, until } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const GUEST_DIR = join(ROOT, 'build/guest');
const NODE = 'streams-a';
const BOOT_MS = 420_000;

test('kubectl logs, exec and port-forward reach a microVM pod through its node connection', { timeout: 1_200_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(ROOT, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  const { dir, cleanup } = tempDir('fleet-streams-');
  const reg = await startRegistry(dir, 'streams-token-unused');
  push(buildBusyboxLayout(dir), reg.direct, 'public/busybox', '1');
  const image = `${reg.gated}/public/busybox:1`;
  const port = await freePort();
  const cp = await startControlPlane(t, ['--feos-listen', `127.0.0.1:${port}`]);
  const k = (...args: string[]) => kubectl(cp.kubeconfig, ...args);
  const token = await createToken(cp.kubeconfig, '--ttl', '1h');
  const base = join(dir, 'node');
  mkdirSync(base);
  const tokenFile = join(base, 'join-token');
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  const podId = randomUUID();
  const meshDevice = `wg${randomBytes(3).toString('hex')}s`;
  /** The wireguard-go processes of the suite's mesh device (feosd's own command line names it too). */
  const wireguard = () => processesNaming(meshDevice).filter((pid) => processName(pid) === 'wireguard-go');
  const feosd: FeosdProcess = await startFeosd(base, {
    guestDir: GUEST_DIR,
    env: { ...process.env, LOG_LEVEL: 'info' },
    extra: ['--control-plane', `127.0.0.1:${port}`, '--join-token-file', tokenFile, '--node-dir', join(base, 'nodedir'), '--node-name', NODE, '--registry-forward', reg.gated, '--stop-grace', '10', '--mesh-device', meshDevice, '--mesh-port', String(await unusedUdpPort())],
  });
  const children: Array<{ kill(s?: NodeJS.Signals): void }> = [];
  t.after(async () => {
    for (const c of children) c.kill('SIGKILL');
    keepLog('streams-control-plane', cp.logs());
    keepLog('streams-feosd', feosd.stderr());
    await feosd.stop('SIGKILL');
    // Every microVM feosd started: the test's pod and the ghost's, which the node's kubelet creates.
    for (const id of existsSync(join(feosd.stateDir, 'vms')) ? readdirSync(join(feosd.stateDir, 'vms')) : []) {
      try {
        const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', id, 'microvm.pb')));
        if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
      } catch {}
    }
    await reg.stop();
    cleanup();
    // Its mesh device's wireguard-go runs on after feosd, in the host's namespace.
    await endProcesses(wireguard(), 5_000, `wireguard-go ${meshDevice}`);
    assert.deepEqual(wireguard(), [], 'no wireguard-go of the suite is left');
  });
  const step = steps(t, () => [
    `feosd:\n${feosd.stderr().split('\n').slice(-20).join('\n')}`,
    `control plane:\n${cp.logs().split('\n').slice(-20).join('\n')}`,
  ]);

  await step('the node joins and its microVM pod runs two containers', async () => {
    await until('the FeOS node is Ready', async () => (await readyOf(cp.kubeconfig, NODE)) === 'True', 90_000);
    await until(`its mesh device ${meshDevice}, a wireguard-go`, async () => wireguard().length === 1, 60_000);
    await feosd.pods.createPod({
      id: podId,
      spec: {
        vcpus: 1,
        memoryBytes: 256n * 1024n * 1024n,
        containers: [
          // Serves "pong" on 8080, one connection after another.
          { name: 'web', image, command: ['/bin/sh', '-c'], args: ['echo web started; echo web ready; while true; do echo pong | nc -l -p 8080; done'] },
          { name: 'side', image, command: ['/bin/sh', '-c', 'echo side says hi; while true; do sleep 3600; done'] },
        ],
      },
    });
    const pod = await waitForPod(feosd, podId, (p) => p.state !== PodState.PENDING, BOOT_MS);
    assert.equal(pod.state, PodState.RUNNING, pod.reason);
    await until(
      'both containers run',
      async () => {
        const got = (await feosd.pods.getPod({ id: podId })).pod!;
        return got.containers.length === 2 && got.containers.every((c) => c.state === 'running');
      },
      120_000,
    );
    const manifest = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'vm', annotations: { 'feos.kube32.io/pod-id': podId } },
      spec: {
        nodeName: NODE,
        tolerations: [{ key: 'kube32.io/runtime', operator: 'Equal', value: 'feos', effect: 'NoSchedule' }],
        containers: [
          { name: 'web', image, ports: [{ containerPort: 8080 }] },
          { name: 'side', image },
        ],
      },
    };
    const file = join(dir, 'pod.json');
    writeFileSync(file, JSON.stringify(manifest));
    const r = await k('create', '-f', file);
    assert.equal(r.code, 0, r.stderr);
    // Its status as the FeOS kubelet (another issue's part) would write it: kubectl port-forward and attach want a Running pod.
    const st = await k('patch', 'pod', 'vm', '--subresource', 'status', '--type', 'merge', '-p', JSON.stringify({ status: { phase: 'Running' } }));
    assert.equal(st.code, 0, st.stderr);
  });

  await step('kubectl logs: -c, --tail; --previous is refused as Kubernetes does', async () => {
    let r = await k('logs', 'vm', '-c', 'web');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'web started\nweb ready\n');
    r = await k('logs', 'vm', '-c', 'web', '--tail', '1');
    assert.equal(r.stdout, 'web ready\n', r.stderr);
    r = await k('logs', 'vm', '-c', 'side');
    assert.equal(r.stdout, 'side says hi\n', r.stderr);
    // Without -c, kubectl takes the first container (and says so).
    r = await k('logs', 'vm');
    assert.equal(r.stdout, 'web started\nweb ready\n', r.stderr);
    assert.match(r.stderr, /Defaulted container "web" out of: web, side/);
    r = await k('get', '--raw', '/api/v1/namespaces/default/pods/vm/log');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /a container name must be specified for pod vm, choose one of: \[web side\]/);
    r = await k('logs', 'vm', '-c', 'web', '--previous');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /BadRequest.*previous terminated container "web" in pod "vm" not found/);
  });

  await step('kubectl exec: stdin through -i, the exit code passed back, stderr apart, -it with and without a terminal', async () => {
    const piped = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const p = spawn('kubectl', ['--kubeconfig', cp.kubeconfig, 'exec', '-i', 'vm', '-c', 'web', '--', 'sh', '-c', 'cat; echo done'], { stdio: ['pipe', 'pipe', 'pipe'] });
      children.push(p);
      let out = '';
      p.stdout.setEncoding('utf8').on('data', (d: string) => {
        out += d;
      });
      p.on('close', (code) => resolve({ code, out }));
      p.stdin.end('piped in\nand more\n');
    });
    assert.equal(piped.code, 0);
    assert.equal(piped.out, 'piped in\nand more\ndone\n');
    const r = await k('exec', 'vm', '-c', 'side', '--', 'sh', '-c', 'echo "out $0"; echo err >&2; exit 7');
    assert.equal(r.code, 7, r.stderr);
    assert.equal(r.stdout, 'out sh\n');
    assert.match(r.stderr, /^err\n/);
    assert.match(r.stderr, /command terminated with exit code 7/);
    // -it without a terminal here: kubectl says so and goes on without one.
    const it = await run('bash', ['-c', `echo typed | kubectl --kubeconfig ${cp.kubeconfig} exec -it vm -c web -- cat`], 30_000);
    assert.equal(it.code, 0, it.stderr);
    assert.equal(it.stdout, 'typed\n');
    // -it on a terminal (script's): the command has a tty, its exit code comes back.
    const ttyErr = join(dir, 'tty-kubectl.err');
    const tty = await run('script', ['-qec', `kubectl --kubeconfig ${cp.kubeconfig} -v=6 exec -it vm -c web -- sh -c 'test -t 1 && echo on-a-tty; exit 4' 2>${ttyErr}`, '/dev/null'], 30_000);
    const direct = await run(process.execPath, [join(ROOT, 'bin/feosctl.js'), '--socket', feosd.socket, 'pod', 'exec', '-t', podId, '-c', 'web', '--', 'sh', '-c', 'exit 4'], 30_000);
    assert.equal(tty.code, 4, `${tty.stdout}${tty.stderr}\nkubectl: ${readFileSync(ttyErr, 'utf8').slice(-3000)}\nfeosctl -t: exit ${direct.code} ${direct.stderr}`);
    assert.match(tty.stdout, /on-a-tty/);
    const missing = await k('exec', 'vm', '-c', 'nope', '--', 'true');
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /container nope is not valid for pod vm|container nope not found/);
  });

  await step('kubectl logs -f follows what the container writes', async () => {
    const p = spawn('kubectl', ['--kubeconfig', cp.kubeconfig, 'logs', '-f', 'vm', '-c', 'web', '--tail', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(p);
    let out = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    await until('the follower prints the tail', async () => out === 'web ready\n', 30_000);
    const r = await k('exec', 'vm', '-c', 'web', '--', 'sh', '-c', 'echo followed line >> /proc/1/fd/1');
    assert.equal(r.code, 0, r.stderr);
    await until('the follower prints the new line', async () => out === 'web ready\nfollowed line\n', 30_000);
    assert.equal(p.exitCode, null, 'kubectl logs -f goes on');
    p.kill('SIGTERM');
  });

  await step('kubectl port-forward reaches the container port, connection after connection', async () => {
    const local = await freePort();
    const p = spawn('kubectl', ['--kubeconfig', cp.kubeconfig, 'port-forward', 'pod/vm', `${local}:8080`, '--address', '127.0.0.1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(p);
    let out = '';
    let err = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    p.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    await until('port-forward listens', async () => out.includes(`Forwarding from 127.0.0.1:${local} -> 8080`), 30_000);
    const ask = () =>
      new Promise<string>((resolve, reject) => {
        const sock = net.connect(local, '127.0.0.1');
        let got = '';
        sock.setEncoding('utf8').on('data', (d: string) => {
          got += d;
          if (got.endsWith('\n')) sock.end();
        });
        sock.on('close', () => resolve(got));
        sock.on('error', reject);
      });
    assert.equal(await ask(), 'pong\n', err);
    assert.equal(await ask(), 'pong\n', err);
    assert.equal(p.exitCode, null, `port-forward goes on: ${err}`);
    p.kill('SIGTERM');
  });

  await step('attach is refused with what to use; a Pod without its FeOS pod gets the node\'s answer; a Pod on a Node that is not a FeOS node keeps the WebAssembly refusals', async () => {
    const attach = await k('attach', 'vm', '-c', 'web');
    assert.notEqual(attach.code, 0);
    assert.match(attach.stderr, /attach is not supported for microVM pods/);
    // A Pod whose FeOS pod the node does not have yet: the node's answer, naming the FeOS pod and the node,
    // until the node's kubelet has created it; then, as Kubernetes says of a container not started yet,
    // that it waits (the node has it, not RUNNING).
    const ghostId = randomUUID();
    writeFileSync(join(dir, 'ghost.json'), JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'ghost', annotations: { 'feos.kube32.io/pod-id': ghostId } }, spec: { nodeName: NODE, containers: [{ name: 'app', image }] } }));
    assert.equal((await k('create', '-f', join(dir, 'ghost.json'))).code, 0);
    const ghostLog = await k('logs', 'ghost');
    assert.notEqual(ghostLog.code, 0);
    assert.match(ghostLog.stderr, new RegExp(`\\(FeOS pod ${ghostId} on node ${NODE}\\)|container "app" in pod "ghost" is waiting to start: ContainerCreating`));
    const ghostExec = await k('exec', 'ghost', '--', 'true');
    assert.notEqual(ghostExec.code, 0);
    assert.match(ghostExec.stderr, new RegExp(`FeOS pod ${ghostId} on node ${NODE}`));
    for (const [name, obj] of [
      ['wasm-node.json', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'wasm-elsewhere' } }],
      ['wasm-pod.json', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'wasm' }, spec: { nodeName: 'wasm-elsewhere', containers: [{ name: 'app', image: 'app.wasm' }] } }],
    ] as const) {
      writeFileSync(join(dir, name), JSON.stringify(obj));
      const made = await k('create', '-f', join(dir, name));
      assert.equal(made.code, 0, made.stderr);
    }
    const st = await k('patch', 'pod', 'wasm', '--subresource', 'status', '--type', 'merge', '-p', JSON.stringify({ status: { phase: 'Running' } }));
    assert.equal(st.code, 0, st.stderr);
    const ex = await k('exec', 'wasm', '--', 'true');
    assert.notEqual(ex.code, 0);
    assert.match(ex.stderr, /exec is not supported for WebAssembly pods/);
    const pf = await k('port-forward', 'pod/wasm', `${await freePort()}:8080`);
    assert.notEqual(pf.code, 0);
    assert.match(pf.stderr, /port-forward is not supported for WebAssembly pods/);
  });
});
