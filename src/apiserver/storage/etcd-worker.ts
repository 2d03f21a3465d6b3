/**
 * The etcd side of `EtcdStorage`: a worker thread that owns the etcd v3 client (npm `etcd3`, gRPC)
 * and answers the API server's thread, which waits for each answer with `Atomics.wait` (see
 * `etcd.ts`). It also keeps one etcd watch on `/registry/` from a revision and posts its events, in
 * revision order, to the API server's thread (etcd-watch.ts), and compacts etcd's history on a
 * schedule the way kube-apiserver does (etcd-kv.ts). The wire is in etcd-wire.ts.
 */
import { workerData } from 'node:worker_threads';
import { Etcd3 } from 'etcd3';
import { EtcdKv, scheduleCompaction, toRow } from './etcd-kv.ts';
import { RegistryWatch } from './etcd-watch.ts';
import { type EtcdRequest, type EtcdWorkerData, num } from './etcd-wire.ts';

export * from './etcd-wire.ts';

/** The worker's state: the client, its watch, the compaction schedule. */
interface Worker {
  data: EtcdWorkerData;
  kv: EtcdKv;
  watch: RegistryWatch;
  stopCompaction: () => void;
}

/** Answers one request of the API server's thread. */
async function handle(w: Worker, req: EtcdRequest): Promise<unknown> {
  switch (req.op) {
    case 'init': {
      const rev = await w.kv.currentRev();
      const start = await w.watch.open(await w.kv.oldestReadable(Math.max(1, rev + 1 - w.data.replayRevisions), rev));
      w.stopCompaction = scheduleCompaction(w.kv.client, w.data.compactionIntervalMs);
      return { rev, droppedUpTo: start - 1 };
    }
    case 'get': {
      const r = await w.kv.range(req.key);
      return { row: r.kvs[0] ? toRow(r.kvs[0]) : undefined, rev: num(r.header.revision) };
    }
    case 'range':
      return w.kv.rangeAll(req.prefix);
    case 'rev':
      return w.kv.currentRev();
    case 'commit':
      return w.kv.commit(req.conds, req.writes);
    case 'putBlob':
      return w.kv.putBlob(req.sha256, req.bytes);
    case 'getBlob':
      return w.kv.getBlob(req.sha256);
    case 'compact':
      await w.kv.client.kv.compact({ revision: req.revision, physical: true });
      return undefined;
    case 'close':
      w.stopCompaction();
      w.watch.close();
      w.kv.client.close();
      w.data.events.close();
      return undefined;
  }
}

function startWorker(data: EtcdWorkerData): void {
  const signal = new Int32Array(data.signal);
  const client = new Etcd3({
    hosts: data.endpoints,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + data.callTimeoutMs }),
    grpcOptions: { 'grpc.max_receive_message_length': 256 * 1024 * 1024 },
  });
  const w: Worker = { data, kv: new EtcdKv(client), watch: new RegistryWatch(client, data.events), stopCompaction: () => {} };
  data.requests.on('message', async ({ id, req }: { id: number; req: EtcdRequest }) => {
    let reply: { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string; code?: number };
    try {
      reply = { id, ok: true, value: await handle(w, req) };
    } catch (err: unknown) {
      const e = err as { message?: unknown; code?: unknown };
      reply = { id, ok: false, error: typeof e?.message === 'string' ? e.message : String(err), code: typeof e?.code === 'number' ? e.code : undefined };
    }
    data.requests.postMessage(reply);
    Atomics.add(signal, 0, 1);
    Atomics.notify(signal, 0);
    if (req.op === 'close') data.requests.close();
  });
}

if (workerData && (workerData as { signal?: unknown }).signal instanceof SharedArrayBuffer) startWorker(workerData as EtcdWorkerData);
