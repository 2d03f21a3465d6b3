/**
 * feosctl's mesh command (docs/feos/feosctl.md, docs/feos/network.md "The mesh"): `feosctl mesh get`,
 * the node's mesh as feos.network.v1.MeshService's GetMesh answers it (seed 000, "The mesh").
 * A feosd without --control-plane serves no MeshService: feosctl says so (UNIMPLEMENTED) and exits 1.
 */
import type { Command } from 'commander';
import { toJson, type JsonValue } from '@bufbuild/protobuf';
import YAML from 'yaml';
import { GetMeshResponseSchema, MeshService } from '../gen/feos/network/v1/network_pb.js';
import { makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';
import type { Output } from './output.ts';

/** Adds `feosctl mesh get` to `program`. */
export function addMeshCommands(program: Command, ctx: CtlContext): void {
  const { call, deadline, output, target, table } = ctx;
  program
    .command('mesh')
    .description("the node's mesh (with --control-plane and without --pod-prefix)")
    .command('get')
    .description("the node's prefixes, key, port, the peers' version and the peers")
    .addOption(output())
    .action(async (o: { output: Output }) => {
      const c = makeClient(MeshService, target());
      const res = await call(async () => {
        try {
          return await c.getMesh({}, { deadline: deadline() });
        } catch (err: unknown) {
          const e = err as { code?: number; details?: string };
          if (e.code === 12) e.details = 'feosd serves no mesh: a node is on one with --control-plane and without --pod-prefix (docs/feos/network.md)';
          throw err;
        }
      });
      const m = res.mesh;
      // protobuf JSON (64-bit numbers as strings), as the other commands print.
      const json = toJson(GetMeshResponseSchema, res) as JsonValue;
      if (o.output === 'json') process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
      else if (o.output === 'yaml') process.stdout.write(YAML.stringify(json));
      else {
        process.stdout.write(
          table([
            ['DEVICE', 'IMPLEMENTATION', 'PORT', 'CLUSTER PREFIX', 'NODE PREFIX', 'VERSION', 'PUBLIC KEY'],
            [m?.device || '-', m?.implementation || '-', m?.listenPort ? String(m.listenPort) : '-', m?.clusterPrefix || '-', m?.nodePrefix || '-', String(m?.version ?? 0n), m?.publicKey || '-'],
          ]),
        );
        if (m && m.peers.length > 0) {
          process.stdout.write('\n');
          process.stdout.write(table([['PEER', 'PREFIX', 'ENDPOINT', 'PUBLIC KEY'], ...m.peers.map((p) => [p.nodeName, p.prefix, p.endpoint, p.publicKey])]));
        }
      }
      c.grpc.close();
    });
}
