/**
 * Test doubles for controller unit tests (STYLE.md 1 and 5.15): a cache preloaded with objects, an API that
 * records every call in order (and can be told to fail one), a manual clock, and a context made of them.
 */
import { Readable } from 'node:stream';
import type { KubernetesObject, V1Node, V1Pod } from '@kubernetes/client-node';
import { ManualClock } from '../../lib/index.ts';
import type { ClusterApi, SnapshotAnswer } from '../runtime/api.ts';
import type { Caches, Lister } from '../runtime/cache.ts';
import type { ControllerLog } from '../runtime/controller.ts';
import { type ControllerContext, DEFAULT_TIMINGS, newSharedState, type ControllerTimings } from '../runtime/context.ts';
import { ANNOTATIONS, ApiError } from '../../api/index.ts';

/** A cache over a plain array; `set` and `remove` change it between reconciles. */
export class FakeLister<T extends KubernetesObject> implements Lister<T> {
  items: T[] = [];
  get(name: string, namespace?: string): T | undefined {
    return this.items.find((o) => o.metadata?.name === name && (o.metadata?.namespace ?? '') === (namespace ?? ''));
  }
  list(namespace?: string): readonly T[] {
    return namespace ? this.items.filter((o) => o.metadata?.namespace === namespace) : this.items;
  }
  set(obj: T): void {
    this.remove(obj.metadata?.name ?? '', obj.metadata?.namespace);
    this.items.push(obj);
  }
  remove(name: string, namespace?: string): void {
    this.items = this.items.filter((o) => !(o.metadata?.name === name && (o.metadata?.namespace ?? '') === (namespace ?? '')));
  }
}

export type FakeCaches = { [K in keyof Caches]: FakeLister<ReturnType<Caches[K]['list']>[number]> };

export function fakeCaches(): FakeCaches {
  return {
    pods: new FakeLister(),
    nodes: new FakeLister(),
    leases: new FakeLister(),
    checkpoints: new FakeLister(),
    replicaSets: new FakeLister(),
    deployments: new FakeLister(),
    daemonSets: new FakeLister(),
    statefulSets: new FakeLister(),
    controllerRevisions: new FakeLister(),
    resourceQuotas: new FakeLister(),
    services: new FakeLister(),
    endpoints: new FakeLister(),
    endpointSlices: new FakeLister(),
    modules: new FakeLister(),
    podDisruptionBudgets: new FakeLister(),
    namespaces: new FakeLister(),
    serviceAccounts: new FakeLister(),
    horizontalPodAutoscalers: new FakeLister(),
  };
}

/** One recorded API call: the method's name and its arguments (streams replaced by their byte length). */
export interface ApiCall {
  op: keyof ClusterApi;
  args: unknown[];
}

/** An API that records calls. `failures` makes the next call of a method throw; `snapshot` is what the kubelet answers. */
export class FakeApi {
  readonly calls: ApiCall[] = [];
  readonly failures = new Map<keyof ClusterApi, ApiError>();
  snapshot: () => SnapshotAnswer = () => ({
    kind: 'snapshot',
    body: Readable.from([Buffer.from('K32S-fake-snapshot')]),
    sizeBytes: 18,
    imageSha256: 'a'.repeat(64),
    snapshotSha256: 'b'.repeat(64),
    podTimeMs: 1234,
  });
  /**
   * The `resourceVersion` of each Checkpoint and pod written through this API (`checkpoints/ns/name`,
   * `pods/ns/name`), as a server keeps it: a write whose `metadata.resourceVersion` differs gets 409
   * Conflict, as on a real API server. Objects not written yet accept any version.
   */
  readonly resourceVersions = new Map<string, string>();
  #uid = 0;
  #rv = 100;

  /** The calls without events (most tests assert those apart). */
  get writes(): ApiCall[] {
    return this.calls.filter((c) => c.op !== 'createEvent' && c.op !== 'patchEvent');
  }

  /** The recorded events (created, not aggregated repeats), in order. */
  get events(): Array<{ reason: string; type: string; message: string; involvedObject: { kind?: string; name?: string; uid?: string }; firstTimestamp: string }> {
    return this.calls.filter((c) => c.op === 'createEvent').map((c) => c.args[1] as never);
  }

  /** A versioned write of `kind/ns/name`: 409 on a stale `resourceVersion`, else the new version. */
  #versioned(kind: string, ns: unknown, name: unknown, body: unknown): string {
    const key = `${kind}/${String(ns)}/${String(name)}`;
    const want = (body as { metadata?: { resourceVersion?: string } } | undefined)?.metadata?.resourceVersion;
    const have = this.resourceVersions.get(key);
    if (want && have !== undefined && want !== have) {
      throw new ApiError(`patch ${key}`, 409, 'Conflict', 'the object has been modified; please apply your changes to the latest version and try again');
    }
    const next = String(++this.#rv);
    this.resourceVersions.set(key, next);
    return next;
  }

  /** The reasons of the recorded events, in order. */
  get eventReasons(): string[] {
    return this.calls.filter((c) => c.op === 'createEvent').map((c) => (c.args[1] as { reason: string }).reason);
  }

  /** The events' messages by reason. */
  eventMessage(reason: string): string | undefined {
    const c = this.calls.find((x) => x.op === 'createEvent' && (x.args[1] as { reason: string }).reason === reason);
    return (c?.args[1] as { message?: string } | undefined)?.message;
  }

  /** A `ClusterApi` view of this recorder. */
  asApi(): ClusterApi {
    const record = (op: keyof ClusterApi) => async (...args: unknown[]): Promise<unknown> => {
      this.calls.push({ op, args: args.map((a) => (a instanceof Readable ? '<stream>' : structuredClone(a))) });
      const f = this.failures.get(op);
      if (f) {
        this.failures.delete(op);
        throw f;
      }
      switch (op) {
        case 'replacePod': {
          const pod = structuredClone(args[2]) as V1Pod;
          pod.metadata = { ...pod.metadata, uid: `new-uid-${++this.#uid}` };
          return pod;
        }
        case 'createPod': {
          const pod = structuredClone(args[1]) as V1Pod;
          pod.metadata = { ...pod.metadata, uid: `uid-${++this.#uid}` };
          return pod;
        }
        case 'takeSnapshot':
          return this.snapshot();
        case 'captureCheckpointData': {
          const answer = this.snapshot();
          if (answer.kind === 'refused') return answer;
          answer.body.destroy();
          const status = { sizeBytes: answer.sizeBytes, snapshotSha256: answer.snapshotSha256, imageSha256: answer.imageSha256, podTimeMs: answer.podTimeMs };
          return { kind: 'stored', checkpoint: { metadata: { resourceVersion: this.#versioned('checkpoints', args[0], args[1], undefined) }, status } };
        }
        case 'putCheckpointData': {
          const body = args[2] as Readable;
          for await (const _ of body) {
            // drain
          }
          return { metadata: { resourceVersion: this.#versioned('checkpoints', args[0], args[1], undefined) } };
        }
        case 'patchCheckpointStatus':
        case 'patchCheckpoint':
        case 'patchPod': {
          const patch = structuredClone(args[2]) as { metadata?: Record<string, unknown> };
          const rv = this.#versioned(op === 'patchPod' ? 'pods' : 'checkpoints', args[0], args[1], patch);
          return { ...patch, metadata: { ...(patch.metadata ?? {}), resourceVersion: rv } };
        }
        case 'thaw':
          return true;
        default:
          return args.at(-1) ?? {};
      }
    };
    return new Proxy({} as ClusterApi, { get: (_t, op) => record(op as keyof ClusterApi) });
  }
}

/** A logger that keeps nothing (set `KUBE32_TEST_LOG=1` to see lines). */
export const quietLog: ControllerLog = {
  debug: () => {},
  info: (o, m) => (process.env.KUBE32_TEST_LOG ? console.log('info', m, o) : undefined),
  warn: (o, m) => (process.env.KUBE32_TEST_LOG ? console.log('warn', m, o) : undefined),
  error: (o, m) => (process.env.KUBE32_TEST_LOG ? console.log('error', m, o) : undefined),
};

/** A context for one test: fake caches, the recording API, a manual clock. */
export function fakeContext(timings: Partial<ControllerTimings> = {}) {
  const clock = new ManualClock(1_700_000_000_000);
  const cache = fakeCaches();
  const fake = new FakeApi();
  const ctx: ControllerContext = {
    api: fake.asApi(),
    cache,
    clock,
    log: quietLog,
    timings: { ...DEFAULT_TIMINGS, ...timings },
    state: newSharedState(clock),
  };
  return { ctx, cache, fake, clock };
}

/** A Ready node with `memory` allocatable (a quantity) and optional labels, annotations and taints. */
export function node(name: string, opts: Partial<{ memory: string; mops: number; labels: Record<string, string>; unschedulable: boolean; ready: string; taints: V1Node['spec'] extends infer S ? S extends { taints?: infer T } ? T : never : never }> = {}): V1Node {
  return {
    metadata: {
      name,
      labels: { 'kubernetes.io/hostname': name, ...(opts.labels ?? {}) },
      annotations: opts.mops !== undefined ? { [ANNOTATIONS.interpMops]: String(opts.mops) } : {},
    },
    spec: { unschedulable: opts.unschedulable, taints: opts.taints },
    status: {
      allocatable: { memory: opts.memory ?? '16Mi', pods: '110' },
      conditions: [{ type: 'Ready', status: opts.ready ?? 'True' }],
    },
  };
}

/** A pod with one container `app`, optionally bound and running. */
export function pod(name: string, opts: Partial<{ namespace: string; nodeName: string; running: boolean; memory: string; annotations: Record<string, string>; labels: Record<string, string>; uid: string; ports: number[]; owner: { kind: string; name: string; uid: string } }> = {}): V1Pod {
  return {
    metadata: {
      name,
      namespace: opts.namespace ?? 'default',
      uid: opts.uid ?? `uid-${name}`,
      labels: opts.labels ?? {},
      annotations: opts.annotations ?? {},
      ownerReferences: opts.owner ? [{ apiVersion: 'apps/v1', controller: true, blockOwnerDeletion: true, ...opts.owner }] : undefined,
    },
    spec: {
      nodeName: opts.nodeName,
      containers: [
        {
          name: 'app',
          image: 'wasm://counter',
          resources: opts.memory ? { requests: { memory: opts.memory } } : undefined,
          ports: opts.ports?.map((p) => ({ containerPort: p })),
        },
      ],
    },
    status: opts.running
      ? {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'True' }],
          containerStatuses: [{ name: 'app', ready: true, restartCount: 0, image: 'wasm://counter', imageID: '', state: { running: {} } }],
        }
      : { phase: 'Pending' },
  };
}
