/**
 * The guest agent's steps on the guest's system (docs/feos/guest.md): the clock (the feos-clock
 * helper), the registry link and a pull's options, volumes mounted by their drive's serial, and the
 * pod's network configured with busybox's `ip`. Part of the agent (agent.ts).
 */
import fs from 'node:fs';
import type { MessageShape } from '@bufbuild/protobuf';
import type { ConfigureNetworkRequestSchema } from '../gen/feos/guest/v1/guest_pb.js';
import { GrpcCode, GrpcError } from './grpc-wire.ts';
import type { PullOptions } from './images.ts';
import { readFileOr, run } from './agent-base.ts';
import { commandFailure, mke2fsArgs, mke2fsTimeoutMs } from './volume-format.ts';

const CLOCK_HELPER = '/usr/bin/feos-clock';

/** Steps (`step`) or slews (`adjust`) the guest's clock by an offset (ns) through the helper. */
export async function clock(cmd: 'step' | 'adjust', offsetNs: bigint): Promise<void> {
  try {
    await run(CLOCK_HELPER, [cmd, offsetNs.toString()], { timeout: 5000 });
  } catch (err: unknown) {
    const e = err as { code?: string; stderr?: string };
    if (e.code === 'ENOENT') throw new GrpcError(GrpcCode.UNIMPLEMENTED, `${CLOCK_HELPER} is missing`);
    throw new GrpcError(GrpcCode.INTERNAL, `clock ${cmd}: ${e.stderr?.trim() || String(err)}`);
  }
}

/** The registry link's MAC address: feosd's user-mode NIC that forwards a node's registry (microvm/qemu-args.ts). */
const REGISTRY_LINK_MAC = '52:54:00:fe:00:01';
/** The guest's address on the registry link. */
const REGISTRY_LINK_ADDRESS = '10.0.2.15/24';
let registryLinkUp: Promise<void> | undefined;

/** Brings the registry link up once (when the microVM has one: only then do endpoints name it). */
function ensureRegistryLink(): Promise<void> {
  registryLinkUp ??= (async () => {
    const dev = fs.readdirSync('/sys/class/net').find((n) => readFileOr(`/sys/class/net/${n}/address`, '').trim() === REGISTRY_LINK_MAC);
    if (!dev) throw new GrpcError(GrpcCode.FAILED_PRECONDITION, 'the microVM has no registry link');
    await run('/bin/ip', ['link', 'set', dev, 'up'], { timeout: 5000 });
    await run('/bin/ip', ['addr', 'replace', REGISTRY_LINK_ADDRESS, 'dev', dev], { timeout: 5000 });
  })().catch((err: unknown) => {
    registryLinkUp = undefined;
    throw err;
  });
  return registryLinkUp;
}

/**
 * The pull options of a request: the token taken out of the request at once (it is never printed, and
 * the request no longer holds it), the endpoints checked.
 */
export async function pullOptions(req: { pullToken: string; registryEndpoints: Record<string, string> }): Promise<PullOptions> {
  const token = req.pullToken;
  req.pullToken = '';
  for (const ep of Object.values(req.registryEndpoints)) {
    if (!/^https?:\/\/[^/]+$/.test(ep)) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `registry endpoint ${JSON.stringify(ep)}: want http(s)://host:port`);
    if (ep.startsWith('http://10.0.2.')) await ensureRegistryLink();
  }
  return { token: token || undefined, endpoints: { ...req.registryEndpoints } };
}

/** The block device whose virtio serial is `serial`, or undefined. */
function diskBySerial(serial: string): string | undefined {
  for (const name of fs.readdirSync('/sys/block')) {
    if (readFileOr(`/sys/block/${name}/serial`, '').trim() === serial) return `/dev/${name}`;
  }
  return undefined;
}

/**
 * Mounts a volume at /volumes/<name> (seed 000, "Volumes"): drive N is the disk with serial
 * `feos-vol-N`; `format` makes a new file system first (busybox's mke2fs: ext2, which the ext4 driver
 * mounts; its inodes capped: ./volume-format.ts). Mounting one that is mounted already is done.
 */
export async function mountVolume(name: string, drive: number, format: boolean): Promise<void> {
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw new Error(`bad volume name ${JSON.stringify(name)}`);
  const dev = diskBySerial(`feos-vol-${drive}`);
  if (!dev) throw new Error(`drive ${drive}: no disk with serial feos-vol-${drive}`);
  const target = `/volumes/${name}`;
  if (readFileOr('/proc/mounts', '').includes(`${dev} ${target} `)) return;
  if (format) {
    // The device's size: /sys/block/<name>/size counts 512-byte sectors.
    const sizeBytes = Number(readFileOr(`/sys/block/${dev.slice('/dev/'.length)}/size`, '0').trim()) * 512;
    const timeout = mke2fsTimeoutMs(sizeBytes);
    try {
      await run('/bin/mke2fs', mke2fsArgs(name, dev, sizeBytes), { timeout });
    } catch (err: unknown) {
      throw new Error(`${dev}: mke2fs: ${commandFailure(err, timeout)}`);
    }
  }
  fs.mkdirSync(target, { recursive: true });
  try {
    await run('/bin/mount', ['-t', 'ext4', '-o', 'noatime', dev, target], { timeout: 30_000 });
  } catch (err: unknown) {
    throw new Error(`${dev}: mount ${target}: ${commandFailure(err, 30_000)}`);
  }
}

/**
 * The pod's link: the NIC with the MAC feosd pushes (its TAP's; QEMU gives the NIC that MAC), else the
 * first NIC that is not the registry link (a microVM with `--registry-forward` has both, in an order
 * the kernel chooses), else eth0.
 */
function podLink(mac: string): string {
  let names: string[];
  try {
    names = fs.readdirSync('/sys/class/net').filter((n) => n !== 'lo').sort();
  } catch {
    return 'eth0';
  }
  const macOf = (n: string) => readFileOr(`/sys/class/net/${n}/address`, '').trim().toLowerCase();
  return (mac && names.find((n) => macOf(n) === mac.toLowerCase())) || names.find((n) => macOf(n) !== REGISTRY_LINK_MAC && /^eth\d+$/.test(n)) || 'eth0';
}

/** Configures the pod's link (podLink) as feosd pushes it: addresses, gateways, routes, MTU, MAC, resolvers. */
export async function configureNetwork(req: MessageShape<typeof ConfigureNetworkRequestSchema>): Promise<void> {
  const dev = podLink(req.macAddress);
  // The pod's addresses are its own: no duplicate address detection (busybox ip has no `nodad`).
  try {
    fs.writeFileSync(`/proc/sys/net/ipv6/conf/${dev}/accept_dad`, '0');
  } catch (err: unknown) {
    throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `${dev}: ${String(err)}`);
  }
  const steps: string[][] = [];
  if (req.macAddress) steps.push(['link', 'set', dev, 'down'], ['link', 'set', dev, 'address', req.macAddress]);
  if (req.mtu) steps.push(['link', 'set', dev, 'mtu', String(req.mtu)]);
  steps.push(['link', 'set', dev, 'up']);
  if (req.ipv6Address) {
    steps.push(['-6', 'addr', 'replace', `${req.ipv6Address}/128`, 'dev', dev]);
    const gw = req.ipv6Gateway || 'fe80::1';
    if (req.ipv6Routes.length === 0) steps.push(['-6', 'route', 'replace', 'default', 'via', gw, 'dev', dev]);
    for (const r of req.ipv6Routes) steps.push(['-6', 'route', 'replace', r, 'via', gw, 'dev', dev]);
  }
  if (req.ipv4Address) {
    const gw = req.ipv4Gateway || '169.254.0.1';
    steps.push(['addr', 'replace', `${req.ipv4Address}/32`, 'dev', dev]);
    steps.push(['route', 'replace', gw, 'dev', dev, 'scope', 'link']);
    steps.push(['route', 'replace', 'default', 'via', gw, 'dev', dev, 'onlink']);
  }
  for (const args of steps) {
    try {
      await run('/bin/ip', args, { timeout: 5000 });
    } catch (err: unknown) {
      throw new GrpcError(GrpcCode.INTERNAL, `ip ${args.join(' ')}: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
    }
  }
  await removeStaleAddresses(dev, [req.ipv6Address && `${req.ipv6Address}/128`, req.ipv4Address && `${req.ipv4Address}/32`].filter((a) => a !== ''));
  if (req.nameservers.length > 0) {
    fs.writeFileSync('/etc/resolv.conf', req.nameservers.map((n) => `nameserver ${n}\n`).join(''));
  }
}

/** An address with its prefix length, in one spelling (IPv6 compressed in lowercase). */
function canonical(cidr: string): string {
  const [addr, len] = cidr.split('/');
  return addr.includes(':') ? `${new URL(`http://[${addr}]`).hostname}/${len}` : cidr;
}

/**
 * Removes the pod link's global addresses that the push did not give: a pod restored from a checkpoint has new
 * addresses on this node (seed "Addresses"), and its memory still holds the old ones, which the node
 * neither routes nor lets out (its prerouting drops a source not routed back to the TAP).
 */
async function removeStaleAddresses(dev: string, keep: string[]): Promise<void> {
  if (keep.length === 0) return;
  const wanted = new Set(keep.map(canonical));
  let shown: string;
  try {
    shown = (await run('/bin/ip', ['addr', 'show', 'dev', dev], { timeout: 5000 })).stdout;
  } catch (err: unknown) {
    throw new GrpcError(GrpcCode.INTERNAL, `ip addr show dev ${dev}: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
  }
  for (const m of shown.matchAll(/^\s*(inet6?) (\S+) .*scope global/gm)) {
    if (wanted.has(canonical(m[2]))) continue;
    const args = [...(m[1] === 'inet6' ? ['-6'] : []), 'addr', 'del', m[2], 'dev', dev];
    try {
      await run('/bin/ip', args, { timeout: 5000 });
    } catch (err: unknown) {
      throw new GrpcError(GrpcCode.INTERNAL, `ip ${args.join(' ')}: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
    }
  }
}
