/**
 * What a microVM's serial console (`<state>/vms/<id>/serial.log`, appended across boots) says about a
 * guest that did not attach, for the reason of its FAILED pod (seed 000, "A pod": the pod is FAILED
 * with the reason). Reads the end of the file only.
 */
import { open } from 'node:fs/promises';

/** How much of the end of the console is read (bytes): a boot's kernel log is about 20 KiB. */
export const CONSOLE_TAIL_BYTES = 256 * 1024;

/**
 * The end of the console's last boot: what follows the last kernel banner (`Linux version`) in the
 * last `CONSOLE_TAIL_BYTES`, or all of them when no banner is there; '' when the file cannot be read.
 */
export async function lastBootConsole(path: string): Promise<string> {
  let text: string;
  try {
    const f = await open(path, 'r');
    try {
      const { size } = await f.stat();
      const length = Math.min(size, CONSOLE_TAIL_BYTES);
      const buf = Buffer.alloc(length);
      await f.read(buf, 0, length, size - length);
      text = buf.toString('utf8');
    } finally {
      await f.close();
    }
  } catch {
    return '';
  }
  const banner = text.lastIndexOf('Linux version ');
  return banner >= 0 ? text.slice(banner) : text;
}

/**
 * The words to add to `guest attach: …` when a boot's guest did not attach: the console's file, and
 * when its last boot's kernel killed a process for lack of memory (the agent, Node.js's
 * `MainThread`, is the first to go), that the pod needs more memory. Never throws.
 * Without a sign of memory, the accelerator the microVM ran under, and how to choose the other (a kernel
 * that hangs under a nested KVM the probe took for a working one, or a TCG too slow for the bound).
 * @param path the console's file (`vmPaths(dir).serialLog`)
 * @param accelerator the accelerator feosd boots microVMs with; none: not named
 * @returns `; the guest ran out of memory (...): give the pod more memory; its console: PATH`, or
 *   `; the microVM ran under KVM: where KVM hangs (nested), start feosd with --accel tcg; its console: PATH`
 */
export async function attachFailureHint(path: string, accelerator?: 'kvm' | 'tcg'): Promise<string> {
  const boot = await lastBootConsole(path);
  const oom = /Out of memory: Killed process \d+ \(([^)\n]*)\)/.exec(boot);
  if (oom) return `; the guest ran out of memory (its kernel killed ${oom[1]}): give the pod more memory (--memory); its console: ${path}`;
  return `${accelHint(accelerator)}; its console: ${path}`;
}

/** `; the microVM ran under KVM (...--accel tcg...)`, or '' without an accelerator. */
function accelHint(accelerator: 'kvm' | 'tcg' | undefined): string {
  if (accelerator === 'kvm') return '; the microVM ran under KVM: where KVM hangs (nested), start feosd with --accel tcg';
  if (accelerator === 'tcg') return '; the microVM ran under TCG (emulated, about ten times slower): start feosd with --accel kvm where KVM works, or give a longer --guest-attach-timeout';
  return '';
}
