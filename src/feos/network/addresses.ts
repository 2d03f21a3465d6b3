/**
 * The pods' addresses (the seed's "Addresses"): an IPv6 address of the pod prefix from a counter
 * that never goes back, and an IPv4 /32 of the range, the lowest never handed out first, then the
 * one free the longest. Both files are written whole before an address is handed out.
 *
 * - `<podsDir>/next-ipv6-address`: the next IPv6 address, as text.
 * - `<podsDir>/ipv4-addresses`: a feos.network.v1.Ipv4AddressPool (the lowest address never
 *   handed out, and the addresses freed since in the order they were freed, with when).
 */
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { writeFileAtomic } from '../../lib/index.ts';
import { Ipv4AddressPoolSchema } from '../gen/feos/network/v1/network_pb.js';
import { NetworkError } from './errors.ts';
import { formatAddress, formatPrefix, parseAddress, prefixHolds, prefixLast, type Prefix } from './ip.ts';

/** A pod's addresses on the node; either may be missing. */
export interface PodAddresses {
  /** Canonical IPv6 text, of the pod prefix. */
  ipv6?: string;
  /** Canonical IPv4 text, of the pods' IPv4 range. */
  ipv4?: string;
}

/** How an allocator starts. */
export interface AddressAllocatorOptions {
  /** Where the two files live (feosd: /var/lib/feos/pods); made when missing. */
  podsDir: string;
  /** The pod prefix; without, no IPv6 address is handed out. */
  podPrefix?: Prefix;
  podIpv4Range: Prefix;
  /** The kept pods' addresses, by pod ID (from their records): the start-time reconciliation. */
  keptPods?: Iterable<[string, PodAddresses]>;
  /** The clock, ms since the epoch. @default Date.now */
  now?: () => number;
}

interface FreeEntry {
  value: bigint;
  freedAtMs: number;
}

/**
 * Hands out and frees the pods' addresses, one call at a time. Open it with {@link AddressAllocator.open}.
 * @example
 * const a = await AddressAllocator.open({ podsDir, podPrefix, podIpv4Range, keptPods });
 * const { ipv6, ipv4 } = await a.allocate('abcdefghjkm'); // kept on disk before it returns
 * await a.release('abcdefghjkm');                         // the IPv4 address is free again
 */
export class AddressAllocator {
  readonly #opts: Required<Omit<AddressAllocatorOptions, 'podPrefix' | 'keptPods'>> & { podPrefix?: Prefix };
  /** The offset in the pod prefix of the next IPv6 address. */
  #nextV6 = 2n;
  /** The offset in the range of the lowest IPv4 address never handed out; past the last when none is left. */
  #nextV4 = 1n;
  #free: FreeEntry[] = [];
  readonly #pods = new Map<string, PodAddresses>();
  readonly #heldV4 = new Map<bigint, string>();
  #chain: Promise<unknown> = Promise.resolve();

  private constructor(opts: AddressAllocatorOptions) {
    this.#opts = { podsDir: opts.podsDir, podPrefix: opts.podPrefix, podIpv4Range: opts.podIpv4Range, now: opts.now ?? Date.now };
  }

  /**
   * Reads the files and reconciles them with the kept pods: the IPv6 counter goes past every
   * kept pod's address, an IPv4 address that was handed out, that no kept pod holds and that is
   * not recorded as free counts as free from now on, and one a kept pod holds is not free.
   * @throws NetworkError INTERNAL when a file cannot be read, parsed or written
   */
  static async open(opts: AddressAllocatorOptions): Promise<AddressAllocator> {
    const a = new AddressAllocator(opts);
    await mkdir(opts.podsDir, { recursive: true });
    await a.#load(opts.keptPods ?? []);
    return a;
  }

  get #v6Path(): string {
    return join(this.#opts.podsDir, 'next-ipv6-address');
  }

  get #v4Path(): string {
    return join(this.#opts.podsDir, 'ipv4-addresses');
  }

  get #v4Last(): bigint {
    // The range's last address is left out, and so is its first.
    return prefixLast(this.#opts.podIpv4Range) - this.#opts.podIpv4Range.address - 1n;
  }

  async #load(kept: Iterable<[string, PodAddresses]>): Promise<void> {
    const { podPrefix, podIpv4Range } = this.#opts;
    let v6Dirty = false;
    let v4Dirty = false;
    if (podPrefix) {
      const text = await readText(this.#v6Path);
      if (text !== undefined) {
        const a = safeParse(text.trim());
        if (a && prefixHolds(podPrefix, 6, a.value)) this.#nextV6 = a.value - podPrefix.address;
        else v6Dirty = true;
      } else v6Dirty = true;
    }
    const buf = await readBytes(this.#v4Path);
    if (buf) {
      let pool: ReturnType<typeof fromBinary<typeof Ipv4AddressPoolSchema>>;
      try {
        pool = fromBinary(Ipv4AddressPoolSchema, buf);
      } catch (err: unknown) {
        throw new NetworkError('INTERNAL', `${this.#v4Path}: not an Ipv4AddressPool record`, { cause: err });
      }
      const next = pool.next === '' ? undefined : safeParse(pool.next);
      this.#nextV4 = next && prefixHolds(podIpv4Range, 4, next.value) ? next.value - podIpv4Range.address : this.#v4Last + 1n;
      if (pool.next !== '' && !(next && prefixHolds(podIpv4Range, 4, next.value))) {
        // Another range than the file's: start it afresh.
        this.#nextV4 = 1n;
        v4Dirty = true;
      } else {
        for (const f of pool.free) {
          const a = safeParse(f.address);
          if (a && prefixHolds(podIpv4Range, 4, a.value)) this.#free.push({ value: a.value - podIpv4Range.address, freedAtMs: Number(f.freedAtMs) });
          else v4Dirty = true;
        }
      }
    } else v4Dirty = true;
    for (const [podId, addrs] of kept) {
      const mine: PodAddresses = {};
      const v6 = addrs.ipv6 ? safeParse(addrs.ipv6) : undefined;
      if (podPrefix && v6 && prefixHolds(podPrefix, 6, v6.value)) {
        mine.ipv6 = formatAddress(6, v6.value);
        const off = v6.value - podPrefix.address;
        if (off >= this.#nextV6) {
          this.#nextV6 = off + 1n;
          v6Dirty = true;
        }
      }
      const v4 = addrs.ipv4 ? safeParse(addrs.ipv4) : undefined;
      if (v4 && prefixHolds(podIpv4Range, 4, v4.value)) {
        const off = v4.value - podIpv4Range.address;
        if (off >= 1n && off <= this.#v4Last && !this.#heldV4.has(off)) {
          mine.ipv4 = formatAddress(4, v4.value);
          this.#heldV4.set(off, podId);
          const i = this.#free.findIndex((f) => f.value === off);
          if (i >= 0) {
            this.#free.splice(i, 1);
            v4Dirty = true;
          }
        }
      }
      this.#pods.set(podId, mine);
    }
    // Handed out, held by no kept pod, not recorded as free: free from now on.
    const freeSet = new Set(this.#free.map((f) => f.value));
    const now = this.#opts.now();
    const handedOutEnd = this.#nextV4 > this.#v4Last ? this.#v4Last + 1n : this.#nextV4;
    for (let off = 1n; off < handedOutEnd; off++) {
      if (!this.#heldV4.has(off) && !freeSet.has(off)) {
        this.#free.push({ value: off, freedAtMs: now });
        v4Dirty = true;
      }
    }
    if (v6Dirty && podPrefix) await this.#writeV6();
    if (v4Dirty) await this.#writeV4();
  }

  /** Runs `fn` after every call before it: the allocator's one-at-a-time rule. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn, fn);
    this.#chain = run.catch(() => {});
    return run;
  }

  async #writeV6(): Promise<void> {
    const p = this.#opts.podPrefix!;
    await writeFileAtomic(this.#v6Path, `${formatAddress(6, p.address + this.#nextV6)}\n`);
  }

  async #writeV4(): Promise<void> {
    const r = this.#opts.podIpv4Range;
    const pool = create(Ipv4AddressPoolSchema, {
      version: 1,
      next: this.#nextV4 <= this.#v4Last ? formatAddress(4, r.address + this.#nextV4) : '',
      free: this.#free.map((f) => ({ address: formatAddress(4, r.address + f.value), freedAtMs: BigInt(f.freedAtMs) })),
    });
    await writeFileAtomic(this.#v4Path, toBinary(Ipv4AddressPoolSchema, pool));
  }

  /**
   * Gives the pod what it lacks: an IPv6 address of the prefix (when the node has one) and an
   * IPv4 address of the range, each kept on disk before it is returned. A pod that has both gets
   * them again. `existing` is the pod's record's addresses, taken when they are of this network.
   * @returns the pod's addresses
   * @throws NetworkError RESOURCE_EXHAUSTED when the prefix or the range has no address left,
   *   INTERNAL when a file cannot be written (nothing is handed out then)
   */
  allocate(podId: string, existing: PodAddresses = {}): Promise<PodAddresses> {
    return this.#serial(async () => {
      const { podPrefix, podIpv4Range } = this.#opts;
      const cur: PodAddresses = { ...(this.#pods.get(podId) ?? {}) };
      if (!cur.ipv6 && existing.ipv6 && podPrefix) {
        const a = safeParse(existing.ipv6);
        if (a && prefixHolds(podPrefix, 6, a.value)) cur.ipv6 = formatAddress(6, a.value);
      }
      if (!cur.ipv4 && existing.ipv4) {
        const a = safeParse(existing.ipv4);
        const off = a ? a.value - podIpv4Range.address : -1n;
        if (a && prefixHolds(podIpv4Range, 4, a.value) && off >= 1n && off <= this.#v4Last) {
          const holder = this.#heldV4.get(off);
          if (holder === undefined || holder === podId) {
            cur.ipv4 = formatAddress(4, a.value);
            this.#heldV4.set(off, podId);
            this.#free = this.#free.filter((f) => f.value !== off);
          }
        }
      }
      if (!cur.ipv6 && podPrefix) {
        const off = this.#nextV6;
        if (podPrefix.address + off > prefixLast(podPrefix)) {
          throw new NetworkError('RESOURCE_EXHAUSTED', `the pod prefix ${formatPrefix(podPrefix)} has no IPv6 address left`);
        }
        this.#nextV6 = off + 1n;
        try {
          await this.#writeV6();
        } catch (err: unknown) {
          this.#nextV6 = off;
          throw new NetworkError('INTERNAL', `the IPv6 counter: ${(err as Error).message}`, { cause: err });
        }
        cur.ipv6 = formatAddress(6, podPrefix.address + off);
      }
      if (!cur.ipv4) {
        const savedNext = this.#nextV4;
        const savedFree = this.#free;
        let off: bigint | undefined;
        while (this.#nextV4 <= this.#v4Last) {
          const o = this.#nextV4++;
          if (!this.#heldV4.has(o)) {
            off = o;
            break;
          }
        }
        if (off === undefined) {
          const f = this.#free[0];
          if (!f) {
            throw new NetworkError('RESOURCE_EXHAUSTED', `the pods' IPv4 range ${formatPrefix(podIpv4Range)} has no address left`);
          }
          this.#free = this.#free.slice(1);
          off = f.value;
        }
        try {
          await this.#writeV4();
        } catch (err: unknown) {
          this.#nextV4 = savedNext;
          this.#free = savedFree;
          throw new NetworkError('INTERNAL', `the IPv4 addresses: ${(err as Error).message}`, { cause: err });
        }
        this.#heldV4.set(off, podId);
        cur.ipv4 = formatAddress(4, podIpv4Range.address + off);
      }
      this.#pods.set(podId, cur);
      return { ...cur };
    });
  }

  /**
   * Frees the pod's IPv4 address (last in the free list, with now as when) and forgets the pod;
   * its IPv6 address is never handed out again. A pod the allocator does not know is nothing to do.
   * @throws NetworkError INTERNAL when the file cannot be written (the address stays held)
   */
  release(podId: string): Promise<void> {
    return this.#serial(async () => {
      const cur = this.#pods.get(podId);
      if (!cur) return;
      if (cur.ipv4) {
        const off = parseAddress(cur.ipv4).value - this.#opts.podIpv4Range.address;
        if (this.#heldV4.get(off) === podId) {
          const saved = this.#free;
          this.#free = [...this.#free, { value: off, freedAtMs: this.#opts.now() }];
          try {
            await this.#writeV4();
          } catch (err: unknown) {
            this.#free = saved;
            throw new NetworkError('INTERNAL', `the IPv4 addresses: ${(err as Error).message}`, { cause: err });
          }
          this.#heldV4.delete(off);
        }
      }
      this.#pods.delete(podId);
    });
  }

  /** The pod's addresses, when the allocator knows it. */
  get(podId: string): PodAddresses | undefined {
    const p = this.#pods.get(podId);
    return p ? { ...p } : undefined;
  }

  /** The pod holding an address (IPv4 or IPv6, any text form), if any. */
  holder(address: string): string | undefined {
    const a = safeParse(address);
    if (!a) return undefined;
    const text = formatAddress(a.family, a.value);
    for (const [id, p] of this.#pods) if (p.ipv4 === text || p.ipv6 === text) return id;
    return undefined;
  }

  /** Every pod's addresses. */
  entries(): Array<[string, PodAddresses]> {
    return [...this.#pods].map(([id, p]) => [id, { ...p }]);
  }
}

function safeParse(text: string): ReturnType<typeof parseAddress> | undefined {
  try {
    return parseAddress(text);
  } catch {
    return undefined;
  }
}

async function readBytes(path: string): Promise<Uint8Array | undefined> {
  try {
    return await readFile(path);
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new NetworkError('INTERNAL', `${path}: read failed: ${(err as Error).message}`, { cause: err });
  }
}

async function readText(path: string): Promise<string | undefined> {
  const b = await readBytes(path);
  return b ? Buffer.from(b).toString('utf8') : undefined;
}
