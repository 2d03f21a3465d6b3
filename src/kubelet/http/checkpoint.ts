/**
 * `POST /checkpoint/<ns>/<pod>/<container>` and `POST /thaw/<ns>/<pod>/<container>` (seed 002
 * "Kubelet endpoints"): freeze, stream the K32S snapshot, thaw. Refusals are thrown as
 * {@link EndpointError}s (or the pod's `PodStateError`s) and answered by the server's one mapping.
 */
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { V1Pod } from '@kubernetes/client-node';
import { type Logger, pauseAt } from '../../lib/index.ts';
import { PodStateError, type PodInstance } from '../../wasm/index.ts';
import type { ContainerRunner } from '../container.ts';
import type { PodManager } from '../pods.ts';
import { podSpecBlockers } from '../../api/index.ts';
import { EndpointError, badRequest, podNotFound } from './status.ts';

/** The freeze timeout when `timeoutMs` is not given: 10 s (seed). */
export const DEFAULT_FREEZE_TIMEOUT_MS = 10_000;
/** The longest freeze timeout a caller may ask for: 60 s (seed). */
export const MAX_FREEZE_TIMEOUT_MS = 60_000;

/** A container of a pod on this node, and its pod. */
export interface FoundContainer {
  runner: ContainerRunner;
  pod: V1Pod;
}

/**
 * The container `container` of pod `ns/pod` on this node.
 * @throws EndpointError 404 `NotFound` when the pod or the container is not on this node
 */
export function findContainer(pods: PodManager | undefined, ns: string, pod: string, container: string): FoundContainer {
  const w = pods?.find(ns, pod);
  const runner = w?.container(container);
  if (!w || !runner) {
    throw podNotFound(w ? `container "${container}" not found in pod "${ns}/${pod}" on this node` : `pod "${ns}/${pod}" not found on this node`, pod);
  }
  return { runner, pod: w.pod };
}

/**
 * Reads `leave` (`running` or `frozen`), `timeoutMs` (1 to 60 000) and `digest` (`true`, the default, or
 * `false`) of a checkpoint request.
 */
function checkpointQuery(url: URL): { leave: 'running' | 'frozen'; timeoutMs: number; digest: boolean } {
  const leave = url.searchParams.get('leave') ?? 'running';
  if (leave !== 'running' && leave !== 'frozen') throw badRequest(`leave must be "running" or "frozen": current value is "${leave}"`);
  const d = url.searchParams.get('digest') ?? 'true';
  if (d !== 'true' && d !== 'false') throw badRequest(`digest must be "true" or "false": current value is "${d}"`);
  const t = url.searchParams.get('timeoutMs');
  const timeoutMs = t === null ? DEFAULT_FREEZE_TIMEOUT_MS : Number(t);
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_FREEZE_TIMEOUT_MS) {
    throw badRequest(`timeoutMs must be a whole number of ms from 1 to ${MAX_FREEZE_TIMEOUT_MS}: current value is "${t}"`);
  }
  return { leave, timeoutMs, digest: d === 'true' };
}

/**
 * Freezes `inst` within `timeoutMs` (a pod already frozen stays as it is).
 * @throws EndpointError 504 `Timeout` naming the call still running, 409 `NotMovable`, 404 `NotFound`
 */
async function freeze(inst: PodInstance, who: string, timeoutMs: number): Promise<void> {
  try {
    await inst.freeze(timeoutMs);
  } catch (err: unknown) {
    if (inst.frozen) await inst.thaw().catch(() => {});
    if (err instanceof PodStateError && err.code === 'Timeout') {
      const call = inst.runningCall?.name ?? 'k32_handle';
      const b = err.blockers.length > 0 ? err.blockers : [`call ${call} still running after ${timeoutMs} ms`];
      throw new EndpointError(504, 'Timeout', `pod ${who}: ${b.join('; ')}`, { blockers: b });
    }
    throw err;
  }
}

/** Serves a checkpoint: the snapshot's bytes with its facts in `x-kube32-*` headers. */
export async function serveCheckpoint(req: IncomingMessage, res: ServerResponse, url: URL, pods: PodManager | undefined, at: { ns: string; pod: string; container: string }, log: Logger): Promise<void> {
  const { ns, pod, container } = at;
  const who = `${ns}/${pod}`;
  const { leave, timeoutMs, digest } = checkpointQuery(url);
  const found = findContainer(pods, ns, pod, container);
  const inst = found.runner.instance;
  // What the spec and the module forbid holds whatever the container's state (an app pod restarting is
  // still an app pod: 409 with its blocker, not 404); the module is kept by the runner once loaded.
  const specBlockers = podSpecBlockers(found.pod, { entryPoint: (inst?.module ?? found.runner.module)?.entryPoint });
  if (!inst) {
    if (specBlockers.length > 0) throw new EndpointError(409, 'NotMovable', `pod ${who} cannot move: ${specBlockers.join('; ')}`, { blockers: specBlockers });
    throw podNotFound(`container "${container}" of pod "${who}" is not running`, pod);
  }
  // A call still running is not refused here: the freeze below waits for it up to timeoutMs (504).
  const nodeBlockers = inst.blockers().filter((b) => !b.startsWith('call '));
  const blockers = [...new Set([...specBlockers, ...nodeBlockers])];
  if (blockers.length > 0) throw new EndpointError(409, 'NotMovable', `pod ${who} cannot move: ${blockers.join('; ')}`, { blockers });
  const wasFrozen = inst.frozen;
  if (!wasFrozen) await freeze(inst, who, timeoutMs);
  log.debug({ pod: who, container, leave }, 'checkpoint: pod frozen');
  await pauseAt('kubelet-frozen');
  let snapshot: Awaited<ReturnType<PodInstance['snapshot']>>;
  try {
    // `digest=false` (the API server, which checks the trailer as the bytes arrive): no hashing pass
    // before the first byte, which for 16 MiB was ~17 ms of a move's freeze-to-Running (issue 26).
    snapshot = await inst.snapshot({ digest });
  } catch (err: unknown) {
    if (!wasFrozen && inst.frozen) await inst.thaw().catch(() => {});
    throw err;
  }
  let complete = false;
  try {
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': snapshot.byteLength,
      'x-kube32-image-sha256': snapshot.imageSha256,
      ...(snapshot.snapshotSha256 ? { 'x-kube32-snapshot-sha256': snapshot.snapshotSha256 } : {}),
      'x-kube32-pod-time-ms': String(snapshot.podTimeMs),
    });
    // The last chunk is held back until the end: the answer has a content-length, so a caller holds the
    // whole snapshot once its last byte arrives, before end(). `leave=running` thaws before that byte
    // goes out, so a caller that has the whole snapshot finds the pod serving again (its next request is
    // not answered 503; a thaw after the last write left a loaded node's pod frozen for it).
    let last: Uint8Array | undefined;
    for await (const chunk of snapshot.chunks) {
      if (res.destroyed) break;
      if (last !== undefined && !res.write(last)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
      last = chunk;
    }
    if (!res.destroyed) {
      if (leave === 'running' && inst.frozen) await inst.thaw().catch(() => {});
      if (last === undefined) res.end();
      else res.end(last);
      complete = true;
    }
  } finally {
    if (leave === 'running') {
      if (inst.frozen) await inst.thaw().catch(() => {});
    }
    log.info({ pod: who, container, leave, bytes: snapshot.byteLength, complete, user: (req as { user?: string }).user }, 'checkpoint served');
  }
}

/** Serves a thaw: 200 `{"thawed":true}`; 404 when the container is not frozen. */
export async function serveThaw(res: ServerResponse, found: FoundContainer, at: { ns: string; pod: string; container: string }): Promise<void> {
  const inst = found.runner.instance;
  if (!inst?.frozen) throw new EndpointError(404, 'NotFound', `pod "${at.ns}/${at.pod}" container "${at.container}" is not frozen`);
  await inst.thaw();
  const body = JSON.stringify({ thawed: true });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}
