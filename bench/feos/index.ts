// FeOS node benchmark (issue 8), one run, as root: a pod of 256 MiB's create-to-RUNNING, suspend and
// resume times through feosd, against what QEMU itself takes to boot the same kernel and initramfs to the
// guest agent's first word (the limit under this VMM), and the snapshot's write rate against dd to the
// same disk; then its hibernation into a local-directory object store and its restore, against the
// suspend and the resume. Prints ratios; asserts nothing.
//   node bench/feos/index.ts
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GuestClient } from '../../src/feos/guest/index.ts';
import { qemuArgs, hostTscKhz, vmPaths } from '../../src/feos/microvm/index.ts';
import { guestVersions } from '../../src/feos/pods/index.ts';
import { PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { startFeosd, waitForPod } from '../../test/feos/harness.ts';

const REPO = new URL('../../', import.meta.url).pathname;
const GUEST_DIR = join(REPO, 'build/guest');
const MEMORY = 256n * 1024n * 1024n;

if (process.getuid?.() !== 0) {
  console.error('bench/feos: needs root (the kernel file, QEMU)');
  process.exit(2);
}
execFileSync('bash', [join(REPO, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'] });
const version = guestVersions(GUEST_DIR).at(-1)!;
const work = mkdtempSync(join(tmpdir(), 'feos-bench-'));
const ms = (t0: number) => performance.now() - t0;

try {
  // 1. QEMU alone: spawn to the agent's first answer.
  const dir = join(work, 'raw');
  execFileSync('mkdir', ['-p', join(dir, 'snapshot')]);
  const disk = join(work, 'raw.qcow2');
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', join(GUEST_DIR, version, 'data.qcow2'), disk]);
  const t0 = performance.now();
  const qemu = spawn('qemu-system-x86_64', qemuArgs({ dir, guestDir: join(GUEST_DIR, version), disk, vcpus: 1, memoryBytes: MEMORY, accelerator: 'tcg', tscKhz: hostTscKhz() }), { stdio: 'ignore' });
  const guest = new GuestClient(vmPaths(dir).guest);
  let rawBoot = 0;
  for (;;) {
    try {
      await guest.call('Ping', {}, 300_000);
      rawBoot = ms(t0);
      break;
    } catch {
      if (ms(t0) > 300_000) throw new Error('the raw QEMU boot did not answer within 300 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  guest.close();
  qemu.kill('SIGKILL');

  // 2. Through feosd.
  const storeDir = join(work, 'store');
  const feosd = await startFeosd(join(work, 'feosd'), { guestDir: GUEST_DIR, extra: ['--object-store', pathToFileURL(storeDir).href] });
  process.on('exit', () => feosd.child.kill('SIGKILL'));
  const id = 'benchpqd0aa';
  const c0 = performance.now();
  await feosd.pods.createPod({ id, spec: { vcpus: 1, memoryBytes: MEMORY } });
  const pod = await waitForPod(feosd, id, (p) => p.state !== PodState.PENDING, 300_000);
  const createToRunning = ms(c0);
  if (pod.state !== PodState.RUNNING) throw new Error(`the pod is ${PodState[pod.state]}: ${pod.reason}`);
  const s0 = performance.now();
  await feosd.pods.suspendPod({ id });
  const suspend = ms(s0);
  const snapshotBytes = statSync(join(feosd.stateDir, 'vms', id, 'snapshot', 'vmstate')).size;
  const r0 = performance.now();
  await feosd.pods.resumePod({ id });
  const resume = ms(r0);
  // 2b. Hibernate into the store (suspend, put memory and disk with their SHA-256s, manifest, release)
  // and restore on the same node (copy and check both, rebase, resume).
  const h0 = performance.now();
  const hibernated = await feosd.pods.hibernatePod({ id });
  const hibernate = ms(h0);
  const ck = join(storeDir, 'pods', id, hibernated.pod!.checkpoint);
  const m = JSON.parse(readFileSync(join(ck, 'manifest.json'), 'utf8')) as { files: Array<{ sizeBytes: number }> };
  const storedBytes = m.files.reduce((n, f) => n + f.sizeBytes, 0);
  const x0 = performance.now();
  await feosd.pods.restorePod({ id });
  const restore = ms(x0);
  await feosd.pods.deletePod({ id });
  await feosd.stop();

  // 3. dd to the same disk, the same size, synced.
  const mib = Math.max(1, Math.round(snapshotBytes / 2 ** 20));
  const d0 = performance.now();
  execFileSync('dd', ['if=/dev/zero', `of=${join(work, 'dd.img')}`, 'bs=1M', `count=${mib}`, 'conv=fsync'], { stdio: 'ignore' });
  const dd = ms(d0);

  const rate = (bytes: number, t: number) => bytes / 2 ** 20 / (t / 1000);
  console.log(`feos bench (TCG, 256 MiB pod, guest ${version})`);
  console.log(`  QEMU alone, start to the agent's first answer   ${(rawBoot / 1000).toFixed(1)} s`);
  console.log(`  feosd create to RUNNING                          ${(createToRunning / 1000).toFixed(1)} s   ratio ${(createToRunning / rawBoot).toFixed(2)}`);
  console.log(`  suspend                                          ${(suspend / 1000).toFixed(2)} s   ratio to the boot ${(suspend / rawBoot).toFixed(3)}`);
  console.log(`  resume                                           ${(resume / 1000).toFixed(2)} s   ratio to the boot ${(resume / rawBoot).toFixed(3)}`);
  console.log(`  hibernate (suspend + ${(storedBytes / 2 ** 20).toFixed(0)} MiB into the store)    ${(hibernate / 1000).toFixed(2)} s   ratio to the suspend ${(hibernate / suspend).toFixed(2)}`);
  console.log(`  restore (copy, check, resume)                    ${(restore / 1000).toFixed(2)} s   ratio to the resume ${(restore / resume).toFixed(2)}`);
  console.log(`  snapshot ${mib} MiB in the suspend: ${rate(snapshotBytes, suspend).toFixed(0)} MiB/s; dd: ${rate(mib * 2 ** 20, dd).toFixed(0)} MiB/s; ratio ${(rate(snapshotBytes, suspend) / rate(mib * 2 ** 20, dd)).toFixed(2)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
