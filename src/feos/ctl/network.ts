/**
 * feosctl's commands for the pods' network (docs/feos/feosctl.md, docs/feos/network.md): the node's
 * security groups (`feos.network.v1.SecurityGroupService`, seed 000 "Security groups") and name tables
 * (`feos.network.v1.NameService`, seed 000 "Name tables").
 *   feosctl security-group put -f FILE | get ID | list | delete ID | members ID --from V --to V [--add A]... [--remove A]...
 *   feosctl name-table put -f FILE | get ID | list | delete ID
 * A feosd without `--pod-prefix` serves neither: feosctl says so (UNIMPLEMENTED) and exits 1.
 */
import { readFileSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import { type DescMessage, fromJson, type JsonValue, type MessageShape, toJson } from '@bufbuild/protobuf';
import YAML from 'yaml';
import {
  NameService,
  type NameTable,
  NameTableSchema,
  type SecurityGroup,
  type SecurityGroupRule,
  SecurityGroupSchema,
  SecurityGroupService,
} from '../gen/feos/network/v1/network_pb.js';
import { makeClient } from '../api/index.ts';
import type { CtlContext } from './context.ts';

import type { Output } from './output.ts';

/**
 * A message from a `-f` file (YAML or JSON, protobuf JSON names), as `pod create -f` reads a PodSpec.
 * @throws InvalidArgumentError naming the file and what is wrong (unreadable, not YAML, not a mapping,
 *   a field or value protobuf JSON cannot take)
 */
export function messageFromFile<Desc extends DescMessage>(schema: Desc, file: string, what: string, fields: string): MessageShape<Desc> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err: unknown) {
    throw new InvalidArgumentError(`-f ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(`${file}: not YAML or JSON: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
  }
  if (doc === null || doc === undefined || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new InvalidArgumentError(`${file}: want a ${what}, a mapping with ${fields}`);
  }
  try {
    return fromJson(schema, doc as JsonValue);
  } catch (err: unknown) {
    const msg = (err instanceof Error ? err.message : String(err)).replace(/^cannot decode message [\w.]+ from JSON: /, '');
    throw new InvalidArgumentError(`${file}: not a ${what}: ${msg} (fields: ${fields}; protobuf JSON names)`);
  }
}

/** A rule in one line: `tcp 80,443 from group web`, `any to internet`. */
export function ruleText(r: SecurityGroupRule, dir: 'from' | 'to'): string {
  const proto = ['any', 'tcp', 'udp', 'icmp', 'icmpv6'][r.protocol] ?? String(r.protocol);
  const ports = r.ports.map((p) => (p.first === p.last || p.last === 0 ? String(p.first) : `${p.first}-${p.last}`)).join(',');
  const types = r.icmpTypes.length > 0 ? `type ${r.icmpTypes.join(',')}` : '';
  const peer =
    r.peer.case === 'group'
      ? `group ${r.peer.value}`
      : r.peer.case === 'block'
        ? `${r.peer.value.cidr}${r.peer.value.except.length > 0 ? ` except ${r.peer.value.except.join(',')}` : ''}`
        : r.peer.case === 'internet'
          ? 'internet'
          : 'nothing';
  return [proto, ports, types, dir, peer].filter(Boolean).join(' ');
}

function print<T>(items: T[], out: Output, single: boolean, key: string, json: (x: T) => JsonValue, rows: () => string[][], ctx: CtlContext): void {
  if (out === 'json') process.stdout.write(`${JSON.stringify(single ? json(items[0]) : { [key]: items.map(json) }, null, 2)}\n`);
  else if (out === 'yaml') process.stdout.write(YAML.stringify(single ? json(items[0]) : { [key]: items.map(json) }));
  else process.stdout.write(ctx.table(rows()));
}

function printGroups(gs: SecurityGroup[], out: Output, single: boolean, ctx: CtlContext): void {
  print(gs, out, single, 'groups', (g) => toJson(SecurityGroupSchema, g) as JsonValue, () => {
    const rows = [['ID', 'VERSION', 'INGRESS', 'EGRESS', 'MEMBERS']];
    for (const g of gs) {
      rows.push([
        g.id,
        String(g.version),
        g.ingress.map((r) => ruleText(r, 'from')).join('; ') || '-',
        g.egress.map((r) => ruleText(r, 'to')).join('; ') || '-',
        g.members.join(',') || '-',
      ]);
    }
    return rows;
  }, ctx);
}

function printTables(ts: NameTable[], out: Output, single: boolean, ctx: CtlContext): void {
  print(ts, out, single, 'tables', (t) => toJson(NameTableSchema, t) as JsonValue, () => {
    const rows = [['ID', 'VERSION', 'NAMES', 'INCLUDES']];
    for (const t of ts) rows.push([t.id, String(t.version), t.names.map((n) => `${n.name}=${n.addresses.join(',')}`).join(' ') || '-', t.includes.join(',') || '-']);
    return rows;
  }, ctx);
}

/**
 * A call to a network service; feosd without `--pod-prefix` does not serve them (UNIMPLEMENTED), which
 * becomes a message that says so.
 */
export function networkCall<T>(ctx: CtlContext, fn: () => Promise<T>): Promise<T> {
  return ctx.call(async () => {
    try {
      return await fn();
    } catch (err: unknown) {
      const e = err as { code?: number; details?: string };
      if (e.code === 12) e.details = 'feosd serves no network: start it with --pod-prefix (docs/feos/network.md)';
      throw err;
    }
  });
}

/** A version flag's value: a whole number (uint64). */
function version(flag: string) {
  return (v: string): bigint => {
    if (!/^\d{1,20}$/.test(v.trim()) || BigInt(v) > 0xffffffffffffffffn) throw new InvalidArgumentError(`${flag} ${JSON.stringify(v)}: want a whole number (a version)`);
    return BigInt(v);
  };
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** Adds `security-group` and `name-table` to feosctl's program. */
export function addNetworkCommands(program: Command, ctx: CtlContext): void {
  const groups = () => makeClient(SecurityGroupService, ctx.target());
  const tables = () => makeClient(NameService, ctx.target());
  const GROUP_FIELDS = 'id, version, ingress, egress, members; a rule: protocol, ports, icmpTypes, and one of group, block, internet';
  const TABLE_FIELDS = 'id, version, names (name, addresses), includes';

  const sg = program.command('security-group').alias('sg').description("the node's security groups (with --pod-prefix)");
  sg.command('put')
    .description('puts a group whole (a new one, or a new version of one)')
    .requiredOption('-f, --filename <file>', 'the SecurityGroup as YAML or JSON (protobuf JSON names)')
    .addOption(ctx.output())
    .action(async (o: { filename: string; output: Output }) => {
      const group = messageFromFile(SecurityGroupSchema, o.filename, 'SecurityGroup', GROUP_FIELDS);
      const c = groups();
      const res = await networkCall(ctx, () => c.putSecurityGroup({ group }, { deadline: ctx.deadline() }));
      printGroups([res.group!], o.output, true, ctx);
      c.grpc.close();
    });
  sg.command('get <id>')
    .description('shows a group')
    .addOption(ctx.output())
    .action(async (id: string, o: { output: Output }) => {
      const c = groups();
      const res = await networkCall(ctx, () => c.getSecurityGroup({ id }, { deadline: ctx.deadline() }));
      printGroups([res.group!], o.output, true, ctx);
      c.grpc.close();
    });
  sg.command('list')
    .description("lists the node's groups (the built-in default first)")
    .addOption(ctx.output())
    .action(async (o: { output: Output }) => {
      const c = groups();
      const res = await networkCall(ctx, () => c.listSecurityGroups({}, { deadline: ctx.deadline() }));
      printGroups(res.groups, o.output, false, ctx);
      c.grpc.close();
    });
  sg.command('members <id>')
    .description("changes a group's members from the version the node has to another")
    .requiredOption('--from <version>', 'the version the node has', version('--from'))
    .requiredOption('--to <version>', 'the version after the change', version('--to'))
    .option('--add <address>', 'an IPv6 address or prefix to add (repeatable)', collect)
    .option('--remove <address>', 'an IPv6 address or prefix to remove (repeatable)', collect)
    .addOption(ctx.output())
    .action(async (id: string, o: { from: bigint; to: bigint; add?: string[]; remove?: string[]; output: Output }) => {
      const c = groups();
      const res = await networkCall(ctx, () =>
        c.updateSecurityGroupMembers({ id, fromVersion: o.from, toVersion: o.to, addMembers: o.add ?? [], removeMembers: o.remove ?? [] }, { deadline: ctx.deadline() }),
      );
      printGroups([res.group!], o.output, true, ctx);
      c.grpc.close();
    });
  sg.command('delete <id>')
    .description('removes a group that no pod names')
    .action(async (id: string) => {
      const c = groups();
      await networkCall(ctx, () => c.deleteSecurityGroup({ id }, { deadline: ctx.deadline() }));
      process.stdout.write(`security group ${id} deleted\n`);
      c.grpc.close();
    });

  const nt = program.command('name-table').description("the node's name tables, which the pods' resolver answers from (with --pod-prefix)");
  nt.command('put')
    .description('puts a table whole')
    .requiredOption('-f, --filename <file>', 'the NameTable as YAML or JSON (protobuf JSON names)')
    .addOption(ctx.output())
    .action(async (o: { filename: string; output: Output }) => {
      const table = messageFromFile(NameTableSchema, o.filename, 'NameTable', TABLE_FIELDS);
      const c = tables();
      const res = await networkCall(ctx, () => c.putNameTable({ table }, { deadline: ctx.deadline() }));
      printTables([res.table!], o.output, true, ctx);
      c.grpc.close();
    });
  nt.command('get <id>')
    .description('shows a table')
    .addOption(ctx.output())
    .action(async (id: string, o: { output: Output }) => {
      const c = tables();
      const res = await networkCall(ctx, () => c.getNameTable({ id }, { deadline: ctx.deadline() }));
      printTables([res.table!], o.output, true, ctx);
      c.grpc.close();
    });
  nt.command('list')
    .description("lists the node's tables")
    .addOption(ctx.output())
    .action(async (o: { output: Output }) => {
      const c = tables();
      const res = await networkCall(ctx, () => c.listNameTables({}, { deadline: ctx.deadline() }));
      if (o.output === 'table' && res.tables.length === 0) process.stdout.write('No name tables.\n');
      else printTables(res.tables, o.output, false, ctx);
      c.grpc.close();
    });
  nt.command('delete <id>')
    .description('removes a table that no pod names')
    .action(async (id: string) => {
      const c = tables();
      await networkCall(ctx, () => c.deleteNameTable({ id }, { deadline: ctx.deadline() }));
      process.stdout.write(`name table ${id} deleted\n`);
      c.grpc.close();
    });
}
