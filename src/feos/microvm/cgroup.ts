/**
 * Each microVM's cgroup (seed 000, "Jail, user and cgroup"), where cgroup v2 allows:
 * `<root>/vms/<id>` with `cpu.weight` 100 per vCPU and no caps; cpu and memory are enabled in `<root>`
 * and `<root>/vms`, never above. Best effort: a host on cgroup v1 (as this project's CI) has none.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

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
