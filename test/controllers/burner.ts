/**
 * The burner example (examples/burner, built into build/examples/burner.wasm by the build) for the
 * metrics and autoscaling suites: pushed as the module `burner`, and a load that keeps pods busy by
 * asking each for `/burn?ms=N` again as soon as it answers, until stopped.
 */
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { Readable } from 'node:stream';
import type { V1Pod } from '@kubernetes/client-node';
import type { ControllersCluster } from './cluster.ts';

const WASM = new URL('../../build/examples/burner.wasm', import.meta.url).pathname;
/** The burner's container port in these suites. */
export const BURNER_PORT = 8090;

/** Pushes build/examples/burner.wasm as the module `burner` (`wasm://burner`). */
export async function pushBurner(c: ControllersCluster): Promise<void> {
  if (!existsSync(WASM)) throw new Error(`${WASM} is missing: run npm run build (scripts/build-examples.sh)`);
  const bytes = readFileSync(WASM);
  const res = await c.rest.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/burner/data', body: Readable.from([bytes]), contentType: 'application/octet-stream', contentLength: bytes.length });
  res.body.resume();
  if (res.status >= 300) throw new Error(`pushing the burner module: ${res.status}`);
}

/** The burner's container, with a CPU request (the HPA's utilization is of it). */
export function burnerContainer(cpuRequest = '100m'): Record<string, unknown> {
  return { name: 'burner', image: 'wasm://burner', ports: [{ containerPort: BURNER_PORT }], resources: { requests: { cpu: cpuRequest }, limits: { memory: '1Mi' } } };
}

/** One `GET /burn?ms=<ms>` to the pod at its IP; resolves true when it answered 200. */
function burnOnce(pod: V1Pod, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ host: pod.status?.podIP, port: BURNER_PORT, path: `/burn?ms=${ms}`, timeout: 10_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode === 200));
      res.on('error', () => resolve(false));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve(false));
  });
}

/** A running load: `stop()` ends it after the requests in flight. */
export interface Load {
  stop(): Promise<void>;
}

/**
 * Keeps `pods` busy: for each, one `/burn?ms=<ms>` after another (a pod's calls run one at a time, so
 * one loop a pod keeps its thread about one core busy).
 */
export function startLoad(pods: V1Pod[], ms = 200): Load {
  let stopped = false;
  const loops = pods.map(async (pod) => {
    // A pod that stops answering (gone, or not yet ready) is asked again after a pause, not in a tight loop.
    while (!stopped) if (!(await burnOnce(pod, ms))) await new Promise((r) => setTimeout(r, 200));
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}
