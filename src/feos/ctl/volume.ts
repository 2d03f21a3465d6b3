/** feosctl's volume commands (docs/feos/feosctl.md): `volume create|get|list|delete`. */
import { type Command, InvalidArgumentError } from 'commander';
import { VolumeService } from '../gen/feos/volume/v1/volume_pb.js';
import { makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';
import { volumeBytes } from './flags.ts';
import { type Output, printVolumes } from './output.ts';

/** Adds `feosctl volume ...` to `program`. */
export function addVolumeCommands(program: Command, ctx: CtlContext): void {
  const { call, deadline, output, target } = ctx;
  const volume = program.command('volume').description("the node's volumes");
  volume
    .command('create <id>')
    .description('records a volume (a lowercase UUID), AVAILABLE')
    .requiredOption('--size <quantity>', 'its size, such as 1Gi (64Mi to 16Ti in whole Mi)', volumeBytes)
    .option('--label <key=value...>', 'labels')
    .addOption(output())
    .action(async (id: string, o: { size: bigint; label?: string[]; output: Output }) => {
      const labels: Record<string, string> = {};
      for (const kv of o.label ?? []) {
        const at = kv.indexOf('=');
        if (at <= 0) throw new InvalidArgumentError(`--label ${JSON.stringify(kv)}: want key=value`);
        const key = kv.slice(0, at);
        // Two values for one key: which one was meant is not feosctl's to guess.
        if (key in labels) throw new InvalidArgumentError(`--label ${JSON.stringify(kv)}: label ${key} given twice`);
        labels[key] = kv.slice(at + 1);
      }
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.createVolume({ id, sizeBytes: o.size, labels }, { deadline: deadline() }));
      printVolumes([res.volume!], o.output, true);
      c.grpc.close();
    });
  volume
    .command('get <id>')
    .addOption(output())
    .action(async (id: string, o: { output: Output }) => {
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.getVolume({ id }, { deadline: deadline() }));
      printVolumes([res.volume!], o.output, true);
      c.grpc.close();
    });
  volume
    .command('list')
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = makeClient(VolumeService, target());
      const res = await call(() => c.listVolumes({}, { deadline: deadline() }));
      if (o.output === 'table' && res.volumes.length === 0) process.stdout.write('No volumes.\n');
      else printVolumes(res.volumes, o.output, false);
      c.grpc.close();
    });
  volume
    .command('delete <id>')
    .action(async (id: string) => {
      const c = makeClient(VolumeService, target());
      await call(() => c.deleteVolume({ id }, { deadline: deadline() }));
      process.stdout.write(`volume ${id} deleted\n`);
      c.grpc.close();
    });
}
