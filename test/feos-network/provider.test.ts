// The layer as the pod layer's PodNetworkProvider (src/feos/pods): the types fit (tsc checks this
// file), and a node without a pod prefix refuses pods with a network with the reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/lib/index.ts';
import { createNetwork } from '../../src/feos/network/index.ts';
import type { PodNetworkProvider } from '../../src/feos/pods/index.ts';

test('a layer without a pod prefix is a provider that refuses pods with a network', { timeout: 10_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'k32t-prov-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const network = createNetwork({ stateDir: dir, log: createLogger('test') });
  await network.start([]);
  const provider: PodNetworkProvider = network.podNetworkProvider();
  assert.match(provider.check({ $typeName: 'feos.pod.v1.PodNetwork', securityGroups: [], nameTables: [], dnsUpstreams: [] }) ?? '', /no pod prefix/);
  await network.stop();
});
