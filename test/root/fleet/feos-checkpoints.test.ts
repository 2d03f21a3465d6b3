/**
 * Save checkpoints of a microVM pod and its restore after a node loss (issue 18, "Moving them"; docs/feos/
 * cluster-pods.md "Save checkpoints and node loss"), as root, on `kube32-cli up --workers 0 --feos-nodes 2
 * --node-monitor-grace-period 20s` (two feosds sharing up's object store, real QEMU under TCG):
 * - a Deployment of one microVM pod with `kube32.io/checkpoint-interval` gets periodic Checkpoints that end
 *   `Saved` with KIND microvm, a `Checkpointed` event, and the pod keeps running where it is (same uid,
 *   same node, its count going on);
 * - the pod's node is lost (its feosd and microVMs SIGKILLed): the Node turns NotReady, and the pod is
 *   restored on the other FeOS node from its latest checkpoint, its count going on from there (not from 1).
 * One microVM boots; the node loss restores it. About 5.5 minutes (332 s) on the 2-core build machine under TCG.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { kubectl, run, startUp, suiteRegistry, until } from './helpers.ts';
import { steps } from '../../helpers/steps.ts';

const REPO = new URL('../../../', import.meta.url).pathname;
/** A boot and the pull in the guest under TCG on a loaded machine. */
const BOOT_MS = 600_000;

interface Pod {
  metadata: { name: string; uid: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status: { phase?: string; conditions?: { type: string; status: string }[] };
}
interface Ck {
  metadata: { name: string; labels?: Record<string, string> };
  spec: { podName: string; action: string };
  status?: { phase?: string; snapshotKind?: string; snapshotName?: string; takenAt?: string; nodeName?: string };
}

test('a microVM pod\'s periodic Save checkpoints leave it running; after its node is lost it is restored elsewhere from the latest', { timeout: 2_400_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const { reg, dir } = await suiteRegistry(t, 'k32t-fckpt-', 'fckpt-unused-token');
  execFileSync('bash', [join(REPO, 'examples/feos-counter/build-image.sh'), reg.direct], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const up = await startUp(t, ['--workers', '0', '--feos-nodes', '2', '--feos-accel', 'tcg', '--feos-registry', reg.direct, '--node-monitor-grace-period', '20s', '--ready-timeout', '300'], 1_200_000);
  const k = (...args: string[]) => kubectl(up.kubeconfig, ...args);
  const pods = async (): Promise<Pod[]> => {
    const r = await k('get', 'pods', '-l', 'app=feos-counter', '-o', 'json');
    return (JSON.parse(r.stdout || '{"items":[]}') as { items: Pod[] }).items.filter((p) => !p.metadata.deletionTimestamp);
  };
  const checkpoints = async (): Promise<Ck[]> => {
    const r = await k('get', 'ckpt', '-o', 'json');
    return (JSON.parse(r.stdout || '{"items":[]}') as { items: Ck[] }).items;
  };
  const runningReady = (p: Pod | undefined) => p?.status.phase === 'Running' && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  const count = async (name: string): Promise<number | undefined> => {
    const r = await k('logs', name, '--tail', '5');
    const nums = r.stdout.split('\n').map((l) => /^count (\d+)$/.exec(l.trim())?.[1]).filter((x): x is string => x !== undefined).map(Number);
    return r.code === 0 && nums.length > 0 ? nums[nums.length - 1] : undefined;
  };

  const step = steps(t, () => [
    `up:\n${up.out().split('\n').slice(-20).join('\n')}`,
  ]);

  let pod: Pod;
  await step('a Deployment of one microVM pod with a checkpoint interval runs on a FeOS node', async () => {
    const yaml = join(dir, 'feos-counter.yaml');
    const base = execFileSync('sed', [`s|127.0.0.1:5000|${reg.direct}|`, join(REPO, 'examples/feos-counter/counter.yaml')], { encoding: 'utf8' });
    // Periodic checkpoints every 90 s (the template's annotation): a checkpoint under TCG pauses the pod for 20 to 30 s.
    writeFileSync(yaml, base.replace(/( {2}template:\n {4}metadata:\n)/, '$1      annotations:\n        kube32.io/checkpoint-interval: 90s\n'));
    const r = await k('apply', '-f', yaml);
    assert.equal(r.code, 0, r.stderr);
    pod = await until('the microVM counter Running and Ready', async () => (await pods()).find(runningReady), BOOT_MS);
    assert.match(pod.spec.nodeName ?? '', /^feos-[12]$/);
  });

  let saved: Ck;
  await step('a periodic checkpoint ends Saved (KIND microvm) with a Checkpointed event; the pod runs on, same uid and node, counting', async () => {
    // A checkpoint taken once the count is at 20 at least: a pod started afresh after the loss would count from 1.
    await until('the count at 20', async () => ((await count(pod.metadata.name)) ?? 0) >= 20, 300_000);
    const since = new Date(Date.now() - 1000).toISOString();
    saved = await until('a Saved periodic checkpoint taken since', async () => (await checkpoints()).find((c) => c.metadata.labels?.['kube32.io/trigger'] === 'periodic' && c.status?.phase === 'Saved' && (c.status.takenAt ?? '') > since), 400_000);
    assert.equal(saved.spec.action, 'Save');
    assert.equal(saved.status?.snapshotKind, 'microvm');
    assert.ok(saved.status?.snapshotName, 'it names the FeOS checkpoint');
    assert.equal(saved.status?.nodeName, pod.spec.nodeName);
    const wide = await k('get', 'ckpt', saved.metadata.name, '-o', 'wide', '--no-headers');
    assert.match(wide.stdout, /\sSave\s+Saved\s.*\smicrovm\s*$/m);
    const ev = await k('get', 'events', '--field-selector', `involvedObject.name=${pod.metadata.name},reason=Checkpointed`, '-o', 'jsonpath={.items[*].message}');
    assert.match(ev.stdout, /saved the microVM \(FeOS checkpoint \S+\) on feos-[12]; the pod runs on/);
    const now = await until('the pod Running and Ready after its checkpoint', async () => (await pods()).find((p) => p.metadata.uid === pod.metadata.uid && runningReady(p)), 120_000);
    assert.equal(now.spec.nodeName, pod.spec.nodeName, 'it stays on its node');
    const a = await until('a count', () => count(pod.metadata.name), 60_000);
    const b = await until('the count going on', async () => {
      const n = await count(pod.metadata.name);
      return n !== undefined && n > a ? n : undefined;
    }, 60_000);
    assert.ok(b > a);
  });

  await step('its node is lost (feosd and its microVMs killed): the pod is restored on the other FeOS node from its latest checkpoint, its count going on from there', async () => {
    const lost = pod.spec.nodeName!;
    const other = lost === 'feos-1' ? 'feos-2' : 'feos-1';
    // The count the checkpoint holds is at least what the log showed before it was taken.
    const before = (await count(pod.metadata.name)) ?? 0;
    const ns = `k32-${up.tag}-${lost}`;
    for (const pid of (await run('ip', ['netns', 'pids', ns])).stdout.split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {}
    }
    await until(`${lost} NotReady`, async () => {
      const r = await k('get', 'node', lost, '--no-headers');
      return /\sNotReady\s/.test(r.stdout);
    }, 120_000);
    const after = await until(`the pod Running and Ready on ${other}`, async () => (await pods()).find((p) => p.spec.nodeName === other && runningReady(p)), 600_000);
    assert.equal(after.metadata.name, pod.metadata.name, 'the same name');
    assert.notEqual(after.metadata.uid, pod.metadata.uid, 'a new uid');
    const n = await until('a count in the restored pod\'s log', () => count(after.metadata.name), 60_000);
    assert.ok(n >= 20, `the count goes on from the checkpoint, taken at 20 or more (${n}), not from 1`);
    t.diagnostic(`count ${before} before the loss; ${n} after the restore on ${other} (the checkpoint's count and on)`);
  });
});
