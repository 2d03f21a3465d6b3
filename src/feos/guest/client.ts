/**
 * feosd's client of a guest agent (seed 000, "The guest"): connects to the microVM's guest channel
 * (QEMU's virtio-serial port on a host unix socket), does the channel's handshake (channel.ts), and
 * calls feos.guest.v1.GuestService over HTTP/2 on it. One connection at a time: QEMU's socket takes
 * one client, and a lost connection is made again by the next call.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import {
  AdjustTimeRequestSchema,
  AdjustTimeResponseSchema,
  ConfigureNetworkRequestSchema,
  ConfigureNetworkResponseSchema,
  CreateContainerRequestSchema,
  CreateContainerResponseSchema,
  ListContainersRequestSchema,
  ListContainersResponseSchema,
  PullImageRequestSchema,
  PullImageResponseSchema,
  StartContainerRequestSchema,
  StartContainerResponseSchema,
  EmptyMemoryRequestSchema,
  EmptyMemoryResponseSchema,
  FreezeFilesystemRequestSchema,
  FreezeFilesystemResponseSchema,
  ThawFilesystemRequestSchema,
  ThawFilesystemResponseSchema,
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
import { HostHandshake } from './channel.ts';
import { GrpcCode, GrpcError, streamCall, type StreamCall, unaryCall } from './grpc-wire.ts';

/** How often the host sends a new ATTACH while the guest has not answered (ms). */
const ATTACH_RETRY_MS = 1000;

/**
 * Connects to the guest channel's socket and does the handshake.
 * @param socketPath the microVM's `guest.sock`
 * @param signal ends the attempt (its reason is the error)
 * @returns an HTTP/2 client session on the channel, and its socket
 * @throws GrpcError UNAVAILABLE when the socket cannot be connected or closes; the signal's reason when it aborts
 */
export function attachGuest(socketPath: string, signal: AbortSignal): Promise<GuestConnection> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(socketPath);
    const hs = new HostHandshake();
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const cleanup = (): void => {
      done = true;
      clearInterval(timer);
      signal.removeEventListener('abort', onAbort);
      sock.off('data', onData);
    };
    const fail = (err: unknown): void => {
      if (done) return;
      cleanup();
      sock.destroy();
      reject(err);
    };
    const onAbort = (): void => fail(signal.reason);
    const onData = (chunk: Buffer): void => {
      const rest = hs.push(chunk);
      if (rest === undefined) return;
      cleanup();
      sock.pause();
      if (rest.length > 0) sock.unshift(rest);
      const session = http2.connect('http://feos-guest', { createConnection: () => sock });
      session.on('error', () => {});
      session.once('close', () => sock.destroy());
      sock.once('close', () => session.destroy());
      sock.resume();
      resolve({ session, socket: sock });
    };
    if (signal.aborted) {
      fail(signal.reason);
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    sock.on('error', (err) => fail(new GrpcError(GrpcCode.UNAVAILABLE, `guest channel ${socketPath}: ${err.message}`, { cause: err })));
    sock.on('close', () => fail(new GrpcError(GrpcCode.UNAVAILABLE, `guest channel ${socketPath}: closed during the handshake`)));
    sock.on('data', onData);
    sock.once('connect', () => {
      sock.write(hs.attachLine());
      timer = setInterval(() => sock.write(hs.attachLine()), ATTACH_RETRY_MS);
    });
  });
}

/** An attached guest channel: the HTTP/2 session and the unix socket under it. */
export interface GuestConnection {
  session: http2.ClientHttp2Session;
  socket: net.Socket;
}

/** The guest's methods feosd calls, with their schemas. */
const METHODS = {
  Ping: [PingRequestSchema, PingResponseSchema],
  GetTime: [GetTimeRequestSchema, GetTimeResponseSchema],
  SetTime: [SetTimeRequestSchema, SetTimeResponseSchema],
  AdjustTime: [AdjustTimeRequestSchema, AdjustTimeResponseSchema],
  ConfigureNetwork: [ConfigureNetworkRequestSchema, ConfigureNetworkResponseSchema],
  EmptyMemory: [EmptyMemoryRequestSchema, EmptyMemoryResponseSchema],
  Shutdown: [ShutdownRequestSchema, ShutdownResponseSchema],
  MountVolumes: [MountVolumesRequestSchema, MountVolumesResponseSchema],
  PullImage: [PullImageRequestSchema, PullImageResponseSchema],
  FreezeFilesystem: [FreezeFilesystemRequestSchema, FreezeFilesystemResponseSchema],
  ThawFilesystem: [ThawFilesystemRequestSchema, ThawFilesystemResponseSchema],
  CreateContainer: [CreateContainerRequestSchema, CreateContainerResponseSchema],
  StartContainer: [StartContainerRequestSchema, StartContainerResponseSchema],
  ListContainers: [ListContainersRequestSchema, ListContainersResponseSchema],
} as const;
type Methods = typeof METHODS;

/**
 * A guest's client: attaches on the first call and again after the connection was lost.
 * Calls are bounded by their own timeout, the attach included.
 */
export class GuestClient {
  readonly socketPath: string;
  #conn: GuestConnection | undefined;
  #attaching: Promise<GuestConnection> | undefined;

  constructor(socketPath: string) {
    this.socketPath = socketPath;
  }

  /** Whether a connection is up now. */
  get attached(): boolean {
    const s = this.#conn?.session;
    return s !== undefined && !s.closed && !s.destroyed;
  }

  /**
   * Attaches (or reuses the connection).
   * @throws GrpcError UNAVAILABLE "the guest did not answer within <ms> ms" past `timeoutMs`
   */
  async attach(timeoutMs: number, signal?: AbortSignal): Promise<http2.ClientHttp2Session> {
    if (this.attached) return this.#conn!.session;
    if (!this.#attaching) {
      const timeout = AbortSignal.timeout(timeoutMs);
      const sig = signal ? AbortSignal.any([timeout, signal]) : timeout;
      this.#attaching = attachGuest(this.socketPath, sig)
        .then((c) => {
          this.#conn = c;
          c.session.once('close', () => {
            if (this.#conn === c) this.#conn = undefined;
          });
          return c;
        })
        .catch((err: unknown) => {
          if (timeout.aborted) throw new GrpcError(GrpcCode.UNAVAILABLE, `the guest did not answer within ${timeoutMs} ms`);
          throw err;
        })
        .finally(() => {
          this.#attaching = undefined;
        });
    }
    return (await this.#attaching).session;
  }

  /**
   * Calls a method of feos.guest.v1.GuestService.
   * @param timeoutMs bounds the whole call, the attach included
   * @throws GrpcError with the guest's status; UNAVAILABLE when it cannot be reached in time
   */
  async call<M extends keyof Methods>(
    name: M,
    request: MessageInitShape<Methods[M][0]>,
    timeoutMs: number,
  ): Promise<MessageShape<Methods[M][1]>> {
    const [reqSchema, resSchema] = METHODS[name] as unknown as [DescMessage, DescMessage];
    const start = performance.now();
    const session = await this.attach(timeoutMs);
    const left = Math.max(1, timeoutMs - (performance.now() - start));
    const bytes = await unaryCall(
      session,
      `/feos.guest.v1.GuestService/${name}`,
      toBinary(reqSchema, create(reqSchema, request as never)),
      left,
    ).catch((err: unknown) => {
      // A call that timed out may have left the session stuck (a paused VM): start afresh next time.
      if (err instanceof GrpcError && (err.code === GrpcCode.DEADLINE_EXCEEDED || err.code === GrpcCode.UNAVAILABLE)) this.close();
      throw err;
    });
    return fromBinary(resSchema, bytes) as MessageShape<Methods[M][1]>;
  }

  /**
   * Opens a streaming call of feos.guest.v1.GuestService (Exec, ContainerLogs, PortForward): the
   * connect bounded by `connectMs`, the stream by nothing but its caller.
   * @throws GrpcError UNAVAILABLE when the guest cannot be reached in time
   */
  async stream(name: 'Exec' | 'ContainerLogs' | 'PortForward', connectMs: number): Promise<StreamCall> {
    const session = await this.attach(connectMs);
    return streamCall(session, `/feos.guest.v1.GuestService/${name}`);
  }

  /** Drops the connection (the next call attaches again). */
  close(): void {
    const c = this.#conn;
    this.#conn = undefined;
    c?.session.destroy();
    c?.socket.destroy();
  }
}
