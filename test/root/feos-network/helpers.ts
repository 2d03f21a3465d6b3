// Helpers of the network layer's root suites: namespaces they make and remove, commands in
// them, the fixtures' processes, their control API and gRPC clients from the .proto files.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { DescService } from '@bufbuild/protobuf';
import { grpcServiceDefinition } from '../../../src/feos/network/index.ts';
import { endProcessesInNetns } from '../../helpers/processes.ts';

/** The result of a command: its exit code and output. */
export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command (no shell), bounded in time; never throws for a non-zero exit. */
export function sh(cmd: string[], timeoutMs = 15_000): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd[0], cmd.slice(1), { timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs a command and throws with its output when it fails. */
export async function must(cmd: string[], timeoutMs?: number): Promise<string> {
  const r = await sh(cmd, timeoutMs);
  if (r.code !== 0) throw new Error(`${cmd.join(' ')}: exit ${r.code}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** `ip netns exec NS CMD...`. */
export function inNs(ns: string, ...cmd: string[]): string[] {
  return ['ip', 'netns', 'exec', ns, ...cmd];
}

/** Namespaces of one suite, `k32t-<random>-<name>`, all removed by {@link Namespaces.removeAll}. */
export class Namespaces {
  readonly prefix = `k32t-${randomBytes(3).toString('hex')}`;
  readonly #made: string[] = [];

  async add(name: string): Promise<string> {
    const ns = `${this.prefix}-${name}`;
    await must(['ip', 'netns', 'add', ns]);
    this.#made.push(ns);
    await must(inNs(ns, 'ip', 'link', 'set', 'lo', 'up'));
    return ns;
  }

  /**
   * Ends every process in the namespaces made ({@link endProcessesInNetns}: a wireguard-go or a listener left running
   * would keep a deleted namespace alive, orphaned), then removes them. A second call has nothing to do.
   * @throws Error naming a process that did not end (the namespaces are removed all the same)
   */
  async removeAll(): Promise<void> {
    const made = this.#made.splice(0).reverse();
    let failed: unknown;
    for (const ns of made) {
      await endProcessesInNetns(ns).catch((err: unknown) => {
        failed ??= err;
      });
      await sh(['ip', 'netns', 'del', ns]);
    }
    if (failed) throw failed;
  }
}

/** A process started in a namespace, ready once it printed a line starting with "ready". */
export interface Started {
  child: ChildProcess;
  ready: string;
  stop(): Promise<void>;
}

/**
 * Starts `node FILE ARGS` in a namespace and waits for its "ready" line.
 * @param wrap a command that runs node (`unshare -m ...`), before it on the command line
 * @throws Error with its output when it exits or does not get ready within the deadline
 */
export function startInNs(ns: string, file: string, args: string[], timeoutMs = 30_000, wrap: string[] = []): Promise<Started> {
  const child = spawn('ip', ['netns', 'exec', ns, ...wrap, process.execPath, file, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => {
    err += d;
  });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} did not get ready within ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    child.stdout!.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.startsWith('ready'));
      if (line) {
        clearTimeout(timer);
        resolve({ child, ready: line.slice(5).trim(), stop });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${file} exited (${code}) before it was ready: ${err}`));
    });
  });
}

/** Calls the node fixture's control API. */
export function control<T = unknown>(socketPath: string, call: Record<string, unknown>): Promise<{ ok: boolean; result: T; code?: string; message?: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path: '/', method: 'POST', timeout: 30_000 }, (res) => {
      let body = '';
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve(JSON.parse(body)));
    });
    req.on('error', reject);
    req.end(JSON.stringify(call));
  });
}

/** A promise-returning gRPC client of a service, from the same .proto as the server. */
export function grpcClient(service: DescService, socketPath: string): { call<T>(method: string, req: unknown): Promise<T>; close(): void } {
  const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(service), service.name);
  const client = new Ctor(`unix:${socketPath}`, grpc.credentials.createInsecure());
  return {
    call<T>(method: string, req: unknown): Promise<T> {
      return new Promise((resolve, reject) => {
        const fn = (client as unknown as Record<string, (...args: unknown[]) => void>)[method].bind(client);
        fn(req, { deadline: Date.now() + 20_000 }, (err: grpc.ServiceError | null, resp: T) => (err ? reject(err) : resolve(resp)));
      });
    },
    close: () => client.close(),
  };
}

/** A server stream of a service, its messages collected as they come. */
export function grpcStream<T>(service: DescService, socketPath: string, method: string, req: unknown): { messages: T[]; close(): void } {
  const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(service), service.name);
  const client = new Ctor(`unix:${socketPath}`, grpc.credentials.createInsecure());
  const call = (client as unknown as Record<string, (r: unknown) => grpc.ClientReadableStream<T>>)[method].call(client, req);
  const messages: T[] = [];
  call.on('data', (m: T) => messages.push(m));
  call.on('error', () => {});
  return {
    messages,
    close: () => {
      call.cancel();
      client.close();
    },
  };
}
