// HibernatePod against a real S3 server (OpenStack Swift's s3api on loopback, scripts/s3-server.sh) that refuses it,
// with a real feosd and no VM (issue 17, "Bad input and faults"): a pod whose boot failed after its disk was made
// hibernates its disk alone, so one state dir serves three feosds in turn. A bucket that does not exist and
// credentials the server refuses are FAILED_PRECONDITION naming the store and what to check; the pod stays FAILED on
// the node with its disk, nothing is left in the store (so is a feosd that finds no credentials at all, saying what to set); with the right bucket and keys the same pod then hibernates.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { status } from '@grpc/grpc-js';
import { startS3Server } from '../helpers/s3-server.ts';
import { PodState, startFeosd, tempDir, waitForPod } from './harness.ts';

const SWIFT = '/usr/bin/swift-proxy-server';
const skip = existsSync(SWIFT) ? false : `OpenStack Swift is not installed (${SWIFT}): scripts/setup.sh installs it as root`;
const code = (e: unknown) => (e as { code?: number }).code;
const details = (e: unknown) => (e as { details?: string }).details ?? '';
const BUCKET = 'feos-faults';
const ID = 'hbsthreef0a';

test('a hibernation to a bucket that does not exist or with refused keys is FAILED_PRECONDITION naming the store; the pod stays as it was and hibernates once the store is right', { skip, timeout: 300_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-hbs3-');
  t.after(cleanup);
  const s3 = await startS3Server();
  t.after(() => s3.stop());
  await s3.createBucket(BUCKET);
  const client = s3.client();
  t.after(() => client.destroy());
  const keys = async () => ((await client.send(new ListObjectsV2Command({ Bucket: BUCKET }))).Contents ?? []).map((o) => o.Key!);
  const feosd = (bucket: string, env: Record<string, string>) =>
    startFeosd(dir, { extra: ['--object-store', `s3://${bucket}/node`, '--s3-endpoint', s3.endpoint], env: { ...process.env, ...env } });

  // No guest is installed: the pod's boot fails. Its disk, as a boot that failed after making it leaves it.
  let f = await feosd(BUCKET, s3.env);
  await f.pods.createPod({ id: ID, spec: { vcpus: 1, memoryBytes: 256n << 20n } });
  await waitForPod(f, ID, (p) => p.state === PodState.FAILED, 30_000);
  await f.stop();
  const disk = join(dir, 'state', 'disks', `${ID}.qcow2`);
  mkdirSync(join(dir, 'state', 'disks'), { recursive: true });
  const bytes = Buffer.alloc(256 * 1024, 7);
  writeFileSync(disk, bytes);
  const stays = async () => {
    const pod = (await f.pods.getPod({ id: ID })).pod!;
    assert.equal(pod.state, PodState.FAILED, `the pod stays as it was: ${pod.reason}`);
    assert.deepEqual(readFileSync(disk), bytes, 'its disk is on the node as it was');
    assert.deepEqual(await keys(), [], 'nothing of it is in the store');
  };

  for (const [what, bucket, env, why] of [
    ['a bucket that does not exist', 'feos-no-such-bucket', s3.env, /s3:\/\/feos-no-such-bucket\/node: .*NoSuchBucket \(404\).*check the bucket feos-no-such-bucket, --s3-endpoint, --s3-region and the AWS credentials/],
    ['a secret the server refuses', BUCKET, { ...s3.env, AWS_SECRET_ACCESS_KEY: 'not-the-secret' }, new RegExp(`s3://${BUCKET}/node: .*(SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId).*check the bucket ${BUCKET}`)],
    // No keys anywhere (it was UNAVAILABLE "Could not load credentials from any providers", naming nothing to set).
    // The instance metadata service is off: the chain would otherwise ask 169.254.169.254.
    ['no credentials at all', BUCKET, { AWS_REGION: s3.env.AWS_REGION, AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '', AWS_SESSION_TOKEN: '', AWS_PROFILE: '', HOME: dir, AWS_SHARED_CREDENTIALS_FILE: join(dir, 'no-credentials'), AWS_CONFIG_FILE: join(dir, 'no-config'), AWS_EC2_METADATA_DISABLED: 'true' }, new RegExp(`s3://${BUCKET}/node: .*no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`)],
  ] as const) {
    f = await feosd(bucket, env);
    try {
      const err = await f.pods.hibernatePod({ id: ID }).then(
        () => assert.fail(`${what}: the hibernation succeeded`),
        (e: unknown) => e,
      );
      assert.equal(code(err), status.FAILED_PRECONDITION, `${what}: ${details(err)}`);
      assert.match(details(err), why, what);
      assert.match(details(err), /the pod stays FAILED on the node/, what);
      await stays();
    } finally {
      await f.stop();
    }
  }

  f = await feosd(BUCKET, s3.env);
  t.after(() => f.stop('SIGKILL'));
  const done = (await f.pods.hibernatePod({ id: ID })).pod!;
  assert.equal(done.state, PodState.HIBERNATED, done.reason);
  assert.ok((await keys()).includes(`node/pods/${ID}/${done.checkpoint}/manifest.json`), 'its manifest is in the bucket');
  assert.ok(!existsSync(disk), 'its disk went into the store');
});
