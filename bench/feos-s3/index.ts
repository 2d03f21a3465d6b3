// Hibernation through S3 (issue 17), one run, as root, against a real S3 server (OpenStack Swift's s3api on
// loopback, scripts/s3-server.sh): a 256 MiB pod hibernated on feosd A and restored with its memory on feosd B,
// against uploading and downloading the same number of bytes with the AWS SDK alone (lib-storage, 8 MiB parts, 4
// at a time); the bytes a second hibernation of the unchanged pod uploads, against the first; and the restore from
// S3 against a local resume from the node's own snapshot. Prints ratios; asserts nothing.
//   node bench/feos-s3/index.ts
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startS3Server } from '../../test/helpers/s3-server.ts';
import { startFeosd, until, waitForPod, type FeosdProcess } from '../../test/feos/harness.ts';

const REPO = new URL('../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const BUCKET = 'feos-bench';
const ID = 'benchs3p0aa';

if (process.getuid?.() !== 0) {
  console.error('bench/feos-s3: needs root (QEMU, the kernel file)');
  process.exit(2);
}
execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'] });
const work = mkdtempSync(join(tmpdir(), 'feos-bench-s3-'));
const s3 = await startS3Server();
const ms = (t0: number) => performance.now() - t0;
const nodes: FeosdProcess[] = [];
try {
  await s3.createBucket(BUCKET);
  const client = s3.client();
  const flags = ['--object-store', `s3://${BUCKET}/bench`, '--s3-endpoint', s3.endpoint];
  const env = { ...process.env, ...s3.env };
  for (const n of ['a', 'b']) {
    mkdirSync(join(work, n));
    nodes.push(await startFeosd(join(work, n), { guestDir: GUEST_DIR, extra: flags, env }));
  }
  const [a, b] = nodes as [FeosdProcess, FeosdProcess];
  const answers = (f: FeosdProcess) => until('the guest answers', async () => ((await f.pods.getPod({ id: ID })).pod!.guest?.answered ? true : undefined), 120_000);
  const manifest = async (checkpoint: string) => {
    const r = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: `bench/pods/${ID}/${checkpoint}/manifest.json` }));
    return JSON.parse(await r.Body!.transformToString()) as { uploadedBytes: number; files: Array<{ sizeBytes: number; chunks: unknown[] }> };
  };

  await a.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n } });
  const pod = await waitForPod(a, ID, (p) => p.state !== PodState.PENDING, 300_000);
  if (pod.state !== PodState.RUNNING) throw new Error(`the pod is ${PodState[pod.state]}: ${pod.reason}`);
  await answers(a);
  // A local suspend and resume first: the node's own snapshot, no store.
  const s0 = performance.now();
  await a.pods.suspendPod({ id: ID });
  const suspend = ms(s0);
  const r0 = performance.now();
  await a.pods.resumePod({ id: ID });
  const resume = ms(r0);
  await answers(a);

  const h0 = performance.now();
  const h1 = await a.pods.hibernatePod({ id: ID });
  const hibernate = ms(h0);
  const m1 = await manifest(h1.pod!.checkpoint);
  const total1 = m1.files.reduce((n, f) => n + f.sizeBytes, 0);
  const chunks1 = m1.files.reduce((n, f) => n + f.chunks.length, 0);
  const x0 = performance.now();
  await b.pods.restorePod({ id: ID });
  const restore = ms(x0);
  await answers(b);
  await a.pods.deletePod({ id: ID });
  const h2s = performance.now();
  const h2 = await b.pods.hibernatePod({ id: ID });
  const hibernate2 = ms(h2s);
  const m2 = await manifest(h2.pod!.checkpoint);
  const total2 = m2.files.reduce((n, f) => n + f.sizeBytes, 0);

  // The SDK alone: the same number of bytes up (lib-storage) and down, through the same server.
  const file = join(work, 'bytes');
  writeFileSync(file, randomBytes(total1));
  const u0 = performance.now();
  await new Upload({ client, params: { Bucket: BUCKET, Key: 'sdk-alone', Body: createReadStream(file) }, partSize: 8 * 1024 * 1024, queueSize: 4 }).done();
  const upload = ms(u0);
  const d0 = performance.now();
  const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'sdk-alone' }));
  let n = 0;
  for await (const c of got.Body as AsyncIterable<Uint8Array>) n += c.byteLength;
  const download = ms(d0);
  if (n !== total1) throw new Error(`the SDK read ${n} of ${total1} bytes`);
  client.destroy();

  const mib = (x: number) => (x / 2 ** 20).toFixed(0);
  const s = (t: number) => `${(t / 1000).toFixed(2)} s`;
  console.log(`feos S3 bench (TCG, 256 MiB pod, Swift s3api on loopback; ${mib(total1)} MiB of memory and disk in ${chunks1} chunks)`);
  console.log(`  SDK alone: upload ${mib(total1)} MiB ${s(upload)}, download ${s(download)}`);
  console.log(`  hibernate on A (suspend, chunks, manifest)        ${s(hibernate)}   ratio to the SDK's upload ${(hibernate / upload).toFixed(2)} (goal 1.5)`);
  console.log(`  restore on B with its memory (fetch, check, resume) ${s(restore)}   ratio to the SDK's download ${(restore / download).toFixed(2)} (goal 1.5)`);
  console.log(`  local suspend ${s(suspend)}, local resume ${s(resume)}; the restore from S3 is ${(restore / resume).toFixed(2)} times the local resume`);
  console.log(
    `  second hibernation (on B, the pod unchanged)       ${s(hibernate2)}   uploaded ${mib(m2.uploadedBytes)} of ${mib(total2)} MiB: ${((100 * m2.uploadedBytes) / total2).toFixed(1)} % (goal 5 %; first: ${((100 * m1.uploadedBytes) / total1).toFixed(0)} %)`,
  );
  console.log('  a baked layer against a fresh pull: not measured (baked images are not built yet)');
} finally {
  for (const f of nodes) await f.stop('SIGKILL');
  try {
    execFileSync('pkill', ['-KILL', '-f', `${work}/`], { stdio: 'ignore' });
  } catch {}
  await s3.stop();
  rmSync(work, { recursive: true, force: true });
}
