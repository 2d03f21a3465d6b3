/**
 * The QEMU command line of a microVM (seed 000, "A pod's microVM"; ../shared/design/feos-on-qemu.md):
 * the `microvm` machine, virtio-mmio devices, the guest channel on a virtio-serial port, the serial
 * console on a unix socket with its log, QMP, the read-only system disk, the pod's disk, the balloon
 * with free page reporting, and a TAP device when the pod has a network.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** What a microVM is booted with. */
export interface QemuConfig {
  /** The microVM's directory (sockets, logs, snapshot/). */
  dir: string;
  /** The guest version's directory: vmlinuz, initramfs, system.img. */
  guestDir: string;
  /** The pod's disk (qcow2). */
  disk: string;
  vcpus: number;
  /** Bytes; whole MiB. */
  memoryBytes: bigint;
  accelerator: 'kvm' | 'tcg';
  /** The host's TSC rate in kHz, given to a TCG guest (whose TSC is the host's) so that it does not calibrate. */
  tscKhz?: number;
  /** TAP device name and MAC address, when the pod has a network. */
  tap?: { name: string; mac: string };
  /** The pod's volumes' disks (qcow2), in their order: drive 1, 2, ... (serial `feos-vol-<drive>`). */
  volumes?: string[];
  /**
   * Registries on the node (`host:port`, such as one on its loopback) that a microVM (with a TAP or
   * without) reaches through a user-mode NIC of its own (MAC REGISTRY_LINK_MAC, `restrict=on`: nothing but
   * these forwards): the i-th at `REGISTRY_LINK_HOST:(REGISTRY_LINK_PORT + i)` in the guest.
   */
  registryForwards?: string[];
}

/** The registry link's MAC address in the guest (src/feos/guest/agent-system.ts finds the link by it). */
export const REGISTRY_LINK_MAC = '52:54:00:fe:00:01';
/** Where the guest reaches the node's forwarded registries. */
export const REGISTRY_LINK_HOST = '10.0.2.100';
/** The guest port of the first forwarded registry. */
export const REGISTRY_LINK_PORT = 5000;

/**
 * The guest's endpoint of each forwarded registry: `host:port` as image references name it →
 * `http://REGISTRY_LINK_HOST:port`.
 */
export function registryEndpoints(forwards: readonly string[]): Record<string, string> {
  return Object.fromEntries(forwards.map((f, i) => [f, `http://${REGISTRY_LINK_HOST}:${REGISTRY_LINK_PORT + i}`]));
}

/** The busybox whose `nc` joins a guest's registry connection to the node's registry (busybox-static). */
const BUSYBOX = '/bin/busybox';

/** The files of a microVM's directory. */
export function vmPaths(dir: string) {
  return {
    record: join(dir, 'microvm.pb'),
    config: join(dir, 'config.json'),
    qmp: join(dir, 'qmp.sock'),
    guest: join(dir, 'guest.sock'),
    console: join(dir, 'console.sock'),
    serialLog: join(dir, 'serial.log'),
    qemuLog: join(dir, 'qemu.log'),
    snapshotDir: join(dir, 'snapshot'),
    vmstate: join(dir, 'snapshot', 'vmstate'),
    /** Written once the migration stream in `vmstate` is whole, before QEMU is ended: `{pid, pidStartTicks}` of that QEMU. */
    vmstateWhole: join(dir, 'snapshot', 'whole.json'),
  };
}

/** The host's TSC rate in kHz from /proc/cpuinfo ("cpu MHz" of a constant_tsc CPU); undefined when unknown. */
export function hostTscKhz(cpuinfo = readCpuinfo()): number | undefined {
  if (!/\bconstant_tsc\b/.test(cpuinfo)) return undefined;
  const m = /^cpu MHz\s*:\s*([\d.]+)/m.exec(cpuinfo);
  return m ? Math.round(Number.parseFloat(m[1]) * 1000) : undefined;
}

function readCpuinfo(): string {
  try {
    return readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return '';
  }
}

/** Quotes a path for QEMU's option syntax (commas doubled). */
function opt(path: string): string {
  return path.replaceAll(',', ',,');
}

/**
 * The arguments after the QEMU binary.
 * @param incoming a migration stream to load (a resume), which leaves the VM paused
 */
export function qemuArgs(cfg: QemuConfig, incoming?: string): string[] {
  const p = vmPaths(cfg.dir);
  const mib = cfg.memoryBytes / (1024n * 1024n);
  const args = [
    '-name', `feos-${cfg.dir.split('/').at(-1)}`,
    // Under TCG there is no kvmclock: without the PIT, PIC and RTC the kernel's early timer calibration
    // may wedge (measured here: one boot in two hung after "tsc: Unable to calibrate against PIT").
    '-M', cfg.accelerator === 'tcg' ? 'microvm,pit=on,pic=on,rtc=on' : 'microvm',
    '-accel', cfg.accelerator,
    '-cpu', cfg.accelerator === 'kvm' ? 'host' : 'max',
    '-smp', String(cfg.vcpus),
    '-m', `${mib}M`,
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot',
    '-kernel', join(cfg.guestDir, 'vmlinuz'),
    '-initrd', join(cfg.guestDir, 'initramfs'),
    // tsc_early_khz: under TCG on a loaded host, the kernel's TSC calibration fails and the boot wedges
    // ("Marking TSC unstable due to could not calculate TSC khz"); TCG's TSC runs at the host's rate.
    '-append', `console=ttyS0 panic=-1 rootfstype=ramfs loglevel=5${cfg.accelerator === 'tcg' && cfg.tscKhz ? ` tsc_early_khz=${cfg.tscKhz}` : ''}`,
    '-chardev', `socket,id=console,path=${opt(p.console)},server=on,wait=off,logfile=${opt(p.serialLog)},logappend=on`,
    '-serial', 'chardev:console',
    '-qmp', `unix:${opt(p.qmp)},server=on,wait=off`,
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=guest,path=${opt(p.guest)},server=on,wait=off`,
    '-device', 'virtserialport,chardev=guest,name=feos.guest',
    '-drive', `id=system,file=${opt(join(cfg.guestDir, 'system.img'))},format=raw,if=none,readonly=on`,
    '-device', 'virtio-blk-device,drive=system,serial=feos-system',
    '-drive', `id=data,file=${opt(cfg.disk)},format=qcow2,if=none,cache=writeback,discard=unmap`,
    '-device', 'virtio-blk-device,drive=data,serial=feos-data',
    '-device', 'virtio-balloon-device,free-page-reporting=on',
  ];
  for (const [i, disk] of (cfg.volumes ?? []).entries()) {
    args.push('-drive', `id=vol${i + 1},file=${opt(disk)},format=qcow2,if=none,cache=writeback,discard=unmap`);
    args.push('-device', `virtio-blk-device,drive=vol${i + 1},serial=feos-vol-${i + 1}`);
  }
  if (cfg.tap) {
    args.push('-netdev', `tap,id=net0,ifname=${cfg.tap.name},script=no,downscript=no`);
    args.push('-device', `virtio-net-device,netdev=net0,mac=${cfg.tap.mac}`);
  }
  // Beside a TAP too: the pod's network does not reach the node's own addresses (its groups' rules never
  // do), so a registry on the node is reached through this link alone.
  if (cfg.registryForwards && cfg.registryForwards.length > 0) {
    const fwds = cfg.registryForwards.map((f, i) => {
      const m = /^(.+):(\d+)$/.exec(f);
      if (!m) throw new RangeError(`registry forward ${JSON.stringify(f)}: want host:port`);
      return `guestfwd=tcp:${REGISTRY_LINK_HOST}:${REGISTRY_LINK_PORT + i}-cmd:${BUSYBOX} nc ${m[1].replace(/^\[|\]$/g, '')} ${m[2]}`;
    });
    args.push('-netdev', `user,id=registry,restrict=on,net=10.0.2.0/24,${fwds.join(',')}`);
    args.push('-device', `virtio-net-device,netdev=registry,mac=${REGISTRY_LINK_MAC}`);
  }
  if (incoming) args.push('-incoming', `exec:cat '${incoming.replaceAll("'", "'\\''")}'`);
  return args;
}
