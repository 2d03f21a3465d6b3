// docs/feos/network.md's recipe as an operator follows it, as root, in a network namespace of the test's
// own (`k32t-<random>-feos`), with a real microVM (QEMU, TCG here):
//   - a namespace without a default route: feosd warns at its start and a create of a pod with a network
//     is FAILED_PRECONDITION naming the missing route (its DNS and metadata would time out: the kernel
//     never answers the pod's ARP for 169.254.0.1 without a route out);
//   - with the recipe's routes: a pod with a network and a container whose image (built as
//     docs/feos/feosd.md builds it, every busybox applet linked) comes from docker-registry on the node
//     through --registry-forward, and one from a plain-HTTP registry its network reaches
//     (--insecure-registry); `pod create --wait` prints both running; `pod exec -- cat`
//     works; the pod's resolver answers a name of its table, and its metadata service answers a client
//     that speaks AWS IMDSv2's header names with the pod's metadata.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, symlinkSync, copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { feosctl, PodState, routeOut, startFeosd, tempDir, until } from '../../feos/harness.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const ID = 'rcppqd0test';

function inNs(ns: string, cmd: string, args: string[], timeout = 60_000): string {
  return execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout });
}

/** The image of docs/feos/feosd.md ("Images without the internet"): busybox with every applet linked. */
function buildImage(dir: string): string {
  const layout = join(dir, 'layout');
  const bundle = join(dir, 'bundle');
  const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 60_000 });
  sh('umoci', ['init', '--layout', layout]);
  sh('umoci', ['new', '--image', `${layout}:1`]);
  sh('umoci', ['unpack', '--rootless', '--image', `${layout}:1`, bundle]);
  const bin = join(bundle, 'rootfs', 'bin');
  mkdirSync(bin, { recursive: true });
  copyFileSync('/bin/busybox', join(bin, 'busybox'));
  for (const a of execFileSync('/bin/busybox', ['--list'], { encoding: 'utf8' }).split('\n').filter((x) => x !== '' && x !== 'busybox')) symlinkSync('busybox', join(bin, a));
  sh('umoci', ['repack', '--image', `${layout}:1`, bundle]);
  sh('umoci', ['config', '--image', `${layout}:1`, '--config.env', 'PATH=/bin', '--config.cmd', '/bin/sh', '--config.cmd', '-c', '--config.cmd', 'while true; do date; sleep 5; done']);
  return layout;
}

test("network.md's recipe: without a route out a create is refused; with it a pod runs a container from the node's registry and its DNS and metadata answer", { timeout: 900_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const ns = `k32t-${randomBytes(3).toString('hex')}-feos`;
  execFileSync('ip', ['netns', 'add', ns]);
  const { dir, cleanup } = tempDir('feos-recipe-');
  const stops: Array<() => Promise<void>> = [];
  t.after(async () => {
    for (const s of stops.reverse()) await s().catch(() => {});
    execFileSync('ip', ['netns', 'del', ns]);
    cleanup();
  });
  execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);

  // Without a default route: a warning at the start, FAILED_PRECONDITION for a create with a network.
  const bare = await startFeosd(join(dir, 'bare'), { guestDir: GUEST_DIR, netns: ns, extra: ['--pod-prefix', 'fd00:feed::/64'] });
  stops.push(() => bare.stop('SIGKILL'));
  await until('the warning', async () => (/the node lacks what the pods' network needs: no IPv4 default route/.test(bare.stderr()) ? true : undefined), 30_000);
  assert.match(bare.stderr(), /no IPv6 default route/);
  const refused = await feosctl(bare.socket, ['pod', 'create', '--network']);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /^feosctl: FAILED_PRECONDITION: pods with a network cannot run on this node: the node lacks what the pods' network needs: no IPv4 default route \(the kernel answers a pod's ARP for its gateway 169\.254\.0\.1 only with a route out.*`ip route add default/);
  await bare.stop('SIGTERM');

  // The recipe: a way out for each family; the registry on the node (the namespace's loopback).
  routeOut(ns);
  const registry = async (where: string, address: string, name: string) => {
    // The same storage: the image pushed to the node's is on the other too.
    writeFileSync(join(dir, `${name}.yml`), `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'registry')}\nhttp:\n  addr: ${address}\n`);
    const child = spawn('ip', ['netns', 'exec', where, 'docker-registry', 'serve', join(dir, `${name}.yml`)], { stdio: 'ignore' });
    stops.push(async () => {
      if (child.exitCode === null) {
        const ended = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await ended;
      }
    });
    await until(`the registry on ${address} answers`, async () => {
      try {
        return inNs(where, 'curl', ['-sf', `http://${address}/v2/`], 5000);
      } catch {
        return undefined;
      }
    }, 30_000);
  };
  await registry(ns, '127.0.0.1:5000', 'node-registry');
  inNs(ns, 'skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${buildImage(dir)}:1`, 'docker://127.0.0.1:5000/busybox:1'], 120_000);
  // Beyond the recipe: the far end of its veth in a namespace of its own, a plain-HTTP registry there
  // (11.0.0.2, an address of the internet as the pods' groups see it), which the pod reaches through its
  // network, masqueraded, with --insecure-registry.
  const inet = `k32t-${randomBytes(3).toString('hex')}-inet`;
  execFileSync('ip', ['netns', 'add', inet]);
  stops.unshift(async () => {
    execFileSync('ip', ['netns', 'del', inet]);
  });
  for (const [where, args] of [
    [ns, ['link', 'set', 'feos-out-end', 'netns', inet]],
    [ns, ['addr', 'add', '11.0.0.1/24', 'dev', 'feos-out']],
    [inet, ['link', 'set', 'lo', 'up']],
    [inet, ['link', 'set', 'feos-out-end', 'up']],
    [inet, ['addr', 'add', '11.0.0.2/24', 'dev', 'feos-out-end']],
  ] as const) {
    execFileSync('ip', ['-n', where, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  }
  await registry(inet, '11.0.0.2:5000', 'inet-registry');

  const feosd = await startFeosd(join(dir, 'node'), {
    guestDir: GUEST_DIR,
    netns: ns,
    extra: ['--pod-prefix', 'fd00:feed::/64', '--registry-forward', '127.0.0.1:5000', '--insecure-registry', '11.0.0.2:5000'],
  });
  stops.push(async () => {
    await feosd.stop('SIGKILL');
    try {
      const vm = fromBinary(MicroVmSchema, readFileSync(join(feosd.stateDir, 'vms', ID, 'microvm.pb')));
      if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
    } catch {}
  });
  await until('the pods network is up', async () => (/the pods network is up/.test(feosd.stderr()) ? true : undefined), 30_000);
  assert.doesNotMatch(feosd.stderr(), /the node lacks/);
  writeFileSync(join(dir, 'names.yaml'), 'id: svc\nversion: "1"\nnames:\n  - name: db\n    addresses: ["fd00:feed::99", "192.0.2.99"]\n');
  const put = await feosctl(feosd.socket, ['name-table', 'put', '-f', join(dir, 'names.yaml')]);
  assert.equal(put.code, 0, put.stderr);
  writeFileSync(join(dir, 'pod.yaml'), 'network:\n  nameTables: [svc]\n');
  const created = await feosctl(
    feosd.socket,
    ['pod', 'create', '--id', ID, '-f', join(dir, 'pod.yaml'), '--image', '127.0.0.1:5000/busybox:1', '--image', '11.0.0.2:5000/busybox:1', '--metadata', 'role=web', '--wait'],
    600_000,
  );
  assert.equal(created.code, 0, `${created.stdout}${created.stderr}\n${feosd.stderr().split('\n').slice(-15).join('\n')}`);
  // --wait shows the containers' states (it printed '-' for a RUNNING pod): one from the node's registry
  // through the forward, one from the plain-HTTP registry through the pod's network.
  assert.match(created.stdout, new RegExp(`^ID\\s+STATE.*\\n${ID}\\s+RUNNING\\s.*\\n\\nCONTAINER\\s+IMAGE\\s+STATE\\nbusybox\\s+127\\.0\\.0\\.1:5000/busybox:1\\s+running\\nbusybox-2\\s+11\\.0\\.0\\.2:5000/busybox:1\\s+running\\n$`));
  const pod = (await feosd.pods.getPod({ id: ID })).pod!;
  assert.equal(pod.state, PodState.RUNNING);
  assert.match(pod.ipv6Address, /^fd00:feed::/);

  const exec = async (args: string[]) => {
    const r = await feosctl(feosd.socket, ['pod', 'exec', ID, '--', ...args], 60_000);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  assert.match(await exec(['cat', '/proc/version']), /^Linux version /);
  assert.match(await exec(['ls', '/bin']), /\bcat\b[\s\S]*\bnslookup\b/);
  // The resolver answers a name of the pod's table.
  const aaaa = await exec(['nslookup', '-type=AAAA', 'db', '169.254.0.53']);
  const a = await exec(['nslookup', '-type=A', 'db', '169.254.0.53']);
  const both = await exec(['nslookup', 'db', '169.254.0.53']);
  assert.match(a, /192\.0\.2\.99/);
  assert.match(aaaa, /fd00:feed::99/, `${aaaa}\n${both}`);
  // The metadata service, asked as the AWS SDKs and cloud-init ask (IMDSv2's header names).
  const tokenAnswer = await exec(['sh', '-c', "printf 'PUT /latest/api/token HTTP/1.0\\r\\nX-aws-ec2-metadata-token-ttl-seconds: 60\\r\\n\\r\\n' | nc 169.254.169.254 80"]);
  assert.match(tokenAnswer, /^HTTP\/1\.[01] 200 /);
  const token = tokenAnswer.split('\r\n\r\n')[1]?.trim() ?? '';
  assert.match(token, /^[A-Za-z0-9_-]{20,}$/);
  assert.equal(await exec(['wget', '-qO-', '--header', `X-aws-ec2-metadata-token: ${token}`, 'http://169.254.169.254/metadata/role']), 'web');
  assert.equal(await exec(['wget', '-qO-', '--header', `X-aws-ec2-metadata-token: ${token}`, 'http://169.254.169.254/feos/pod-id']), ID);

  const del = await feosctl(feosd.socket, ['pod', 'delete', ID]);
  assert.equal(del.code, 0, del.stderr);
});
