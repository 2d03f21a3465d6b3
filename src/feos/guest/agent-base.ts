/**
 * What the guest agent's handlers share (docs/feos/guest.md): its status (Ping's state, reason and
 * attaches), its log to the kernel's, the image store and containers on the data disk, and the helpers
 * that turn requests and errors into the wire's terms. Part of the agent (agent.ts), which the guest
 * carries: imports only node:, the generated guest_pb.js and @bufbuild/protobuf.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { fromBinary, toBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import { AgentState } from '../gen/feos/guest/v1/guest_pb.js';
import { GrpcCode, GrpcError, type UnaryHandler } from './grpc-wire.ts';
import { ImageStore, PullError } from './images.ts';
import { ContainerError, Containers } from './containers.ts';

export const run = promisify(execFile);
/** The agent's version, reported by Ping. */
export const AGENT_VERSION = '1';
/** The gRPC service's name, the paths' prefix. */
export const S = 'feos.guest.v1.GuestService';

/** What Ping reports of the agent: its state and why, and how often a host attached. */
export const status: { attaches: number; state: AgentState; reason: string } = { attaches: 0, state: AgentState.READY, reason: '' };

/** Logs a line to the kernel's log (the serial console), else to stderr. */
export function log(msg: string): void {
  try {
    fs.appendFileSync('/dev/kmsg', `feos-agent: ${msg}\n`);
  } catch {
    process.stderr.write(`feos-agent: ${msg}\n`);
  }
}

/** A unary handler from a typed function: the request decoded (INVALID_ARGUMENT when it is not one), the answer encoded. */
export function method<I extends DescMessage, O extends DescMessage>(
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

/** A file's text, or `fallback` when it cannot be read. */
export function readFileOr(path: string, fallback: string): string {
  try {
    return fs.readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

/** MemAvailable of /proc/meminfo (bytes). */
export function memAvailable(): bigint {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileOr('/proc/meminfo', ''));
  return m ? BigInt(m[1]) * 1024n : 0n;
}

/** The data disk's mount point; the image store and the containers live on it. */
export const DATA_DIR = process.env.FEOS_GUEST_DATA ?? '/data';
export const images = new ImageStore(`${DATA_DIR}/images`);
export const containers = new Containers(`${DATA_DIR}/containers`, images);

/** The data disk must be mounted for images and containers. */
export function needData(): void {
  if (!readFileOr('/proc/mounts', '').includes(` ${DATA_DIR} `) && !process.env.FEOS_GUEST_DATA) {
    throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `the data disk is not mounted at ${DATA_DIR}`);
  }
}

/** A pull's or a container's error as a gRPC status (never with the token: the messages hold none). */
export function containerStatus(err: unknown): GrpcError {
  if (err instanceof GrpcError) return err;
  if (err instanceof PullError) return new GrpcError(GrpcCode.FAILED_PRECONDITION, `pull: ${err.message}`);
  if (err instanceof ContainerError) return new GrpcError(GrpcCode[err.code], err.message);
  return new GrpcError(GrpcCode.INTERNAL, err instanceof Error ? err.message : String(err));
}
