/**
 * The guest agent's streams (docs/feos/guest.md): Exec (`crun exec`, with a terminal through
 * feos-pty), ContainerLogs (all, the last lines, followed) and PortForward (to 127.0.0.1 in the guest).
 * Part of the agent (agent.ts).
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import {
  ContainerLogsRequestSchema,
  ContainerLogsResponseSchema,
  ExecRequestSchema,
  ExecResponseSchema,
  PortForwardRequestSchema,
  PortForwardResponseSchema,
} from '../gen/feos/guest/v1/guest_pb.js';
import { GrpcCode, GrpcError, type StreamHandler } from './grpc-wire.ts';
import { containerStatus, containers, needData, S } from './agent-base.ts';

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
/** The streaming calls by their path. */
export const streams = new Map<string, StreamHandler>([
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
