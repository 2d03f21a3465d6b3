// Units of feosd that need no process: pod IDs, the suspend's budget, spec checks, the error mapping,
// and the guest channel's handshake.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { PodSpecSchema } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { Code, FeosError, toGrpcStatus, vmBusy, isVmBusy } from '../../src/feos/api/index.ts';
import { keepClockOnce, mintPodId, normalizeSpec, parsePodId, snapshotTimeoutMs, suspendBudgetMs } from '../../src/feos/pods/index.ts';
import { GrpcCode, GrpcError } from '../../src/feos/guest/index.ts';
import { GuestHandshake, HostHandshake, H2_PREFACE } from '../../src/feos/guest/index.ts';
import { qemuArgs, hostTscKhz } from '../../src/feos/microvm/index.ts';
import { chooseAccelerator, probeKvm } from '../../src/feos/microvm/index.ts';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

const GiB = 1024n ** 3n;
const MiB = 1024n ** 2n;

describe('pod IDs', () => {
  test('minted IDs are 11 lowercase Crockford base32 characters with a letter first, and parse', () => {
    fc.assert(
      fc.property(fc.constant(null), () => {
        const id = mintPodId();
        assert.match(id, /^[a-hjkmnp-tv-z][0-9a-hjkmnp-tv-z]{10}$/);
        assert.equal(parsePodId(id), id);
      }),
      { numRuns: 500 },
    );
  });
  test('UUIDs are taken, in lowercase', () => {
    assert.equal(parsePodId('22222222-3333-4444-5555-666666666666'), '22222222-3333-4444-5555-666666666666');
    assert.equal(parsePodId('ABCDEF01-3333-4444-5555-666666666666'), 'abcdef01-3333-4444-5555-666666666666');
  });
  for (const bad of ['', 'ABCDEFGHJKM', '0bcdefghjkm', 'abcdefghjk', 'abcdefghjkmn', 'abcdefghjki', 'abcdefghjkl', 'abcdefghjko', 'abcdefghjku', '../etc/pass', 'abcdefghjk/']) {
    test(`${JSON.stringify(bad)} is INVALID_ARGUMENT`, () => {
      assert.throws(() => parsePodId(bad), (err: unknown) => err instanceof FeosError && err.code === 'INVALID_ARGUMENT');
    });
  }
});

describe("the suspend's budget", () => {
  // The seed's table: 190 s + 5 s per GiB, GiB rounded up; the snapshot 120 s + 4 s per GiB.
  const table: Array<[bigint, number, number]> = [
    [256n * MiB, 195, 124],
    [1n * GiB, 195, 124],
    [1n * GiB + MiB, 200, 128],
    [4n * GiB, 210, 136],
    [64n * GiB, 510, 376],
  ];
  for (const [mem, budget, snapshot] of table) {
    test(`${mem / MiB} MiB: budget ${budget} s, snapshot ${snapshot} s`, () => {
      assert.equal(suspendBudgetMs(mem), budget * 1000);
      assert.equal(snapshotTimeoutMs(mem), snapshot * 1000);
    });
  }
});

describe('pod specs', () => {
  test('defaults: 1 vCPU, 256 MiB', () => {
    const s = normalizeSpec(create(PodSpecSchema));
    assert.equal(s.vcpus, 1);
    assert.equal(s.memoryBytes, 256n * MiB);
  });
  const bad: Array<[string, Parameters<typeof create<typeof PodSpecSchema>>[1]]> = [
    ['too many vCPUs', { vcpus: 33 }],
    ['memory not whole MiB', { memoryBytes: 256n * MiB + 1n }],
    ['too little memory', { memoryBytes: 64n * MiB }],
    ['a container without an image', { containers: [{ name: 'a' }] }],
    ['a container name with capitals', { containers: [{ name: 'A', image: 'x' }] }],
    ['two containers of one name', { containers: [{ name: 'a', image: 'x' }, { name: 'a', image: 'y' }] }],
    ['a volume ID that is not a UUID', { volumes: [{ name: 'v', volumeId: 'nope' }] }],
    ['nine volumes', { volumes: Array.from({ length: 9 }, (_, i) => ({ name: `v${i}`, volumeId: `00000000-0000-0000-0000-00000000000${i}` })) }],
    ['a mount of a missing volume', { containers: [{ name: 'a', image: 'x', volumeMounts: [{ name: 'v', path: '/v' }] }] }],
    ['a bad metadata key', { metadata: { 'a b': 'x' } }],
    ['an upstream that is not an IP', { network: { dnsUpstreams: ['dns.google'] } }],
  ];
  for (const [what, init] of bad) {
    test(`${what} is INVALID_ARGUMENT`, () => {
      assert.throws(() => normalizeSpec(create(PodSpecSchema, init)), (err: unknown) => err instanceof FeosError && err.code === 'INVALID_ARGUMENT');
    });
  }
});

describe('errors on the wire', () => {
  test('a FeosError keeps its code and message; anything else is UNKNOWN', () => {
    const table: Array<[unknown, number, string]> = [
      [new FeosError('NOT_FOUND', 'pod x not found'), Code.NOT_FOUND, 'pod x not found'],
      [new FeosError('ALREADY_EXISTS', 'a'), Code.ALREADY_EXISTS, 'a'],
      [new FeosError('FAILED_PRECONDITION', 'b'), Code.FAILED_PRECONDITION, 'b'],
      [new Error('boom'), Code.UNKNOWN, 'boom'],
      ['text', Code.UNKNOWN, 'text'],
    ];
    for (const [err, code, details] of table) {
      const st = toGrpcStatus(err);
      assert.equal(st.code, code);
      assert.equal(st.details, details);
    }
  });
  test('a busy error carries the VmBusy detail, and only it', () => {
    const st = toGrpcStatus(vmBusy('the snapshot is late'));
    assert.equal(st.code, Code.UNAVAILABLE);
    assert.equal(st.details, 'the VM is busy: the snapshot is late');
    assert.equal(isVmBusy(st), true);
    assert.equal(isVmBusy(toGrpcStatus(new FeosError('UNAVAILABLE', 'other'))), false);
  });
});

describe('the guest channel handshake', () => {
  test('the host drops stale bytes before the answer to its latest nonce', () => {
    const host = new HostHandshake();
    const line = host.attachLine();
    const nonce = line.trim().split(' ')[1];
    assert.equal(host.push(Buffer.from('garbage from an old session FEOS-ATTACHED 0000000000000000\n')), undefined);
    const rest = host.push(Buffer.from(`xx FEOS-ATTACHED ${nonce}\nHTTP2`));
    assert.equal(rest?.toString(), 'HTTP2');
  });
  test('an answer split across reads is found', () => {
    const host = new HostHandshake();
    const nonce = host.attachLine().trim().split(' ')[1];
    const answer = `FEOS-ATTACHED ${nonce}\n`;
    assert.equal(host.push(Buffer.from(answer.slice(0, 9))), undefined);
    assert.equal(host.push(Buffer.from(answer.slice(9)))?.length, 0);
  });
  test('the guest answers every ATTACH before the preface, then hands over the bytes from the preface on', () => {
    const g = new GuestHandshake();
    const a = g.push(Buffer.from('stale\nFEOS-ATTACH 0123456789abcdef\nFEOS-ATTACH fedcba98'));
    assert.deepEqual(a, { kind: 'wait', answers: ['0123456789abcdef'] });
    const b = g.push(Buffer.from(`76543210\n${H2_PREFACE}\r\nSM`));
    assert.equal(b.kind, 'preface');
    assert.deepEqual(b.answers, ['fedcba9876543210']);
    assert.ok(b.kind === 'preface' && b.rest.toString().startsWith(H2_PREFACE));
  });
  test('garbage after an answer waits for the next ATTACH', () => {
    const g = new GuestHandshake();
    g.push(Buffer.from('FEOS-ATTACH 0123456789abcdef\n'));
    assert.deepEqual(g.push(Buffer.from('this is not HTTP/2 at all')), { kind: 'wait', answers: [] });
    const c = g.push(Buffer.from(`FEOS-ATTACH 1111111111111111\n${H2_PREFACE}`));
    assert.equal(c.kind, 'preface');
  });
});

describe('the QEMU command line', () => {
  test('TCG gets the PIT, PIC, RTC and the host TSC rate; a resume loads the stream', () => {
    const args = qemuArgs(
      { dir: '/s/vms/abcdefghjkm', guestDir: '/g/v1', disk: '/s/disks/abcdefghjkm.qcow2', vcpus: 2, memoryBytes: 256n * MiB, accelerator: 'tcg', tscKhz: 2_000_000 },
      '/s/vms/abcdefghjkm/snapshot/vmstate',
    );
    assert.equal(args[args.indexOf('-M') + 1], 'microvm,pit=on,pic=on,rtc=on');
    assert.equal(args[args.indexOf('-m') + 1], '256M');
    assert.equal(args[args.indexOf('-smp') + 1], '2');
    assert.match(args[args.indexOf('-append') + 1], /tsc_early_khz=2000000/);
    assert.equal(args[args.indexOf('-incoming') + 1], "exec:cat '/s/vms/abcdefghjkm/snapshot/vmstate'");
    assert.ok(args.includes('virtserialport,chardev=guest,name=feos.guest'));
    assert.ok(args.includes('virtio-balloon-device,free-page-reporting=on'));
  });
  test('the TSC rate comes from a constant_tsc CPU only', () => {
    assert.equal(hostTscKhz('flags : fpu constant_tsc\ncpu MHz\t\t: 2596.136\n'), 2596136);
    assert.equal(hostTscKhz('flags : fpu\ncpu MHz\t\t: 2596.136\n'), undefined);
  });
});

describe('the guest clock', () => {
  // A guest whose clock is `offsetMs` ahead, answering after `rttMs`; it records what it was sent.
  function fakeGuest(offsetMs: number, rttMs: number, adjust: 'ok' | 'unimplemented') {
    const sent: Array<[string, unknown]> = [];
    const guest = {
      call: async (name: string, req: Record<string, unknown>) => {
        sent.push([name, req]);
        if (name === 'GetTime') {
          await new Promise((r) => setTimeout(r, rttMs / 2));
          const now = BigInt(Date.now() + offsetMs) * 1_000_000n;
          await new Promise((r) => setTimeout(r, rttMs / 2));
          return { unixNanos: now };
        }
        if (name === 'AdjustTime' && adjust === 'unimplemented') throw new GrpcError(GrpcCode.UNIMPLEMENTED, 'no adjtimex');
        return {};
      },
    };
    return { guest: guest as unknown as Parameters<typeof keepClockOnce>[0], sent };
  }
  test('four GetTime calls; the offset goes to AdjustTime, negated', async () => {
    const { guest, sent } = fakeGuest(500, 0, 'ok');
    assert.equal(await keepClockOnce(guest, 1000), 'adjusted');
    assert.deepEqual(sent.map(([n]) => n), ['GetTime', 'GetTime', 'GetTime', 'GetTime', 'AdjustTime']);
    const offset = Number((sent[4][1] as { offsetNanos: bigint }).offsetNanos) / 1e6;
    assert.ok(offset < -480 && offset > -520, `offset ${offset} ms`);
  });
  test('a guest that cannot adjust is set when off by more than 20 ms, and left alone within it', async () => {
    const off = fakeGuest(200, 0, 'unimplemented');
    assert.equal(await keepClockOnce(off.guest, 1000), 'set');
    assert.equal(off.sent.at(-1)![0], 'SetTime');
    const close = fakeGuest(0, 0, 'unimplemented');
    assert.equal(await keepClockOnce(close.guest, 1000), 'in-sync');
  });
  test('a measurement whose shortest round trip is over the limit is dropped', async () => {
    const { guest, sent } = fakeGuest(500, 30, 'ok');
    assert.equal(await keepClockOnce(guest, 10), 'dropped');
    assert.equal(sent.filter(([n]) => n !== 'GetTime').length, 0);
  });
});

describe('the accelerator probe', () => {
  /**
   * A stand-in QEMU (a shell script) that prints `lines` on its serial console (stdout) and then hangs,
   * and a stand-in KVM device that opens. Returns the script's path and the device's.
   */
  function standIn(dir: string, lines: string[], then: 'hang' | 'exit'): { qemu: string; kvm: string } {
    const qemu = join(dir, 'qemu-stand-in');
    // The lines have no single quote.
    const body = lines.map((l) => `printf '%s\\r\\n' '${l}'`).join('\n');
    writeFileSync(qemu, `#!/bin/sh\n${body}\n${then === 'hang' ? 'exec sleep 600' : 'exit 0'}\n`, { mode: 0o755 });
    const kvm = join(dir, 'kvm');
    writeFileSync(kvm, '');
    return { qemu, kvm };
  }

  test("the boot stub's line and a hang is no KVM: the probe waits for the kernel's end of boot, within its bound, and answers TCG", { timeout: 30_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'feos-accel-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    // What nested KVM on these machines prints before the kernel hangs.
    const { qemu, kvm } = standIn(dir, ['Probing EDD (edd=off to disable)... ok'], 'hang');
    const t0 = performance.now();
    assert.equal(await probeKvm(qemu, join(dir, 'vmlinuz'), { timeoutMs: 2000, kvmDevice: kvm }), false);
    assert.ok(performance.now() - t0 >= 1900, 'it waited for its bound');
    const state = join(dir, 'state');
    await import('node:fs/promises').then((fs) => fs.mkdir(state));
    assert.equal(await chooseAccelerator('auto', state, qemu, join(dir, 'vmlinuz'), { timeoutMs: 2000, kvmDevice: kvm }), 'tcg');
  });

  test("a kernel that reaches its panic for the missing root is KVM; one whose QEMU ends first, or without the device, is not", { timeout: 30_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'feos-accel-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const booted = standIn(dir, ['Probing EDD (edd=off to disable)... ok', '[    0.000000] Linux version 6.1.0-57-amd64', '[    1.806490] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)'], 'hang');
    const t0 = performance.now();
    assert.equal(await probeKvm(booted.qemu, join(dir, 'vmlinuz'), { timeoutMs: 20_000, kvmDevice: booted.kvm }), true);
    assert.ok(performance.now() - t0 < 15_000, 'it answers at the line, not at its bound');
    assert.equal(await probeKvm(booted.qemu, join(dir, 'vmlinuz'), { timeoutMs: 20_000, kvmDevice: join(dir, 'no-kvm') }), false);
    const ended = standIn(dir, ['Probing EDD (edd=off to disable)... ok', '[    0.000000] Linux version 6.1.0-57-amd64'], 'exit');
    assert.equal(await probeKvm(ended.qemu, join(dir, 'vmlinuz'), { timeoutMs: 20_000, kvmDevice: ended.kvm }), false);
  });

  test("an answer kept by an earlier probe (any serial byte) is probed again", { timeout: 30_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'feos-accel-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const { qemu, kvm } = standIn(dir, ['Probing EDD (edd=off to disable)... ok'], 'hang');
    const state = join(dir, 'state');
    await import('node:fs/promises').then((fs) => fs.mkdir(state));
    assert.equal(await chooseAccelerator('auto', state, qemu, join(dir, 'vmlinuz'), { timeoutMs: 500, kvmDevice: kvm }), 'tcg');
    const cache = join(state, 'accelerator.json');
    const { probe: _probe, ...old } = JSON.parse(readFileSync(cache, 'utf8')) as Record<string, unknown>;
    writeFileSync(cache, JSON.stringify({ ...old, accelerator: 'kvm' }));
    assert.equal(await chooseAccelerator('auto', state, qemu, join(dir, 'vmlinuz'), { timeoutMs: 500, kvmDevice: kvm }), 'tcg');
  });

  test('its answer is kept per QEMU binary: a QEMU named without a path and upgraded on PATH is probed again', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'feos-accel-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const bin = join(dir, 'bin');
    const state = join(dir, 'state');
    await import('node:fs/promises').then((fs) => Promise.all([fs.mkdir(bin), fs.mkdir(state)]));
    const name = 'feos-test-qemu-system-x86_64';
    writeFileSync(join(bin, name), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${bin}${delimiter}${path ?? ''}`;
    t.after(() => { process.env.PATH = path; });
    // Without a kernel the probe answers TCG; the test then records KVM as if a probe had found it.
    assert.equal(await chooseAccelerator('auto', state, name, undefined), 'tcg');
    const cache = join(state, 'accelerator.json');
    const kept = JSON.parse(readFileSync(cache, 'utf8')) as { accelerator: string; qemu: string };
    assert.ok(kept.qemu.endsWith(join(bin, name)), kept.qemu);
    writeFileSync(cache, JSON.stringify({ ...kept, accelerator: 'kvm' }));
    assert.equal(await chooseAccelerator('auto', state, name, undefined), 'kvm', 'the same boot and binary take the kept answer');
    writeFileSync(join(bin, name), '#!/bin/sh\n# upgraded\nexit 1\n', { mode: 0o755 });
    assert.equal(await chooseAccelerator('auto', state, name, undefined), 'tcg', 'an upgraded QEMU is probed again');
  });
});
