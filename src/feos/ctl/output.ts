/**
 * feosctl's printing: kubectl-like tables, and with `-o json|yaml` the objects as protobuf JSON (a
 * PodInfo with its `id` first).
 */
import { toJson, type JsonValue } from '@bufbuild/protobuf';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import YAML from 'yaml';
import { type PodInfo, PodInfoSchema, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { type Volume, VolumeSchema, VolumeState } from '../gen/feos/volume/v1/volume_pb.js';
import { formatBytes, humanDuration } from '../../lib/index.ts';

/** The `-o` formats (`wide`: a table with more columns, for pods). */
export type Output = 'table' | 'wide' | 'json' | 'yaml';

/** A pod as protobuf JSON, its `id` first. */
export function podJson(pod: PodInfo): JsonValue {
  const json = toJson(PodInfoSchema, pod, { alwaysEmitImplicit: false }) as Record<string, JsonValue>;
  // `id` first, then the rest as protobuf JSON has them.
  const { id, ...rest } = json;
  return { id: id ?? '', ...rest };
}

/** The pod's age as kubectl prints ages: from its creation (`createdAt`), not its last change of state. */
function age(pod: PodInfo): string {
  const since = pod.createdAt ?? pod.stateChangedAt;
  if (!since) return '';
  return humanDuration(Date.now() - timestampDate(since).getTime());
}

/** Rows as columns padded as kubectl pads them (three spaces apart, the last column unpadded), one line each. */
export function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return `${rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('   ')).join('\n')}\n`;
}

/** How long ago `t` was, as kubectl prints ages; `-` without it. */
function since(t: PodInfo['startedAt']): string {
  return t ? humanDuration(Date.now() - timestampDate(t).getTime()) : '-';
}

/**
 * Prints pods to stdout: a table (one pod's containers below it; `wide` adds, as `kubectl get -o wide`
 * does, the images, the guest version, how long ago the pod was brought up and its checkpoint), or JSON /
 * YAML (one pod alone when `single`, else `{ pods: [...] }`).
 */
export function printPods(pods: PodInfo[], output: Output, single: boolean): void {
  if (output === 'json') {
    process.stdout.write(`${JSON.stringify(single ? podJson(pods[0]) : { pods: pods.map(podJson) }, null, 2)}\n`);
  } else if (output === 'yaml') {
    process.stdout.write(YAML.stringify(single ? podJson(pods[0]) : { pods: pods.map(podJson) }));
  } else {
    const wide = output === 'wide';
    const rows = [['ID', 'STATE', 'VCPUS', 'MEMORY', 'IPV6', 'IPV4', 'AGE', ...(wide ? ['IMAGES', 'GUEST', 'STARTED', 'CHECKPOINT'] : []), 'REASON']];
    for (const p of pods) {
      rows.push([
        p.id,
        PodState[p.state] ?? String(p.state),
        String(p.spec?.vcpus ?? ''),
        `${(p.spec?.memoryBytes ?? 0n) / (1024n * 1024n)}Mi`,
        p.ipv6Address || '-',
        p.ipv4Address || '-',
        age(p),
        ...(wide ? [p.spec?.containers.map((c) => c.image).join(',') || '-', p.guestVersion || '-', since(p.startedAt), p.checkpoint || '-'] : []),
        p.reason,
      ]);
    }
    process.stdout.write(table(rows));
    // One pod's containers below it (GetPod asks a RUNNING pod's guest for their states): an exited
    // container is why an exec is refused.
    const p = pods[0];
    if (single && (p.spec?.containers.length ?? 0) > 0) {
      const crows = [['CONTAINER', 'IMAGE', 'STATE']];
      for (const c of p.spec!.containers) {
        const st = p.containers.find((x) => x.name === c.name);
        crows.push([c.name, c.image, st ? (st.state === 'exited' ? `exited (${st.exitCode})` : st.state) : '-']);
      }
      process.stdout.write(`\n${table(crows)}`);
    }
    // What its disk was made on when that was a baked layer, and the layer it baked (seed "Baked images"); a pod on
    // the blank data volume, as most are, prints neither (-o yaml shows its disk).
    if (single && p.disk?.layer) process.stdout.write(`\nDisk:  on baked layer ${p.disk.layer}\n`);
    if (single && p.baked) process.stdout.write(`${p.disk?.layer ? '' : '\n'}Baked: ${p.baked}\n`);
    // The layers its create named that were not used, each with its status (a damaged one is DATA_LOSS naming its object).
    if (single && (p.disk?.passedOver.length ?? 0) > 0) process.stdout.write(`\n${p.disk!.passedOver.map((w) => `Layer passed over: ${w}\n`).join('')}`);
  }
}

/** Prints volumes to stdout: a table, or JSON / YAML (one alone when `single`, else `{ volumes: [...] }`). */
export function printVolumes(vs: Volume[], out: Output, single: boolean): void {
  const json = (v: Volume) => toJson(VolumeSchema, v) as JsonValue;
  if (out === 'json') process.stdout.write(`${JSON.stringify(single ? json(vs[0]) : { volumes: vs.map(json) }, null, 2)}\n`);
  else if (out === 'yaml') process.stdout.write(YAML.stringify(single ? json(vs[0]) : { volumes: vs.map(json) }));
  else {
    const rows = [['ID', 'STATE', 'SIZE', 'POD', 'FORMATTED']];
    for (const v of vs) rows.push([v.id, VolumeState[v.state] ?? String(v.state), formatBytes(Number(v.sizeBytes)), v.podId || '-', String(v.formatted)]);
    process.stdout.write(table(rows));
  }
}
