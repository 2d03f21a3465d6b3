// The resolver's sockets handed over by systemd's protocol (seed: "DNS"): bound before the node
// holds the address (IP_FREEBIND), passed as fds 3 and 4 with LISTEN_FDS, LISTEN_PID and
// LISTEN_FDNAMES=dns, and answered on by the layer. python3 binds them, as feos-host-init or
// feosd.socket would, and execs the layer in place.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RESOLVER_PAIR, handOverArgs } from '../../helpers/listen-fds.ts';
import { Namespaces, control, inNs, must, sh, startInNs, type Started } from './helpers.ts';

const here = import.meta.dirname;

const python = (await sh(['python3', '--version'])).code === 0;

describe('the resolver on sockets handed over', { timeout: 60_000, skip: python ? false : 'python3 is not installed: nothing here binds sockets to hand over' }, () => {
  const nss = new Namespaces();
  let dir = '';
  let node: Started | undefined;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'k32t-fds-'));
  });

  after(async () => {
    await node?.stop();
    await nss.removeAll();
    await rm(dir, { recursive: true, force: true });
  });

  it('answers on them', async () => {
    const ns = await nss.add('node');
    const pod = await nss.add('pod');
    await must(inNs(ns, 'ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1'));
    await must(inNs(ns, 'ip', 'addr', 'add', '11.0.0.1/24', 'dev', 'up0'));
    await must(inNs(ns, 'ip', 'link', 'set', 'up0', 'up'));
    await must(inNs(ns, 'ip', 'route', 'add', 'default', 'via', '11.0.0.2'));
    const config = {
      stateDir: join(dir, 'state'),
      grpcSocket: join(dir, 'grpc.sock'),
      controlSocket: join(dir, 'control.sock'),
      flags: { podPrefix: '2001:db8:2::/64', dnsUpstreams: ['11.0.0.2'] },
      kept: [],
    };
    node = await startInNs(ns, join(here, 'python-exec.ts'), ['python3', ...handOverArgs(RESOLVER_PAIR, [process.execPath, join(here, 'fixture-node.ts'), JSON.stringify(config)])]);
    const ready = JSON.parse(node.ready) as { handedOver: boolean; unavailable: string | null };
    assert.equal(ready.unavailable, null);
    assert.equal(ready.handedOver, true);
    const id = 'abcdefghjkm';
    await must(inNs(ns, 'ip', 'link', 'add', `pod-${id}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod));
    assert.ok((await control(config.controlSocket, { method: 'createPod', id, spec: { securityGroups: [], nameTables: [], dnsUpstreams: [] } })).ok);
    const at = await control<{ guest: { ipv4Address: string } }>(config.controlSocket, { method: 'attachPod', id });
    assert.ok(at.ok, at.message ?? '');
    await must(inNs(pod, 'ip', 'link', 'set', 'eth0', 'up'));
    await must(inNs(pod, 'ip', 'addr', 'add', `${at.result.guest.ipv4Address}/32`, 'dev', 'eth0'));
    await must(inNs(pod, 'ip', 'route', 'add', 'default', 'via', '169.254.0.1', 'dev', 'eth0', 'onlink'));
    // The upstream is not there: the resolver's SERVFAIL (after its 2 s upstream timeout) is an answer on
    // the handed-over socket. dig waits 15 s for it: a loaded machine may be slow.
    const out = await must(inNs(pod, 'dig', '@169.254.0.53', '+time=15', '+tries=1', 'example.test'), 30_000);
    assert.match(out, /status: SERVFAIL/);
  });
});
