// Baked images benchmark (issue 17, seed "Baked images"; docs/feos/baked-images.md), one run, as root: a
// 256 MiB pod with one container whose image carries a 64 MiB incompressible file, on a local registry
// (test/feos/registry.ts) reached through --registry-forward, feosd with a local-directory object store.
// Three pods one after another: a fresh pull (no image_layers), one that pulls and bakes, and one created
// on the baked layer. Prints create-to-RUNNING (the container started) of each, the layer's size and the
// ratio of the layer's start to the fresh pull's. Asserts nothing.
//   node bench/feos-baked/index.ts
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guestVersions } from '../../src/feos/pods/index.ts';
import { type PodInfo, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startFeosd, until, waitForPod, type FeosdProcess } from '../../test/feos/harness.ts';
import { buildBusyboxLayout, push, startRegistry } from '../../test/feos/registry.ts';

const REPO = new URL('../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const MEMORY = 256n * 1024n * 1024n;
const BIG_MIB = 64;
const FRESH = 'bnchfresh0a';
const BAKE = 'bnchbake00a';
const LAYER = 'bnchxayer0a';

if (process.getuid?.() !== 0) {
  console.error('bench/feos-baked: needs root (the kernel file, QEMU)');
  process.exit(2);
}
execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'] });
const version = guestVersions(GUEST_DIR).at(-1)!;
const work = mkdtempSync(join(tmpdir(), 'feos-bench-baked-'));
const ms = (t0: number) => performance.now() - t0;
let feosd: FeosdProcess | undefined;
let stopRegistry = async () => {};

try {
  // The image: busybox and a 64 MiB random file in a second layer.
  const layout = buildBusyboxLayout(work);
  const bundle = join(work, 'bundle-big');
  execFileSync('umoci', ['unpack', '--rootless', '--image', `${layout}:1`, bundle], { stdio: 'ignore' });
  writeFileSync(join(bundle, 'rootfs', 'big.bin'), randomBytes(BIG_MIB * 1024 * 1024));
  execFileSync('umoci', ['repack', '--image', `${layout}:1`, bundle], { stdio: 'ignore' });
  const reg = await startRegistry(work, 'bench-token');
  stopRegistry = () => reg.stop();
  push(layout, reg.direct, 'public/big', '1');
  const image = `${reg.gated}/public/big:1`;

  const storeDir = join(work, 'store');
  feosd = await startFeosd(join(work, 'feosd'), { guestDir: GUEST_DIR, extra: ['--object-store', pathToFileURL(storeDir).href, '--registry-forward', reg.gated] });
  const f = feosd;
  process.on('exit', () => f.child.kill('SIGKILL'));
  const spec = { vcpus: 1, memoryBytes: MEMORY, containers: [{ name: 'app', image, command: ['/bin/sh', '-c', 'sleep 100000'] }] };
  /** Creates a pod and answers the ms from the create to RUNNING (its container started). */
  const timed = async (id: string, imageLayers?: { image: string; layers?: string[]; bake?: boolean }): Promise<{ ms: number; pod: PodInfo }> => {
    const t0 = performance.now();
    await f.pods.createPod({ id, spec, imageLayers });
    const pod = await waitForPod(f, id, (p) => p.state !== PodState.PENDING, 600_000);
    const took = ms(t0);
    if (pod.state !== PodState.RUNNING) throw new Error(`pod ${id} is ${PodState[pod.state]}: ${pod.reason}`);
    return { ms: took, pod };
  };
  const blobs = () => reg.seenRequests.filter((r) => r.includes('/blobs/')).length;

  const fresh = await timed(FRESH);
  await f.pods.deletePod({ id: FRESH });
  const bake = await timed(BAKE, { image, bake: true });
  const baked = await until('the layer is in the store', async () => (await f.pods.getPod({ id: BAKE })).pod!.baked || undefined, 600_000);
  const trimmed = /feos-agent: fstrim.*/.exec(readFileSync(join(f.stateDir, 'vms', BAKE, 'serial.log'), 'utf8'))?.[0] ?? 'no fstrim line';
  await f.pods.deletePod({ id: BAKE });
  const before = blobs();
  const onLayer = await timed(LAYER, { image, layers: [baked] });
  const pulledOnLayer = blobs() - before;
  await f.pods.deletePod({ id: LAYER });
  const layerBytes = statSync(join(storeDir, 'layers', baked, 'layer.qcow2')).size;
  const m = JSON.parse(readFileSync(join(storeDir, 'layers', baked, 'manifest.json'), 'utf8')) as { imageDigest: string };

  const s = (t: number) => `${(t / 1000).toFixed(1)} s`;
  console.log(`feos baked images bench (TCG, 256 MiB pod, guest ${version}, image ${m.imageDigest.slice(0, 19)}… with a ${BIG_MIB} MiB file)`);
  console.log(`  create to RUNNING, fresh pull                 ${s(fresh.ms)}`);
  console.log(`  create to RUNNING, pull and bake              ${s(bake.ms)}   ratio to the fresh pull ${(bake.ms / fresh.ms).toFixed(2)}`);
  console.log(`  create to RUNNING, on the baked layer         ${s(onLayer.ms)}   ratio to the fresh pull ${(onLayer.ms / fresh.ms).toFixed(2)}`);
  console.log(`  layer ${(layerBytes / 2 ** 20).toFixed(1)} MiB; blobs fetched by the pod on the layer: ${pulledOnLayer}; ${trimmed}`);
} finally {
  for (const id of [FRESH, BAKE, LAYER]) await feosd?.pods.deletePod({ id }).catch(() => {});
  await feosd?.stop();
  await stopRegistry();
  rmSync(work, { recursive: true, force: true });
}
