// A restore's copy alone, in one process, against a real S3 server (Swift's s3api on loopback,
// scripts/s3-server.sh): a 180 MiB file of random bytes cut into packs by a PackWriter and put, then read back into
// a file by `readPacked` (ranged GETs, every chunk checked, positioned writes), against the SDK's download of the same
// bytes as one object (GetObject, the body read to its end) written to a file. Runs each ROUNDS times alternately and
// prints the ratio of the means, and each side's CPU. Asserts nothing. `node --cpu-prof` on it profiles both.
//   node bench/s3-restore-copy/index.ts [MiB] [rounds]
import { randomBytes } from 'node:crypto';
import { Session } from 'node:inspector/promises';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { fileChunks } from '../../src/feos/pods/index.ts';
import { hashPool, PackWriter, readPacked, S3ObjectStore } from '../../src/feos/store/index.ts';
import { startS3Server } from '../../test/helpers/s3-server.ts';

const MIB = Number(process.argv[2] ?? 180);
const ROUNDS = Number(process.argv[3] ?? 3);
const BUCKET = 'feos-restore-copy';
const work = mkdtempSync(join(tmpdir(), 'feos-restore-copy-'));
const s3 = await startS3Server();
try {
  await s3.createBucket(BUCKET);
  const client = s3.client();
  const store = new S3ObjectStore(`s3://${BUCKET}/b`, { endpoint: s3.endpoint, client });
  const src = join(work, 'src');
  writeFileSync(src, randomBytes(MIB * 2 ** 20));
  const writer = new PackWriter(store, 'packs', new Map());
  const file = await writer.putFile(fileChunks(src, undefined, writer.pieces));
  await writer.finish();
  await new Upload({ client, params: { Bucket: BUCKET, Key: 'sdk', Body: createReadStream(src) }, partSize: 8 * 2 ** 20, queueSize: 4 }).done();
  // FEOS_PROFILE=DIR: a CPU profile of each side's reads alone (the main thread), DIR/ours.cpuprofile and DIR/sdk.cpuprofile.
  const profDir = process.env.FEOS_PROFILE;
  const session = profDir ? new Session() : undefined;
  session?.connect();
  await session?.post('Profiler.enable');
  const profiled = async (name: string, f: () => Promise<void>) => {
    await session?.post('Profiler.start');
    await f();
    if (session) writeFileSync(join(profDir!, `${name}-${Date.now()}.cpuprofile`), JSON.stringify((await session.post('Profiler.stop')).profile));
  };
  const cpu = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;
  const ours: number[] = [];
  const sdk: number[] = [];
  const oursCpu: number[] = [];
  const sdkCpu: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    {
      const fh = await open(join(work, 'ours'), 'w', 0o600);
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      await profiled('ours', () => readPacked(store, 'packs', file.chunks, fh).then(() => {}));
      ours.push(performance.now() - t0);
      oursCpu.push(cpu(process.cpuUsage(c0)));
      await fh.close();
    }
    {
      const fh = await open(join(work, 'sdk'), 'w', 0o600);
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      await profiled('sdk', async () => {
        const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: 'sdk' }));
        for await (const c of got.Body as AsyncIterable<Uint8Array>) await fh.write(c);
      });
      sdk.push(performance.now() - t0);
      sdkCpu.push(cpu(process.cpuUsage(c0)));
      await fh.close();
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const s = (xs: number[]) => xs.map((x) => (x / 1000).toFixed(2)).join(' ');
  console.log(`restore copy of ${MIB} MiB (${file.chunks.length} chunks), ${ROUNDS} rounds: readPacked ${s(ours)} s (CPU ${s(oursCpu)} s), SDK download ${s(sdk)} s (CPU ${s(sdkCpu)} s); ratio ${(mean(ours) / mean(sdk)).toFixed(2)}`);
  client.destroy();
} finally {
  await hashPool().close();
  await s3.stop();
  rmSync(work, { recursive: true, force: true });
}
