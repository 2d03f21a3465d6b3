/**
 * `default/kubernetes` Endpoints when an API server stops cleanly while another one is writing them
 * (issue 11, docs/etcd.md): the one that stops deletes its identity Lease and writes the Endpoints
 * without itself; another that listed the Leases just before that deletion, and writes its Endpoints
 * just after, must not put the stopped server back (it stayed there until the next renewal, a third of
 * the Lease duration: test/etcd/cluster-identity.test.ts read it there now and then). The interleaving
 * is made exact here: the stop runs at the moment the other server writes the Endpoints.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bootstrap } from '../../src/apiserver/bootstrap.ts';
import { attachCheckpointDataPeers } from '../../src/apiserver/checkpoint-data-peers.ts';
import type { ServerContext } from '../../src/apiserver/handlers/context.ts';
import { CheckpointDataStore } from '../../src/apiserver/registry/checkpoints/data-store.ts';
import { Registry } from '../../src/apiserver/registry/store.ts';
import { EtcdStorage } from '../../src/apiserver/storage/etcd.ts';
import type { KubeObject, ObjectKey, Storage } from '../../src/apiserver/storage/index.ts';
import { createLogger } from '../../src/lib/index.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';

/** What an API server's identity needs of its context. */
function context(storage: Storage): ServerContext {
  const log = createLogger('endpoints-stop-race');
  log.level = 'silent';
  return { registry: new Registry(storage), log, checkpointData: new CheckpointDataStore() } as unknown as ServerContext;
}

const ENDPOINTS = { resource: 'endpoints', namespace: 'default', name: 'kubernetes' };
const isEndpoints = (k: ObjectKey) => k.resource === ENDPOINTS.resource && k.namespace === ENDPOINTS.namespace && k.name === ENDPOINTS.name;

/** The addresses of `default/kubernetes` Endpoints as `ip:port`. */
async function addresses(storage: Storage): Promise<string[]> {
  const subsets = ((await storage.get(ENDPOINTS))?.subsets ?? []) as { addresses?: { ip: string }[]; ports?: { port: number }[] }[];
  return subsets.flatMap((s) => (s.addresses ?? []).flatMap((a) => (s.ports ?? []).map((p) => `${a.ip}:${p.port}`))).sort();
}

test('an API server that stops while another writes the kubernetes Endpoints is not put back in them', { timeout: 60_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const open = async () => {
    const s = await EtcdStorage.open({ endpoints: [url], compactionIntervalMs: 0 });
    t.after(async () => await s.close());
    return s;
  };
  // C serves first: the system namespaces, its identity Lease, and the Endpoints naming it.
  const storageC = await open();
  await bootstrap(context(storageC).registry, context(storageC).log);
  const c = attachCheckpointDataPeers(context(storageC), storageC, { selfUrl: 'https://127.0.0.3:6443', caCertPem: undefined });
  t.after(() => c.stop());
  await c.ready;
  assert.deepEqual(await addresses(storageC), ['127.0.0.3:6443']);

  // A starts; the moment it writes the Endpoints (from the Leases it listed: A and C), C stops.
  const storageA = await open();
  let stopped = false;
  let cStopped: Promise<void> | undefined;
  const racing = new Proxy(storageA, {
    get(target, prop, receiver) {
      if (prop === 'guaranteedUpdate') {
        return (key: ObjectKey, tryUpdate: (o: KubeObject) => KubeObject) => {
          if (isEndpoints(key) && !stopped) {
            stopped = true;
            cStopped = c.stop();
          }
          return target.guaranteedUpdate(key, tryUpdate);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const a = attachCheckpointDataPeers(context(racing), racing, { selfUrl: 'https://127.0.0.2:6443', caCertPem: undefined });
  t.after(() => a.stop());
  await a.ready;
  await cStopped;
  assert.ok(stopped, 'C stopped while A wrote the Endpoints');
  assert.deepEqual(await addresses(storageA), ['127.0.0.2:6443'], 'the Endpoints name A alone: C, stopped, was not written back');
  assert.deepEqual(await addresses(storageC), ['127.0.0.2:6443']);
});
