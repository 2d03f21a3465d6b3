/**
 * The guest agent's end of the guest channel (docs/feos/guest.md): the virtio-serial port is one byte
 * stream; each host connection opens with the channel's handshake (channel.ts) and then carries one
 * HTTP/2 connection with feosd as the client. Part of the agent (agent.ts).
 */
import fs from 'node:fs';
import http2 from 'node:http2';
import { Duplex } from 'node:stream';
import { GuestHandshake } from './channel.ts';
import { serveStreams, serveUnary, type StreamHandler, type UnaryHandler } from './grpc-wire.ts';
import { log, status } from './agent-base.ts';

/** The port's device in the guest. */
export const PORT_PATH = process.env.FEOS_GUEST_PORT ?? '/dev/vport0p1';
/** How long the agent waits between reads while the host is not connected (ms). */
const IDLE_POLL_MS = 100;

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
/** Serves the calls on the port for as long as the guest runs. */
export async function serve(handlers: Map<string, UnaryHandler>, streams: Map<string, StreamHandler>): Promise<void> {
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
      status.attaches += 1;
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
