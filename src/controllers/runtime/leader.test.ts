import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../lib/index.ts';
import { ApiError, type RestClient, type RestRequest } from '../../api/index.ts';
import { LeaderElector } from './leader.ts';

interface Lease {
  metadata: { name: string; namespace: string; resourceVersion: string };
  spec: { holderIdentity?: string; leaseDurationSeconds?: number };
}

/**
 * One Lease behind optimistic concurrency, as the API server keeps it. `holdPuts` makes each PUT wait for
 * `releasePuts()` before it is applied (a renewal whose answer is slow).
 */
class FakeLeases {
  lease: Lease | undefined;
  #rv = 1;
  #held: (() => void)[] = [];
  holdPuts = false;

  releasePuts(): void {
    for (const go of this.#held.splice(0)) go();
  }

  get waitingPuts(): number {
    return this.#held.length;
  }

  readonly rest = {
    json: async <T>(req: RestRequest): Promise<T> => {
      if (req.method === 'GET') {
        if (!this.lease) throw new ApiError('get', 404, 'NotFound', 'not found');
        return structuredClone(this.lease) as T;
      }
      if (req.method === 'POST') {
        const body = req.body as Lease;
        if (this.lease) throw new ApiError('create', 409, 'AlreadyExists', 'exists');
        this.lease = { ...body, metadata: { ...body.metadata, resourceVersion: String(++this.#rv) } };
        return structuredClone(this.lease) as T;
      }
      if (req.method === 'PUT') {
        if (this.holdPuts) await new Promise<void>((go) => this.#held.push(go));
        const body = req.body as Lease;
        if (body.metadata.resourceVersion !== this.lease?.metadata.resourceVersion) throw new ApiError('update', 409, 'Conflict', 'the object has been modified');
        this.lease = { ...body, metadata: { ...body.metadata, resourceVersion: String(++this.#rv) } };
        return structuredClone(this.lease) as T;
      }
      throw new Error(`unexpected ${req.method}`);
    },
  };
}

const silent = { info() {}, warn() {}, error() {}, debug() {} } as never;

test('a clean stop releases the Lease even when a renewal is in flight (its write would make the release a 409)', { timeout: 5000 }, async () => {
  const leases = new FakeLeases();
  const clock = new ManualClock();
  const elector = new LeaderElector(leases.rest as unknown as RestClient, clock, silent, { identity: 'cp-a', leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 });
  await elector.run(() => assert.fail('lost the Lease'));
  assert.equal(leases.lease?.spec.holderIdentity, 'cp-a');

  // A renewal reads the Lease and sends its write, which is slow to land.
  leases.holdPuts = true;
  clock.advance(200);
  for (let i = 0; i < 20 && leases.waitingPuts === 0; i++) await Promise.resolve();
  assert.equal(leases.waitingPuts, 1, 'the renewal waits to be written');

  // The process stops now; the renewal lands after stop() has begun (after a release read the Lease, if it
  // does not wait for the renewal): the writes are applied in the order they were sent.
  let stopped = false;
  const stopping = elector.stop().then(() => { stopped = true; });
  for (let i = 0; i < 20 && leases.waitingPuts < 2; i++) await Promise.resolve();
  for (let i = 0; i < 100 && !stopped; i++) {
    leases.releasePuts();
    await new Promise((r) => setImmediate(r));
  }
  await stopping;
  assert.equal(leases.lease?.spec.holderIdentity, '', 'released: a successor takes it at once');
  assert.equal(leases.lease?.spec.leaseDurationSeconds, 1);
  assert.equal(elector.leading, false);
});

test('a stop that comes while a take is in flight releases what the take got', { timeout: 5000 }, async () => {
  const leases = new FakeLeases();
  leases.lease = { metadata: { name: 'kube32-controllers', namespace: 'kube-system', resourceVersion: '1' }, spec: { holderIdentity: '' } };
  const clock = new ManualClock();
  const elector = new LeaderElector(leases.rest as unknown as RestClient, clock, silent, { identity: 'cp-b', leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 });
  leases.holdPuts = true;
  const running = elector.run(() => {});
  for (let i = 0; i < 20 && leases.waitingPuts === 0; i++) await Promise.resolve();
  assert.equal(leases.waitingPuts, 1, 'the take waits to be written');
  const stopping = elector.stop();
  leases.holdPuts = false;
  leases.releasePuts();
  await Promise.all([running, stopping]);
  assert.equal(elector.leading, false, 'a stopped candidate does not lead');
  assert.equal(leases.lease?.spec.holderIdentity, '', 'the Lease the take got is released');
});
