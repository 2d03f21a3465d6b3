/**
 * The guest agent's unary calls (feos.guest.v1.GuestService; docs/feos/guest.md): Ping, the clock,
 * the network, EmptyMemory, Shutdown, MountVolumes, and the images' and containers' calls. Part of the
 * agent (agent.ts).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { create } from '@bufbuild/protobuf';
import {
  AdjustTimeRequestSchema,
  AdjustTimeResponseSchema,
  AgentState,
  ConfigureNetworkRequestSchema,
  ConfigureNetworkResponseSchema,
  CreateContainerRequestSchema,
  CreateContainerResponseSchema,
  EmptyMemoryRequestSchema,
  EmptyMemoryResponseSchema,
  FreezeFilesystemRequestSchema,
  FreezeFilesystemResponseSchema,
  GetTimeRequestSchema,
  GetTimeResponseSchema,
  ListContainersRequestSchema,
  ListContainersResponseSchema,
  MountVolumesRequestSchema,
  MountVolumesResponseSchema,
  PingRequestSchema,
  PingResponseSchema,
  PullImageRequestSchema,
  PullImageResponseSchema,
  SetTimeRequestSchema,
  SetTimeResponseSchema,
  ShutdownRequestSchema,
  ShutdownResponseSchema,
  StartContainerRequestSchema,
  StartContainerResponseSchema,
  ThawFilesystemRequestSchema,
  ThawFilesystemResponseSchema,
} from '../gen/feos/guest/v1/guest_pb.js';
import { GrpcCode, GrpcError, type UnaryHandler } from './grpc-wire.ts';
import { AGENT_VERSION, containerStatus, containers, DATA_DIR, images, log, memAvailable, method, needData, readFileOr, run, S, status } from './agent-base.ts';
import { clock, configureNetwork, mountVolume, pullOptions } from './agent-system.ts';

/** The unary calls by their path. */
export const handlers = new Map<string, UnaryHandler>([
  [
    `/${S}/Ping`,
    method(PingRequestSchema, PingResponseSchema, async () =>
      create(PingResponseSchema, {
        state: status.state,
        reason: status.reason,
        uptimeMs: BigInt(Math.round(Number.parseFloat(readFileOr('/proc/uptime', '0').split(' ')[0]) * 1000)),
        bootId: readFileOr('/proc/sys/kernel/random/boot_id', '').trim(),
        agentVersion: AGENT_VERSION,
        kernelRelease: os.release(),
        attaches: status.attaches,
        memoryAvailableBytes: memAvailable(),
      }),
    ),
  ],
  [
    `/${S}/GetTime`,
    method(GetTimeRequestSchema, GetTimeResponseSchema, async () =>
      create(GetTimeResponseSchema, { unixNanos: BigInt(Date.now()) * 1_000_000n }),
    ),
  ],
  [
    `/${S}/SetTime`,
    method(SetTimeRequestSchema, SetTimeResponseSchema, async (req) => {
      await clock('step', req.unixNanos - BigInt(Date.now()) * 1_000_000n);
      return create(SetTimeResponseSchema);
    }),
  ],
  [
    `/${S}/AdjustTime`,
    method(AdjustTimeRequestSchema, AdjustTimeResponseSchema, async (req) => {
      await clock('adjust', req.offsetNanos);
      return create(AdjustTimeResponseSchema);
    }),
  ],
  [
    `/${S}/ConfigureNetwork`,
    method(ConfigureNetworkRequestSchema, ConfigureNetworkResponseSchema, async (req) => {
      await configureNetwork(req);
      return create(ConfigureNetworkResponseSchema);
    }),
  ],
  [
    `/${S}/EmptyMemory`,
    method(EmptyMemoryRequestSchema, EmptyMemoryResponseSchema, async () => {
      try {
        fs.writeFileSync('/proc/sys/vm/drop_caches', '3');
        fs.writeFileSync('/proc/sys/vm/compact_memory', '1');
      } catch (err: unknown) {
        throw new GrpcError(GrpcCode.INTERNAL, `empty memory: ${String(err)}`);
      }
      return create(EmptyMemoryResponseSchema, { memoryAvailableBytes: memAvailable() });
    }),
  ],
  [
    `/${S}/Shutdown`,
    method(ShutdownRequestSchema, ShutdownResponseSchema, async (req) => {
      status.state = AgentState.STOPPING;
      log(req.reboot ? 'reboot asked' : 'shutdown asked');
      // Answer first, then go: sync, unmount the data disk, power off.
      setTimeout(() => {
        execFile('/bin/sh', ['-c', `sync; umount /data 2>/dev/null; ${req.reboot ? 'reboot' : 'poweroff'} -f`]);
      }, 50);
      return create(ShutdownResponseSchema);
    }),
  ],
  [
    `/${S}/MountVolumes`,
    method(MountVolumesRequestSchema, MountVolumesResponseSchema, async (req) => {
      const res = create(MountVolumesResponseSchema);
      for (const v of req.volumes) {
        try {
          await mountVolume(v.name, v.drive, v.format);
          res.mounted.push(v.name);
        } catch (err: unknown) {
          res.failed[v.name] = err instanceof Error ? err.message : String(err);
        }
      }
      return res;
    }),
  ],
  [
    `/${S}/PullImage`,
    method(PullImageRequestSchema, PullImageResponseSchema, async (req) => {
      try {
        const opts = await pullOptions(req);
        needData();
        const { image, cached } = await images.pull(req.image, opts);
        log(`pulled ${req.image} (${image.digest}${cached ? ', cached' : ''})`);
        return create(PullImageResponseSchema, { manifestDigest: image.digest, sizeBytes: BigInt(image.sizeBytes), cached });
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/FreezeFilesystem`,
    method(FreezeFilesystemRequestSchema, FreezeFilesystemResponseSchema, async (req) => {
      needData();
      if (req.trim) {
        // Best effort: a disk without discard trims nothing, and the freeze goes on. The sync first: ext4
        // trims only the blocks whose freeing its journal committed (a pull's tarball just deleted).
        await run('/bin/busybox', ['sh', '-c', `sync && /bin/busybox fstrim -v ${DATA_DIR}`], { timeout: 120_000 })
          .then(({ stdout }) => log(`fstrim: ${String(stdout).trim()}`))
          .catch((err: unknown) => log(`fstrim ${DATA_DIR}: ${String(err)}`));
      }
      const why = await fsfreeze('--freeze');
      // EBUSY: frozen already (a freeze whose answer a restart of feosd or of the agent cut off).
      if (why && !/busy/i.test(why)) throw new GrpcError(GrpcCode.FAILED_PRECONDITION, `freeze ${DATA_DIR}: ${why}`);
      log(`${DATA_DIR} frozen`);
      return create(FreezeFilesystemResponseSchema);
    }),
  ],
  [
    `/${S}/ThawFilesystem`,
    method(ThawFilesystemRequestSchema, ThawFilesystemResponseSchema, async () => {
      needData();
      const why = await fsfreeze('--unfreeze');
      // EINVAL: it was not frozen.
      if (why && !/invalid argument/i.test(why)) throw new GrpcError(GrpcCode.INTERNAL, `thaw ${DATA_DIR}: ${why}`);
      if (!why) log(`${DATA_DIR} thawed`);
      return create(ThawFilesystemResponseSchema, { wasFrozen: !why });
    }),
  ],
  [
    `/${S}/CreateContainer`,
    method(CreateContainerRequestSchema, CreateContainerResponseSchema, async (req) => {
      try {
        const opts = await pullOptions(req);
        needData();
        const c = req.config;
        if (!c) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, 'config: missing');
        const res = await containers.create(
          {
            name: c.name,
            image: c.image,
            command: c.command,
            args: c.args,
            env: { ...c.env },
            volumeMounts: c.volumeMounts.map((m) => ({ name: m.name, path: m.path, readOnly: m.readOnly })),
          },
          opts,
        );
        log(`container ${c.name} ${res.adopted ? 'adopted' : 'created'} (${res.imageDigest})`);
        return create(CreateContainerResponseSchema, res);
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/StartContainer`,
    method(StartContainerRequestSchema, StartContainerResponseSchema, async (req) => {
      try {
        needData();
        await containers.start(req.name);
        log(`container ${req.name} started`);
        return create(StartContainerResponseSchema);
      } catch (err: unknown) {
        throw containerStatus(err);
      }
    }),
  ],
  [
    `/${S}/ListContainers`,
    method(ListContainersRequestSchema, ListContainersResponseSchema, async () =>
      create(ListContainersResponseSchema, { containers: containers.list() }),
    ),
  ],
]);

/**
 * busybox's `fsfreeze` on the data disk's file system (FIFREEZE, FITHAW): '' when it did it, else its
 * error's words (EBUSY for a freeze of a frozen one, EINVAL for a thaw of a thawed one).
 */
async function fsfreeze(how: '--freeze' | '--unfreeze'): Promise<string> {
  try {
    await run('/bin/busybox', ['fsfreeze', how, DATA_DIR], { timeout: 60_000 });
    return '';
  } catch (err: unknown) {
    const e = err as { stderr?: string; message?: string };
    return (e.stderr || e.message || String(err)).trim();
  }
}
