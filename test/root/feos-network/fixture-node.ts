// A node's network layer alone, for the root suites: run inside a network namespace
// (`ip netns exec NS node fixture-node.ts CONFIG_JSON`). It serves feos.network.v1 over gRPC on
// a unix socket and a small JSON control API (the calls feosd makes) on another, then prints
// "ready" with what start returned.
import * as grpc from '@grpc/grpc-js';
import http from 'node:http';
import { createLogger } from '../../../src/lib/index.ts';
import { createNetwork, type KeptPod, type PodNetworkSpec, type PodRecordView } from '../../../src/feos/network/index.ts';

interface Config {
  stateDir: string;
  grpcSocket: string;
  controlSocket: string;
  flags: Record<string, unknown>;
  kept: KeptPod[];
}

const config = JSON.parse(process.argv[2]) as Config;
const log = createLogger('feos-network-fixture');
// flags.mesh: the mesh's options but the logger (MeshOptions), as feosd gives them with --control-plane.
const meshFlags = config.flags.mesh as Record<string, unknown> | undefined;
const network = createNetwork({
  stateDir: config.stateDir,
  log,
  legacyBpfDir: `${config.stateDir}/bpf-nat64`,
  ...config.flags,
  mesh: meshFlags ? { nodeDir: String(meshFlags.nodeDir), ...meshFlags, log } : undefined,
});
const kept = await network.start(config.kept);

const server = new grpc.Server();
for (const s of network.grpcServices()) server.addService(s.definition, s.implementation);
await new Promise<void>((resolve, reject) =>
  server.bindAsync(`unix:${config.grpcSocket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
);

type Call = { method: string; localAddress?: string; answer?: { meshed: boolean; clusterPrefix: string; nodePrefix: string }; id?: string; spec?: PodNetworkSpec; existing?: { ipv6?: string; ipv4?: string }; pod?: PodRecordView };
const provider = network.podNetworkProvider();
const control = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => {
    body += d;
  });
  req.on('end', async () => {
    const call = JSON.parse(body) as Call;
    try {
      let result: unknown;
      switch (call.method) {
        case 'createPod':
          result = await network.createPod(call.id!, call.spec!, call.existing);
          break;
        case 'attachPod':
          result = await network.attachPod(call.id!);
          break;
        case 'detachPod':
          result = await network.detachPod(call.id!);
          break;
        case 'removePod':
          result = await network.removePod(call.id!);
          break;
        case 'setUp':
          result = await provider.setUp(call.pod!);
          break;
        case 'tearDown':
          result = await provider.tearDown(call.pod!);
          break;
        case 'rewriteTable':
          result = await network.rewriteTable();
          break;
        case 'unavailableReason':
          result = network.unavailableReason ?? null;
          break;
        case 'joinMesh': {
          // What the fleet client does with JoinMesh's answer (src/feos/fleet), the answer given by hand.
          const ask = network.mesh!.joinAsk(call.localAddress ?? '');
          result = { ask, taken: await network.mesh!.joined(ask, call.answer!) };
          break;
        }
        default:
          throw new Error(`unknown method ${call.method}`);
      }
      res.end(JSON.stringify({ ok: true, result: result ?? null }));
    } catch (err: unknown) {
      res.end(JSON.stringify({ ok: false, code: (err as { code?: string }).code, message: (err as Error).message }));
    }
  });
});
await new Promise<void>((resolve) => control.listen(config.controlSocket, resolve));
process.stdout.write(`ready ${JSON.stringify({ kept: Object.fromEntries(kept), unavailable: network.unavailableReason ?? null, handedOver: network.resolverSocketsHandedOver })}\n`);

process.on('SIGTERM', async () => {
  control.close();
  server.forceShutdown();
  await network.stop();
  process.exit(0);
});
