// Hibernation through S3 (issue 17), one run, as root, against a real S3 server (OpenStack Swift's s3api on
// loopback, scripts/s3-server.sh): a 256 MiB pod hibernated on feosd A and restored with its memory on feosd B,
// against uploading and downloading the same number of bytes with the AWS SDK alone (lib-storage, 8 MiB parts, 4
// at a time); the bytes a second hibernation of the unchanged pod uploads, against the first; and the restore from
// S3 against a local resume from the node's own snapshot. Prints ratios; asserts nothing.
//   node bench/feos-s3/index.ts
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, createReadStream, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startS3Server } from '../../test/helpers/s3-server.ts';
import { ChunkCutter, type CdcParams, PACKED_CHUNKS, LARGE_CHUNKS } from '../../src/feos/store/index.ts';
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
    return JSON.parse(await r.Body!.transformToString()) as { uploadedBytes: number; base?: string; files: Array<{ sizeBytes: number; chunks: unknown[] }>; packs?: string[] };
  };

  await a.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n * 1024n * 1024n } });
  const pod = await waitForPod(a, ID, (p) => p.state !== PodState.PENDING, 300_000);
  if (pod.state !== PodState.RUNNING) throw new Error(`the pod is ${PodState[pod.state]}: ${pod.reason}`);
  await answers(a);
  // Two local suspends and resumes first: the node's own snapshot, no store. Their two migration streams, a
  // few seconds apart, measure what content-defined chunks of each size would upload a second time.
  const vmstate = join(work, 'a', 'state', 'vms', ID, 'snapshot', 'vmstate');
  const s0 = performance.now();
  await a.pods.suspendPod({ id: ID });
  const suspend = ms(s0);
  copyFileSync(vmstate, join(work, 'stream1'));
  const r0 = performance.now();
  await a.pods.resumePod({ id: ID });
  const resume = ms(r0);
  await answers(a);
  await a.pods.suspendPod({ id: ID });
  copyFileSync(vmstate, join(work, 'stream2'));
  await a.pods.resumePod({ id: ID });
  await answers(a);
  const cutShare = async (p: CdcParams) => {
    const shas = async (f: string) => {
      const out = new Map<string, number>();
      const c = new ChunkCutter(p);
      const add = (xs: Buffer[]) => {
        for (const x of xs) out.set(createHash('sha256').update(x).digest('hex'), x.length);
      };
      for await (const piece of createReadStream(f, { highWaterMark: 1 << 20 })) add(c.push(piece as Buffer));
      add(c.end());
      return out;
    };
    const one = await shas(join(work, 'stream1'));
    const two = await shas(join(work, 'stream2'));
    let fresh = 0;
    let all = 0;
    for (const [k, n] of two) {
      all += n;
      if (!one.has(k)) fresh += n;
    }
    return { share: fresh / all, chunks: two.size };
  };
  const sizes: Array<[string, CdcParams]> = [
    ['1 MiB (v2)', LARGE_CHUNKS],
    ['16 KiB', { minBytes: 4096, avgBytes: 16384, maxBytes: 131072 }],
    ['8 KiB', { minBytes: 2048, avgBytes: 8192, maxBytes: 65536 }],
    ['4 KiB (v3)', PACKED_CHUNKS],
    ['2 KiB', { minBytes: 512, avgBytes: 2048, maxBytes: 16384 }],
  ];
  const shares: string[] = [];
  for (const [name, p] of sizes) {
    const r = await cutShare(p);
    shares.push(`${name}: ${(100 * r.share).toFixed(1)} % (${r.chunks} chunks)`);
  }
  const logged = (f: FeosdProcess, msg: string) => {
    const lines = f.stderr().split('\n').filter((l) => l.includes(`"msg":"${msg}"`));
    return JSON.parse(lines.at(-1) ?? '{}') as Record<string, number>;
  };

  const h0 = performance.now();
  const h1 = await a.pods.hibernatePod({ id: ID });
  const hibernate = ms(h0);
  const m1 = await manifest(h1.pod!.checkpoint);
  const total1 = m1.files.reduce((n, f) => n + f.sizeBytes, 0);
  const chunks1 = m1.files.reduce((n, f) => n + f.chunks.length, 0);
  const packs1 = m1.packs?.length ?? 0;
  const t1 = logged(a, 'hibernated');
  // The SDK alone, the same number of bytes up, right after the hibernation (and again at the end: the machine's load
  // moves within a run; the ratios are to the mean of the two).
  const file = join(work, 'bytes');
  writeFileSync(file, randomBytes(total1));
  let sdkCpuMs = 0;
  const sdkUpload = async (key: string) => {
    const u0 = performance.now();
    const c0 = process.cpuUsage();
    await new Upload({ client, params: { Bucket: BUCKET, Key: key, Body: createReadStream(file) }, partSize: 8 * 1024 * 1024, queueSize: 4 }).done();
    const c = process.cpuUsage(c0);
    sdkCpuMs = (c.user + c.system) / 1000;
    return ms(u0);
  };
  const uploadNear = await sdkUpload('sdk-alone-1');
  const x0 = performance.now();
  await b.pods.restorePod({ id: ID });
  const restore = ms(x0);
  const tr = logged(b, 'restore');
  await answers(b);
  await a.pods.deletePod({ id: ID });
  const h2s = performance.now();
  const h2 = await b.pods.hibernatePod({ id: ID });
  const hibernate2 = ms(h2s);
  const m2 = await manifest(h2.pod!.checkpoint);
  const total2 = m2.files.reduce((n, f) => n + f.sizeBytes, 0);
  const t2 = logged(b, 'hibernated');

  // The SDK alone: the same number of bytes up (lib-storage) and down, through the same server.
  const uploadEnd = await sdkUpload('sdk-alone');
  const upload = (uploadNear + uploadEnd) / 2;
  const d0 = performance.now();
  const dc0 = process.cpuUsage();
  const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'sdk-alone' }));
  let n = 0;
  for await (const c of got.Body as AsyncIterable<Uint8Array>) n += c.byteLength;
  const download = ms(d0);
  const dc = process.cpuUsage(dc0);
  const downloadCpuMs = (dc.user + dc.system) / 1000;
  if (n !== total1) throw new Error(`the SDK read ${n} of ${total1} bytes`);
  client.destroy();

  const mib = (x: number) => (x / 2 ** 20).toFixed(x < 2 ** 24 ? 1 : 0);
  const s = (t: number) => `${(t / 1000).toFixed(2)} s`;
  console.log(`feos S3 bench (TCG, 256 MiB pod, Swift s3api on loopback; ${mib(total1)} MiB of memory and disk in ${chunks1} chunks, ${packs1} packs)`);
  console.log(`  SDK alone: upload ${mib(total1)} MiB ${s(upload)} (right after the hibernation ${s(uploadNear)}, at the end ${s(uploadEnd)}), download ${s(download)}`);
  console.log(`  hibernate on A (suspend, chunks, manifest)        ${s(hibernate)}   ratio to the SDK's upload ${(hibernate / upload).toFixed(2)} (goal 1.5)`);
  console.log(
    `    of it: suspend (QEMU writes its stream) ${s(t1.suspendMs ?? 0)}, chunk and upload ${s(t1.uploadMs ?? 0)}${t1.overlapped ? " (from the suspend's start: the stream is cut and uploaded as QEMU writes it)" : ' (after the suspend)'} (waiting for the store ${s(t1.waitedMs ?? 0)}), manifest ${s(t1.manifestMs ?? 0)} (${mib(t1.manifestBytes ?? 0)} MiB); upload to the SDK's: ${((t1.uploadMs ?? 0) / upload).toFixed(2)}`,
  );
  console.log(`    CPU time (less moved by the machine's load than the times): feosd's over the hibernation ${s(t1.cpuMs ?? 0)} (its hash workers' included), this process's for the SDK's upload ${s(sdkCpuMs)}`);
  console.log(`  restore on B with its memory (fetch, check, resume) ${s(restore)}   ratio to the SDK's download ${(restore / download).toFixed(2)} (goal 1.5)`);
  console.log(
    `    of it: copy ${s(tr.allMs ?? 0)}: ranged GETs, chunks checked and written ${s(tr.fetchMs ?? 0)} (to the SDK's download ${((tr.fetchMs ?? 0) / download).toFixed(2)}), whole files checked ${s(tr.checkMs ?? 0)}, fsync ${s(tr.syncMs ?? 0)}; the rest (claim, QEMU loads the stream, resume) ${s(restore - (tr.allMs ?? 0))}`,
  );
  console.log(`    CPU time over the copy: feosd's ${s(tr.copyCpuMs ?? 0)} (its hash workers' included; it also writes the files), this process's for the SDK's download ${s(downloadCpuMs)} (the bytes counted, not written)`);
  console.log(`  local suspend ${s(suspend)}, local resume ${s(resume)}; the restore from S3 is ${(restore / resume).toFixed(2)} times the local resume`);
  console.log(
    `  second hibernation (on B, the pod unchanged)       ${s(hibernate2)}   uploaded ${mib(m2.uploadedBytes)} of ${mib(total2)} MiB: ${((100 * m2.uploadedBytes) / total2).toFixed(1)} % (goal 5 %; first: ${((100 * m1.uploadedBytes) / total1).toFixed(0)} %)`,
  );
  console.log(
    `    of it: suspend ${s(t2.suspendMs ?? 0)}, chunk and upload ${s(t2.uploadMs ?? 0)}, manifest ${s(t2.manifestMs ?? 0)}; with the manifest (${((t2.manifestBytes ?? 0) / 2 ** 10).toFixed(0)} KiB, ${m2.base === h1.pod!.checkpoint ? "relative to the first's" : 'every chunk named'}; the first's ${((t1.manifestBytes ?? 0) / 2 ** 10).toFixed(0)} KiB) it sent ${((100 * (m2.uploadedBytes + (t2.manifestBytes ?? 0))) / total2).toFixed(1)} % (goal 5 %)`,
  );
  console.log(`  two local streams a few seconds apart, the second's bytes in chunks the first lacks, by average chunk size: ${shares.join('; ')}`);
  console.log('  a baked layer against a fresh pull: bench/feos-baked');
} finally {
  for (const f of nodes) await f.stop('SIGKILL');
  try {
    execFileSync('pkill', ['-KILL', '-f', `${work}/`], { stdio: 'ignore' });
  } catch {}
  await s3.stop();
  rmSync(work, { recursive: true, force: true });
}
