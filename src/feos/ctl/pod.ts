/**
 * feosctl's pod commands (docs/feos/feosctl.md): create, get, list, start, stop, suspend, resume,
 * hibernate, restore and delete; the streaming ones (events, exec, logs, port-forward) are in
 * ./pod-streams.ts.
 */
import { applyMetadata, withContainerStates } from './metadata.ts';
import { readFileSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import { create } from '@bufbuild/protobuf';
import { type PodInfo, PodService, PodSpecSchema, PodState, type PodEvent } from '../gen/feos/pod/v1/pod_pb.js';
import { makeClient } from '../api/index.ts';
import { MAX_VCPUS, mintPodId } from '../pods/index.ts';
import { CallFailed, type CtlContext } from './context.ts';
import { memoryBytes, readToken, specFromFile, wholeNumber } from './flags.ts';
import { type Output, printPods } from './output.ts';
import { addPodStreamCommands } from './pod-streams.ts';

/** Adds `feosctl pod ...` to `program`. */
export function addPodCommands(program: Command, ctx: CtlContext): void {
  const { call, deadline, output } = ctx;
  const pods = () => makeClient(PodService, ctx.target());
  /** Watches a pod until it is no longer PENDING (RUNNING or FAILED, ...), within --timeout. */
  const waitSettled = (c: ReturnType<typeof pods>, id: string) =>
    call(
      () =>
        new Promise<PodInfo>((resolve, reject) => {
          const ev = c.watchPodEvents({ podId: id }, { deadline: deadline() });
          ev.on('data', (e: PodEvent) => {
            if (e.pod && e.pod.state !== PodState.PENDING) {
              resolve(e.pod);
              ev.cancel();
            }
          });
          ev.on('error', (err: { code?: number }) => {
            if (err.code !== 1) reject(err);
          });
        }),
    );
  /** After --wait, a FAILED pod is feosctl's failure: exit 1 with the reason (the pod is printed first). */
  const failedAfterWait = (p: PodInfo) => {
    if (p.state === PodState.FAILED) throw new CallFailed(`pod ${p.id} is FAILED: ${p.reason || 'no reason given'}`);
  };
  const pod = program.command('pod').description('the pods of the node');
  pod
    .command('create')
    .description('records a pod and brings it up in the background (an ID is minted when none is given)')
    .option('--id <id>', 'the pod ID (11 characters of lowercase Crockford base32, a letter first, or a UUID)')
    .option('--vcpus <n>', `virtual CPUs (1 to ${MAX_VCPUS})`, wholeNumber('--vcpus', 1, MAX_VCPUS))
    .option('--memory <quantity>', 'memory, such as 256Mi or 1Gi', memoryBytes)
    .option('--image <ref...>', 'a container per image, named after it')
    .option('--network', 'give the pod a network (the defaults)')
    .option('-f, --filename <file>', 'the PodSpec as YAML or JSON (protobuf JSON names)')
    .option('--wait', 'wait until the pod is RUNNING or FAILED (FAILED exits 1)')
    .option('--pull-token-file <file>', "a Bearer token of the images' registry for this bring-up's pulls (kept in feosd's memory only)")
    .option('--metadata <key=value...>', "the pod's metadata (its metadata service's /metadata); over -f's and --metadata-file's")
    .option('--metadata-file <file>', 'metadata as a YAML or JSON mapping of keys to strings')
    .option('--image-layer <layer...>', "baked layers of the pod's one container's image to start its disk on, in order (a pod's BAKED layer ID); one the node cannot fetch is passed over")
    .option('--bake', "let the pod bake its one container's image into a layer when its disk is on the blank data volume (needs feosd's --object-store)")
    .addOption(output({ wide: true }))
    .action(async (o: { id?: string; vcpus?: number; memory?: bigint; image?: string[]; network?: boolean; filename?: string; wait?: boolean; pullTokenFile?: string; metadata?: string[]; metadataFile?: string; imageLayer?: string[]; bake?: boolean; output: Output }) => {
      let spec = create(PodSpecSchema);
      if (o.filename) {
        let text: string;
        try {
          text = readFileSync(o.filename, 'utf8');
        } catch (err: unknown) {
          throw new InvalidArgumentError(`-f ${o.filename}: ${err instanceof Error ? err.message : String(err)}`);
        }
        spec = specFromFile(o.filename, text);
      }
      if (o.vcpus !== undefined) spec.vcpus = o.vcpus;
      if (o.memory !== undefined) spec.memoryBytes = o.memory;
      for (const image of o.image ?? []) {
        const base = (image.split('/').at(-1) ?? 'c').split(/[:@]/)[0].replace(/[^a-z0-9-]/g, '-').slice(0, 58) || 'c';
        // Two images of one name (busybox:1 and busybox:2) are two containers: busybox, busybox-2.
        let name = base;
        for (let n = 2; spec.containers.some((c) => c.name === name); n++) name = `${base}-${n}`;
        spec.containers.push({ $typeName: 'feos.pod.v1.ContainerSpec', name, image, command: [], args: [], env: {}, volumeMounts: [] });
      }
      if (o.network && !spec.network) spec.network = { $typeName: 'feos.pod.v1.PodNetwork', securityGroups: [], nameTables: [], dnsUpstreams: [] };
      applyMetadata(spec, o.metadata, o.metadataFile);
      const c = pods();
      const id = o.id ?? mintPodId();
      const pullToken = readToken(o.pullTokenFile);
      let imageLayers: { image: string; layers: string[]; bake: boolean } | undefined;
      if (o.bake || o.imageLayer) {
        if (spec.containers.length !== 1) {
          c.grpc.close();
          throw new InvalidArgumentError(`--bake and --image-layer need a pod with one container (it has ${spec.containers.length}): give one --image, or one container in -f`);
        }
        imageLayers = { image: spec.containers[0].image, layers: o.imageLayer ?? [], bake: o.bake ?? false };
      }
      const res = await call(() => c.createPod({ id, spec, pullToken, imageLayers }, { deadline: deadline() }));
      const settled = o.wait ? await withContainerStates(c, await waitSettled(c, res.pod!.id || id), deadline()) : res.pod!;
      printPods([settled], o.output, true);
      c.grpc.close();
      failedAfterWait(settled);
    });
  pod
    .command('get <id>')
    .description('shows a pod')
    .addOption(output({ wide: true }))
    .action(async (id: string, o: { output: Output }) => {
      const c = pods();
      const res = await call(() => c.getPod({ id }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('list')
    .description("lists the node's pods")
    .addOption(output({ wide: true }))
    .action(async (o: { output: Output }) => {
      const c = pods();
      const res = await call(() => c.listPods({}, { deadline: deadline() }));
      if (o.output === 'table' && res.pods.length === 0) process.stdout.write('No pods.\n');
      else printPods(res.pods, o.output, false);
      c.grpc.close();
    });
  for (const [name, desc] of [
    ['start', 'brings a STOPPED or FAILED pod up anew on its disk'],
    ['stop', 'shuts a pod down (its disk stays)'],
    ['suspend', "writes a RUNNING pod's microVM into its snapshot"],
    ['resume', 'resumes a SUSPENDED pod, or restores a HIBERNATED one from its checkpoint'],
  ] as const) {
    const cmd = pod.command(`${name} <id>`).description(desc).addOption(output({ wide: true }));
    if (name === 'start') {
      cmd.option('--pull-token-file <file>', "a Bearer token of the images' registry for this bring-up's pulls");
      cmd.option('--wait', 'wait until the pod is RUNNING or FAILED (FAILED exits 1)');
    }
    if (name === 'resume') cmd.option('--disk-only', 'a HIBERNATED pod: boot anew on its checkpoint\'s disk, without its memory');
    cmd.action(async (id: string, o: { output: Output; pullTokenFile?: string; wait?: boolean; diskOnly?: boolean }) => {
        const c = pods();
        const method = { start: c.startPod, stop: c.stopPod, suspend: c.suspendPod, resume: c.resumePod }[name] as (
          req: { id: string; pullToken?: string; diskOnly?: boolean },
          options: { deadline: Date },
        ) => Promise<{ pod?: PodInfo }>;
        const req = name === 'start' ? { id, pullToken: readToken(o.pullTokenFile) } : name === 'resume' ? { id, diskOnly: o.diskOnly ?? false } : { id };
        const res = await call(() => method(req, { deadline: deadline() }));
        const settled = o.wait ? await withContainerStates(c, await waitSettled(c, res.pod!.id), deadline()) : res.pod!;
        printPods([settled], o.output, true);
        c.grpc.close();
        if (o.wait) failedAfterWait(settled);
      });
  }
  pod
    .command('hibernate <id>')
    .description("puts a pod into feosd's object store (its memory and disk) and releases it on the node: HIBERNATED")
    .option('--no-abandon', 'a ResumePod waits for this hibernation instead of abandoning it (a drain)')
    .addOption(output({ wide: true }))
    .action(async (id: string, o: { output: Output; abandon: boolean }) => {
      const c = pods();
      const res = await call(() => c.hibernatePod({ id, noAbandon: !o.abandon }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('restore <id>')
    .description("brings a pod back from its checkpoint in feosd's object store (a HIBERNATED pod, or one hibernated by another feosd)")
    .option('--checkpoint <name>', "the checkpoint (default: the pod's own, or its latest in the store)")
    .option('--disk-only', "boot anew on the checkpoint's disk, without its memory")
    .addOption(output({ wide: true }))
    .action(async (id: string, o: { output: Output; checkpoint?: string; diskOnly?: boolean }) => {
      const c = pods();
      const res = await call(() => c.restorePod({ id, checkpoint: o.checkpoint ?? '', diskOnly: o.diskOnly ?? false }, { deadline: deadline() }));
      printPods([res.pod!], o.output, true);
      c.grpc.close();
    });
  pod
    .command('delete <id>')
    .description('removes a pod: its microVM, disk and record')
    .action(async (id: string) => {
      const c = pods();
      await call(() => c.deletePod({ id }, { deadline: deadline() }));
      process.stdout.write(`pod ${id} deleted\n`);
      c.grpc.close();
    });
  addPodStreamCommands(pod, ctx);
}
