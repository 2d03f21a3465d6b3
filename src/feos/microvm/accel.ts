/**
 * Chooses the accelerator (../shared/design/feos-on-qemu.md): KVM where `/dev/kvm` opens and a short
 * boot under KVM shows that the kernel itself runs (it reaches the end of its boot: without a root file
 * system it panics, "Kernel panic - not syncing: VFS: Unable to mount root fs") within a bound, else TCG.
 * Any byte is not enough: under nested KVM on this project's machines the boot stub prints "Probing EDD
 * (edd=off to disable)... ok" and the kernel then hangs. The answer is kept in
 * `<state-dir>/accelerator.json` for the host's boot (its boot_id) and QEMU binary, so feosd probes once
 * per boot.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { access, constants, readFile } from 'node:fs/promises';
import { delimiter, isAbsolute, join } from 'node:path';
import { writeFileAtomic } from '../../lib/index.ts';

/**
 * How long the probe waits for the kernel's end of boot (ms): under KVM the probe's kernel panics for its
 * missing root within about a second, under TCG on these machines within 6.5 s (measured).
 */
export const KVM_PROBE_MS = 15_000;

/**
 * The lines that show the kernel ran to the end of its boot: the panic for the missing root (the
 * probe boots without an initramfs), or, for a kernel given a root, its first process.
 */
/**
 * The probe's version in the kept answer: an answer of another probe (1: any serial byte, which took the
 * boot stub's line for a boot) is not taken.
 */
export const PROBE_VERSION = 2;

export const KERNEL_BOOTED = /Kernel panic - not syncing|VFS: Unable to mount root fs|Run \S+ as init process/;

/** The probe's options (tests give a stand-in device and a shorter bound). */
export interface ProbeOptions {
  /** How long to wait for the kernel's end of boot (ms). @default KVM_PROBE_MS */
  timeoutMs?: number;
  /** The KVM device that must open read-write. @default "/dev/kvm" */
  kvmDevice?: string;
}

/**
 * Boots the kernel under KVM without an initramfs and waits for a line of `KERNEL_BOOTED` on its serial
 * console (the boot stub's "Probing EDD ... ok" is not one: it is printed before the kernel runs).
 * @returns true when such a line came within `timeoutMs`; false when the device does not open, QEMU
 *   cannot start or ends first, or the bound passes (QEMU is killed then)
 */
export async function probeKvm(qemu: string, kernel: string, opts: ProbeOptions | number = {}): Promise<boolean> {
  const { timeoutMs = KVM_PROBE_MS, kvmDevice = '/dev/kvm' } = typeof opts === 'number' ? { timeoutMs: opts } : opts;
  try {
    await access(kvmDevice, constants.R_OK | constants.W_OK);
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
    let seen = '';
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    child.stdout.setEncoding('latin1');
    child.stdout.on('data', (chunk: string) => {
      // Only the tail can hold the start of a line the next chunk ends.
      seen = (seen + chunk).slice(-4096);
      if (KERNEL_BOOTED.test(seen)) finish(true);
    });
    child.once('error', () => finish(false));
    // 'close' after the last output: a kernel that panics ends QEMU (-no-reboot) right after its line.
    child.once('close', () => finish(false));
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
 * The accelerator microVMs boot with. The probe's answer is kept for the host's boot, the QEMU binary and
 * the probe's version (`PROBE_VERSION`).
 * @param wanted `auto` probes (once per host boot and QEMU binary), `kvm` or `tcg` forces it
 * @param probe the probe's options (`probeKvm`)
 */
export async function chooseAccelerator(
  wanted: 'auto' | 'kvm' | 'tcg',
  stateDir: string,
  qemu: string,
  kernel: string | undefined,
  probe: ProbeOptions = {},
): Promise<'kvm' | 'tcg'> {
  if (wanted !== 'auto') return wanted;
  const bootId = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => '')).trim();
  const qemuStamp = binaryStamp(qemu);
  const cache = join(stateDir, 'accelerator.json');
  if (existsSync(cache)) {
    try {
      const c = JSON.parse(readFileSync(cache, 'utf8')) as { bootId: string; qemu: string; probe?: number; accelerator: 'kvm' | 'tcg' };
      const same = c.bootId === bootId && c.qemu === qemuStamp && c.probe === PROBE_VERSION;
      if (same && (c.accelerator === 'kvm' || c.accelerator === 'tcg')) return c.accelerator;
    } catch {}
  }
  const accelerator = kernel && (await probeKvm(qemu, kernel, probe)) ? 'kvm' : 'tcg';
  await writeFileAtomic(cache, JSON.stringify({ bootId, qemu: qemuStamp, probe: PROBE_VERSION, accelerator }));
  return accelerator;
}
