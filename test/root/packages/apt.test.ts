// FeOS as an operator installs it (seed 000, "Packages", "DNS", "Jail, user and cgroup"; issue 23), as
// root, with Debian's own tools: `npm run package` builds two versions of the packages, each with its
// own guest; scripts/package-repo.ts makes a local apt repository signed by a throwaway key; apt-get
// installs feosd and feosctl from it with a sources list of the test's own (the machine's apt
// configuration is left as it is); every file is where the seed puts it and systemd-analyze verifies
// the units; feosd runs as feosd.service would (its ExecStart, the resolver's sockets of feosd.socket
// by systemd-socket-activate, a notify socket of the test's own, its cgroup with DelegateSubgroup=feosd
// beside feos-vms.service's) in a network namespace, answers DNS on the sockets it was handed, even a
// query sent while it restarts (feosd.socket played by a holder of the test's own); feosctl from the
// package creates a pod on /run/feos/api.sock whose QEMU is in vms/<id> of feos-vms.service's cgroup,
// taken over across the restart; the upgrade to the second version keeps the first guest beside the second, and autoremove leaves it. Everything is
// purged, the group and the state removed, at the end. One pod boot (TCG): within about ten minutes.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeClient } from '../../../src/feos/api/index.ts';
import { PodService, PodState } from '../../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { waitFor } from '../../helpers/wait.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
const GUEST_BUILD = join(REPO, 'build/guest');
const PACKAGES = ['feosd', 'feosctl', 'feos-node24', 'feos-guest'];
const VERSION_A = '0.1.0~test1';
const VERSION_B = '0.1.0~test2';
/** The second version's own guest: the first's files under a later version (versions sort by time). */
const GUEST_B = '29991231235959-00000000';
const NS = `k32pkg${process.pid}`;
const CGROUP2 = ['/sys/fs/cgroup', '/sys/fs/cgroup/unified'].find((d) => existsSync(join(d, 'cgroup.controllers')));

const sh = (cmd: string, args: string[], o: { env?: NodeJS.ProcessEnv; timeout?: number } = {}) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: o.timeout ?? 300_000, env: o.env ?? process.env, maxBuffer: 64 * 1024 * 1024 });
  } catch (err: unknown) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
  }
};
/** A command run without blocking the event loop, which reads feosd's output meanwhile (a full pipe would stall it). */
const run = (cmd: string, args: string[], timeout = 300_000) =>
  new Promise<string>((resolve, reject) =>
    execFile(cmd, args, { encoding: 'utf8', timeout, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => (err ? reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stdout}\n${stderr}`)) : resolve(stdout))),
  );
const installed = (p: string) => {
  try {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's format, not a template
    return execFileSync('dpkg-query', ['-W', '-f=${Status} ${Version}', p], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
};
/**
 * feosd.socket as systemd holds it, for restarts (systemd-socket-activate execs its one child): binds the
 * resolver's UDP and TCP sockets with IP_FREEBIND, then on "start" forks a feosd with them at fds 3 and 4
 * (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES=dns:dns) in the cgroup argv[1] names, on "stop" SIGTERMs it and
 * reaps it. argv[2:] is feosd's command line.
 */
const SOCKET_UNIT = `
import fcntl, os, signal, socket, sys
procs, argv = sys.argv[1], sys.argv[2:]
socks = []
for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND
    s.bind(("169.254.0.53", 53))
    if kind == socket.SOCK_STREAM:
        s.listen(128)
    socks.append(s)
print("listening")
child = 0
for line in sys.stdin:
    if line.strip() == "start":
        child = os.fork()
        if child == 0:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
            high = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100) for s in socks]
            for i, fd in enumerate(high):
                os.dup2(fd, 3 + i)
                os.set_inheritable(3 + i, True)
            os.environ.update(LISTEN_FDS="2", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="dns:dns")
            os.execv(argv[0], argv)
        print("started")
    elif line.strip() == "stop" and child:
        os.kill(child, signal.SIGTERM)
        os.waitpid(child, 0)
        child = 0
        print("stopped")
`;
const groupExists = (g: string) => readFileSync('/etc/group', 'utf8').split('\n').some((l) => l.startsWith(`${g}:`));

test('feosd and feosctl from a local apt repository: files, units, socket activation, READY=1, cgroups, a pod, the upgrade', { timeout: 1_500_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  for (const p of ['feosd', 'feosctl', 'feos-node24']) assert.ok(!installed(p).startsWith('install ok'), `${p} is installed on this machine already: the test would remove it`);
  for (const p of ['/var/lib/feos', '/run/feos', '/usr/lib/feos']) assert.ok(!existsSync(p), `${p} exists: another FeOS lives on this machine, which the test would take over`);
  assert.ok(CGROUP2, 'no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified');
  const hadGroup = groupExists('feos');
  const work = mkdtempSync(join(REPO, 'build/pkgtest-'));
  chmodSync(work, 0o755);
  const cg = join(CGROUP2, `k32t-packages-${process.pid}`);
  const feosdCg = join(cg, 'system.slice/feosd.service');
  const vmsCg = join(cg, 'system.slice/feos-vms.service');
  const aptDir = join(work, 'apt');
  const repo = join(work, 'repo');
  let feosd: ChildProcess | undefined;
  let notify: ChildProcess | undefined;
  const logs = { feosd: '', notify: '' };
  const guestA = execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_BUILD], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').at(-1)!;

  // apt-get on the test's own sources list, lists and caches: the machine's apt configuration stays.
  const aptOpts = [
    '-o', `Dir::Etc::SourceList=${join(aptDir, 'sources.list')}`,
    '-o', `Dir::Etc::SourceParts=${join(aptDir, 'sources.list.d')}`,
    '-o', `Dir::State::Lists=${join(aptDir, 'lists')}`,
    '-o', `Dir::Cache=${join(aptDir, 'cache')}`,
    '-o', 'DPkg::Lock::Timeout=300',
    '-o', 'Dpkg::Use-Pty=0',
  ];
  const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const apt = (...a: string[]) => sh('apt-get', [...aptOpts, ...a], { env: aptEnv, timeout: 600_000 });

  t.after(() => {
    const quiet = (f: () => unknown) => {
      try {
        f();
      } catch {}
    };
    // QEMU outlives feosd by design: end the microVMs by their pids in vms/, then feosd.
    const killAll = (cgroup: string) =>
      quiet(() => {
        for (const pid of readFileSync(join(cgroup, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) quiet(() => process.kill(Number(pid), 'SIGKILL'));
      });
    quiet(() => {
      for (const e of readdirSync(join(vmsCg, 'vms'), { withFileTypes: true })) if (e.isDirectory()) killAll(join(vmsCg, 'vms', e.name));
    });
    quiet(() => feosd?.kill('SIGKILL'));
    // A feosd the socket holder started outlives the holder: end whatever is in feosd.service's cgroups.
    for (const d of [join(feosdCg, 'feosd'), feosdCg]) killAll(d);
    quiet(() => notify?.kill('SIGKILL'));
    quiet(() => {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's format, not a template
      const dpkgNames = execFileSync('dpkg-query', ['-W', '-f=${Package}\n', 'feos*'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n').filter(Boolean);
      const present = dpkgNames.filter((p) => installed(p) !== '' && !installed(p).startsWith('unknown ok not-installed'));
      if (present.length > 0) apt('purge', '-y', '-q', ...present);
    });
    quiet(() => !hadGroup && groupExists('feos') && execFileSync('groupdel', ['feos']));
    for (const p of ['/var/lib/feos', '/run/feos', '/usr/lib/feos']) quiet(() => rmSync(p, { recursive: true, force: true }));
    // The cgroups, the deepest first (each is empty once its processes ended).
    quiet(() => {
      const dirs = [cg, ...readdirSync(cg, { recursive: true, withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(e.parentPath, e.name))];
      for (const d of dirs.sort((a, b) => b.length - a.length)) {
        for (let i = 0; i < 100 && existsSync(d); i++) {
          try {
            rmdirSync(d);
          } catch {
            execFileSync('sleep', ['0.1']); // the kernel frees a cgroup once its last process is reaped
          }
        }
      }
    });
    quiet(() => execFileSync('ip', ['netns', 'del', NS], { stdio: 'ignore' }));
    quiet(() => execFileSync('gpgconf', ['--homedir', join(work, 'key'), '--kill', 'gpg-agent'], { stdio: 'ignore' }));
    rmSync(work, { recursive: true, force: true });
  });

  const step = steps(t, () => [
    `feosd's log:\n${logs.feosd.split('\n').slice(-40).join('\n')}\nnotify: ${logs.notify}`,
  ]);

  await step('npm run package builds both versions, and package-repo a signed repository of the first', async () => {
    const build = (version: string, guests: string[], out: string) => {
      const dir = join(work, `guests-${version}`);
      for (const [name, from] of guests.map((g) => [g, guestA] as const)) {
        mkdirSync(join(dir, name), { recursive: true });
        for (const f of readdirSync(join(GUEST_BUILD, from))) execFileSync('cp', ['-l', join(GUEST_BUILD, from, f), join(dir, name, f)]);
      }
      // What `npm run package -- --version V --guest-dir DIR --out OUT` runs.
      const made = sh(process.execPath, [join(REPO, 'scripts/package.ts'), '--version', version, '--guest-dir', dir, '--out', out], { timeout: 600_000 }).trim().split('\n');
      return made.map((f) => f.slice(out.length + 1)).sort();
    };
    const a = build(VERSION_A, [guestA], join(work, 'deb-a'));
    assert.deepEqual(a, [`feos-guest-${guestA}_${VERSION_A}_amd64.deb`, `feos-guest_${VERSION_A}_all.deb`, `feos-node24_${process.version.slice(1)}-1_amd64.deb`, `feosctl_${VERSION_A}_amd64.deb`, `feosd_${VERSION_A}_amd64.deb`]);
    const b = build(VERSION_B, [guestA, GUEST_B], join(work, 'deb-b'));
    assert.ok(b.includes(`feos-guest-${GUEST_B}_${VERSION_B}_amd64.deb`), b.join(' '));
    assert.match(sh('dpkg-deb', ['-f', join(work, 'deb-b', `feos-guest_${VERSION_B}_all.deb`), 'Depends']), new RegExp(`^feos-guest-${GUEST_B}\\s*$`));
    sh(process.execPath, [join(REPO, 'scripts/package-repo.ts'), '--debs', join(work, 'deb-a'), '--out', repo, '--key-dir', join(work, 'key')]);
    // The key stays out of the repository, its files 0600 in a 0700 home; the Release is signed by it.
    assert.equal(readdirSync(repo).sort().join(' '), 'dists feos.gpg pool');
    for (const e of readdirSync(join(work, 'key'), { recursive: true, withFileTypes: true })) if (e.isFile()) assert.equal(execFileSync('stat', ['-c', '%a', join(e.parentPath, e.name)], { encoding: 'utf8' }).trim(), '600', e.name);
    sh('gpgv', ['--keyring', join(repo, 'feos.gpg'), join(repo, 'dists/stable/InRelease')]);
    mkdirSync(join(aptDir, 'sources.list.d'), { recursive: true });
    mkdirSync(join(aptDir, 'lists/partial'), { recursive: true });
    mkdirSync(join(aptDir, 'cache/archives/partial'), { recursive: true });
    writeFileSync(join(aptDir, 'sources.list'), `deb [signed-by=${join(repo, 'feos.gpg')}] file:${repo} stable main\n`);
  });

  await step('apt-get install feosd feosctl puts every file where the seed says, with the group feos and the units enabled', async () => {
    apt('update', '-q');
    apt('install', '-y', '-q', '--no-install-recommends', 'feosd', 'feosctl');
    for (const p of PACKAGES) assert.match(installed(p), /^install ok installed/, p);
    assert.match(installed(`feos-guest-${guestA}`), /^install ok installed/);
    for (const f of [
      '/usr/sbin/feosd',
      '/usr/bin/feosctl',
      '/usr/lib/systemd/system/feosd.service',
      '/usr/lib/systemd/system/feos-vms.service',
      '/usr/lib/systemd/system/feosd.socket',
      '/etc/default/feosd',
      '/usr/lib/sysusers.d/feos.conf',
      '/etc/apt/apt.conf.d/50feosd',
      '/usr/lib/feos/node/bin/node',
      `/usr/lib/feos/guest/${guestA}/vmlinuz`,
      `/usr/lib/feos/guest/${guestA}/initramfs`,
      // Enabled the first time, as debhelper does (started too where systemd runs).
      '/etc/systemd/system/multi-user.target.wants/feosd.service',
      '/etc/systemd/system/sockets.target.wants/feosd.socket',
    ]) {
      assert.ok(existsSync(f), f);
    }
    assert.ok(groupExists('feos'), 'the group feos (sysusers.d)');
    assert.match(readFileSync('/etc/default/feosd', 'utf8'), /^FEOSD_ARGS=""$/m);
    assert.equal(sh('/usr/sbin/feosd', ['--version']).trim(), '0.1.0');
    assert.match(sh('/usr/bin/feosctl', ['--help']), /Usage: feosctl/);
  });

  await step('systemd-analyze verify takes every unit (systemd 252 here does not know DelegateSubgroup= yet, and says so)', async () => {
    const units = ['feosd.service', 'feos-vms.service', 'feosd.socket'].map((u) => `/usr/lib/systemd/system/${u}`);
    const r = (() => {
      try {
        return { code: 0, out: execFileSync('systemd-analyze', ['verify', ...units], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) };
      } catch (err: unknown) {
        const e = err as { status: number; stdout: string; stderr: string };
        return { code: e.status, out: `${e.stdout}${e.stderr}` };
      }
    })();
    assert.equal(r.code, 0, r.out);
    const version = Number(/systemd (\d+)/.exec(sh('systemd-analyze', ['--version']))![1]);
    const lines = r.out.split('\n').filter((l) => l.trim() && !(version < 254 && /Unknown key (name )?'DelegateSubgroup'/.test(l)));
    assert.deepEqual(lines, []);
  });

  const unit = readFileSync('/usr/lib/systemd/system/feosd.service', 'utf8');
  const socketUnit = readFileSync('/usr/lib/systemd/system/feosd.socket', 'utf8');
  const podId = 'pkgtestvm01';
  const dig = (...a: string[]) => run('nsenter', [`--net=/run/netns/${NS}`, 'dig', '@169.254.0.53', '+tries=1', ...a], 300_000);
  const notifications = () => logs.notify.split('\n').filter((l) => l.includes('READY=1')).length;
  let feosdPid = 0;
  let feosdArgv: string[] = [];

  await step("feosd runs as feosd.service would: a TCP query to feosd.socket's address starts it, it takes the sockets named dns, answers, and sends READY=1", async () => {
    assert.match(socketUnit, /^ListenDatagram=169\.254\.0\.53:53$/m);
    assert.match(socketUnit, /^ListenStream=169\.254\.0\.53:53$/m);
    assert.match(socketUnit, /^FileDescriptorName=dns$/m);
    for (const k of ['Type=notify', 'Delegate=yes', 'DelegateSubgroup=feosd', 'KillMode=process', 'StateDirectory=feos']) assert.match(unit, new RegExp(`^${k}$`, 'm'));
    // The cgroups systemd would make: feosd.service with its leaf feosd (DelegateSubgroup), feos-vms.service.
    mkdirSync(join(feosdCg, 'feosd'), { recursive: true });
    mkdirSync(vmsCg, { recursive: true });
    sh('ip', ['netns', 'add', NS]);
    sh('ip', ['-n', NS, 'link', 'set', 'lo', 'up']);
    // systemd-socket-activate has no FreeBind=: the address is on lo before feosd gives it to feos-dns.
    sh('ip', ['-n', NS, 'addr', 'add', '169.254.0.53/32', 'dev', 'lo']);
    // The test's notify socket, read by a process of its own (Node has no unix datagram sockets).
    const notifySocket = join(work, 'notify.sock');
    notify = spawn('python3', ['-u', '-c', 'import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(sys.argv[1])\nprint("bound")\nwhile True: print(s.recv(4096).decode().replace("\\n"," "))', notifySocket], { stdio: ['ignore', 'pipe', 'inherit'] });
    notify.stdout!.on('data', (d: Buffer) => {
      logs.notify += d.toString();
    });
    await waitFor('the notify socket bound', 10_000, () => logs.notify.includes('bound'));
    // ExecStart as the unit has it, --vms-cgroup at feos-vms.service's cgroup of this machine's hierarchy and
    // FEOSD_ARGS the test's: a pod prefix for the resolver, TCG, the self-upgrade.
    const execStart = /^ExecStart=(.*)$/m.exec(unit)![1].split(/\s+/);
    assert.deepEqual(execStart, ['/usr/sbin/feosd', '--vms-cgroup', '/sys/fs/cgroup/system.slice/feos-vms.service', '$FEOSD_ARGS']);
    feosdArgv = [execStart[0], '--vms-cgroup', vmsCg, '--pod-prefix', '2001:db8:77::/64', '--accel', 'tcg'];
    const argv = feosdArgv;
    // systemd-socket-activate passes on PATH, HOME, TERM and USER alone: -E the notify socket, which systemd sets itself.
    const activate = ['systemd-socket-activate', '-E', 'NOTIFY_SOCKET', '-l', '169.254.0.53:53', '--fdname=dns', '--', 'systemd-socket-activate', '-E', 'NOTIFY_SOCKET', '-d', '-l', '169.254.0.53:53', '--fdname=dns:dns', '--'];
    feosd = spawn('sh', ['-c', 'echo $$ > "$0" && exec "$@"', join(feosdCg, 'feosd/cgroup.procs'), 'nsenter', `--net=/run/netns/${NS}`, '--', ...activate, ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', NOTIFY_SOCKET: notifySocket, LANG: 'C.UTF-8' },
    });
    feosdPid = feosd.pid!;
    for (const s of [feosd.stdout!, feosd.stderr!]) s.on('data', (d: Buffer) => (logs.feosd += d.toString()));
    await waitFor('systemd-socket-activate listens', 20_000, () => logs.feosd.includes('Listening on 169.254.0.53:53'));
    assert.ok(!existsSync('/run/feos/api.sock'), 'feosd waits for the first query');
    // The first query, over TCP, starts feosd, and is answered once it serves: feosd's resolver refuses
    // a source that is no pod of its own.
    const tcp = await dig('+tcp', '+time=240', 'example.test');
    assert.match(tcp, /status: REFUSED/);
    await waitFor("feosd's log: the resolver took the sockets", 10_000, () => logs.feosd.includes('the resolver took the sockets it was handed (LISTEN_FDS)'));
    assert.match(await dig('+time=30', 'example.test'), /status: REFUSED/);
    await waitFor('READY=1 on the notify socket', 60_000, () => notifications() >= 1);
    assert.match(logs.notify, new RegExp(`MAINPID=${feosdPid}`));
    // The API socket belongs to the group feos, mode 0660.
    assert.equal(execFileSync('stat', ['-c', '%G %a', '/run/feos/api.sock'], { encoding: 'utf8' }).trim(), 'feos 660');
    // feosd stays in the leaf systemd started it in; nothing is left in feosd.service itself.
    assert.equal(readFileSync(`/proc/${feosdPid}/cgroup`, 'utf8').split('\n').find((l) => l.startsWith('0::'))!.slice(3), join(feosdCg, 'feosd').slice(CGROUP2!.length));
    assert.equal(readFileSync(join(feosdCg, 'cgroup.procs'), 'utf8'), '');
  });

  await step("feosctl from the package creates a pod on /run/feos/api.sock; its QEMU is in feos-vms.service's vms/<id> with cpu.weight 100 per vCPU", async () => {
    const out = await run('/usr/bin/feosctl', ['pod', 'create', '--id', podId, '--vcpus', '1', '--memory', '256Mi', '--wait', '-o', 'json'], 600_000);
    assert.equal(JSON.parse(out).state, 'POD_STATE_RUNNING', out);
    const dir = join(vmsCg, 'vms', podId);
    const pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
    assert.equal(pids.length, 1, `one process in ${dir}`);
    assert.match(readFileSync(`/proc/${pids[0]}/cmdline`, 'utf8'), /qemu-system-x86_64/);
    assert.equal(readFileSync(`/proc/${pids[0]}/cgroup`, 'utf8').split('\n').find((l) => l.startsWith('0::'))!.slice(3), dir.slice(CGROUP2!.length));
    // cpu.weight exists where the hierarchy has the cpu controller; a hybrid host (cgroup v1's cpu) has none.
    const controllers = readFileSync(join(CGROUP2!, 'cgroup.controllers'), 'utf8').split(/\s+/);
    if (controllers.includes('cpu')) {
      assert.equal(readFileSync(join(dir, 'cpu.weight'), 'utf8').trim(), '100');
      // The controllers are on below feosd's cgroups, in feos-vms.service and its vms/, never above.
      assert.match(readFileSync(join(vmsCg, 'cgroup.subtree_control'), 'utf8'), /\bcpu\b/);
      assert.match(readFileSync(join(vmsCg, 'vms/cgroup.subtree_control'), 'utf8'), /\bcpu\b/);
    } else {
      t.diagnostic(`${CGROUP2} has no cpu controller (${controllers.join(' ') || 'none'}): cgroup v1 holds it on this host, so there is no cpu.weight to check`);
      assert.ok(!existsSync(join(dir, 'cpu.weight')));
    }
  });

  await step("a query sent while feosd restarts waits in feosd.socket's sockets and is answered once it is back; the pod is taken over", async () => {
    // systemd-socket-activate ends with its feosd: a holder of the test's own now plays feosd.socket, as
    // systemd does, binding the sockets with IP_FREEBIND (FreeBind=yes) and starting feosd again and again
    // in feosd.service/feosd with LISTEN_FDS=2, LISTEN_FDNAMES=dns:dns and the notify socket.
    feosd!.kill('SIGTERM');
    await waitFor('feosd ends on SIGTERM', 60_000, () => feosd!.exitCode !== null || feosd!.signalCode !== null);
    const argv = [...feosdArgv];
    feosd = spawn('nsenter', [`--net=/run/netns/${NS}`, '--', 'python3', '-u', '-c', SOCKET_UNIT, join(feosdCg, 'feosd/cgroup.procs'), ...argv], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', NOTIFY_SOCKET: join(work, 'notify.sock') },
    });
    logs.feosd = '';
    for (const s of [feosd.stdout!, feosd.stderr!]) s.on('data', (d: Buffer) => (logs.feosd += d.toString()));
    const say = (cmd: string, done: string, count: number) => {
      feosd!.stdin!.write(`${cmd}\n`);
      return waitFor(`the socket holder: ${done}`, 120_000, () => logs.feosd.split(`${done}\n`).length > count);
    };
    await waitFor('the socket holder listens', 30_000, () => logs.feosd.includes('listening\n'));
    const ready = notifications();
    await say('start', 'started', 1);
    await waitFor('READY=1 of the feosd it started', 120_000, () => notifications() > ready);
    assert.match(await dig('+time=30', 'example.test'), /status: REFUSED/);
    // feosd stops (its microVM runs on); a query now waits in the socket's queue ...
    await say('stop', 'stopped', 1);
    const waiting = dig('+time=240', 'example.test');
    await waitFor('the query queued in the UDP socket', 30_000, async () => /^UNCONN\s+[1-9]\d*\s/m.test(await run('nsenter', [`--net=/run/netns/${NS}`, 'ss', '-Hlun', 'sport = :53'])));
    // ... and is answered by the next feosd, once it has gone through its pods.
    await say('start', 'started', 2);
    assert.match(await waiting, /status: REFUSED/);
    await waitFor('READY=1 of the second feosd', 120_000, () => notifications() > ready + 1);
    assert.equal(logs.feosd.split('the resolver took the sockets it was handed (LISTEN_FDS)').length, 3, 'both feosds took the sockets named dns');
    const pods = makeClient(PodService, 'unix:/run/feos/api.sock');
    t.after(() => pods.grpc.close());
    await waitFor('the pod taken over RUNNING', 120_000, async () => (await pods.getPod({ id: podId })).pod?.state === PodState.RUNNING);
    await pods.deletePod({ id: podId });
    await waitFor("the pod's QEMU gone", 60_000, () => !existsSync(join(vmsCg, 'vms', podId)) || readFileSync(join(vmsCg, 'vms', podId, 'cgroup.procs'), 'utf8') === '');
    await say('stop', 'stopped', 2);
    feosd.stdin!.end();
    await waitFor('the socket holder ends', 30_000, () => feosd!.exitCode !== null || feosd!.signalCode !== null);
  });

  await step('the upgrade to the second version installs its guest beside the first, which autoremove leaves (50feosd)', async () => {
    sh(process.execPath, [join(REPO, 'scripts/package-repo.ts'), '--debs', join(work, 'deb-b'), '--out', repo, '--key-dir', join(work, 'key')]);
    apt('update', '-q');
    apt('-y', '-q', '--with-new-pkgs', 'upgrade');
    for (const p of ['feosd', 'feosctl', 'feos-guest', `feos-guest-${GUEST_B}`]) assert.match(installed(p), new RegExp(`^install ok installed ${VERSION_B.replace('~', '\\~')}$`), p);
    assert.match(installed(`feos-guest-${guestA}`), /^install ok installed/);
    for (const g of [guestA, GUEST_B]) assert.ok(existsSync(`/usr/lib/feos/guest/${g}/vmlinuz`), g);
    // Nothing depends on the first guest any more: only 50feosd keeps it from autoremove.
    assert.doesNotMatch(apt('-s', 'autoremove'), /^Remv feos-guest-/m);
    // Without apt.conf.d (APT_CONFIG is read before it, and can move it away), autoremove would remove it.
    writeFileSync(join(aptDir, 'no-parts.conf'), 'Dir::Etc::Parts "/nonexistent";\n');
    const without = sh('apt-get', [...aptOpts, '-s', 'autoremove'], { env: { ...aptEnv, APT_CONFIG: join(aptDir, 'no-parts.conf') } });
    assert.match(without, new RegExp(`^Remv feos-guest-${guestA} `, 'm'));
  });

  await step('purging leaves no unit enabled or masked behind', async () => {
    apt('purge', '-y', '-q', 'feosd', 'feosctl', 'feos-guest', `feos-guest-${guestA}`, `feos-guest-${GUEST_B}`, 'feos-node24');
    for (const p of PACKAGES) assert.ok(!installed(p).startsWith('install ok'), p);
    for (const f of ['/etc/systemd/system/multi-user.target.wants/feosd.service', '/etc/systemd/system/sockets.target.wants/feosd.socket', '/etc/systemd/system/feosd.service', '/etc/default/feosd', '/etc/apt/apt.conf.d/50feosd', '/usr/lib/feos/guest']) {
      assert.ok(!existsSync(f), f);
    }
  });
});
