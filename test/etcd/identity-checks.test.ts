/**
 * The checks around the cluster identity that need no etcd: the advertise address's default and
 * refusals, the CLI flags' messages, a record whose CA key is not its certificate's, and the
 * `kubernetes` Endpoints built from several API servers (one subset per port, sorted, deduplicated).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { advertiseAddressOf, bootstrap, ensureKubernetesService, setKubernetesEndpoints } from '../../src/apiserver/bootstrap.ts';
import { ClusterIdentityError, parseClusterIdentity } from '../../src/apiserver/cluster-identity.ts';
import { createCertificateAuthority } from '../../src/apiserver/pki.ts';
import { Registry } from '../../src/apiserver/registry/store.ts';
import { MemoryStorage } from '../../src/apiserver/storage/index.ts';
import { parseApiServerClusterFlags } from '../../src/cli/apiserver-flags.ts';
import { createLogger } from '../../src/lib/index.ts';

test('the advertise address: given, else the bind address, else a host address; never a name or an unspecified address', () => {
  assert.equal(advertiseAddressOf('127.0.0.1', '10.0.0.5'), '10.0.0.5');
  assert.equal(advertiseAddressOf('127.3.4.5'), '127.3.4.5');
  assert.equal(advertiseAddressOf('localhost'), '127.0.0.1');
  const host = advertiseAddressOf('0.0.0.0');
  assert.notEqual(host, '0.0.0.0');
  assert.match(host, /^[\d.]+$|:/, 'an IP address of this host');
  assert.throws(() => advertiseAddressOf('127.0.0.1', 'api.example.com'), /the advertise address must be a specified IP address \(Endpoints list IPs\): current value is "api\.example\.com"/);
  assert.throws(() => advertiseAddressOf('127.0.0.1', '0.0.0.0'), RangeError);
});

test('--advertise-address and --identity-lease-duration-seconds refuse bad values naming the flag', () => {
  assert.deepEqual(parseApiServerClusterFlags({ identityLeaseDurationSeconds: '30' }), { identityLeaseDurationSeconds: 30, reusePort: false });
  assert.deepEqual(parseApiServerClusterFlags({ advertiseAddress: '::1', identityLeaseDurationSeconds: '3' }), { advertiseAddress: '::1', identityLeaseDurationSeconds: 3, reusePort: false });
  assert.throws(() => parseApiServerClusterFlags({ advertiseAddress: 'node-a', identityLeaseDurationSeconds: '30' }), /--advertise-address must be a specified IP address .*: current value is node-a/);
  for (const bad of ['2', '3601', '1.5', 'ten', '']) {
    assert.throws(() => parseApiServerClusterFlags({ identityLeaseDurationSeconds: bad }), new RegExp(`--identity-lease-duration-seconds must be an integer of 3 to 3600: current value is ${bad}$`));
  }
});

test('a record whose CA key is not its certificate\'s key is refused, naming the key', async () => {
  const [one, two] = await Promise.all([createCertificateAuthority(), createCertificateAuthority()]);
  const record = (keyPem: string) => JSON.stringify({ version: 1, caCertPem: one.certPem, caKeyPem: keyPem, tokenKey: 'ab'.repeat(32), createdAt: '' });
  assert.equal((await parseClusterIdentity(record(one.keyPem))).caCertPem, one.certPem);
  await assert.rejects(parseClusterIdentity(record(two.keyPem)), (err: Error) => err instanceof ClusterIdentityError && /\/kube32\/cluster-identity: not a Kube32 cluster identity: the CA key is not the key of the CA certificate/.test(err.message));
  await assert.rejects(parseClusterIdentity('{"version":1,"caCertPem":"x","caKeyPem":"y","tokenKey":"zz"}'), /tokenKey must be 64 hex digits/);
  await assert.rejects(parseClusterIdentity('nope'), /not JSON/);
});

test('default/kubernetes Endpoints: one subset per port, addresses sorted and deduplicated, none left when no server is', async () => {
  const registry = new Registry(new MemoryStorage());
  const log = createLogger('identity-checks');
  log.level = 'silent';
  await bootstrap(registry, log);
  await ensureKubernetesService(registry, '127.0.0.1', 6443);
  const subsets = async () => (await registry.storage.get({ resource: 'endpoints', namespace: 'default', name: 'kubernetes' }))?.subsets;
  assert.deepEqual(await subsets(), [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port: 6443, protocol: 'TCP' }] }]);
  await setKubernetesEndpoints(registry, [
    { ip: '10.0.0.3', port: 6443 },
    { ip: '10.0.0.2', port: 6443 },
    { ip: '127.0.0.1', port: 6444 },
    { ip: '10.0.0.2', port: 6443 },
    { ip: 'not-an-ip', port: 6443 },
  ]);
  assert.deepEqual(await subsets(), [
    { addresses: [{ ip: '10.0.0.2' }, { ip: '10.0.0.3' }], ports: [{ name: 'https', port: 6443, protocol: 'TCP' }] },
    { addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port: 6444, protocol: 'TCP' }] },
  ]);
  const rv = (await registry.storage.get({ resource: 'endpoints', namespace: 'default', name: 'kubernetes' }))?.metadata.resourceVersion;
  await setKubernetesEndpoints(registry, [{ ip: '127.0.0.1', port: 6444 }, { ip: '10.0.0.3', port: 6443 }, { ip: '10.0.0.2', port: 6443 }]);
  assert.equal((await registry.storage.get({ resource: 'endpoints', namespace: 'default', name: 'kubernetes' }))?.metadata.resourceVersion, rv, 'the same servers in another order write nothing');
  await setKubernetesEndpoints(registry, []);
  assert.equal(await subsets(), undefined);
});
