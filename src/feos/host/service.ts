/**
 * feos.host.v1.HostService (seed 000, "feosd"): the node's facts, Reboot and Shutdown (signals to PID 1,
 * refused in a PID namespace of feosd's own), and UpgradeFeosBinary (only with --self-upgrade).
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { GetHostInfoResponseSchema, UpgradeFeosBinaryRequest } from '../gen/feos/host/v1/host_pb.js';
import { FeosError } from '../api/index.ts';
import { guestVersions } from '../pods/index.ts';

/** feosd's version. */
export const FEOSD_VERSION = '0.1.0';

/** Whether this process is in a PID namespace below the host's (NSpid in /proc/self/status has more than one pid). */
export function inOwnPidNamespace(): boolean {
  try {
    const line = /^NSpid:\s*(.*)$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return line ? line[1].trim().split(/\s+/).length > 1 : false;
  } catch {
    return false;
  }
}

/** Options of the host service. */
export interface HostServiceOptions {
  guestDir: string;
  stateDir: string;
  accelerator: () => string;
  selfUpgrade: boolean;
  startedAt: number;
  /** Runs the new executable with the same pid (process.execve). */
  exec: (path: string) => void;
}

/** The handlers of HostService. */
export function hostHandlers(o: HostServiceOptions) {
  const signalPid1 = async (signal: number, what: string) => {
    if (inOwnPidNamespace() || process.pid === 1) {
      throw new FeosError('FAILED_PRECONDITION', `${what}: feosd runs in a PID namespace of its own; PID 1 is not the node's`);
    }
    try {
      process.kill(1, signal);
    } catch (err: unknown) {
      throw new FeosError('INTERNAL', `${what}: kill(1): ${String(err)}`);
    }
    return {};
  };
  // Node names no real-time signals; glibc's SIGRTMIN is 34 on Linux.
  const sigrtmin = 34;
  return {
    getHostInfo: async (): Promise<MessageInitShape<typeof GetHostInfoResponseSchema>> => ({
      hostname: os.hostname(),
      kernelRelease: os.release(),
      cpus: os.cpus().length,
      memoryBytes: BigInt(os.totalmem()),
      feosdVersion: FEOSD_VERSION,
      accelerator: o.accelerator(),
      guestVersions: guestVersions(o.guestDir),
      startedAt: timestampFromMs(o.startedAt),
      bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      pid: process.pid,
    }),
    reboot: async () => signalPid1(sigrtmin + 5, 'Reboot'),
    shutdown: async () => signalPid1(sigrtmin + 4, 'Shutdown'),
    upgradeFeosBinary: async (reqs: AsyncIterable<UpgradeFeosBinaryRequest>) => {
      if (!o.selfUpgrade) throw new FeosError('FAILED_PRECONDITION', 'UpgradeFeosBinary: feosd runs without --self-upgrade');
      let header: { size: bigint; sha256: string } | undefined;
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const r of reqs) {
        if (r.part.case === 'header') header = { size: r.part.value.size, sha256: r.part.value.sha256.toLowerCase() };
        else if (r.part.case === 'chunk') {
          if (!header) throw new FeosError('INVALID_ARGUMENT', 'UpgradeFeosBinary: a chunk before the header');
          size += r.part.value.length;
          if (BigInt(size) > header.size) throw new FeosError('INVALID_ARGUMENT', `UpgradeFeosBinary: more than the header's ${header.size} bytes`);
          chunks.push(Buffer.from(r.part.value));
        }
      }
      if (!header) throw new FeosError('INVALID_ARGUMENT', 'UpgradeFeosBinary: no header');
      if (BigInt(size) !== header.size) throw new FeosError('INVALID_ARGUMENT', `UpgradeFeosBinary: ${size} bytes, the header says ${header.size}`);
      const bytes = Buffer.concat(chunks);
      const digest = createHash('sha256').update(bytes).digest('hex');
      if (digest !== header.sha256) throw new FeosError('INVALID_ARGUMENT', `UpgradeFeosBinary: sha256 ${digest}, the header says ${header.sha256}`);
      const dir = join(o.stateDir, 'upgrade');
      await mkdir(dir, { recursive: true });
      const path = join(dir, 'feosd');
      await writeFile(path, bytes, { mode: 0o755 });
      await chmod(path, 0o755);
      // Answer first, then exec.
      setTimeout(() => o.exec(path), 200);
      return { path };
    },
  };
}
