/**
 * feosctl's streaming pod commands (docs/feos/feosctl.md): `pod events`, `pod exec`, `pod logs` and
 * `pod port-forward`.
 */
import net from 'node:net';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { create } from '@bufbuild/protobuf';
import {
  ExecPodRequestSchema,
  type ExecPodResponse,
  type PodLogsResponse,
  PodService,
  PodState,
  type PodEvent,
  PortForwardPodRequestSchema,
  type PortForwardPodResponse,
} from '../gen/feos/pod/v1/pod_pb.js';
import { codeName, makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';
import YAML from 'yaml';
import { podJson } from './output.ts';

/** Adds the streaming commands to feosctl's `pod` command. */
export function addPodStreamCommands(pod: Command, ctx: CtlContext): void {
  const { call, deadline } = ctx;
  const pods = () => makeClient(PodService, ctx.target());
  pod
    .command('events [id]')
    .description("streams the pods' changes (one pod's with an ID), one line each, JSON lines with -o json, YAML documents with -o yaml")
    .addOption(new Option('-o, --output <format>', 'table, json or yaml').choices(['table', 'json', 'yaml']).default('table'))
    .action(async (id: string | undefined, o: { output: 'table' | 'json' | 'yaml' }) => {
      const c = pods();
      const stream = c.watchPodEvents({ podId: id ?? '' });
      // The table shows a pod's state and reason: a recorded change that keeps both (its guest version,
      // its addresses) would print the same line again. JSON lines have every event.
      const shown = new Map<string, string>();
      await call(
        () =>
          new Promise<void>((resolve, reject) => {
            stream.on('data', (e: PodEvent) => {
              if (o.output === 'json' || o.output === 'yaml') {
                const doc = { podId: e.podId, deleted: e.deleted, initial: e.initial, pod: e.pod ? podJson(e.pod) : null };
                // YAML: a document per event, each started with `---`, as a stream of documents.
                process.stdout.write(o.output === 'json' ? `${JSON.stringify(doc)}\n` : `---\n${YAML.stringify(doc)}`);
              } else {
                const state = e.deleted ? 'DELETED' : PodState[e.pod?.state ?? 0];
                const line = `${state}\0${e.pod?.reason ?? ''}`;
                if (!e.initial && shown.get(e.podId) === line) return;
                shown.set(e.podId, line);
                process.stdout.write(`${e.podId}   ${state}${e.initial ? ' (now)' : ''}   ${e.pod?.reason ?? ''}\n`);
              }
            });
            stream.on('end', resolve);
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
    });
  pod
    .command('exec <id> <command...>')
    .description("runs a command in a container of a RUNNING pod (after --); exits with the command's exit code")
    .option('-c, --container <name>', "the container (default: the pod's first)")
    .option('-i, --stdin', "pass feosctl's stdin to the command")
    .option('-t, --tty', 'give the command a terminal')
    .action(async (id: string, command: string[], o: { container?: string; stdin?: boolean; tty?: boolean }) => {
      const c = pods();
      const stream = c.execPod();
      stream.write(create(ExecPodRequestSchema, { request: { case: 'start', value: { podId: id, container: o.container ?? '', command, tty: !!o.tty, stdin: !!o.stdin } } }));
      if (o.stdin) {
        process.stdin.on('data', (d: Buffer) => stream.write(create(ExecPodRequestSchema, { request: { case: 'stdin', value: d } })));
        process.stdin.on('end', () => {
          stream.write(create(ExecPodRequestSchema, { request: { case: 'closeStdin', value: true } }));
          stream.end();
        });
      } else stream.end();
      const code = await call(
        () =>
          new Promise<number>((resolve, reject) => {
            let exit = -1;
            stream.on('data', (r: ExecPodResponse) => {
              if (r.response.case === 'stdout') process.stdout.write(r.response.value);
              else if (r.response.case === 'stderr') process.stderr.write(r.response.value);
              else if (r.response.case === 'exitCode') exit = r.response.value;
            });
            stream.on('end', () => resolve(exit));
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
      process.stdin.pause();
      process.exitCode = code < 0 ? 1 : code;
    });
  pod
    .command('logs <id>')
    .description("prints a container's log (its stdout and stderr)")
    .option('-c, --container <name>', "the container (default: the pod's first)")
    .option('-f, --follow', 'go on with what it writes until it ends')
    .option('--tail <lines>', 'the last lines only', (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`want a whole number of lines, got ${JSON.stringify(v)}`);
      return n;
    })
    .action(async (id: string, o: { container?: string; follow?: boolean; tail?: number }) => {
      const c = pods();
      // A log without --follow ends on its own: it has the calls' deadline (--timeout); a followed one runs until it ends.
      const stream = c.podLogs({ podId: id, container: o.container ?? '', follow: !!o.follow, tailLines: o.tail ?? 0 }, o.follow ? {} : { deadline: deadline() });
      await call(
        () =>
          new Promise<void>((resolve, reject) => {
            stream.on('data', (r: PodLogsResponse) => process.stdout.write(r.data));
            stream.on('end', resolve);
            stream.on('error', reject);
          }),
      );
      c.grpc.close();
    });
  pod
    .command('port-forward <id> <ports>')
    .description('forwards local TCP connections to a port on the pod: LOCAL:REMOTE (LOCAL 0 asks the OS), or PORT for both')
    .option('--address <address>', 'the local address to listen on', '127.0.0.1')
    .action(async (id: string, ports: string, o: { address: string }) => {
      const m = /^(?:(\d+):)?(\d+)$/.exec(ports);
      const remote = m ? Number(m[2]) : 0;
      const local = m ? Number(m[1] ?? m[2]) : -1;
      if (!m || remote < 1 || remote > 65535 || local > 65535) throw new InvalidArgumentError(`${ports}: want LOCAL:REMOTE or PORT (1 to 65535)`);
      const c = pods();
      await call(() => c.getPod({ id }, { deadline: deadline() }));
      const server = net.createServer((sock) => {
        const stream = c.portForwardPod();
        stream.write(create(PortForwardPodRequestSchema, { request: { case: 'start', value: { podId: id, port: remote } } }));
        sock.on('data', (d: Buffer) => stream.write(create(PortForwardPodRequestSchema, { request: { case: 'data', value: d } })));
        sock.on('end', () => stream.end());
        sock.on('error', () => stream.cancel());
        stream.on('data', (r: PortForwardPodResponse) => sock.write(r.data));
        stream.on('end', () => sock.end());
        stream.on('error', (err: { code?: number; details?: string }) => {
          process.stderr.write(`feosctl: port-forward: ${typeof err.code === 'number' ? codeName(err.code) : ''}: ${err.details ?? String(err)}\n`);
          sock.destroy();
        });
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(local, o.address, () => resolve());
      });
      const bound = (server.address() as net.AddressInfo).port;
      process.stdout.write(`Forwarding from ${o.address}:${bound} -> ${remote}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      server.close();
      c.grpc.close();
    });
}
