/**
 * The guest's containers (seed 000, "A pod": the guest runs the containers its spec names with the
 * names as their IDs, in order): each is `<root>/<name>/` on the pod's disk, with
 *
 * | File | What it is |
 * |---|---|
 * | `container.json` | the config feosd gave, the image's digest, the order of creation |
 * | `upper/`, `work/` | the overlay's writable layer: what the container wrote, kept across boots |
 * | `rootfs/` | the overlay (lower: the image's rootfs in the store) that crun runs on |
 * | `config.json` | the OCI runtime spec crun reads (the bundle) |
 * | `log` | the container's stdout and stderr |
 * | `pid`, `exit` | its init process while it runs; its exit code once it ended |
 *
 * crun (Debian's) runs it: `crun run` under a shell that records the exit code, so that the code is
 * kept when the agent itself is started again; `--no-pivot`, since the guest's root is the initramfs,
 * which pivot_root(2) refuses (EINVAL). Namespaces: pid, mount, ipc, uts; the network is the
 * pod's (the guest's). No cgroups (`--cgroup-manager=disabled`): the microVM is the pod's bound.
 *
 * Self-contained (node: and ./images.ts only), as the guest carries it.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ImageStore, PullOptions } from './images.ts';

const run = promisify(execFile);

/** A container's config (feos.guest.v1.ContainerConfig). */
export interface ContainerConfig {
  name: string;
  image: string;
  command: string[];
  args: string[];
  env: Record<string, string>;
  volumeMounts: { name: string; path: string; readOnly: boolean }[];
}

/** A container's state as ListContainers reports it. */
export interface ContainerStatus {
  name: string;
  state: 'created' | 'running' | 'exited';
  exitCode: number;
  pid: number;
  imageDigest: string;
}

interface Kept {
  version: 1;
  seq: number;
  config: ContainerConfig;
  imageDigest: string;
  rootfs: string;
  process: { args: string[]; env: string[]; cwd: string; uid: number; gid: number };
}

/** A container operation that failed; its message names the container and the step. */
export class ContainerError extends Error {
  readonly code: 'INVALID_ARGUMENT' | 'NOT_FOUND' | 'FAILED_PRECONDITION' | 'INTERNAL';
  constructor(code: ContainerError['code'], message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ContainerError';
    this.code = code;
  }
}

const NAME_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID', 'CAP_SETUID',
  'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE',
];

/** The guest's containers on the pod's disk, run with crun. */
export class Containers {
  readonly root: string;
  readonly #images: ImageStore;
  readonly #crun: string;
  readonly #crunRoot: string;
  readonly #creating = new Map<string, Promise<{ adopted: boolean; imageDigest: string }>>();

  /**
   * @param root the containers' directory, such as /data/containers
   * @param images the image store the containers' images come from
   * @param crun the crun binary @default "/usr/bin/crun"
   */
  constructor(root: string, images: ImageStore, crun = '/usr/bin/crun', crunRoot = '/run/crun') {
    this.root = root;
    this.#images = images;
    this.#crun = crun;
    this.#crunRoot = crunRoot;
  }

  #dir(name: string): string {
    return join(this.root, name);
  }

  #kept(name: string): Kept | undefined {
    try {
      return JSON.parse(fs.readFileSync(join(this.#dir(name), 'container.json'), 'utf8')) as Kept;
    } catch {
      return undefined;
    }
  }

  /**
   * Creates a container: pulls its image (with `pull`'s token and endpoints), makes its directory and
   * its process's arguments (command or the image's entrypoint, then args or the image's cmd) and
   * environment (the image's, then the config's). A container the disk holds is adopted as it is.
   * @throws ContainerError INVALID_ARGUMENT for a bad name; PullError when the pull fails
   */
  create(config: ContainerConfig, pull: PullOptions): Promise<{ adopted: boolean; imageDigest: string }> {
    if (!NAME_RE.test(config.name)) {
      return Promise.reject(new ContainerError('INVALID_ARGUMENT', `container name ${JSON.stringify(config.name)}: 1 to 63 lowercase letters, digits and '-'`));
    }
    const inFlight = this.#creating.get(config.name);
    if (inFlight) return inFlight;
    const p = this.#create(config, pull).finally(() => this.#creating.delete(config.name));
    this.#creating.set(config.name, p);
    return p;
  }

  async #create(config: ContainerConfig, pull: PullOptions): Promise<{ adopted: boolean; imageDigest: string }> {
    const kept = this.#kept(config.name);
    if (kept) return { adopted: true, imageDigest: kept.imageDigest };
    const { image } = await this.#images.pull(config.image, pull);
    const args = [...(config.command.length > 0 ? config.command : image.config.entrypoint), ...(config.command.length > 0 || config.args.length > 0 ? config.args : image.config.cmd)];
    if (args.length === 0) throw new ContainerError('INVALID_ARGUMENT', `container ${config.name}: neither the spec nor the image ${config.image} names a command`);
    const env = new Map<string, string>();
    env.set('PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    for (const kv of image.config.env) {
      const i = kv.indexOf('=');
      if (i > 0) env.set(kv.slice(0, i), kv.slice(i + 1));
    }
    for (const [k, v] of Object.entries(config.env)) env.set(k, v);
    env.set('HOSTNAME', config.name);
    const [uid, gid] = /^\d+(:\d+)?$/.test(image.config.user) ? image.config.user.split(':').map(Number) : [0, 0];
    const dir = this.#dir(config.name);
    const tmp = `${dir}.creating`;
    fs.rmSync(tmp, { recursive: true, force: true });
    for (const d of ['upper', 'work', 'rootfs']) fs.mkdirSync(join(tmp, d), { recursive: true });
    const seq = fs.existsSync(this.root) ? fs.readdirSync(this.root).filter((n) => NAME_RE.test(n)).length : 0;
    const k: Kept = {
      version: 1,
      seq,
      config,
      imageDigest: image.digest,
      rootfs: image.rootfs,
      process: { args, env: [...env].map(([a, b]) => `${a}=${b}`), cwd: image.config.workingDir || '/', uid, gid: gid ?? 0 },
    };
    fs.writeFileSync(join(tmp, 'container.json'), JSON.stringify(k, null, 2));
    fs.renameSync(tmp, dir);
    return { adopted: false, imageDigest: image.digest };
  }

  /**
   * Starts a created or exited container: mounts its overlay, writes its OCI spec and runs it with
   * crun, its stdout and stderr appended to its log. One that runs is left running.
   * @throws ContainerError NOT_FOUND for a container not created; INTERNAL when the mount fails
   */
  async start(name: string): Promise<void> {
    const k = this.#kept(name);
    if (!k) throw new ContainerError('NOT_FOUND', `container ${name} not found`);
    const st = this.status(name);
    if (st?.state === 'running') return;
    const dir = this.#dir(name);
    const rootfs = join(dir, 'rootfs');
    if (!fs.readFileSync('/proc/mounts', 'utf8').includes(` ${rootfs} overlay `)) {
      try {
        await run('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${k.rootfs},upperdir=${join(dir, 'upper')},workdir=${join(dir, 'work')}`, rootfs], {
          timeout: 30_000,
        });
      } catch (err: unknown) {
        throw new ContainerError('INTERNAL', `container ${name}: overlay mount: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
      }
    }
    fs.writeFileSync(join(dir, 'config.json'), JSON.stringify(ociSpec(k), null, 2));
    fs.rmSync(join(dir, 'exit'), { force: true });
    fs.rmSync(join(dir, 'pid'), { force: true });
    // The boot its pid will belong to (see `status`).
    const boot = bootId();
    if (boot) fs.writeFileSync(join(dir, 'boot'), boot);
    else fs.rmSync(join(dir, 'boot'), { force: true });
    // A container of an earlier agent's run that ended leaves crun's state: remove it first.
    await run(this.#crun, ['--root', this.#crunRoot, 'delete', '-f', name]).catch(() => {});
    const log = fs.openSync(join(dir, 'log'), 'a');
    const q = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
    const script = `${q(this.#crun)} --root ${q(this.#crunRoot)} --cgroup-manager=disabled run --no-pivot --bundle ${q(dir)} --pid-file ${q(join(dir, 'pid'))} ${q(name)} </dev/null; echo $? > ${q(join(dir, 'exit'))}.tmp; mv ${q(join(dir, 'exit'))}.tmp ${q(join(dir, 'exit'))}`;
    const child = spawn('/bin/sh', ['-c', script], { stdio: ['ignore', log, log], detached: true });
    child.unref();
    fs.closeSync(log);
    // Started once crun wrote the pid (or the container already ended).
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (fs.existsSync(join(dir, 'pid')) || fs.existsSync(join(dir, 'exit'))) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new ContainerError('INTERNAL', `container ${name}: crun did not start it within 30 s (see its log)`);
  }

  /** A container's state, or undefined when the guest has none of that name. */
  status(name: string): ContainerStatus | undefined {
    const k = this.#kept(name);
    if (!k) return undefined;
    const dir = this.#dir(name);
    const exit = readOr(join(dir, 'exit'));
    if (exit !== undefined) return { name, state: 'exited', exitCode: Number.parseInt(exit, 10) || 0, pid: 0, imageDigest: k.imageDigest };
    const pid = Number.parseInt(readOr(join(dir, 'pid')) ?? '', 10);
    // A pid file of an earlier boot names no process of this one (its number may be reused). The boot is
    // told by the kernel's boot_id, written beside it at the start: a guest resumed from its memory (a
    // restore on another node, issue 18) is the same boot, though its wall clock jumped ahead by the time
    // it was suspended, which an mtime against "now - uptime" takes for a reboot. Without the file (an
    // older agent's container), the mtime is compared as before.
    const boot = readOr(join(dir, 'boot'));
    const sameBoot = boot !== undefined ? boot === bootId() : pid > 0 && fs.statSync(join(dir, 'pid')).mtimeMs >= bootTimeMs();
    if (pid > 0 && fs.existsSync(`/proc/${pid}`) && sameBoot) {
      return { name, state: 'running', exitCode: 0, pid, imageDigest: k.imageDigest };
    }
    return { name, state: 'created', exitCode: 0, pid: 0, imageDigest: k.imageDigest };
  }

  /** Every container, in the order of creation. */
  list(): ContainerStatus[] {
    if (!fs.existsSync(this.root)) return [];
    return fs
      .readdirSync(this.root)
      .filter((n) => NAME_RE.test(n))
      .map((n) => ({ n, k: this.#kept(n) }))
      .filter((e) => e.k !== undefined)
      .sort((a, b) => a.k!.seq - b.k!.seq)
      .map((e) => this.status(e.n)!);
  }

  /** The container's log file. @throws ContainerError NOT_FOUND */
  logPath(name: string): string {
    if (!this.#kept(name)) throw new ContainerError('NOT_FOUND', `container ${name} not found`);
    return join(this.#dir(name), 'log');
  }
}

/** The kernel's ID of this boot (it stays across a suspend and resume of the microVM), or undefined. */
function bootId(): string | undefined {
  return readOr('/proc/sys/kernel/random/boot_id');
}

/** When the guest booted (ms since the epoch), from /proc/uptime. */
function bootTimeMs(): number {
  const up = Number.parseFloat((readOr('/proc/uptime') ?? '0').split(' ')[0]);
  return Date.now() - up * 1000 - 1000;
}

function readOr(path: string): string | undefined {
  try {
    return fs.readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** The OCI runtime spec (1.0) of a container. */
function ociSpec(k: Kept): Record<string, unknown> {
  const mounts: Record<string, unknown>[] = [
    { destination: '/proc', type: 'proc', source: 'proc' },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
    { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
    { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
    { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
  ];
  if (fs.existsSync('/etc/resolv.conf')) mounts.push({ destination: '/etc/resolv.conf', type: 'bind', source: '/etc/resolv.conf', options: ['rbind', 'ro'] });
  for (const m of k.config.volumeMounts) {
    mounts.push({ destination: m.path, type: 'bind', source: `/volumes/${m.name}`, options: ['rbind', m.readOnly ? 'ro' : 'rw'] });
  }
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: k.process.uid, gid: k.process.gid },
      args: k.process.args,
      env: k.process.env,
      cwd: k.process.cwd,
      capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS },
      noNewPrivileges: true,
    },
    root: { path: 'rootfs', readonly: false },
    hostname: k.config.name,
    mounts,
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      maskedPaths: ['/proc/kcore', '/proc/keys', '/proc/timer_list', '/sys/firmware'],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
}
