/**
 * The FeOS guest agent (seed 000, "The guest"; docs/feos/guest.md): runs in a pod's microVM, started by
 * the initramfs's /init, and serves feos.guest.v1.GuestService over the virtio-serial port `feos.guest`
 * (/dev/vport0p1) to feosd. The port is one byte stream: each host connection opens with the channel's
 * handshake (channel.ts) and then carries one HTTP/2 connection with feosd as the client.
 *
 * Self-contained: imports only node:, the generated guest_pb.js and @bufbuild/protobuf, which the
 * initramfs carries (scripts/build-guest.sh).
 */
import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { Duplex } from 'node:stream';
import fs from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import { promisify } from 'node:util';
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import {
  AdjustTimeRequestSchema,
  AdjustTimeResponseSchema,
  AgentState,
  ConfigureNetworkRequestSchema,
  ContainerLogsRequestSchema,
  ContainerLogsResponseSchema,
  CreateContainerRequestSchema,
  ExecRequestSchema,
  ExecResponseSchema,
  PortForwardRequestSchema,
  PortForwardResponseSchema,
  CreateContainerResponseSchema,
  ListContainersRequestSchema,
  ListContainersResponseSchema,
  PullImageRequestSchema,
  PullImageResponseSchema,
  StartContainerRequestSchema,
  StartContainerResponseSchema,
  ConfigureNetworkResponseSchema,
  EmptyMemoryRequestSchema,
  EmptyMemoryResponseSchema,
  GetTimeRequestSchema,
  GetTimeResponseSchema,
  MountVolumesRequestSchema,
  MountVolumesResponseSchema,
  PingRequestSchema,
  PingResponseSchema,
  SetTimeRequestSchema,
  SetTimeResponseSchema,
  ShutdownRequestSchema,
  ShutdownResponseSchema,
} from '../gen/feos/guest/v1/guest_pb.js';
import { GuestHandshake } from './channel.ts';
import { GrpcCode, GrpcError, serveStreams, serveUnary, type StreamHandler, type UnaryHandler } from './grpc-wire.ts';
import { ImageStore, PullError, type PullOptions } from './images.ts';
import { ContainerError, Containers } from './containers.ts';

const run = promisify(execFile);
/** The agent's version, reported by Ping. */
export const AGENT_VERSION = '1';
const PORT_PATH = process.env.FEOS_GUEST_PORT ?? '/dev/vport0p1';
const CLOCK_HELPER = '/usr/bin/feos-clock';
/** How long the agent waits between reads while the host is not connected (ms). */
const IDLE_POLL_MS = 100;

let attaches = 0;
let state: AgentState = AgentState.READY;
let reason = '';

function log(msg: string): void {
  try {
    fs.appendFileSync('/dev/kmsg', `feos-agent: ${msg}\n`);
  } catch {
    process.stderr.write(`feos-agent: ${msg}\n`);
  }
}

function method<I extends DescMessage, O extends DescMessage>(
  inSchema: I,
  outSchema: O,
  fn: (req: MessageShape<I>) => Promise<MessageShape<O>>,
): UnaryHandler {
  return async (bytes) => {
    let req: MessageShape<I>;
    try {
      req = fromBinary(inSchema, bytes);
    } catch (err: unknown) {
      throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `request: ${String(err)}`);
    }
    return toBinary(outSchema, await fn(req));
  };
}

function readFileOr(path: string, fallback: string): string {
  try {
    return fs.readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

function memAvailable(): bigint {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileOr('/proc/meminfo', ''));
  return m ? BigInt(m[1]) * 1024n : 0n;
}

async function clock(cmd: 'step' | 'adjust', offsetNs: bigint): Promise<void> {
  try {
    await run(CLOCK_HELPER, [cmd, offsetNs.toString()], { timeout: 5000 });
  } catch (err: unknown) {
    const e = err as { code?: string; stderr?: string };
    if (e.code === 'ENOENT') throw new GrpcError(GrpcCode.UNIMPLEMENTED, `${CLOCK_HELPER} is missing`);
    throw new GrpcError(GrpcCode.INTERNAL, `clock ${cmd}: ${e.stderr?.trim() || String(err)}`);
  }
}

const DATA_DIR = process.env.FEOS_GUEST_DATA ?? '/data';
const images = new ImageStore(`${DATA_DIR}/images`);
const containers = new Containers(`${DATA_DIR}/containers`, images);

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
async function pullOptions(req: { pullToken: string; registryEndpoints: Record<string, string> }): Promise<PullOptions> {
  const token = req.pullToken;
  req.pullToken = '';
  for (const ep of Object.values(req.registryEndpoints)) {
    if (!/^https?:\/\/[^/]+$/.test(ep)) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `registry endpoint ${JSON.stringify(ep)}: want http(s)://host:port`);
    if (ep.startsWith('http://10.0.2.')) await ensureRegistryLink();
  }
  return { token: token || undefined, endpoints: { ...req.registryEndpoints } };
}

/** The data disk must be mounted for images and containers. */
function needData(): void {
  if (!readFileOr('/proc/mounts', '').includes(` ${DATA_DIR} `) && !process.env.FEOS_GUEST_DATA) {
    throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `the data disk is not mounted at ${DATA_DIR}`);
  }
}

/** A pull's or a container's error as a gRPC status (never with the token: the messages hold none). */
function containerStatus(err: unknown): GrpcError {
  if (err instanceof GrpcError) return err;
  if (err instanceof PullError) return new GrpcError(GrpcCode.FAILED_PRECONDITION, `pull: ${err.message}`);
  if (err instanceof ContainerError) return new GrpcError(GrpcCode[err.code], err.message);
  return new GrpcError(GrpcCode.INTERNAL, err instanceof Error ? err.message : String(err));
}

const S = 'feos.guest.v1.GuestService';
const handlers = new Map<string, UnaryHandler>([
  [
    `/${S}/Ping`,
    method(PingRequestSchema, PingResponseSchema, async () =>
      create(PingResponseSchema, {
        state,
        reason,
        uptimeMs: BigInt(Math.round(Number.parseFloat(readFileOr('/proc/uptime', '0').split(' ')[0]) * 1000)),
        bootId: readFileOr('/proc/sys/kernel/random/boot_id', '').trim(),
        agentVersion: AGENT_VERSION,
        kernelRelease: os.release(),
        attaches,
        memoryAvailableBytes: memAvailable(),
      }),
    ),
  ],
  [
    `/${S}/GetTime`,
    method(GetTimeRequestSchema, GetTimeResponseSchema, async () =>
      create(GetTimeResponseSchema, { unixNanos: BigInt(Date.now()) * 1_000_000n }),
    ),
  ],
  [
    `/${S}/SetTime`,
    method(SetTimeRequestSchema, SetTimeResponseSchema, async (req) => {
      await clock('step', req.unixNanos - BigInt(Date.now()) * 1_000_000n);
      return create(SetTimeResponseSchema);
    }),
  ],
  [
    `/${S}/AdjustTime`,
    method(AdjustTimeRequestSchema, AdjustTimeResponseSchema, async (req) => {
      await clock('adjust', req.offsetNanos);
      return create(AdjustTimeResponseSchema);
    }),
  ],
  [
    `/${S}/ConfigureNetwork`,
    method(ConfigureNetworkRequestSchema, ConfigureNetworkResponseSchema, async (req) => {
      await configureNetwork(req);
      return create(ConfigureNetworkResponseSchema);
    }),
  ],
  [
    `/${S}/EmptyMemory`,
    method(EmptyMemoryRequestSchema, EmptyMemoryResponseSchema, async () => {
      try {
        fs.writeFileSync('/proc/sys/vm/drop_caches', '3');
        fs.writeFileSync('/proc/sys/vm/compact_memory', '1');
      } catch (err: unknown) {
        throw new GrpcError(GrpcCode.INTERNAL, `empty memory: ${String(err)}`);
      }
      return create(EmptyMemoryResponseSchema, { memoryAvailableBytes: memAvailable() });
    }),
  ],
  [
    `/${S}/Shutdown`,
    method(ShutdownRequestSchema, ShutdownResponseSchema, async (req) => {
      state = AgentState.STOPPING;
      log(req.reboot ? 'reboot asked' : 'shutdown asked');
      // Answer first, then go: sync, unmount the data disk, power off.
      setTimeout(() => {
        execFile('/bin/sh', ['-c', `sync; umount /data 2>/dev/null; ${req.reboot ? 'reboot' : 'poweroff'} -f`]);
      }, 50);
      return create(ShutdownResponseSchema);
    }),
  ],
  [
    `/${S}/MountVolumes`,
    method(MountVolumesRequestSchema, MountVolumesResponseSchema, async (req) => {
      const res = create(MountVolumesResponseSchema);
      for (const v of req.volumes) {
        try {
          await mountVolume(v.name, v.drive, v.format);
          res.mounted.push(v.name);
        } catch (err: unknown) {
          res.failed[v.name] = err instanceof Error ? err.message : String(err);
        }
      }
      return res;
    }),
  ],
  [
    `/${S}/PullImage`,
    method(PullImageRequestSchema, PullImageResponseSchema, async (req) => {
      try {
        const opts = await pullOptions(req);
        needData();
        const { image, cached } = await images.pull(req.image, opts);
        log(`pulled ${req.image} (${image.digest}${cached ? ', cached' : ''})`);
        return create(PullImageResponseSchema, { manifestDigest: image.digest, sizeBytes: BigInt(image.sizeBytes), cached });
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/CreateContainer`,
    method(CreateContainerRequestSchema, CreateContainerResponseSchema, async (req) => {
      try {
        const opts = await pullOptions(req);
        needData();
        const c = req.config;
        if (!c) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, 'config: missing');
        const res = await containers.create(
          {
            name: c.name,
            image: c.image,
            command: c.command,
            args: c.args,
            env: { ...c.env },
            volumeMounts: c.volumeMounts.map((m) => ({ name: m.name, path: m.path, readOnly: m.readOnly })),
          },
          opts,
        );
        log(`container ${c.name} ${res.adopted ? 'adopted' : 'created'} (${res.imageDigest})`);
        return create(CreateContainerResponseSchema, res);
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/StartContainer`,
    method(StartContainerRequestSchema, StartContainerResponseSchema, async (req) => {
      try {
        needData();
        await containers.start(req.name);
        log(`container ${req.name} started`);
        return create(StartContainerResponseSchema);
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/ListContainers`,
    method(ListContainersRequestSchema, ListContainersResponseSchema, async () =>
      create(ListContainersResponseSchema, { containers: containers.list() }),
    ),
  ],
]);

const CRUN = '/usr/bin/crun';
/** The pty helper (src/feos/guest/feos-pty.c) that gives an exec a terminal. */
const PTY_HELPER = '/usr/bin/feos-pty';
/** How often a followed log is looked at for more (ms). */
const LOG_POLL_MS = 200;
/** The largest chunk of a log sent in one message (bytes). */
const LOG_CHUNK = 64 * 1024;

/** The first request of a stream, or INVALID_ARGUMENT. */
async function firstRequest(it: AsyncIterator<Uint8Array>, what: string): Promise<Uint8Array> {
  const first = await it.next();
  if (first.done) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `${what}: no first request`);
  return first.value;
}

/** A running container's name, or FAILED_PRECONDITION / NOT_FOUND. */
function runningContainer(name: string): string {
  const st = containers.status(name);
  if (!st) throw new GrpcError(GrpcCode.NOT_FOUND, `container ${name} not found`);
  if (st.state !== 'running') throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `container ${name} is ${st.state}: exec needs it running`);
  return name;
}

const streams = new Map<string, StreamHandler>([
  [
    `/${S}/Exec`,
    async (requests, send, signal) => {
      const it = requests[Symbol.asyncIterator]();
      const first = fromBinary(ExecRequestSchema, await firstRequest(it, 'exec'));
      if (first.request.case !== 'start') throw new GrpcError(GrpcCode.INVALID_ARGUMENT, 'exec: the first request must be start');
      const start = first.request.value;
      if (start.command.length === 0) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, 'exec: empty command');
      needData();
      const name = runningContainer(start.container);
      const crunArgs = ['--root', '/run/crun', 'exec', name, ...start.command];
      if (start.tty && !fs.existsSync(PTY_HELPER)) throw new GrpcError(GrpcCode.UNIMPLEMENTED, `exec: no ${PTY_HELPER} for a terminal`);
      const child = start.tty ? spawn(PTY_HELPER, [CRUN, ...crunArgs], { stdio: 'pipe' }) : spawn(CRUN, crunArgs, { stdio: 'pipe' });
      const out = (kind: 'stdout' | 'stderr') => (d: Buffer) => send(toBinary(ExecResponseSchema, create(ExecResponseSchema, { response: { case: kind, value: d } })));
      child.stdout.on('data', out('stdout'));
      child.stderr.on('data', out('stderr'));
      child.stdin.on('error', () => {});
      if (!start.stdin) child.stdin.end();
      const onAbort = () => child.kill('SIGKILL');
      signal.addEventListener('abort', onAbort, { once: true });
      void (async () => {
        for (;;) {
          const r = await it.next().catch(() => ({ done: true as const, value: undefined }));
          if (r.done) break;
          const m = fromBinary(ExecRequestSchema, r.value);
          if (m.request.case === 'stdin') child.stdin.write(m.request.value);
          else if (m.request.case === 'closeStdin') break;
        }
        child.stdin.end();
      })();
      const [code, sig] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
        child.once('error', (err) => reject(new GrpcError(GrpcCode.INTERNAL, `exec: ${err.message}`)));
        child.once('close', (c, s) => resolve([c, s]));
      });
      signal.removeEventListener('abort', onAbort);
      const exitCode = code ?? 128 + (sig ? (os.constants.signals[sig] ?? 0) : 0);
      send(toBinary(ExecResponseSchema, create(ExecResponseSchema, { response: { case: 'exitCode', value: exitCode } })));
    },
  ],
  [
    `/${S}/ContainerLogs`,
    async (requests, send, signal) => {
      const req = fromBinary(ContainerLogsRequestSchema, await firstRequest(requests[Symbol.asyncIterator](), 'logs'));
      needData();
      let path: string;
      try {
        path = containers.logPath(req.container);
      } catch (err: unknown) {
        throw containerStatus(err);
      }
      const emit = (b: Buffer) => {
        for (let i = 0; i < b.length; i += LOG_CHUNK) send(toBinary(ContainerLogsResponseSchema, create(ContainerLogsResponseSchema, { data: b.subarray(i, i + LOG_CHUNK) })));
      };
      let all = fs.existsSync(path) ? fs.readFileSync(path) : Buffer.alloc(0);
      let pos = all.length;
      if (req.tailLines > 0) {
        let cut = all.length;
        // The last N lines: a final newline ends the last line, it does not start another.
        let seen = all.length > 0 && all[all.length - 1] === 0x0a ? -1 : 0;
        while (cut > 0) {
          if (all[cut - 1] === 0x0a && ++seen === req.tailLines) break;
          cut--;
        }
        all = all.subarray(cut);
      }
      if (all.length > 0) emit(all);
      if (!req.follow) return;
      while (!signal.aborted) {
        const size = fs.existsSync(path) ? fs.statSync(path).size : 0;
        // A log truncated under us is followed from its start again, as `tail -F` does.
        if (size < pos) pos = 0;
        if (size > pos) {
          const fd = fs.openSync(path, 'r');
          try {
            const buf = Buffer.allocUnsafe(size - pos);
            const n = fs.readSync(fd, buf, 0, buf.length, pos);
            pos += n;
            emit(buf.subarray(0, n));
          } finally {
            fs.closeSync(fd);
          }
          continue;
        }
        if (containers.status(req.container)?.state !== 'running') return;
        await new Promise((r) => setTimeout(r, LOG_POLL_MS));
      }
    },
  ],
  [
    `/${S}/PortForward`,
    async (requests, send, signal) => {
      const it = requests[Symbol.asyncIterator]();
      const first = fromBinary(PortForwardRequestSchema, await firstRequest(it, 'port forward'));
      if (first.request.case !== 'port' || first.request.value < 1 || first.request.value > 65535) {
        throw new GrpcError(GrpcCode.INVALID_ARGUMENT, 'port forward: the first request must name a port (1 to 65535)');
      }
      const port = first.request.value;
      const sock = net.connect(port, '127.0.0.1');
      await new Promise<void>((resolve, reject) => {
        sock.once('connect', resolve);
        sock.once('error', (err) => reject(new GrpcError(GrpcCode.UNAVAILABLE, `port ${port}: ${err.message}`)));
      });
      sock.on('data', (d: Buffer) => send(toBinary(PortForwardResponseSchema, create(PortForwardResponseSchema, { data: d }))));
      const onAbort = () => sock.destroy();
      signal.addEventListener('abort', onAbort, { once: true });
      void (async () => {
        for (;;) {
          const r = await it.next().catch(() => ({ done: true as const, value: undefined }));
          if (r.done) break;
          const m = fromBinary(PortForwardRequestSchema, r.value);
          if (m.request.case === 'data') sock.write(m.request.value);
        }
        sock.end();
      })();
      await new Promise<void>((resolve) => {
        sock.once('close', () => resolve());
        sock.on('error', () => {});
      });
      signal.removeEventListener('abort', onAbort);
    },
  ],
]);

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
 * mounts). Mounting one that is mounted already is done.
 */
async function mountVolume(name: string, drive: number, format: boolean): Promise<void> {
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw new Error(`bad volume name ${JSON.stringify(name)}`);
  const dev = diskBySerial(`feos-vol-${drive}`);
  if (!dev) throw new Error(`drive ${drive}: no disk with serial feos-vol-${drive}`);
  const target = `/volumes/${name}`;
  if (readFileOr('/proc/mounts', '').includes(`${dev} ${target} `)) return;
  if (format) {
    try {
      await run('/bin/mke2fs', ['-F', '-L', name.slice(0, 16), dev], { timeout: 120_000 });
    } catch (err: unknown) {
      throw new Error(`${dev}: mke2fs: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
    }
  }
  fs.mkdirSync(target, { recursive: true });
  try {
    await run('/bin/mount', ['-t', 'ext4', '-o', 'noatime', dev, target], { timeout: 30_000 });
  } catch (err: unknown) {
    throw new Error(`${dev}: mount ${target}: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
  }
}

async function configureNetwork(req: MessageShape<typeof ConfigureNetworkRequestSchema>): Promise<void> {
  // The pod's addresses are its own: no duplicate address detection (busybox ip has no `nodad`).
  try {
    fs.writeFileSync('/proc/sys/net/ipv6/conf/eth0/accept_dad', '0');
  } catch (err: unknown) {
    throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `eth0: ${String(err)}`);
  }
  const steps: string[][] = [];
  if (req.macAddress) steps.push(['link', 'set', 'eth0', 'down'], ['link', 'set', 'eth0', 'address', req.macAddress]);
  if (req.mtu) steps.push(['link', 'set', 'eth0', 'mtu', String(req.mtu)]);
  steps.push(['link', 'set', 'eth0', 'up']);
  if (req.ipv6Address) {
    steps.push(['-6', 'addr', 'replace', `${req.ipv6Address}/128`, 'dev', 'eth0']);
    const gw = req.ipv6Gateway || 'fe80::1';
    if (req.ipv6Routes.length === 0) steps.push(['-6', 'route', 'replace', 'default', 'via', gw, 'dev', 'eth0']);
    for (const r of req.ipv6Routes) steps.push(['-6', 'route', 'replace', r, 'via', gw, 'dev', 'eth0']);
  }
  if (req.ipv4Address) {
    const gw = req.ipv4Gateway || '169.254.0.1';
    steps.push(['addr', 'replace', `${req.ipv4Address}/32`, 'dev', 'eth0']);
    steps.push(['route', 'replace', gw, 'dev', 'eth0', 'scope', 'link']);
    steps.push(['route', 'replace', 'default', 'via', gw, 'dev', 'eth0', 'onlink']);
  }
  for (const args of steps) {
    try {
      await run('/bin/ip', args, { timeout: 5000 });
    } catch (err: unknown) {
      throw new GrpcError(GrpcCode.INTERNAL, `ip ${args.join(' ')}: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
    }
  }
  if (req.nameservers.length > 0) {
    fs.writeFileSync('/etc/resolv.conf', req.nameservers.map((n) => `nameserver ${n}\n`).join(''));
  }
}

/** One host connection's HTTP/2 transport: bytes read from the port in, writes to the port out. */
class PortStream extends Duplex {
  readonly #write: (chunk: Buffer) => Promise<void>;
  constructor(write: (chunk: Buffer) => Promise<void>) {
    super();
    this.#write = write;
  }
  override _read(): void {}
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.#write(chunk).then(() => cb(), cb);
  }
}

/** Serves the port for as long as the guest runs. */
async function serve(): Promise<void> {
  const fd = await waitForPort();
  const server = http2.createServer();
  server.on('sessionError', () => {});
  server.on('session', (session) => {
    serveUnary(session, handlers, new Set(streams.keys()));
    serveStreams(session, streams);
  });
  const handshake = new GuestHandshake();
  let current: PortStream | undefined;
  let writes: Promise<void> = Promise.resolve();
  // Writes go out one at a time, in order; a write while the host is away blocks in the kernel until
  // a host connects again, whose handshake then drops the stale bytes.
  const write = (chunk: Buffer): Promise<void> => {
    const p = writes.then(() => writeAll(fd, chunk));
    writes = p.catch(() => {});
    return p;
  };
  const endSession = (): void => {
    if (current) {
      current.push(null);
      current.destroy();
      current = undefined;
    }
    handshake.reset();
  };
  const buf = Buffer.allocUnsafe(64 * 1024);
  for (;;) {
    const n = await new Promise<number>((resolve, reject) =>
      fs.read(fd, buf, 0, buf.length, null, (err, bytes) => (err ? reject(err) : resolve(bytes))),
    ).catch((err: unknown) => {
      log(`read: ${String(err)}`);
      return 0;
    });
    if (n === 0) {
      if (current) log('the host went away');
      endSession();
      await new Promise((r) => setTimeout(r, IDLE_POLL_MS));
      continue;
    }
    const chunk = Buffer.from(buf.subarray(0, n));
    if (current && !current.destroyed) {
      current.push(chunk);
      continue;
    }
    const step = handshake.push(chunk);
    for (const nonce of step.answers) void write(Buffer.from(`FEOS-ATTACHED ${nonce}\n`, 'latin1'));
    if (step.kind === 'preface') {
      attaches += 1;
      const stream = new PortStream(write);
      current = stream;
      stream.on('close', () => {
        if (current === stream) {
          current = undefined;
          handshake.reset();
        }
      });
      stream.on('error', () => {});
      // The session's end (the host went away, or bytes that are not HTTP/2) ends this connection: what
      // the port carries next must open with a handshake again.
      server.once('session', (session) => {
        session.once('close', () => {
          if (current === stream) endSession();
        });
      });
      server.emit('connection', stream);
      stream.push(step.rest);
    }
  }
}

async function writeAll(fd: number, chunk: Buffer): Promise<void> {
  let off = 0;
  while (off < chunk.length) {
    off += await new Promise<number>((resolve, reject) =>
      fs.write(fd, chunk, off, chunk.length - off, null, (err, n) => (err ? reject(err) : resolve(n))),
    );
  }
}

async function waitForPort(): Promise<number> {
  for (let i = 0; ; i++) {
    try {
      return fs.openSync(PORT_PATH, 'r+');
    } catch (err: unknown) {
      if (i % 50 === 0) log(`${PORT_PATH}: ${String(err)}; waiting for it`);
      await new Promise((r) => setTimeout(r, IDLE_POLL_MS));
    }
  }
}

const mounts = readFileOr('/proc/mounts', '');
if (fs.existsSync('/dev/feos-data') && !mounts.includes(`${fs.realpathSync('/dev/feos-data')} /data `)) {
  state = AgentState.DEGRADED;
  reason = 'the data disk is not mounted at /data';
}

if (import.meta.main) {
  process.on('uncaughtException', (err) => log(`uncaught: ${err.stack ?? String(err)}`));
  log(`agent ${AGENT_VERSION} serving on ${PORT_PATH}`);
  void serve();
}
