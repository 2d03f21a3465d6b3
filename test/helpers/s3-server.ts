/**
 * A real S3 server for a test: OpenStack Swift with s3api on loopback (scripts/s3-server.sh), in a temporary
 * directory of the test's own, on ports of its own, stopped and removed by `stop()`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { canListen, unusedPort } from './ports.ts';

const run = promisify(execFile);
const SCRIPT = resolve(import.meta.dirname, '../../scripts/s3-server.sh');

/** A running Swift S3 server. */
export interface S3Server {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  /** The directory holding its configuration, data and logs. */
  dir: string;
  /** The environment a process needs to reach it (AWS_* variables). */
  env: Record<string, string>;
  /** A client of it. */
  client(): S3Client;
  /** Makes a bucket. */
  createBucket(name: string): Promise<void>;
  /** Stops the servers (the data stays until `stop`). */
  pause(): Promise<void>;
  /** Starts them again on the same ports. */
  resume(): Promise<void>;
  /** Stops the servers and removes the directory. */
  stop(): Promise<void>;
}

/**
 * Starts a Swift S3 server; tries other ports when one of its five is taken (a bounded number of times).
 * @throws Error with the script's message when Swift is not installed or does not start
 */
export async function startS3Server(): Promise<S3Server> {
  const dir = mkdtempSync(join(tmpdir(), 'k32-s3-'));
  let lastErr: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await unusedPort('127.0.0.1');
    const free = await Promise.all([1, 2, 3, 4].map((i) => canListen('127.0.0.1', port + i)));
    if (free.includes(false)) continue;
    try {
      const { stdout } = await run('bash', [SCRIPT, 'start', dir, String(port)], { timeout: 120_000 });
      const env = Object.fromEntries(
        stdout
          .trim()
          .split('\n')
          .map((l) => l.split('=', 2) as [string, string]),
      );
      const endpoint = env.S3_ENDPOINT as string;
      const server: S3Server = {
        endpoint,
        accessKeyId: env.AWS_ACCESS_KEY_ID as string,
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY as string,
        region: env.AWS_REGION as string,
        dir,
        env: { AWS_ACCESS_KEY_ID: env.AWS_ACCESS_KEY_ID as string, AWS_SECRET_ACCESS_KEY: env.AWS_SECRET_ACCESS_KEY as string, AWS_REGION: env.AWS_REGION as string },
        client: () =>
          new S3Client({
            endpoint,
            region: env.AWS_REGION,
            forcePathStyle: true,
            credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID as string, secretAccessKey: env.AWS_SECRET_ACCESS_KEY as string },
            requestChecksumCalculation: 'WHEN_REQUIRED',
            responseChecksumValidation: 'WHEN_REQUIRED',
          }),
        async createBucket(name) {
          const c = server.client();
          try {
            await c.send(new CreateBucketCommand({ Bucket: name }));
          } finally {
            c.destroy();
          }
        },
        async pause() {
          await run('bash', [SCRIPT, 'stop', dir], { timeout: 60_000 });
        },
        async resume() {
          await run('bash', [SCRIPT, 'start', dir], { timeout: 120_000 });
        },
        async stop() {
          await run('bash', [SCRIPT, 'stop', dir], { timeout: 60_000 }).catch(() => {});
          rmSync(dir, { recursive: true, force: true });
        },
      };
      return server;
    } catch (err: unknown) {
      lastErr = err;
      await run('bash', [SCRIPT, 'stop', dir], { timeout: 60_000 }).catch(() => {});
      // The next try configures the directory afresh: the rings name the ports.
      rmSync(join(dir, 'proxy.port'), { force: true });
    }
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`the S3 server (Swift) did not start: ${(lastErr as { stderr?: string })?.stderr ?? lastErr}`);
}
