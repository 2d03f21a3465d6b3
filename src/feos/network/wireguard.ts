/**
 * The mesh's WireGuard device (the seed's "The mesh"): made as kernel WireGuard where the module
 * exists (`ip link add DEV type wireguard`), else by Debian's `wireguard-go`, and configured over
 * WireGuard's cross-platform UAPI (https://www.wireguard.com/xplatform/): the text protocol
 * `get=1` / `set=1` on `/var/run/wireguard/<dev>.sock` for wireguard-go, `wg` (wireguard-tools)
 * for the kernel's, which has no such socket (the seed's generic netlink is a departure: see
 * docs/feos/departures.md).
 *
 * Why our own UAPI client: the protocol is a dozen lines of `key=value`, and no maintained Node
 * library speaks it; `wg` would need a key file on disk for every `set`. Keys are hex on the wire,
 * base64 everywhere else.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import net from 'node:net';
import { NetworkError } from './errors.ts';
import { ip, ipJson, isMissing, run, setSysctl } from './system.ts';
import { checkUapiServer, startWireguardGo, uapiServer } from './wireguard-go.ts';

/** The mesh's MTU: 1500 less WireGuard's 80 bytes over IPv6. */
export const MESH_MTU = 1420;
/** The default device name. */
export const MESH_DEVICE = 'feos-mesh';
/** Where wireguard-go puts its UAPI sockets, whatever the network namespace. */
export const UAPI_DIR = '/var/run/wireguard';

/** What runs a device. */
export type WireGuardImplementation = 'kernel' | 'wireguard-go';

/** A peer as the device has it. */
export interface DevicePeer {
  /** base64 */
  publicKey: string;
  /** "192.0.2.1:51820" / "[2001:db8::1]:51820", or '' */
  endpoint: string;
  allowedIps: string[];
  /** The last handshake, seconds since the epoch; 0 = none. */
  lastHandshake: number;
}

/** The device as `get=1` shows it. */
export interface DeviceState {
  /** base64, or '' when none is set. */
  privateKey: string;
  listenPort: number;
  peers: DevicePeer[];
}

/** A change of the device: the interface's settings and peers to set or remove. */
export interface DeviceChange {
  /** base64 */
  privateKey?: string;
  listenPort?: number;
  /** Replace every peer with those given (a PutMeshPeers at start); else the peers not named keep their sessions. */
  replacePeers?: boolean;
  /** Peers set: each replaces its allowed IPs with those given. */
  set?: Array<{ publicKey: string; endpoint: string; allowedIps: string[] }>;
  /** Public keys (base64) removed. */
  remove?: string[];
}

const b64ToHex = (k: string) => Buffer.from(k, 'base64').toString('hex');
const hexToB64 = (k: string) => Buffer.from(k, 'hex').toString('base64');

/**
 * Checks a WireGuard key: 32 bytes in standard base64 (44 characters).
 * @throws RangeError saying what is wrong
 */
export function checkKey(key: string): void {
  if (!/^[A-Za-z0-9+/]{43}=$/.test(key) || Buffer.from(key, 'base64').length !== 32) throw new RangeError(`"${key}" is not a WireGuard key (32 bytes of base64, 44 characters)`);
}

/** A new private key (X25519, 32 random bytes, clamped as WireGuard clamps it), base64. */
export function generatePrivateKey(): string {
  const { privateKey } = generateKeyPairSync('x25519');
  const d = Buffer.from(privateKey.export({ format: 'jwk' }).d!, 'base64url');
  return d.toString('base64');
}

/** The public key of a private key (both base64). @throws RangeError for a bad key */
export function publicKeyOf(privateKey: string): string {
  checkKey(privateKey);
  // The key as PKCS#8 DER: the fixed X25519 header, then its 32 bytes.
  const der = Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), Buffer.from(privateKey, 'base64')]);
  const key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  return Buffer.from(createPublicKey(key).export({ format: 'jwk' }).x!, 'base64url').toString('base64');
}

/**
 * The device's configuration and peers over its UAPI socket or `wg`. The socket's path is global
 * (not per network namespace): nodes side by side on one machine use distinct device names.
 */
export class WireGuardDevice {
  readonly name: string;
  readonly implementation: WireGuardImplementation;
  readonly uapiDir: string;

  constructor(name: string, implementation: WireGuardImplementation, uapiDir = UAPI_DIR) {
    this.name = name;
    this.implementation = implementation;
    this.uapiDir = uapiDir;
  }

  /** The UAPI socket's path. */
  get socketPath(): string {
    return `${this.uapiDir}/${this.name}.sock`;
  }

  /** One UAPI exchange: the request's lines, then the answer's `key=value` pairs up to errno. */
  async #uapi(lines: string[]): Promise<Array<[string, string]>> {
    const text = await new Promise<string>((resolve, reject) => {
      const s = net.connect(this.socketPath);
      let got = '';
      const t = setTimeout(() => s.destroy(new Error('no answer within 10 s')), 10_000);
      s.setEncoding('utf8');
      s.on('data', (d: string) => {
        got += d;
        if (got.endsWith('\n\n')) {
          clearTimeout(t);
          s.end();
          resolve(got);
        }
      });
      s.on('error', (err) => {
        clearTimeout(t);
        reject(err);
      });
      s.on('end', () => {
        clearTimeout(t);
        resolve(got);
      });
      s.write(`${lines.join('\n')}\n\n`);
    }).catch((err: unknown) => {
      throw new NetworkError('INTERNAL', `the UAPI socket ${this.socketPath} of ${this.name}: ${(err as Error).message}`, { cause: err });
    });
    const pairs = text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => {
        const i = l.indexOf('=');
        return [l.slice(0, i), l.slice(i + 1)] as [string, string];
      });
    const errno = pairs.find(([k]) => k === 'errno');
    if (errno?.[1] !== '0') throw new NetworkError('INTERNAL', `${this.name}: ${lines[0]} failed (errno ${errno?.[1] ?? 'missing'})`);
    return pairs;
  }

  /** The device's key, port and peers. @throws NetworkError INTERNAL */
  async get(): Promise<DeviceState> {
    if (this.implementation === 'kernel') return this.#getWithWg();
    const state: DeviceState = { privateKey: '', listenPort: 0, peers: [] };
    let peer: DevicePeer | undefined;
    for (const [k, v] of await this.#uapi(['get=1'])) {
      if (k === 'private_key') state.privateKey = hexToB64(v);
      else if (k === 'listen_port') state.listenPort = Number(v);
      else if (k === 'public_key') {
        peer = { publicKey: hexToB64(v), endpoint: '', allowedIps: [], lastHandshake: 0 };
        state.peers.push(peer);
      } else if (peer && k === 'endpoint') peer.endpoint = v;
      else if (peer && k === 'allowed_ip') peer.allowedIps.push(v);
      else if (peer && k === 'last_handshake_time_sec') peer.lastHandshake = Number(v);
    }
    return state;
  }

  async #getWithWg(): Promise<DeviceState> {
    const { stdout } = await run('wg', ['show', this.name, 'dump']);
    const [head, ...rest] = stdout.trim().split('\n');
    const h = head.split('\t');
    return {
      privateKey: h[0] === '(none)' ? '' : h[0],
      listenPort: Number(h[2]),
      peers: rest
        .filter((l) => l !== '')
        .map((l) => {
          const f = l.split('\t');
          return { publicKey: f[0], endpoint: f[2] === '(none)' ? '' : f[2], allowedIps: f[3] === '(none)' ? [] : f[3].split(','), lastHandshake: Number(f[4]) };
        }),
    };
  }

  /** Applies a change in one exchange. @throws NetworkError INTERNAL with what the device refused */
  async set(c: DeviceChange): Promise<void> {
    if (this.implementation === 'kernel') return this.#setWithWg(c);
    const lines = ['set=1'];
    if (c.privateKey !== undefined) lines.push(`private_key=${b64ToHex(c.privateKey)}`);
    if (c.listenPort !== undefined) lines.push(`listen_port=${c.listenPort}`);
    if (c.replacePeers) lines.push('replace_peers=true');
    for (const k of c.remove ?? []) lines.push(`public_key=${b64ToHex(k)}`, 'remove=true');
    for (const p of c.set ?? []) {
      lines.push(`public_key=${b64ToHex(p.publicKey)}`, `endpoint=${p.endpoint}`, 'replace_allowed_ips=true');
      for (const a of p.allowedIps) lines.push(`allowed_ip=${a}`);
    }
    await this.#uapi(lines);
  }

  async #setWithWg(c: DeviceChange): Promise<void> {
    // `wg set` reads the private key from a file: it goes through its standard input.
    if (c.replacePeers) {
      const have = await this.#getWithWg();
      const keep = new Set((c.set ?? []).map((p) => p.publicKey));
      c = { ...c, remove: [...(c.remove ?? []), ...have.peers.map((p) => p.publicKey).filter((k) => !keep.has(k))] };
    }
    const args = ['set', this.name];
    if (c.privateKey !== undefined) args.push('private-key', '/dev/stdin');
    if (c.listenPort !== undefined) args.push('listen-port', String(c.listenPort));
    for (const k of c.remove ?? []) args.push('peer', k, 'remove');
    for (const p of c.set ?? []) args.push('peer', p.publicKey, 'endpoint', p.endpoint, 'allowed-ips', p.allowedIps.join(','));
    await run('wg', args, c.privateKey);
  }
}

/** What runs an existing link of that name, or undefined when there is none. */
async function existingImplementation(name: string): Promise<WireGuardImplementation | 'other' | undefined> {
  try {
    const [l] = await ipJson<Array<{ linkinfo?: { info_kind?: string } }>>('-d', 'link', 'show', 'dev', name);
    const kind = l?.linkinfo?.info_kind;
    return kind === 'wireguard' ? 'kernel' : kind === 'tun' ? 'wireguard-go' : 'other';
  } catch (err: unknown) {
    if (isMissing(err)) return undefined;
    throw err;
  }
}

/** How the device is made. */
export interface EnsureDeviceOptions {
  name: string;
  /** `auto`: the kernel's where `ip link add type wireguard` works, else wireguard-go. @default 'auto' */
  implementation?: 'auto' | WireGuardImplementation;
  /** `--wireguard-go`: its path, or a name looked up in PATH. @default 'wireguard-go' */
  wireguardGo?: string;
  /** @default UAPI_DIR */
  uapiDir?: string;
}

/**
 * Makes the device, or takes the one there (an earlier feosd's: wireguard-go runs on as its own
 * daemon, as the pods outlive feosd), with MTU 1420, no addresses and no router advertisements, up.
 * A wireguard-go device is taken, or made, only once the process serving its UAPI socket is found
 * to serve a TUN device of that name in feosd's network namespace ({@link checkUapiServer}): the
 * socket's folder is the machine's, and another namespace's node may use the same name.
 * @throws NetworkError FAILED_PRECONDITION when neither kernel WireGuard nor wireguard-go can make
 *   it (naming why wireguard-go failed), a link of that name is of another kind, or the UAPI socket
 *   is another network namespace's; INTERNAL for a step that failed
 */
export async function ensureDevice(o: EnsureDeviceOptions): Promise<WireGuardDevice> {
  const uapiDir = o.uapiDir ?? UAPI_DIR;
  const socketPath = `${uapiDir}/${o.name}.sock`;
  let impl = await existingImplementation(o.name);
  if (impl === 'other') throw new NetworkError('FAILED_PRECONDITION', `the link ${o.name} is there and is not a WireGuard device: remove it or give --mesh-device another name`);
  if (impl === 'wireguard-go') {
    // Taken only when its socket's server is this namespace's wireguard-go of that device: another
    // namespace's node that uses the name would otherwise be given this node's key and peers.
    const server = await uapiServer(socketPath);
    if (server) await checkUapiServer(o.name, socketPath, server, true);
    else {
      // A TUN device left by a wireguard-go that ended: made anew.
      await ip('link', 'del', 'dev', o.name);
      impl = undefined;
    }
  }
  const want = o.implementation ?? 'auto';
  if (impl === undefined && want !== 'wireguard-go') {
    try {
      await ip('link', 'add', 'dev', o.name, 'type', 'wireguard');
      impl = 'kernel';
    } catch (err: unknown) {
      if (want === 'kernel') throw new NetworkError('FAILED_PRECONDITION', `kernel WireGuard cannot make ${o.name}: ${(err as Error).message}`, { cause: err });
    }
  }
  if (impl === undefined) {
    // A socket served already is another namespace's (the device is not in this one): said before
    // wireguard-go would fail on it ("UAPI listen error: unix socket in use").
    const other = await uapiServer(socketPath);
    if (other) await checkUapiServer(o.name, socketPath, other, false);
    let file: string;
    try {
      // wireguard-go forks its daemon and exits once the device and its UAPI socket are there.
      file = await startWireguardGo(o.wireguardGo ?? 'wireguard-go', o.name);
    } catch (err: unknown) {
      const kernel = want === 'wireguard-go' ? '' : 'no kernel WireGuard (`ip link add type wireguard` failed), and ';
      throw new NetworkError('FAILED_PRECONDITION', `the mesh device ${o.name}: ${kernel}${(err as Error).message}`, { cause: err });
    }
    const server = await uapiServer(socketPath);
    if (!server) throw new NetworkError('FAILED_PRECONDITION', `the mesh device ${o.name}: \`${file} ${o.name}\` exited 0 but nothing serves its UAPI socket ${socketPath}`);
    await checkUapiServer(o.name, socketPath, server, (await existingImplementation(o.name)) === 'wireguard-go');
    impl = 'wireguard-go';
  }
  const dev = new WireGuardDevice(o.name, impl, uapiDir);
  await setSysctl(`net/ipv6/conf/${o.name}/accept_ra`, 0);
  await ip('link', 'set', 'dev', o.name, 'mtu', String(MESH_MTU), 'addrgenmode', 'none');
  await ip('addr', 'flush', 'dev', o.name);
  await ip('link', 'set', 'dev', o.name, 'up');
  return dev;
}
