/**
 * The kubelet's `POST /checkpoint/...?leave=running` (src/kubelet/server.ts) against a stand-in pod whose
 * thaw takes a while, as a worker round trip on a loaded node does: a caller that holds the whole
 * snapshot must find the pod thawed. The answer has a `content-length`, so the caller holds it once its
 * last byte arrives, before the server ends the response: a thaw done after the last byte was written
 * left the pod frozen for the caller's next request (worker.test.ts's GET right after the checkpoint was
 * answered 503 on a loaded machine). With `leave=frozen` the pod stays frozen.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import type { KubeletAuthenticator } from '../../src/kubelet/auth.ts';
import type { PodManager } from '../../src/kubelet/pods.ts';
import { createKubeletServer } from '../../src/kubelet/server.ts';

/** How long the stand-in's thaw may wait for the caller to hold the whole answer. */
const THAW_WAIT_MS = 2000;

/**
 * A stand-in pod instance: freezes at once, streams a snapshot of three chunks, and thaws once the
 * caller (`callerHasAll`) holds every byte of the answer, or after {@link THAW_WAIT_MS}: on a server that
 * thaws before the last byte goes out, the caller cannot hold it all first, and the thaw ends at the bound.
 */
function standIn(callerHasAll: Promise<void>) {
  const chunks = [Buffer.alloc(1000, 1), Buffer.alloc(1000, 2), Buffer.alloc(500, 3)];
  const state = { frozen: false, thaws: 0 };
  const inst = {
    get frozen() {
      return state.frozen;
    },
    module: { entryPoint: undefined },
    runningCall: undefined,
    blockers: () => [],
    freeze: async () => {
      state.frozen = true;
    },
    snapshot: async () => ({
      byteLength: chunks.reduce((n, c) => n + c.length, 0),
      imageSha256: 'ab'.repeat(32),
      snapshotSha256: 'cd'.repeat(32),
      podTimeMs: 1234,
      chunks: (async function* () {
        for (const c of chunks) yield new Uint8Array(c);
      })(),
    }),
    thaw: async () => {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([callerHasAll, new Promise<void>((resolve) => (timer = setTimeout(resolve, THAW_WAIT_MS)))]);
      clearTimeout(timer);
      state.frozen = false;
      state.thaws++;
    },
  };
  const pod: V1Pod = { metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'c', image: 'wasm://x' }] } };
  const pods = { find: (ns: string, name: string) => (ns === 'default' && name === 'p' ? { pod, container: (c: string) => (c === 'c' ? { instance: inst } : undefined) } : undefined) };
  return { state, pods: pods as unknown as PodManager };
}

/** POSTs `path` to the kubelet server; resolves with the status, the byte count and whether the pod was frozen when the last byte arrived. */
function post(port: number, path: string, frozenNow: () => boolean, onAll: () => void): Promise<{ status: number; bytes: number; frozenAtLastByte: boolean }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST' }, (res) => {
      const total = Number(res.headers['content-length']);
      let bytes = 0;
      let frozenAtLastByte = true;
      res.on('data', (d: Buffer) => {
        bytes += d.length;
        if (bytes === total) {
          // The caller holds the whole snapshot now: its next request would find the pod as it is now.
          frozenAtLastByte = frozenNow();
          onAll();
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, frozenAtLastByte }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

for (const leave of ['running', 'frozen'] as const) {
  test(`checkpoint leave=${leave}: when the caller holds the whole snapshot the pod is ${leave === 'running' ? 'thawed' : 'still frozen'}`, { timeout: 30_000 }, async (t) => {
    let callerHasAll!: () => void;
    const hasAll = new Promise<void>((resolve) => (callerHasAll = resolve));
    const { state, pods } = standIn(hasAll);
    const auth = { check: async () => ({ ok: true, user: 'system:kube-apiserver' }) } as unknown as KubeletAuthenticator;
    const server = createKubeletServer({ pods: () => pods, auth, log: pino({ level: 'silent' }), deliver: () => 0, node: { name: 'n1', startedAtMs: Date.now(), heapBytes: 1 << 20 } });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => {
      server.closeAllConnections();
      server.close();
    });
    const { port } = server.address() as AddressInfo;
    const r = await post(port, `/checkpoint/default/p/c?leave=${leave}`, () => state.frozen, callerHasAll);
    assert.equal(r.status, 200);
    assert.equal(r.bytes, 2500);
    if (leave === 'running') {
      assert.equal(r.frozenAtLastByte, false, 'the pod was still frozen when the caller held the whole snapshot: its next request is answered 503');
      assert.equal(state.thaws, 1);
    } else {
      assert.equal(r.frozenAtLastByte, true);
      assert.equal(state.thaws, 0);
    }
  });
}
