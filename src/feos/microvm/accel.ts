/**
 * Chooses the accelerator (../shared/design/feos-on-qemu.md): KVM where `/dev/kvm` opens and a short
 * boot reaches the kernel's first serial byte within a few seconds, else TCG (on this project's
 * machines KVM opens but hangs or fails). The answer is kept in `<state-dir>/accelerator.json` for the
 * host's boot (its boot_id) and QEMU binary, so feosd probes once per boot.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { access, constants, readFile } from 'node:fs/promises';
import { delimiter, isAbsolute, join } from 'node:path';
import { writeFileAtomic } from '../../lib/index.ts';

/** How long the probe waits for the kernel's first serial byte (ms). */
export const KVM_PROBE_MS = 4000;

/**
 * Boots the kernel under KVM without an initramfs and waits for its first serial output.
 * @returns true when a byte came within `timeoutMs`
 */
export async function probeKvm(qemu: string, kernel: string, timeoutMs = KVM_PROBE_MS): Promise<boolean> {
  try {
    await access('/dev/kvm', constants.R_OK | constants.W_OK);
  } catch {
    return false;
  }
  return new Promise((resolve) => {
    const child = spawn(
      qemu,
      ['-M', 'microvm', '-accel', 'kvm', '-cpu', 'host', '-m', '128M', '-nodefaults', '-no-user-config', '-nographic',
        '-no-reboot', '-kernel', kernel, '-append', 'console=ttyS0 panic=-1', '-serial', 'stdio'],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    child.stdout.once('data', () => finish(true));
    child.once('error', () => finish(false));
    child.once('exit', () => finish(false));
  });
}

/**
 * What identifies a QEMU binary for the probe's cache: `size:mtimeMs:path` of the file `qemu` names, looked up on
 * `PATH` as spawn does when it has no slash (a bare `qemu-system-x86_64` was stat'ed in the working directory, so an
 * upgraded QEMU was never noticed). `''` when it is not found.
 */
export function binaryStamp(qemu: string, path = process.env.PATH ?? ''): string {
  const candidates = qemu.includes('/') ? [qemu] : path.split(delimiter).filter((d) => isAbsolute(d)).map((d) => join(d, qemu));
  for (const file of candidates) {
    try {
      const st = statSync(file);
      if (st.isFile()) return `${st.size}:${st.mtimeMs}:${file}`;
    } catch {}
  }
  return '';
}

/**
 * The accelerator microVMs boot with.
 * @param wanted `auto` probes (once per host boot and QEMU binary), `kvm` or `tcg` forces it
 */
export async function chooseAccelerator(
  wanted: 'auto' | 'kvm' | 'tcg',
  stateDir: string,
  qemu: string,
  kernel: string | undefined,
): Promise<'kvm' | 'tcg'> {
  if (wanted !== 'auto') return wanted;
  const bootId = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => '')).trim();
  const qemuStamp = binaryStamp(qemu);
  const cache = join(stateDir, 'accelerator.json');
  if (existsSync(cache)) {
    try {
      const c = JSON.parse(readFileSync(cache, 'utf8')) as { bootId: string; qemu: string; accelerator: 'kvm' | 'tcg' };
      if (c.bootId === bootId && c.qemu === qemuStamp && (c.accelerator === 'kvm' || c.accelerator === 'tcg')) return c.accelerator;
    } catch {}
  }
  const accelerator = kernel && (await probeKvm(qemu, kernel)) ? 'kvm' : 'tcg';
  await writeFileAtomic(cache, JSON.stringify({ bootId, qemu: qemuStamp, accelerator }));
  return accelerator;
}
