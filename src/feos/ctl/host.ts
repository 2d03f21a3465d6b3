/** feosctl's host commands (docs/feos/feosctl.md): `host info`, the node's facts. */
import type { Command } from 'commander';
import { toJson, type JsonValue } from '@bufbuild/protobuf';
import YAML from 'yaml';
import { GetHostInfoResponseSchema, HostService } from '../gen/feos/host/v1/host_pb.js';
import { makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';
import type { Output } from './output.ts';

/** Adds `feosctl host info` to `program`. */
export function addHostCommands(program: Command, ctx: CtlContext): void {
  const { call, deadline, output, target, table } = ctx;
  program
    .command('host')
    .description('the node')
    .command('info')
    .description("the node's facts")
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = makeClient(HostService, target());
      const res = await call(() => c.getHostInfo({}, { deadline: deadline() }));
      // protobuf JSON, as the pods' (startedAt an RFC 3339 time, 64-bit numbers as strings).
      const json = toJson(GetHostInfoResponseSchema, res) as JsonValue;
      if (o.output === 'json') process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
      else if (o.output === 'yaml') process.stdout.write(YAML.stringify(json));
      else {
        process.stdout.write(
          table([
            ['HOSTNAME', 'KERNEL', 'CPUS', 'MEMORY', 'FEOSD', 'ACCEL', 'GUESTS'],
            [res.hostname, res.kernelRelease, String(res.cpus), `${res.memoryBytes / 1024n ** 2n}Mi`, res.feosdVersion, res.accelerator, res.guestVersions.join(',') || '-'],
          ]),
        );
      }
      c.grpc.close();
    });
}
