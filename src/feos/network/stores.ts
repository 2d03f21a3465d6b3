/**
 * The node's security groups and name tables (the seed's "Security groups" and "Name tables"):
 * checked, kept one record a file (`<dir>/<id>.pb`, the message written whole), one change at a
 * time, and seen once kept. Deltas apply only from the version the node has.
 */
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { clone, create, fromBinary, toBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import { writeFileAtomic } from '../../lib/index.ts';
import {
  NameTableSchema,
  Protocol,
  SecurityGroupSchema,
  type NameEntry,
  type NameTable,
  type SecurityGroup,
  type UpdateNameTableRequest,
  type UpdateSecurityGroupMembersRequest,
} from '../gen/feos/network/v1/network_pb.js';
import { NetworkError } from './errors.ts';
import { canonicalAddress, formatPrefix, parsePrefix } from './ip.ts';
import { DEFAULT_GROUP, blockPrefixes, defaultGroup } from './table.ts';

const ID = /^[a-z][a-z0-9-]{0,62}$/;
const LABEL = /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/;

function invalid(message: string): never {
  throw new NetworkError('INVALID_ARGUMENT', message);
}

/** Checks an ID of a group or a table. @throws NetworkError INVALID_ARGUMENT */
export function checkRecordId(kind: string, id: string): void {
  if (!ID.test(id)) invalid(`${kind} ID "${id}": must be 1 to 63 lowercase letters, digits and '-', a letter first`);
}

/**
 * Checks a group and puts its members in canonical form.
 * @returns a checked copy
 * @throws NetworkError INVALID_ARGUMENT naming the rule and what is wrong
 */
export function checkSecurityGroup(g: SecurityGroup): SecurityGroup {
  const out = clone(SecurityGroupSchema, g);
  checkRecordId('security group', out.id);
  if (out.id === DEFAULT_GROUP) invalid(`security group "${DEFAULT_GROUP}" is built in and cannot be put`);
  for (const [dir, rules] of [['ingress', out.ingress], ['egress', out.egress]] as const) {
    rules.forEach((r, i) => {
      const where = `security group ${out.id}: ${dir}[${i}]`;
      const l4 = r.protocol === Protocol.TCP || r.protocol === Protocol.UDP;
      const icmp = r.protocol === Protocol.ICMP || r.protocol === Protocol.ICMPV6;
      if (!Object.values(Protocol).includes(r.protocol)) invalid(`${where}: unknown protocol ${r.protocol}`);
      if (r.ports.length > 0 && !l4) invalid(`${where}: ports are for TCP and UDP rules`);
      for (const p of r.ports) {
        if (p.first < 1 || p.first > 65535 || p.last > 65535 || (p.last !== 0 && p.last < p.first)) {
          invalid(`${where}: port range ${p.first}-${p.last} must lie within 1 to 65535, first to last`);
        }
      }
      if (r.icmpTypes.length > 0 && !icmp) invalid(`${where}: ICMP types are for ICMP and ICMPv6 rules`);
      for (const ty of r.icmpTypes) if (ty > 255) invalid(`${where}: ICMP type ${ty} must be 0 to 255`);
      switch (r.peer.case) {
        case 'group':
          checkRecordId(`${where}: group`, r.peer.value);
          break;
        case 'block': {
          let prefixes: ReturnType<typeof parsePrefix>[];
          try {
            const b = parsePrefix(r.peer.value.cidr);
            prefixes = r.peer.value.except.map((e) => parsePrefix(e));
            for (const e of prefixes) {
              if (e.family !== b.family || e.length < b.length || (e.address >> BigInt((b.family === 4 ? 32 : 128) - b.length)) !== b.address >> BigInt((b.family === 4 ? 32 : 128) - b.length)) {
                invalid(`${where}: exception ${formatPrefix(e)} is not inside ${formatPrefix(b)}`);
              }
            }
            blockPrefixes(r.peer.value);
            r.peer.value.cidr = formatPrefix(b);
            r.peer.value.except = prefixes.map(formatPrefix);
          } catch (err: unknown) {
            if (err instanceof NetworkError) throw err;
            invalid(`${where}: ${(err as Error).message}`);
          }
          if (r.protocol === Protocol.ICMPV6 && r.peer.value.cidr.includes('.')) invalid(`${where}: an ICMPv6 rule with an IPv4 block`);
          if (r.protocol === Protocol.ICMP && r.peer.value.cidr.includes(':')) invalid(`${where}: an ICMP rule with an IPv6 block`);
          break;
        }
        case 'internet':
          if (!r.peer.value) invalid(`${where}: internet must be true when it is the peer`);
          break;
        default:
          invalid(`${where}: a rule names its peer: a group, an address block or the internet`);
      }
    });
  }
  out.members = out.members.map((m) => {
    let p: ReturnType<typeof parsePrefix>;
    try {
      p = parsePrefix(m);
    } catch (err: unknown) {
      return invalid(`security group ${out.id}: member "${m}": ${(err as Error).message}`);
    }
    if (p.family !== 6) invalid(`security group ${out.id}: member "${m}" must be an IPv6 address or prefix`);
    return formatPrefix(p);
  });
  return out;
}

function checkEntry(table: string, e: NameEntry): NameEntry {
  if (!LABEL.test(e.name)) invalid(`name table ${table}: "${e.name}" must be one DNS label in lower case`);
  if (e.addresses.length === 0) invalid(`name table ${table}: ${e.name} has no address`);
  const addresses = e.addresses.map((a) => {
    try {
      return canonicalAddress(a);
    } catch {
      return invalid(`name table ${table}: ${e.name}: "${a}" is not an IP address`);
    }
  });
  return { ...e, addresses };
}

/**
 * Checks a table and puts its addresses in canonical form.
 * @throws NetworkError INVALID_ARGUMENT naming the name and what is wrong
 */
export function checkNameTable(t: NameTable): NameTable {
  const out = clone(NameTableSchema, t);
  checkRecordId('name table', out.id);
  const seen = new Set<string>();
  out.names = out.names.map((e) => {
    const c = checkEntry(out.id, e);
    if (seen.has(c.name)) invalid(`name table ${out.id}: ${c.name} appears twice`);
    seen.add(c.name);
    return c;
  });
  for (const inc of out.includes) {
    checkRecordId(`name table ${out.id}: include`, inc);
    if (inc === out.id) invalid(`name table ${out.id} includes itself`);
  }
  return out;
}

/** Who names a record: the pods that name it, for a refusal of its deletion. */
export type NamedBy = (id: string) => string[];

/**
 * The records of one kind in a directory, `<id>.pb` each. Reads never wait for a write; writes
 * go one at a time and are seen once kept.
 */
export class RecordStore<S extends DescMessage & { typeName: string }> {
  readonly #dir: string;
  readonly #schema: S;
  readonly #kind: string;
  readonly #records = new Map<string, MessageShape<S>>();
  #chain: Promise<unknown> = Promise.resolve();
  /** Called after a change is kept, with the record's ID and whether only its members changed. */
  onChange: (id: string, membersOnly: boolean) => void = () => {};

  constructor(dir: string, schema: S, kind: string) {
    this.#dir = dir;
    this.#schema = schema;
    this.#kind = kind;
  }

  /**
   * Loads every record; a file that is not a record of the kind is logged by the caller and skipped.
   * @returns the files that could not be read, with why
   */
  async load(): Promise<Array<{ file: string; error: string }>> {
    await mkdir(this.#dir, { recursive: true });
    const bad: Array<{ file: string; error: string }> = [];
    for (const f of await readdir(this.#dir)) {
      if (!f.endsWith('.pb')) continue;
      try {
        const rec = fromBinary(this.#schema, await readFile(join(this.#dir, f))) as MessageShape<S> & { id: string };
        if (`${rec.id}.pb` !== f) throw new Error(`holds the ID "${rec.id}"`);
        this.#records.set(rec.id, rec);
      } catch (err: unknown) {
        bad.push({ file: join(this.#dir, f), error: (err as Error).message });
      }
    }
    return bad;
  }

  /** The record, or undefined. */
  get(id: string): MessageShape<S> | undefined {
    const r = this.#records.get(id);
    return r ? clone(this.#schema, r) : undefined;
  }

  has(id: string): boolean {
    return this.#records.has(id);
  }

  /** Every record, by ID. */
  list(): MessageShape<S>[] {
    return [...this.#records.keys()].sort().map((id) => this.get(id)!);
  }

  /** The records as they are, without copies (for the compiler and the resolver, which only read). */
  view(): ReadonlyMap<string, MessageShape<S>> {
    return this.#records;
  }

  /** Runs one change after the ones before it. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn, fn);
    this.#chain = run.catch(() => {});
    return run;
  }

  /**
   * Puts a record whole, or changes one by `change(current)`, then keeps it and makes it seen.
   * @throws NetworkError from `change`, or INTERNAL when the file cannot be written (nothing changes)
   */
  put(id: string, change: (current: MessageShape<S> | undefined) => MessageShape<S>, membersOnly = false): Promise<MessageShape<S>> {
    return this.#serial(async () => {
      const cur = this.#records.get(id);
      const next = change(cur ? clone(this.#schema, cur) : undefined);
      try {
        await writeFileAtomic(join(this.#dir, `${id}.pb`), toBinary(this.#schema, next));
      } catch (err: unknown) {
        throw new NetworkError('INTERNAL', `${this.#kind} ${id}: ${(err as Error).message}`, { cause: err });
      }
      this.#records.set(id, next);
      this.onChange(id, membersOnly);
      return clone(this.#schema, next);
    });
  }

  /**
   * Deletes a record that no pod names.
   * @throws NetworkError NOT_FOUND when there is none, FAILED_PRECONDITION naming the pods that name it
   */
  delete(id: string, namedBy: NamedBy): Promise<void> {
    return this.#serial(async () => {
      if (!this.#records.has(id)) throw new NetworkError('NOT_FOUND', `${this.#kind} ${id} is not on the node`);
      const pods = namedBy(id);
      if (pods.length > 0) throw new NetworkError('FAILED_PRECONDITION', `${this.#kind} ${id} is named by pod ${pods.join(', ')}`);
      try {
        await rm(join(this.#dir, `${id}.pb`), { force: true });
      } catch (err: unknown) {
        throw new NetworkError('INTERNAL', `${this.#kind} ${id}: remove failed: ${(err as Error).message}`, { cause: err });
      }
      this.#records.delete(id);
      this.onChange(id, false);
    });
  }
}

/** The security groups: a {@link RecordStore} with the checks and the members' delta. */
export class SecurityGroupStore extends RecordStore<typeof SecurityGroupSchema> {
  constructor(dir: string) {
    super(dir, SecurityGroupSchema, 'security group');
  }

  /** Puts a group whole. @throws NetworkError INVALID_ARGUMENT from {@link checkSecurityGroup} */
  putGroup(g: SecurityGroup): Promise<SecurityGroup> {
    const checked = checkSecurityGroup(g);
    const before = this.get(checked.id);
    const membersOnly = before !== undefined && sameExceptMembers(before, checked);
    return this.put(checked.id, () => checked, membersOnly);
  }

  /**
   * Applies a delta of a group's members.
   * @throws NetworkError NOT_FOUND, FAILED_PRECONDITION when `from_version` is not the node's, INVALID_ARGUMENT on a bad member
   */
  updateMembers(req: UpdateSecurityGroupMembersRequest): Promise<SecurityGroup> {
    checkRecordId('security group', req.id);
    return this.put(
      req.id,
      (cur) => {
        if (!cur) throw new NetworkError('NOT_FOUND', `security group ${req.id} is not on the node`);
        if (cur.version !== req.fromVersion) {
          throw new NetworkError('FAILED_PRECONDITION', `security group ${req.id} is at version ${cur.version}, not ${req.fromVersion}`);
        }
        const canon = (m: string) => checkSecurityGroup(create(SecurityGroupSchema, { id: req.id, members: [m] })).members[0];
        const remove = new Set(req.removeMembers.map(canon));
        const members = cur.members.filter((m) => !remove.has(m));
        for (const m of req.addMembers.map(canon)) if (!members.includes(m)) members.push(m);
        cur.members = members;
        cur.version = req.toVersion;
        return cur;
      },
      true,
    );
  }

  /** The group, the default group included. */
  getGroup(id: string): SecurityGroup | undefined {
    return id === DEFAULT_GROUP ? defaultGroup() : this.get(id);
  }
}

function sameExceptMembers(a: SecurityGroup, b: SecurityGroup): boolean {
  const strip = (g: SecurityGroup) => toBinary(SecurityGroupSchema, create(SecurityGroupSchema, { ...g, members: [], version: 0n }));
  return Buffer.from(strip(a)).equals(Buffer.from(strip(b)));
}

/** The name tables: a {@link RecordStore} with the checks and the delta. */
export class NameTableStore extends RecordStore<typeof NameTableSchema> {
  constructor(dir: string) {
    super(dir, NameTableSchema, 'name table');
  }

  /** Puts a table whole. @throws NetworkError INVALID_ARGUMENT from {@link checkNameTable} */
  putTable(t: NameTable): Promise<NameTable> {
    const checked = checkNameTable(t);
    return this.put(checked.id, () => checked);
  }

  /**
   * Puts and removes names from the version the node has to another.
   * @throws NetworkError NOT_FOUND, FAILED_PRECONDITION when `from_version` is not the node's, INVALID_ARGUMENT on a bad name
   */
  update(req: UpdateNameTableRequest): Promise<NameTable> {
    checkRecordId('name table', req.id);
    return this.put(req.id, (cur) => {
      if (!cur) throw new NetworkError('NOT_FOUND', `name table ${req.id} is not on the node`);
      if (cur.version !== req.fromVersion) {
        throw new NetworkError('FAILED_PRECONDITION', `name table ${req.id} is at version ${cur.version}, not ${req.fromVersion}`);
      }
      const remove = new Set(req.remove);
      const put = new Map(req.put.map((e) => [e.name, e]));
      const names = cur.names.filter((e) => !remove.has(e.name)).map((e) => put.get(e.name) ?? e);
      for (const e of req.put) if (!names.some((n) => n.name === e.name)) names.push(e);
      const next = create(NameTableSchema, { id: cur.id, version: req.toVersion, names, includes: req.setIncludes ? req.includes : cur.includes });
      return checkNameTable(next);
    });
  }
}
