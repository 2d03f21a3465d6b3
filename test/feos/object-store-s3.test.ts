// The object store on S3 (--object-store s3://BUCKET/PREFIX) against a real S3 server: OpenStack Swift's s3api on
// loopback (scripts/s3-server.sh). The conformance suite every store passes, then what only a remote store has: a
// bucket that does not exist, credentials it refuses, a server that stopped, bytes damaged in storage.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { S3Client } from '@aws-sdk/client-s3';
import { openObjectStore, ObjectStoreError, S3ObjectStore, storeFailureCode } from '../../src/feos/store/index.ts';
import { startS3Server, type S3Server } from '../helpers/s3-server.ts';
import { chunks, objectStoreConformance } from './object-store-conformance.ts';

const SWIFT = '/usr/bin/swift-proxy-server';
const skip = existsSync(SWIFT) ? false : `OpenStack Swift is not installed (${SWIFT}): scripts/setup.sh installs it as root`;

let server: S3Server;
let buckets = 0;
before(async () => {
  if (!skip) server = await startS3Server();
}, { timeout: 180_000 });
after(async () => {
  await server?.stop();
});

function storeIn(bucket: string, prefix = 'feos'): S3ObjectStore {
  return new S3ObjectStore(`s3://${bucket}/${prefix}`, {
    client: server.client(),
  });
}

async function newBucket(): Promise<string> {
  const name = `feos-test-${process.pid}-${++buckets}`;
  await server.createBucket(name);
  return name;
}

if (skip) {
  test('the S3 object store', { skip }, () => {});
} else {
  objectStoreConformance('S3 (Swift s3api)', async () => {
    const store = storeIn(await newBucket());
    return { store, cleanup: () => store.client.destroy() };
  });
}

test("scripts/s3-server.sh: a start of a DIR set up for one port with another is refused, naming both, and the running server serves on (the port was silently ignored: the servers went to the first port's)", { skip, timeout: 120_000 }, async () => {
  const port = Number(new URL(server.endpoint).port);
  const other = String(port + 100);
  const script = join(import.meta.dirname, '../../scripts/s3-server.sh');
  const r = spawnSync('bash', [script, 'start', server.dir, other], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`is set up for port ${port}, not ${other}: start it without a port \\(or with ${port}\\), or give another DIR`));
  assert.equal(r.stdout, '', 'no settings printed');
  const store = storeIn(await newBucket());
  try {
    await store.put('pods/p/c/manifest.json', new TextEncoder().encode('still here'));
    assert.equal(new TextDecoder().decode(await store.getBytes('pods/p/c/manifest.json')), 'still here');
  } finally {
    store.client.destroy();
  }
});

test('S3: objects live under the URL prefix; two prefixes in one bucket do not see each other', { skip, timeout: 60_000 }, async (t) => {
  const bucket = await newBucket();
  const a = storeIn(bucket, 'node-a');
  const b = storeIn(bucket, 'node-b/deeper');
  t.after(() => {
    a.client.destroy();
    b.client.destroy();
  });
  await a.put('pods/p/c/manifest.json', new TextEncoder().encode('a'));
  await b.put('pods/p/c/manifest.json', new TextEncoder().encode('b'));
  assert.deepEqual(await a.list('pods'), ['pods/p/c/manifest.json']);
  assert.equal(new TextDecoder().decode(await b.getBytes('pods/p/c/manifest.json')), 'b');
  const whole = storeIn(bucket, '');
  t.after(() => whole.client.destroy());
  assert.deepEqual(await whole.list('node-b'), ['node-b/deeper/pods/p/c/manifest.json']);
});

test('S3: a bucket that does not exist and refused credentials fail as FAILED_PRECONDITION, naming the bucket', { skip, timeout: 60_000 }, async () => {
  const missing = storeIn('feos-no-such-bucket');
  try {
    const err = await missing.put('pods/p/c/manifest.json', new Uint8Array(4)).then(
      () => assert.fail('a put into a missing bucket succeeded'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ObjectStoreError, String(err));
    assert.equal(storeFailureCode(err), 'FAILED_PRECONDITION');
    assert.match(err.message, /NoSuchBucket \(404\).*check the bucket feos-no-such-bucket/);
  } finally {
    missing.client.destroy();
  }
  const bucket = await newBucket();
  const wrong = new S3ObjectStore(`s3://${bucket}/feos`, {
    client: new S3Client({ endpoint: server.endpoint, region: server.region, forcePathStyle: true, credentials: { accessKeyId: server.accessKeyId, secretAccessKey: 'not-the-secret' } }),
  });
  try {
    const err = await wrong.put('pods/p/c/memory', chunks([Buffer.alloc(1024)])).then(
      () => assert.fail('a put with a wrong secret succeeded'),
      (e: unknown) => e,
    );
    assert.equal(storeFailureCode(err), 'FAILED_PRECONDITION', String(err));
    assert.match((err as Error).message, /SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId/);
  } finally {
    wrong.client.destroy();
  }
});

test('S3: a region that cannot be one is the configuration: FAILED_PRECONDITION naming --s3-region', { skip, timeout: 60_000 }, async () => {
  const store = new S3ObjectStore(`s3://${await newBucket()}/x`, { endpoint: server.endpoint, region: 'not a region!' });
  try {
    const err = await store.put('a/b', new Uint8Array(1)).then(
      () => assert.fail('a put with a bad region succeeded'),
      (e: unknown) => e,
    );
    assert.equal(storeFailureCode(err), 'FAILED_PRECONDITION', String(err));
    assert.match((err as Error).message, /--s3-region/);
  } finally {
    store.client.destroy();
  }
});

test('S3: the store made from the URL and options reads the AWS credentials from the environment', { skip, timeout: 60_000 }, async (t) => {
  const bucket = await newBucket();
  const saved = { ...process.env };
  t.after(() => {
    for (const k of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_REGION']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  });
  Object.assign(process.env, server.env);
  const store = openObjectStore(`s3://${bucket}/p`, { endpoint: server.endpoint });
  await store.put('x/y', new TextEncoder().encode('hello'));
  assert.equal(new TextDecoder().decode(await store.getBytes('x/y')), 'hello');
  (store as S3ObjectStore).client.destroy();
});

test('S3: bytes damaged in storage are refused as DATA_LOSS; a stopped server is UNAVAILABLE', { skip, timeout: 120_000 }, async (t) => {
  const bucket = await newBucket();
  const store = storeIn(bucket);
  t.after(() => store.client.destroy());
  const body = new TextEncoder().encode('{"version":1,"the":"manifest"}');
  await store.put('pods/p/c/manifest.json', body);
  // Swift keeps the object as a .data file below its device: change one byte of it, keeping its size.
  const files: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.data')) files.push(join(d, e.name));
    }
  };
  walk(join(server.dir, 'srv', 'd1', 'objects'));
  const file = files.find((f) => statSync(f).size === body.length && readFileSync(f).equals(Buffer.from(body)));
  assert.ok(file, `the object's .data file among ${files.length}`);
  const damaged = Buffer.from(body);
  damaged[12] = damaged[12]! ^ 1;
  writeFileSync(file, damaged);
  const err = await store.getBytes('pods/p/c/manifest.json').then(
    () => assert.fail('damaged bytes were read'),
    (e: unknown) => e,
  );
  assert.equal(storeFailureCode(err), 'DATA_LOSS', String(err));
  assert.match((err as Error).message, /SHA-256 .* is not the .* they were put with/);

  await server.pause();
  t.after(() => server.resume());
  const down = await store.exists('pods/p/c/manifest.json').then(
    () => assert.fail('a stopped server answered'),
    (e: unknown) => e,
  );
  assert.equal(storeFailureCode(down), 'UNAVAILABLE', String(down));
  assert.match((down as Error).message, /ECONNREFUSED/);
});
