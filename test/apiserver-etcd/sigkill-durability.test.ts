/**
 * Nothing acknowledged is lost (issue 20): writers create ConfigMaps at once through the real client
 * (@kubernetes/client-node), the API server process is SIGKILLed while their writes are in flight,
 * and after a restart on the same data every create that was answered 201 is there — on SQLite (group
 * commit: a write is answered only once its group's fsync is done) and on etcd.
 */
import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { startEtcd } from './etcd-server.ts';

const WRITERS = 8;
/** Acknowledged creates before the kill. */
const BEFORE_KILL = 120;

/** Runs WRITERS create loops until `stop`; answers the names answered 201. */
function writers(api: CoreV1Api, onAck: (n: number) => void) {
  const acked: string[] = [];
  let stopped = false;
  const loops = Array.from({ length: WRITERS }, async (_, w) => {
    for (let i = 0; !stopped; i++) {
      const name = `w${w}-${i}`;
      try {
        await api.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name }, data: { i: String(i) } } });
        acked.push(name);
        onAck(acked.length);
      } catch {
        // The server went away mid-request: this write was never acknowledged.
        return;
      }
    }
  });
  return {
    acked,
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

async function killDuringWrites(t: TestContext, args: string[]): Promise<void> {
  const first = await startApiServer(t, { args });
  let reached!: () => void;
  const enough = new Promise<void>((r) => {
    reached = r;
  });
  const w = writers(first.kubeConfig.makeApiClient(CoreV1Api), (n) => {
    if (n >= BEFORE_KILL) reached();
  });
  await enough;
  // Writes are in flight on every writer: the kill lands among them.
  first.proc.kill('SIGKILL');
  await w.stop();
  await first.stop({ keepData: true });
  const second: TestApiServer = await startApiServer(t, { args, dataDir: first.dataDir });
  const list = await second.kubeConfig.makeApiClient(CoreV1Api).listNamespacedConfigMap({ namespace: 'default' });
  const present = new Set(list.items.map((c) => c.metadata?.name));
  const lost = w.acked.filter((n) => !present.has(n));
  assert.ok(w.acked.length >= BEFORE_KILL);
  assert.deepEqual(lost, [], `${lost.length} of ${w.acked.length} acknowledged creates lost`);
}

test('SQLite: SIGKILL during concurrent writes loses no acknowledged write', { timeout: 180_000 }, async (t) => {
  await killDuringWrites(t, []);
});

test('etcd: SIGKILL during concurrent writes loses no acknowledged write', { timeout: 180_000 }, async (t) => {
  const etcd = await startEtcd(t);
  await killDuringWrites(t, ['--storage', 'etcd', '--etcd-endpoints', etcd.url]);
});
