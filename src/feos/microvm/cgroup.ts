/**
 * Each microVM's cgroup (seed 000, "Jail, user and cgroup"), where cgroup v2 allows:
 * `<root>/vms/<id>` with `cpu.weight` 100 per vCPU and no caps; cpu and memory are enabled in `<root>`
 * and `<root>/vms`, never above. Best effort: a host on cgroup v1 (as this project's CI) has none.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, readdir, rmdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Whether `root` is a cgroup v2 directory. */
export function isCgroup2(root: string): boolean {
  return existsSync(join(root, 'cgroup.controllers'));
}

async function enable(dir: string): Promise<void> {
  const have = (await readFile(join(dir, 'cgroup.controllers'), 'utf8')).split(/\s+/);
  const want = ['cpu', 'memory'].filter((c) => have.includes(c));
  if (want.length > 0) await writeFile(join(dir, 'cgroup.subtree_control'), want.map((c) => `+${c}`).join(' '));
}

/**
 * Puts `pid` into `<root>/vms/<id>` with `cpu.weight` = 100 × vCPUs (1 to 10000).
 * @throws Error naming the file when the kernel refuses
 */
export async function placeInCgroup(root: string, id: string, pid: number, vcpus: number): Promise<void> {
  if (!isCgroup2(root)) return;
  const vms = join(root, 'vms');
  await enable(root);
  await mkdir(vms, { recursive: true });
  await enable(vms);
  const dir = join(vms, id);
  await mkdir(dir, { recursive: true });
  if (existsSync(join(dir, 'cpu.weight'))) await writeFile(join(dir, 'cpu.weight'), String(Math.min(10000, Math.max(1, 100 * vcpus))));
  await writeFile(join(dir, 'cgroup.procs'), String(pid));
}

/** Removes `<root>/vms/<id>` (empty once its QEMU ended); a missing one is fine. */
export async function removeCgroup(root: string, id: string): Promise<void> {
  await rmdir(join(root, 'vms', id)).catch(() => {});
}

/**
 * Where the cgroup v2 hierarchy is mounted in this mount namespace (the first `cgroup2` of
 * /proc/self/mountinfo: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), or undefined.
 */
export function cgroup2Mount(mountinfo = '/proc/self/mountinfo'): string | undefined {
  for (const line of readFileSync(mountinfo, 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (post?.split(' ')[0] === 'cgroup2') return pre.split(' ')[4];
  }
  return undefined;
}

/**
 * The directory of `pid`'s cgroup v2 (`0::/path` of /proc/PID/cgroup below the hierarchy's mount), or
 * undefined without a cgroup v2 hierarchy.
 */
export function cgroupOf(pid: number | 'self' = 'self'): string | undefined {
  const mount = cgroup2Mount();
  if (!mount) return undefined;
  const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'));
  return line === undefined ? undefined : join(mount, line.slice(3));
}

/**
 * The cgroup feosd is given (seed 000, "Jail, user and cgroup"): its own, or the parent of its own
 * where it is already in the leaf `feosd` (systemd's DelegateSubgroup=feosd) or in systemd's `.control`
 * (feosd --hand-over-vms as ExecStopPost=).
 */
export function givenCgroup(own: string): string {
  return ['feosd', '.control'].includes(basename(own)) ? dirname(own) : own;
}

/**
 * Moves feosd into the leaf `feosd` of `given`, its cgroup, so that `given` may enable controllers for
 * the microVMs' `vms/` beside it (a cgroup whose children use controllers holds no processes). The real
 * root of the hierarchy (no cgroup.type) may hold processes beside such children: there feosd stays.
 * @returns the cgroup feosd is in afterwards
 * @throws Error naming the file when the kernel refuses
 */
export async function enterLeaf(given: string, pid = process.pid): Promise<string> {
  if (!existsSync(join(given, 'cgroup.type'))) return given;
  const leaf = join(given, 'feosd');
  await mkdir(leaf, { recursive: true });
  await writeFile(join(leaf, 'cgroup.procs'), String(pid));
  return leaf;
}

/**
 * `feosd --hand-over-vms`, and feosd's start under --vms-cgroup: the microVMs a feosd from before
 * --vms-cgroup put below its own cgroup (`from/vms/<id>`) move to `to/vms/<id>`, each with its
 * cpu.weight; the emptied cgroups are removed and cpu and memory turned off in `from`. The memory a
 * microVM was charged before stays with its old cgroup.
 * @returns the ids of the microVMs moved
 * @throws Error naming the file when the kernel refuses
 */
export async function handOverVms(from: string, to: string): Promise<string[]> {
  const old = join(from, 'vms');
  if (!isCgroup2(old) || join(from) === join(to)) return [];
  const moved: string[] = [];
  for (const e of await readdir(old, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const src = join(old, e.name);
    const pids = (await readFile(join(src, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean);
    const weight = existsSync(join(src, 'cpu.weight')) ? (await readFile(join(src, 'cpu.weight'), 'utf8')).trim() : undefined;
    const vms = join(to, 'vms');
    await enable(to);
    await mkdir(vms, { recursive: true });
    await enable(vms);
    const dst = join(vms, e.name);
    await mkdir(dst, { recursive: true });
    if (weight && existsSync(join(dst, 'cpu.weight'))) await writeFile(join(dst, 'cpu.weight'), weight);
    for (const pid of pids) await writeFile(join(dst, 'cgroup.procs'), pid);
    await rmdir(src);
    if (pids.length > 0) moved.push(e.name);
  }
  await rmdir(old).catch(() => {});
  const on = (await readFile(join(from, 'cgroup.subtree_control'), 'utf8')).split(/\s+/).filter((c) => c === 'cpu' || c === 'memory');
  if (on.length > 0) await writeFile(join(from, 'cgroup.subtree_control'), on.map((c) => `-${c}`).join(' ')).catch(() => {});
  return moved;
}
