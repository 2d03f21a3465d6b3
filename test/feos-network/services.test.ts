// feos.network.v1 over real gRPC on a unix socket, with a layer that has no pod prefix (so no
// root is needed): the rest of the API works, pods with a network fail with FAILED_PRECONDITION;
// records survive a restart. And the metadata service on loopback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { NameService, SecurityGroupService, Protocol } from '../../src/feos/gen/feos/network/v1/network_pb.js';
import { createLogger } from '../../src/lib/index.ts';
import { MetadataService, createNetwork, type PodNetwork } from '../../src/feos/network/index.ts';
import { grpcClient } from '../root/feos-network/helpers.ts';

const log = createLogger('test');
const FAILED_PRECONDITION = 9;

async function serve(network: PodNetwork, socket: string): Promise<grpc.Server> {
  const server = new grpc.Server();
  for (const s of network.grpcServices()) server.addService(s.definition, s.implementation);
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  return server;
}

test('without a pod prefix the groups and tables work and pods with a network fail', { timeout: 30_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'k32t-netsvc-'));
  const servers: grpc.Server[] = [];
  t.after(async () => {
    for (const s of servers) s.forceShutdown();
    await rm(dir, { recursive: true, force: true });
  });
  const kept = [{ id: 'abcdefghjkm', network: { securityGroups: ['web'], nameTables: ['svc'], dnsUpstreams: [] } }];
  let network = createNetwork({ stateDir: dir, log });
  await network.start(kept);
  assert.match(network.unavailableReason ?? '', /no pod prefix/);
  await assert.rejects(network.createPod('bcdefghjkmn', { securityGroups: [], nameTables: [], dnsUpstreams: [] }), {
    code: 'FAILED_PRECONDITION',
    message: /no pod prefix \(--pod-prefix\)/,
  });
  servers.push(await serve(network, join(dir, 'a.sock')));
  const sg = grpcClient(SecurityGroupService, join(dir, 'a.sock'));
  const nt = grpcClient(NameService, join(dir, 'a.sock'));
  t.after(() => {
    sg.close();
    nt.close();
  });
  const put = await sg.call<{ group: { id: string; members: string[] } }>('PutSecurityGroup', {
    group: { id: 'web', version: 3n, members: ['2001:DB8::0:1'], ingress: [{ protocol: Protocol.TCP, ports: [{ first: 443 }], peer: { case: 'internet', value: true } }] },
  });
  assert.deepEqual(put.group.members, ['2001:db8::1/128'], 'members in canonical form');
  await assert.rejects(sg.call('PutSecurityGroup', { group: { id: 'x', ingress: [{ protocol: Protocol.ICMP, ports: [{ first: 1 }], peer: { case: 'internet', value: true } }] } }), {
    code: grpc.status.INVALID_ARGUMENT,
    details: /ports are for TCP and UDP rules/,
  });
  await assert.rejects(sg.call('PutSecurityGroup', { group: { id: 'x', egress: [{ protocol: Protocol.TCP }] } }), { details: /names its peer/ });
  await assert.rejects(sg.call('UpdateSecurityGroupMembers', { id: 'web', fromVersion: 2n, toVersion: 4n }), { code: FAILED_PRECONDITION, details: /at version 3, not 2/ });
  const upd = await sg.call<{ group: { version: bigint; members: string[] } }>('UpdateSecurityGroupMembers', { id: 'web', fromVersion: 3n, toVersion: 1n, addMembers: ['2001:db8::2'], removeMembers: ['2001:db8::1'] });
  assert.equal(upd.group.version, 1n, 'a version the control plane chooses, which need not grow');
  assert.deepEqual(upd.group.members, ['2001:db8::2/128']);
  await assert.rejects(sg.call('DeleteSecurityGroup', { id: 'web' }), { code: FAILED_PRECONDITION, details: /named by pod abcdefghjkm/ });
  await assert.rejects(sg.call('DeleteSecurityGroup', { id: 'default' }), { code: grpc.status.INVALID_ARGUMENT });
  await assert.rejects(sg.call('GetSecurityGroup', { id: 'nope' }), { code: grpc.status.NOT_FOUND });
  await sg.call('PutSecurityGroup', { group: { id: 'spare', version: 1n } });
  await sg.call('DeleteSecurityGroup', { id: 'spare' });
  await nt.call('PutNameTable', { table: { id: 'svc', version: 1n, names: [{ name: 'api', addresses: ['2001:db8::5'] }] } });
  await assert.rejects(nt.call('PutNameTable', { table: { id: 'bad', names: [{ name: 'a.b', addresses: ['::1'] }] } }), { details: /one DNS label/ });
  await assert.rejects(nt.call('PutNameTable', { table: { id: 'bad', names: [{ name: 'a', addresses: ['nope'] }] } }), { details: /is not an IP address/ });
  await assert.rejects(nt.call('DeleteNameTable', { id: 'svc' }), { code: FAILED_PRECONDITION });
  // A record that cannot be read is skipped at the next start, the others load.
  await writeFile(join(dir, 'security-groups', 'junk.pb'), 'not a record');
  servers[0].forceShutdown();
  await network.stop();
  network = createNetwork({ stateDir: dir, log });
  await network.start(kept);
  servers.push(await serve(network, join(dir, 'b.sock')));
  const sg2 = grpcClient(SecurityGroupService, join(dir, 'b.sock'));
  t.after(() => sg2.close());
  const list = await sg2.call<{ groups: Array<{ id: string; version: bigint }> }>('ListSecurityGroups', {});
  assert.deepEqual(list.groups.map((g) => [g.id, g.version]), [['default', 0n], ['web', 1n]]);
  assert.deepEqual((await readdir(join(dir, 'name-tables'))).sort(), ['svc.pb']);
  assert.deepEqual(network.missingFor('abcdefghjkm'), { groups: [], tables: [] });
  await network.stop();
});

test('the metadata service: tokens, 401, JSON or text', { timeout: 10_000 }, async (t) => {
  const svc = new MetadataService({
    podBySource: (a) => (a === '127.0.0.1' ? { podId: 'abcdefghjkm', ipv6: '2001:db8::2', ipv4: '169.254.16.1', metadata: { role: 'web' } } : undefined),
    log,
  });
  const port = await svc.listen('127.0.0.1', 0);
  t.after(() => svc.close());
  const base = `http://127.0.0.1:${port}`;
  assert.equal((await fetch(`${base}/feos/ipv6`)).status, 401);
  assert.equal((await fetch(`${base}/latest/api/token`, { method: 'PUT', headers: { 'x-metadata-token-ttl-seconds': '21601' } })).status, 400);
  assert.equal((await fetch(`${base}/latest/api/token`, { method: 'PUT' })).status, 400);
  assert.equal((await fetch(`${base}/latest/api/token`, { method: 'PUT', headers: { 'x-metadata-token-ttl-seconds': '5', 'x-forwarded-for': '1.2.3.4' } })).status, 400);
  // 60 s: a token of 1 s expired while a loaded machine paused this test, and the 401 after forgetPod
  // must come from forgetPod, not from the token's age.
  const token = await (await fetch(`${base}/latest/api/token`, { method: 'PUT', headers: { 'x-metadata-token-ttl-seconds': '60' } })).text();
  const h = { 'x-metadata-token': token };
  assert.equal(await (await fetch(`${base}/feos/pod-id`, { headers: h })).text(), 'abcdefghjkm');
  assert.equal(await (await fetch(`${base}/feos`, { headers: h })).text(), 'pod-id\nipv6\nipv4');
  assert.deepEqual(await (await fetch(`${base}/metadata`, { headers: { ...h, accept: 'application/json' } })).json(), { role: 'web' });
  assert.equal((await fetch(`${base}/metadata/nope`, { headers: h })).status, 404);
  svc.forgetPod('abcdefghjkm');
  assert.equal((await fetch(`${base}/feos/pod-id`, { headers: h })).status, 401, 'a pod that left has no tokens');
});

test("the metadata service takes AWS IMDSv2's header names, and a 401 says which header it expected", { timeout: 10_000 }, async (t) => {
  const svc = new MetadataService({
    podBySource: (a) => (a === '127.0.0.1' ? { podId: 'abcdefghjkm', ipv4: '169.254.16.1', metadata: { role: 'web' } } : undefined),
    log,
  });
  const port = await svc.listen('127.0.0.1', 0);
  t.after(() => svc.close());
  const base = `http://127.0.0.1:${port}`;
  // As the AWS SDKs and cloud-init ask: the TTL and the token under AWS's names.
  const asked = await fetch(`${base}/latest/api/token`, { method: 'PUT', headers: { 'X-aws-ec2-metadata-token-ttl-seconds': '21600' } });
  assert.equal(asked.status, 200);
  const token = await asked.text();
  const aws = await fetch(`${base}/metadata/role`, { headers: { 'X-aws-ec2-metadata-token': token } });
  assert.equal(aws.status, 200);
  assert.equal(await aws.text(), 'web');
  // The seed's names still work, with a token asked for under either.
  assert.equal(await (await fetch(`${base}/feos/pod-id`, { headers: { 'X-metadata-token': token } })).text(), 'abcdefghjkm');
  // A token under another name: the 401 names it and the headers expected.
  const wrong = await fetch(`${base}/feos/pod-id`, { headers: { 'X-Auth-Token': token } });
  assert.equal(wrong.status, 401);
  assert.match(await wrong.text(), /the request has a `x-auth-token` header, but the session token is expected in `X-metadata-token` \(or `X-aws-ec2-metadata-token`\)/);
  const stale = await fetch(`${base}/feos/pod-id`, { headers: { 'X-aws-ec2-metadata-token': 'not-a-token' } });
  assert.equal(stale.status, 401);
  assert.match(await stale.text(), /token is not valid .*PUT \/latest\/api\/token/);
  // A token request without a TTL under either name says which it wants.
  const noTtl = await fetch(`${base}/latest/api/token`, { method: 'PUT', headers: { 'X-aws-ec2-metadata-token-ttl': '60' } });
  assert.equal(noTtl.status, 400);
  assert.match(await noTtl.text(), /`X-metadata-token-ttl-seconds` \(or `X-aws-ec2-metadata-token-ttl-seconds`\)/);
});
