/**
 * The control plane's side of FeOS nodes (issue 16; docs/feos/fleet.md): a real `kube32-cli
 * control-plane --feos-listen` process, a stand-in node built from the protos (./stand-in.ts), kubectl
 * for what a user checks. The stand-in joins with a token made by `kube32-cli feos token create`,
 * reports, sends events, renews, says it stops, and is removed with `kubectl delete node`; a second
 * instance of the port (in this process, on the same API) calls the stand-in's PodService over its node
 * connection.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import test, { type TestContext } from 'node:test';
import { pino } from 'pino';
import { KubeConfig } from '@kubernetes/client-node';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { issueNodeKubeconfig } from '../../src/apiserver/index.ts';
import { GrpcCallError, serverStream, startFleetServer, unary } from '../../src/fleet/index.ts';
import { PodService } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { dialNodeConnection, join as joinNode, makeCsr, makeKey, nodeService, pinOf, report, seenServer } from './stand-in.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');
const FEOSCTL = join(ROOT, 'bin/feosctl.js');

interface ControlPlane {
  dataDir: string;
  kubeconfig: string;
  feos: string;
  caPem: string;
  proc: ChildProcess;
  logs(): string;
}

async function startControlPlane(t: TestContext, args: string[]): Promise<ControlPlane> {
  const dataDir = mkdtempSync(join(tmpdir(), 'k32-fleet-'));
  const proc = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } });
  let stderr = '';
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    stderr += d;
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then(() => {
      throw new Error(`the control plane exited:\n${stderr}`);
    }),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the control plane did not start within 90 s:\n${stderr}`)), 90_000).unref()),
  ]);
  const info = JSON.parse(line) as { kubeconfig: string; feos?: string };
  if (args.includes('--feos-listen')) assert.ok(info.feos, `the JSON line names the port for nodes: ${line}`);
  const kc = new KubeConfig();
  kc.loadFromFile(info.kubeconfig);
  const caPem = Buffer.from(kc.getCurrentCluster()!.caData!, 'base64').toString('utf8');
  return { dataDir, kubeconfig: info.kubeconfig, feos: info.feos ?? '', caPem, proc, logs: () => stderr };
}

function run(cmd: string, args: string[], env: Record<string, string> = {}, input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { timeout: 60_000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
    if (input !== undefined) child.stdin!.end(input);
    else child.stdin?.end();
  });
}

/** Polls `fn` until it answers something truthy; fails after `ms` naming `what` and the last answer. */
async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err: unknown) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function code(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

test('a FeOS node joins the control plane, reports, sends events, renews, stops and is removed', { timeout: 300_000 }, async (t) => {
  const cp = await startControlPlane(t, ['--feos-listen', '127.0.0.1:0', '--node-monitor-grace-period', '12s', '--feos-node-cert-ttl', '2m']);
  const kubectl = (...args: string[]) => run('kubectl', ['--kubeconfig', cp.kubeconfig, '--cache-dir', mkdtempSync(join(cp.dataDir, 'kc-')), ...args]);
  const cli = (...args: string[]) => run(process.execPath, [CLI, ...args, '--kubeconfig', cp.kubeconfig]);
  const [host, portText] = [cp.feos.slice(0, cp.feos.lastIndexOf(':')), cp.feos.slice(cp.feos.lastIndexOf(':') + 1)];
  const port = Number(portText);
  const name = 'feos-standin-1';

  // --- tokens
  const made = await cli('feos', 'token', 'create', '--ttl', '1h', '--description', 'the stand-in');
  assert.equal(made.code, 0, made.stderr);
  const m = /^feos-join-([a-z0-9]{6})-([a-z0-9]{16})\.([0-9a-f]{64})\n$/.exec(made.stdout);
  assert.ok(m, `feos token create prints the whole token: ${JSON.stringify(made.stdout)}`);
  const [, id, secret, pin] = m as unknown as [string, string, string, string];
  assert.equal(pin, pinOf(cp.caPem), "the pin is the SHA-256 of the cluster CA's SubjectPublicKeyInfo");
  assert.match(made.stderr, new RegExp(`nodes join at \\S+:${port} \\(feosd --control-plane\\)`), 'it says where nodes join');
  const list = await cli('feos', 'token', 'list');
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /^ID\s+TTL\s+EXPIRES\s+USAGES\s+DESCRIPTION\n/);
  assert.match(list.stdout, new RegExp(`^${id}\\s+(59m|60m|1h)\\S*\\s+\\S+Z\\s+authentication\\s+the stand-in$`, 'm'));
  const listJson = await cli('feos', 'token', 'list', '-o', 'json');
  const items = (JSON.parse(listJson.stdout) as { items: { id: string; description: string }[] }).items;
  assert.deepEqual(items.map((i) => [i.id, i.description]), [[id, 'the stand-in']]);
  assert.doesNotMatch(listJson.stdout, new RegExp(secret), 'the list never shows a secret');
  const secretObj = await kubectl('-n', 'kube-system', 'get', 'secret', `bootstrap-token-${id}`, '-o', 'json');
  assert.equal(secretObj.code, 0, secretObj.stderr);
  assert.equal((JSON.parse(secretObj.stdout) as { type: string }).type, 'bootstrap.kubernetes.io/token');
  const badTtl = await cli('feos', 'token', 'create', '--ttl', 'soon');
  assert.equal(badTtl.code, 1);
  assert.match(badTtl.stderr, /--ttl "soon"/);
  // A token that expires before a node could use it, or past what RFC 3339 writes, is refused.
  for (const [ttl, why] of [
    ['1s', /--ttl "1s": at least 1m/],
    ['99999999h', /--ttl "99999999h": at most 87600h/],
  ] as const) {
    const r = await cli('feos', 'token', 'create', '--ttl', ttl);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, why);
  }
  const badId = await cli('feos', 'token', 'delete', 'NOPE');
  assert.equal(badId.code, 1);
  assert.match(badId.stderr, /token ID "NOPE": want the 6 characters/);
  const badOut = await cli('feos', 'token', 'list', '-o', 'wide');
  assert.notEqual(badOut.code, 0);
  assert.match(badOut.stderr, /allowed formats are: json,yaml/);

  // --- refused joins: wrong secret, deleted, expired; nothing is issued and no Node made
  const key = await makeKey();
  const csr = await makeCsr(key);
  const refused = async (tokenSecret: string, what: string) => {
    await assert.rejects(joinNode(cp.feos, cp.caPem, tokenSecret, name, csr), (err: unknown) => {
      assert.equal(code(err), 7, `${what}: PERMISSION_DENIED, got ${String(err)}`);
      return true;
    });
  };
  await refused(`${id}-${'x'.repeat(16)}`, 'a wrong secret');
  await refused('abcdef-0123456789abcdef', 'an unknown token');
  const gone = await cli('feos', 'token', 'create');
  const goneId = /^feos-join-([a-z0-9]{6})-([a-z0-9]{16})/.exec(gone.stdout)!;
  const del = await cli('feos', 'token', 'delete', goneId[1]!);
  assert.equal(del.code, 0, del.stderr);
  assert.equal(del.stdout, `token ${goneId[1]} deleted\n`);
  const delAgain = await cli('feos', 'token', 'delete', goneId[1]!);
  assert.equal(delAgain.code, 1);
  assert.match(delAgain.stderr, /NotFound.*not found/);
  await refused(`${goneId[1]}-${goneId[2]}`, 'a deleted token');
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const expiredSecret = {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: 'bootstrap-token-exp123', namespace: 'kube-system' },
    data: { 'token-id': b64('exp123'), 'token-secret': b64('0123456789abcdef'), expiration: b64('2020-01-01T00:00:00Z'), 'usage-bootstrap-authentication': b64('true') },
  };
  const createdExpired = await run('kubectl', ['--kubeconfig', cp.kubeconfig, '--cache-dir', mkdtempSync(join(cp.dataDir, 'kc-')), 'create', '-f', '-'], {}, JSON.stringify(expiredSecret));
  assert.equal(createdExpired.code, 0, createdExpired.stderr);
  await refused('exp123-0123456789abcdef', 'an expired token');
  const noNode = await kubectl('get', 'node', name);
  assert.notEqual(noNode.code, 0, 'a refused join makes no Node');

  // --- the join
  const joined = await joinNode(cp.feos, cp.caPem, `${id}-${secret}`, name, csr);
  assert.match(seenServer.subjectaltname ?? '', /URI:spiffe:\/\/feos\.local\/ferun/);
  assert.match(seenServer.subjectaltname ?? '', /IP Address:127\.0\.0\.1/);
  const leaf = new X509Certificate(joined.chainPem);
  assert.equal(leaf.subjectAltName, `URI:spiffe://feos.local/node/${name}`);
  assert.ok(leaf.checkIssued(new X509Certificate(cp.caPem)), 'the cluster CA issued the node certificate');
  assert.equal(joined.spiffeId, `spiffe://feos.local/node/${name}`);
  assert.ok(joined.trustBundlePem.includes(cp.caPem.trim().split('\n')[1]!), 'the bundle holds the pinned root');
  const life = Number(joined.notAfter!.seconds) * 1000 - Date.now();
  assert.ok(life > 100_000 && life <= 121_000, `--feos-node-cert-ttl 2m: ${life} ms`);
  const renewIn = Number(joined.renewAt!.seconds) * 1000 - Date.now();
  assert.ok(renewIn > 70_000 && renewIn <= 81_000, `renewal at two thirds: ${renewIn} ms`);
  assert.deepEqual(joined.instances.map((i) => i.address), [cp.feos]);
  const badName = joinNode(cp.feos, cp.caPem, `${id}-${secret}`, 'Not_A_Name', csr);
  await assert.rejects(badName, (err: unknown) => code(err) === 3);
  await assert.rejects(joinNode(cp.feos, cp.caPem, `${id}-${secret}`, 'other', 'not a csr'), (err: unknown) => code(err) === 3);

  // --- reports: a Ready Node with the label, the taint, capacity and node info
  const ns = nodeService(cp.feos, cp.caPem, key, joined.chainPem);
  t.after(() => ns.close());
  const startId = '5f0c1e2a-0000-4000-8000-00000000abcd';
  const answer = await ns.report(report(startId, name));
  assert.equal(answer.reportIntervalMs, 3000);
  assert.deepEqual(answer.instances.map((i) => i.address), [cp.feos]);
  let reporting = true;
  const reports = (async () => {
    while (reporting) {
      await ns.report(report(startId, name)).catch(() => {});
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  t.after(async () => {
    reporting = false;
    await reports;
  });
  const nodes = await until('kubectl get nodes lists the node Ready', async () => {
    const r = await kubectl('get', 'nodes', '-L', 'kube32.io/runtime');
    return new RegExp(`^${name}\\s+Ready\\s+.*\\sfeos$`, 'm').test(r.stdout) ? r.stdout : undefined;
  });
  assert.match(nodes, /RUNTIME/);
  const nodeJson = JSON.parse((await kubectl('get', 'node', name, '-o', 'json')).stdout) as {
    metadata: { labels: Record<string, string> };
    spec: { taints: { key: string; value: string; effect: string }[] };
    status: { capacity: Record<string, string>; allocatable: Record<string, string>; nodeInfo: Record<string, string>; addresses: { type: string; address: string }[] };
  };
  assert.equal(nodeJson.metadata.labels['kube32.io/runtime'], 'feos');
  assert.ok(nodeJson.spec.taints.some((x) => x.key === 'kube32.io/runtime' && x.value === 'feos' && x.effect === 'NoSchedule'), JSON.stringify(nodeJson.spec.taints));
  assert.deepEqual(nodeJson.status.capacity, { cpu: '4', memory: String(8 * 1024 ** 3), pods: '16' });
  assert.deepEqual(nodeJson.status.allocatable, { cpu: '3', memory: String(6 * 1024 ** 3), pods: '16' });
  assert.equal(nodeJson.status.nodeInfo.kernelVersion, '6.1.0-test');
  assert.equal(nodeJson.status.nodeInfo.architecture, 'amd64');
  assert.ok(nodeJson.status.addresses.some((a) => a.type === 'InternalIP' && a.address === '127.0.0.1'));
  const lease = await kubectl('-n', 'kube-node-lease', 'get', 'lease', name, '-o', 'jsonpath={.spec.holderIdentity}');
  assert.equal(lease.stdout, name);
  // A second machine joining under the name of this Ready node is refused: the first keeps its certificate.
  const twin = await joinNode(cp.feos, cp.caPem, `${id}-${secret}`, name, await makeCsr(await makeKey())).then(
    () => assert.fail('a join under the name of a Ready node was answered'),
    (err: unknown) => err,
  );
  assert.equal(code(twin), 6, String(twin));
  assert.match((twin as { details?: string }).details ?? '', new RegExp(`node ${name} is Ready: another feosd reports under this name`));
  await ns.report(report(startId, name));

  // --- events: kept once, acknowledged, shown by kubectl get events
  const started = { sequence: 1n, time: timestampNow(), event: { case: 'feosd' as const, value: { reason: 'Started', message: 'feosd 0.1.0 started (pid 4242)' } } };
  const podEvent = { sequence: 2n, time: timestampNow(), event: { case: 'pod' as const, value: { podId: 'abcdefghjkm', pod: { id: 'abcdefghjkm', state: 2 } } } };
  assert.equal((await ns.sendEvents({ startId, events: [started, podEvent] })).acknowledged, 2n);
  assert.equal((await ns.sendEvents({ startId, events: [started] })).acknowledged, 1n, 'an event sent again is acknowledged again');
  const events = await until('kubectl get events shows the started event', async () => {
    const r = await kubectl('get', 'events', '-o', 'json');
    const evs = (JSON.parse(r.stdout) as { items: { reason: string; message: string; involvedObject: { kind: string; name: string } }[] }).items.filter((e) => e.involvedObject.name === name);
    return evs.some((e) => e.reason === 'Started') ? evs : undefined;
  });
  assert.equal(events.filter((e) => e.reason === 'Started').length, 1, 'kept once');
  assert.equal(events.find((e) => e.reason === 'Started')!.involvedObject.kind, 'Node');
  assert.ok(events.some((e) => e.reason === 'PodRunning' && e.message.includes('abcdefghjkm')), JSON.stringify(events));
  const table = await kubectl('get', 'events');
  assert.match(table.stdout, new RegExp(`Started\\s+node/${name}\\s+feosd 0\\.1\\.0 started`));

  // --- a second instance of the port (this process, same API): listed to nodes; a call over its node connection
  const second = await startFleetServer({
    kubeConfig: (() => {
      const kc = new KubeConfig();
      kc.loadFromFile(cp.kubeconfig);
      return kc;
    })(),
    dataDir: cp.dataDir,
    host: '127.0.0.1',
    port: 0,
    instanceName: 'second',
    log: pino({ level: 'error' }),
  });
  t.after(() => second.close());
  const both = await until('the report answers both instances', async () => {
    const a = await ns.report(report(startId, name));
    return a.instances.length === 2 ? a.instances : undefined;
  });
  assert.deepEqual(new Set(both.map((i) => i.address)), new Set([cp.feos, second.address]));
  const conn = await dialNodeConnection('127.0.0.1', second.port, cp.caPem, key, joined.chainPem, 'pod0000000a');
  t.after(() => conn.close());
  const session = await until('the second instance holds the node connection', async () => second.nodeConnection(name));
  const pods = await unary(session, PodService.method.listPods, {}, { timeoutMs: 10_000 });
  assert.deepEqual(pods.pods.map((p) => p.id), ['pod0000000a']);
  assert.equal(conn.calls(), 1);
  const seen: string[] = [];
  await serverStream(session, PodService.method.watchPodEvents, {}, (e) => seen.push(`${e.podId}:${e.pod?.state}`), { timeoutMs: 10_000 });
  assert.deepEqual(seen, ['pod0000000a:1', 'pod0000000a:2'], 'a server stream over the node connection, to its OK');
  const partial: string[] = [];
  await assert.rejects(
    serverStream(session, PodService.method.watchPodEvents, { podId: 'other' }, (e) => partial.push(e.podId), { timeoutMs: 10_000 }),
    (err: unknown) => err instanceof GrpcCallError && err.code === 9 && err.details === 'no pod other here',
  );
  assert.deepEqual(partial, ['pod0000000a'], 'the messages before the status');
  // The node holds a node connection to each instance.
  const conn1 = await dialNodeConnection(host, port, cp.caPem, key, joined.chainPem, 'pod0000000b');
  t.after(() => conn1.close());

  // --- feosctl --node: through the control plane's node proxy to the node connection
  const feosctl = (kubeconfig: string, node: string, ...args: string[]) => run(process.execPath, [FEOSCTL, '--kubeconfig', kubeconfig, '--node', node, '--timeout', '20', ...args]);
  const listed = await until('feosctl --node pod list answers the stand-in pod', async () => {
    const r = await feosctl(cp.kubeconfig, name, 'pod', 'list', '-o', 'json');
    return r.code === 0 ? r : undefined;
  });
  assert.deepEqual((JSON.parse(listed.stdout) as { pods: { id: string }[] }).pods.map((p) => p.id), ['pod0000000b']);
  assert.equal(conn1.calls(), 1);
  const podTable = await feosctl(cp.kubeconfig, name, 'pod', 'list');
  assert.equal(podTable.code, 0, podTable.stderr);
  assert.match(podTable.stdout, /^ID\s+STATE[\s\S]*\npod0000000b\s+RUNNING/);
  const unimplemented = await feosctl(cp.kubeconfig, name, 'pod', 'get', 'pod0000000b');
  assert.equal(unimplemented.code, 1);
  assert.match(unimplemented.stderr, /^feosctl: UNIMPLEMENTED: not in the stand-in/, "the node's own status comes back through the cluster");
  // Only cluster admins: a kubelet's kubeconfig is refused as at the node proxy.
  const kubelet = issueNodeKubeconfig(cp.dataDir, 'some-kubelet', { path: join(cp.dataDir, 'kubelet.kubeconfig') });
  const forbidden = await feosctl(kubelet, name, 'pod', 'list');
  assert.equal(forbidden.code, 1);
  assert.match(forbidden.stderr, /^feosctl: UNAVAILABLE: the cluster refused the tunnel to node feos-standin-1: Forbidden: nodes "feos-standin-1" is forbidden: User "system:node:some-kubelet" cannot create resource "nodes\/proxy"/);
  const nowhere = await feosctl(cp.kubeconfig, 'no-such-node', 'pod', 'list');
  assert.equal(nowhere.code, 1);
  assert.match(nowhere.stderr, /NotFound: nodes "no-such-node" not found/);
  const noFlag = await run(process.execPath, [FEOSCTL, '--node', name, 'pod', 'list'], { KUBECONFIG: '' });
  assert.equal(noFlag.code, 1);
  assert.match(noFlag.stderr, /--node needs --kubeconfig/);
  // $KUBECONFIG serves as --kubeconfig, as for kubectl; half or crossed flags are refused, nothing falls back to the socket.
  const fromEnv = await run(process.execPath, [FEOSCTL, '--node', name, 'pod', 'list'], { KUBECONFIG: cp.kubeconfig });
  assert.equal(fromEnv.code, 0, fromEnv.stderr);
  for (const [args, why] of [
    [['--kubeconfig', cp.kubeconfig, 'pod', 'list'], /--kubeconfig is for --node NAME/],
    [['--kubeconfig', cp.kubeconfig, '--node', '', 'pod', 'list'], /--node "": want the name of a FeOS node/],
    [['--kubeconfig', cp.kubeconfig, '--node', name, '--socket', '/tmp/x.sock', 'pod', 'list'], /leave out --socket and --tcp/],
  ] as const) {
    const r = await run(process.execPath, [FEOSCTL, ...args]);
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, why);
  }
  assert.doesNotMatch(nowhere.stderr + forbidden.stderr, /%3F|%20/, 'messages through the tunnel are decoded');

  // --- renewal: the same key, a new certificate; another key is refused
  const renewed = await ns.renew({ csrPem: await makeCsr(key) });
  const newLeaf = new X509Certificate(renewed.chainPem);
  assert.notEqual(newLeaf.serialNumber, leaf.serialNumber);
  assert.equal(newLeaf.subjectAltName, `URI:spiffe://feos.local/node/${name}`);
  assert.equal(newLeaf.publicKey.export({ type: 'spki', format: 'der' }).toString('hex'), leaf.publicKey.export({ type: 'spki', format: 'der' }).toString('hex'));
  const other = await makeKey();
  await assert.rejects(ns.renew({ csrPem: await makeCsr(other) }), (err: unknown) => code(err) === 3);
  const ns2 = nodeService(cp.feos, cp.caPem, key, renewed.chainPem);
  t.after(() => ns2.close());
  await ns2.report(report(startId, name));
  await ns.report(report(startId, name)); // the old certificate drains: it still may call

  // --- stopping, then no reports: Unknown within the grace
  reporting = false;
  await reports;
  await ns2.stopping({ startId, message: 'SIGTERM' });
  const stopping = await kubectl('get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].reason}');
  assert.equal(stopping.stdout, 'FeosdStopping');
  await until(
    'the node lifecycle controller turns the silent node Unknown',
    async () => (await kubectl('get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).stdout === 'Unknown',
    60_000,
  );
  await ns2.report(report(startId, name));
  await until('a report makes it Ready again', async () => (await kubectl('get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).stdout === 'True');

  // --- kubectl delete node: PERMISSION_DENIED on the next call, node connections closed
  const deleted = await kubectl('delete', 'node', name);
  assert.equal(deleted.code, 0, deleted.stderr);
  await assert.rejects(ns2.report(report(startId, name)), (err: unknown) => code(err) === 7);
  await assert.rejects(ns2.sendEvents({ startId, events: [] }), (err: unknown) => code(err) === 7);
  await assert.rejects(ns.report(report(startId, name)), (err: unknown) => code(err) === 7);
  await until('the node connection closes', async () => second.nodeConnections(name) === 0, 20_000);
  await Promise.race([conn.closed, new Promise((_, reject) => setTimeout(() => reject(new Error('the node connection stayed open')), 20_000).unref())]);
  const after = await kubectl('get', 'node', name);
  assert.notEqual(after.code, 0, 'a report does not make the Node again');
});

test('feos token create on a control plane without a port for nodes warns that no node can join yet', { timeout: 120_000 }, async (t) => {
  const cp = await startControlPlane(t, []);
  const made = await run(process.execPath, [CLI, 'feos', 'token', 'create', '--kubeconfig', cp.kubeconfig]);
  assert.equal(made.code, 0, made.stderr);
  assert.match(made.stdout, /^feos-join-[a-z0-9]{6}-[a-z0-9]{16}\.[0-9a-f]{64}\n$/);
  assert.match(made.stderr, /warning: no control plane serves FeOS nodes now \(none was started with --feos-listen HOST:PORT\)/);
  // A token that is not there: kubectl's words, without the "error: " it puts only before its own errors
  // (it printed "error: Error from server (NotFound): ...").
  const missing = await run(process.execPath, [CLI, 'feos', 'token', 'delete', 'abcdef', '--kubeconfig', cp.kubeconfig]);
  assert.equal(missing.code, 1);
  assert.equal(missing.stderr, 'Error from server (NotFound): token "abcdef" not found (feos token list shows the tokens)\n');
});

test('control-plane refuses bad --feos-listen, --trust-domain and --feos-node-cert-ttl before starting anything', { timeout: 60_000 }, async () => {
  const cases: [string[], RegExp][] = [
    [['--feos-listen', 'nowhere'], /^error: --feos-listen "nowhere": want ADDRESS:PORT or \[IPv6\]:PORT with a port from 0 to 65535, e\.g\. 0\.0\.0\.0:7443\n$/],
    [['--feos-listen', '127.0.0.1:70000'], /^error: --feos-listen "127\.0\.0\.1:70000": want ADDRESS:PORT/],
    [['--feos-listen', '127.0.0.1:0', '--feos-node-cert-ttl', '10s'], /^error: --feos-node-cert-ttl: must be at least 1m\n$/],
    [['--feos-listen', '127.0.0.1:0', '--trust-domain', 'Not A Domain'], /^error: --trust-domain "Not A Domain": want a lowercase DNS name/],
  ];
  const dir = mkdtempSync(join(tmpdir(), 'k32-fleet-flags-'));
  try {
    for (const [args, want] of cases) {
      const r = await run(process.execPath, [CLI, 'control-plane', '--data-dir', join(dir, 'd'), '--port', '0', ...args]);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, want);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('feosctl --node NAME of a node the cluster does not have is NOT_FOUND naming it and how to list the nodes', { timeout: 120_000 }, async (t) => {
  const cp = await startControlPlane(t, ['--feos-listen', '127.0.0.1:0']);
  const r = await run(process.execPath, [FEOSCTL, '--kubeconfig', cp.kubeconfig, '--node', 'nosuch', '--timeout', '20', 'pod', 'list']);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  assert.equal(
    r.stderr,
    `feosctl: NOT_FOUND: node nosuch is not in the cluster (NotFound: nodes "nosuch" not found): list its nodes with kubectl --kubeconfig ${cp.kubeconfig} get nodes\n`,
  );
  // Whatever the command: a pod's too.
  const get = await run(process.execPath, [FEOSCTL, '--kubeconfig', cp.kubeconfig, '--node', 'nosuch', '--timeout', '20', 'pod', 'get', 'abcdefghjkm']);
  assert.equal(get.code, 1);
  assert.match(get.stderr, /^feosctl: NOT_FOUND: node nosuch is not in the cluster/);
});
