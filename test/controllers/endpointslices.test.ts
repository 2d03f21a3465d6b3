/**
 * `discovery.k8s.io/v1` EndpointSlices with the real kubectl against a real cluster (API server, controllers,
 * two kube32-sim workers): a Service over two counter pods gets one slice, labelled with the Service's name
 * and owned by it, listing both pods' addresses and the resolved port; `kubectl describe svc` prints them as
 * `Endpoints:`; `kubectl get endpointslices` prints kube-apiserver's columns; a pod relabelled out of the selector or deleted leaves the slice;
 * with no pod left one placeholder slice stays; the deleted Service takes its slice with it (garbage collector). The `default/kubernetes` slice names the
 * API server.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice, V1Pod } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';
import { counterPod, runPod, startControllersCluster } from './cluster.ts';

const PORT = 18095;

interface SliceList {
  items: V1EndpointSlice[];
}

test('a Service over counter pods has an EndpointSlice that kubectl get and describe show, kept in step with its pods', { timeout: 150_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  await c.startWorker('w2');

  const kubectl = async (args: string[]) => {
    const r = await c.api.kubectl(args);
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const slices = async (): Promise<V1EndpointSlice[]> => (JSON.parse(await kubectl(['get', 'endpointslices', '-l', 'kubernetes.io/service-name=counter', '-o', 'json'])) as SliceList).items;

  // kubectl finds the resource through discovery.
  const resources = await kubectl(['api-resources', '--api-group=discovery.k8s.io']);
  assert.match(resources, /^endpointslices\s+discovery\.k8s\.io\/v1\s+true\s+EndpointSlice$/m);

  const pods: V1Pod[] = [];
  for (const [name, node] of [['counter-a', 'w1'], ['counter-b', 'w2']] as const) {
    const spec = counterPod(name, PORT, { labels: { app: 'counter' }, nodeName: node });
    spec.spec!.containers[0]!.ports = [{ name: 'web', containerPort: PORT }];
    pods.push(await runPod(c, spec));
  }
  const ips = pods.map((p) => p.status?.podIP).sort();
  assert.equal(new Set(ips).size, 2, `two addresses: ${ips.join(',')}`);
  await kubectl(['create', 'service', 'clusterip', 'counter', '--tcp=80:web']);
  // `kubectl create service` selects app=counter.
  const svc = await c.core.readNamespacedService({ name: 'counter', namespace: 'default' });

  const ready = await c.until('the slice to list both pods, ready', async () => {
    const items = await slices();
    const eps = items.flatMap((s) => s.endpoints ?? []);
    return items.length === 1 && eps.length === 2 && eps.every((e) => e.conditions?.ready === true) ? items[0] : undefined;
  });
  assert.match(ready.metadata?.name ?? '', /^counter-[a-z0-9]{5}$/);
  assert.equal(ready.addressType, 'IPv4');
  assert.deepEqual(ready.ports, [{ name: svc.spec?.ports?.[0]?.name, port: PORT, protocol: 'TCP' }]);
  assert.equal(ready.metadata?.labels?.['endpointslice.kubernetes.io/managed-by'], 'endpointslice-controller.k8s.io');
  assert.deepEqual(
    ready.metadata?.ownerReferences?.map((o) => [o.apiVersion, o.kind, o.name, o.uid, o.controller]),
    [['v1', 'Service', 'counter', svc.metadata?.uid, true]],
  );
  assert.deepEqual(
    ready.endpoints?.map((e) => [e.addresses, e.conditions, e.nodeName, e.targetRef?.kind, e.targetRef?.name, e.targetRef?.uid]),
    pods.map((p) => [[p.status?.podIP], { ready: true, serving: true, terminating: false }, p.spec?.nodeName, 'Pod', p.metadata?.name, p.metadata?.uid]),
  );

  // kubectl describe reads the slices: Endpoints: ip:port,ip:port (not <none>).
  const described = await kubectl(['describe', 'svc', 'counter']);
  const line = described.split('\n').find((l) => l.startsWith('Endpoints:'));
  assert.ok(line, described);
  assert.deepEqual(line.replace(/^Endpoints:\s+/, '').split(',').sort(), ips.map((ip) => `${ip}:${PORT}`));
  // kubectl get prints kube-apiserver's columns.
  const table = await kubectl(['get', 'endpointslices', '-l', 'kubernetes.io/service-name=counter']);
  assert.match(table, /^NAME\s+ADDRESSTYPE\s+PORTS\s+ENDPOINTS\s+AGE$/m);
  assert.match(table, new RegExp(`^${ready.metadata?.name}\\s+IPv4\\s+${PORT}\\s+\\S+\\s+\\d+s$`, 'm'));

  // Nothing changed since: the controller wrote nothing more (its comparison sees the stored slice as equal).
  assert.equal((await slices())[0]?.metadata?.resourceVersion, ready.metadata?.resourceVersion);

  // A pod relabelled out of the selector leaves the slice, and comes back with its label.
  await kubectl(['label', 'pod', 'counter-b', 'app=elsewhere', '--overwrite']);
  await c.until('counter-b to leave the slice', async () => {
    const eps = (await slices()).flatMap((s) => s.endpoints ?? []);
    return eps.length === 1 && eps[0]?.targetRef?.name === 'counter-a';
  });
  await kubectl(['label', 'pod', 'counter-b', 'app=counter', '--overwrite']);
  await c.until('counter-b to come back', async () => (await slices()).flatMap((s) => s.endpoints ?? []).length === 2);

  // A pod deleted: its address leaves the slice.
  await kubectl(['delete', 'pod', 'counter-a', '--wait=true']);
  await c.until('counter-a to leave the slice', async () => {
    const eps = (await slices()).flatMap((s) => s.endpoints ?? []);
    return eps.length === 1 && eps[0]?.targetRef?.name === 'counter-b' && eps[0].addresses[0] === pods[1]!.status?.podIP;
  });
  const after = await kubectl(['describe', 'svc', 'counter']);
  assert.match(after, new RegExp(`^Endpoints:\\s+${pods[1]!.status!.podIP!.replaceAll('.', '\\.')}:${PORT}$`, 'm'));

  // No pod left: one placeholder slice without endpoints or ports, as Kubernetes keeps.
  await kubectl(['delete', 'pod', 'counter-b', '--wait=true']);
  const placeholder = await c.until('the placeholder slice', async () => {
    const items = await slices();
    return items.length === 1 && (items[0]?.endpoints ?? []).length === 0 ? items[0] : undefined;
  });
  assert.deepEqual(placeholder.ports ?? [], []);
  const none = await kubectl(['describe', 'svc', 'counter']);
  assert.match(none, /^Endpoints:\s*$/m, 'kubectl prints no endpoint (an empty line, as against kube-controller-manager)');

  // The Service deleted: the garbage collector deletes its slice.
  await kubectl(['delete', 'service', 'counter']);
  await c.until('the slice to go with the Service', async () => (await slices()).length === 0);

  // The API server keeps the kubernetes slice beside its Endpoints.
  const k = JSON.parse(await kubectl(['get', 'endpointslice', 'kubernetes', '-n', 'default', '-o', 'json'])) as V1EndpointSlice;
  const ep = await c.core.readNamespacedEndpoints({ name: 'kubernetes', namespace: 'default' });
  assert.deepEqual(k.metadata?.labels, { 'kubernetes.io/service-name': 'kubernetes' });
  assert.equal(k.addressType, 'IPv4');
  assert.deepEqual(k.ports, [{ name: 'https', port: ep.subsets?.[0]?.ports?.[0]?.port, protocol: 'TCP' }]);
  assert.deepEqual(k.endpoints, ep.subsets?.[0]?.addresses?.map((a) => ({ addresses: [a.ip], conditions: { ready: true } })));
});

test('the API server refuses an EndpointSlice a user writes wrong, naming each field', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const bad = {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'bad' },
    addressType: 'IPv5',
    endpoints: [{ addresses: [] }],
    ports: [{ name: 'http', port: 80, protocol: 'ICMP' }, { name: 'http', port: 70000 }],
  };
  const r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(bad) });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /The EndpointSlice "bad" is invalid/);
  assert.match(r.stderr, /addressType: Unsupported value: "IPv5": supported values: "FQDN", "IPv4", "IPv6"/);
  assert.match(r.stderr, /endpoints\[0\]\.addresses: Required value: must contain at least 1 address/);
  assert.match(r.stderr, /ports\[0\]\.protocol: Unsupported value: "ICMP"/);
  assert.match(r.stderr, /ports\[1\]\.name: Duplicate value: "http"/);
  assert.match(r.stderr, /ports\[1\]\.port: Invalid value: 70000/);
  const badIp = { ...bad, metadata: { name: 'bad-ip' }, addressType: 'IPv4', endpoints: [{ addresses: ['10.0.0.300'] }], ports: [] };
  const r2 = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(badIp) });
  assert.equal(r2.code, 1);
  assert.match(r2.stderr, /endpoints\[0\]\.addresses\[0\]: Invalid value: "10\.0\.0\.300": must be a valid IPv4 address/);
  // A good one is stored, its port defaulted to TCP, and addressType may not change.
  const good = { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'by-hand', labels: { 'kubernetes.io/service-name': 'ext' } }, addressType: 'IPv4', endpoints: [{ addresses: ['10.1.2.3'] }], ports: [{ name: 'http', port: 80 }] };
  const r3 = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(good) });
  assert.equal(r3.code, 0, r3.stderr);
  const got = await api.kubectl(['get', 'endpointslice', 'by-hand', '-o', 'jsonpath={.ports[0].protocol}']);
  assert.equal(got.stdout, 'TCP');
  // kubectl apply of a changed slice replaces its ports and endpoints (atomic lists, as in Kubernetes).
  const applied = { ...good, metadata: { name: 'by-hand', labels: { 'kubernetes.io/service-name': 'ext' } }, endpoints: [{ addresses: ['10.1.2.4'] }], ports: [{ name: 'http', port: 81, protocol: 'TCP' }] };
  for (const body of [{ ...good, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }, applied]) {
    const a = await api.kubectl(['apply', '-f', '-'], { input: JSON.stringify(body) });
    assert.equal(a.code, 0, a.stderr);
  }
  const now = await api.kubectl(['get', 'endpointslice', 'by-hand', '-o', 'jsonpath={.endpoints[*].addresses[*]} {.ports[*].port}']);
  assert.equal(now.stdout, '10.1.2.4 81');
  const r4 = await api.kubectl(['patch', 'endpointslice', 'by-hand', '--type=merge', '-p', '{"addressType":"FQDN","endpoints":[{"addresses":["a.example.com"]}]}']);
  assert.equal(r4.code, 1);
  assert.match(r4.stderr, /addressType: Invalid value: .*field is immutable/);
});
