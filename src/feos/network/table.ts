/**
 * The nftables table `inet feos` (the seed's "The table"), compiled from the pods, their
 * security groups and the node's addresses into nft's JSON, and written as one transaction.
 * Pure: {@link compileTable} computes, {@link tableUpdate} chooses between a replacement of the
 * whole table and a batch of set-element changes when only set members differ.
 */
import { createHash } from 'node:crypto';
import type { SecurityGroup, SecurityGroupRule } from '../gen/feos/network/v1/network_pb.js';
import { Protocol } from '../gen/feos/network/v1/network_pb.js';
import { familyBits, formatAddress, formatPrefix, normalizePrefixes, parsePrefix, subtractPrefixes, type Family, type Prefix } from './ip.ts';
import { METADATA_ADDRESS } from './options.ts';
import { TAP_PREFIX } from './pod-link.ts';
import type { NftCommand } from './system.ts';

/** The table's family and name. */
export const TABLE = { family: 'inet', name: 'feos' } as const;
/**
 * The nflog group of drops (reasons "spoofed", "deny", "no-rule"). Each logging rule also has a
 * counter: the drops logged, which `nft list` shows.
 */
export const NFLOG_DROPS = 2;
/** The nflog group of the copies of the first packets of the TCP connections pods open. */
export const NFLOG_COPIES = 3;
/** Drops logged at most this often, per pod and reason, per second. */
export const LOG_RATE_PER_SECOND = 10;
/** The built-in group of a pod that names none: out to the internet, nothing in. */
export const DEFAULT_GROUP = 'default';

/** IPv4 addresses that are not global (RFC 6890): the internet is everything else. */
const NOT_INTERNET4 = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24',
  '192.0.2.0/24', '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
].map((p) => parsePrefix(p));
/** The IPv6 internet: global unicast, 2000::/3, without documentation's 2001:db8::/32. */
const INTERNET6 = subtractPrefixes(parsePrefix('2000::/3'), [parsePrefix('2001:db8::/32')]);
const INTERNET4 = subtractPrefixes(parsePrefix('0.0.0.0/0'), NOT_INTERNET4);

/** What denies a pod a destination whatever its groups: besides the options' and the node's own. */
export const ALWAYS_DENIED = ['169.254.0.0/16', 'fe80::/10', '127.0.0.0/8', '::1/128', '224.0.0.0/4', 'ff00::/8', '0.0.0.0/32', '::/128'].map(
  (p) => parsePrefix(p),
);

/** A pod in the table. */
export interface TablePod {
  /** Its TAP device, `pod-<ID>`. */
  tap: string;
  /** Its IPv6 address: a member of every group it names. */
  ipv6?: string;
  /** Its groups, present on the node; none = the default group. */
  groups: string[];
}

/** Everything the table is compiled from. */
export interface TableInput {
  podIpv4Range: Prefix;
  dnsAddress: string;
  otlpAddress: string;
  /** The local port the metadata service's 169.254.169.254:80 is redirected to, on the resolver's address. */
  metadataPort?: number;
  /** What no pod reaches: the denied prefixes, the node's addresses and {@link ALWAYS_DENIED} (both families; split here). */
  denied: Prefix[];
  /** The cluster's ULA on a mesh: a source in it is dropped when it comes through another device than the one it is routed to. */
  meshPrefix?: Prefix;
  pods: TablePod[];
  /** The node's groups by ID (the default group is built in). */
  groups: ReadonlyMap<string, SecurityGroup>;
}

/** A named set's contents, each element a prefix text ("10.0.0.0/8", "2001:db8::5/128"). */
export interface SetContents {
  family: Family;
  elements: string[];
}

/** The table compiled: the commands that write it whole, its sets, and its shape without set elements. */
export interface CompiledTable {
  commands: NftCommand[];
  sets: Map<string, SetContents>;
  /** The commands without the sets' elements: two tables of one shape differ in set members alone. */
  shape: string;
}

const t = { family: TABLE.family, table: TABLE.name };
const match = (left: unknown, right: unknown, op = '==') => ({ match: { op, left, right } });
const meta = (key: string) => ({ meta: { key } });
const payload = (protocol: string, field: string) => ({ payload: { protocol, field } });
const ct = (key: string, dir?: string) => ({ ct: dir ? { key, dir } : { key } });
const rule = (chain: string, ...expr: unknown[]): NftCommand => ({ add: { rule: { ...t, chain, expr } } });
const fromPod = match(meta('iifname'), `${TAP_PREFIX}*`);
const toPod = match(meta('oifname'), `${TAP_PREFIX}*`);

function element(p: Prefix): unknown {
  const addr = formatAddress(p.family, p.address);
  return p.length === familyBits(p.family) ? addr : { prefix: { addr, len: p.length } };
}

function blockSetName(block: { cidr: string; except: string[] }): string {
  const h = createHash('sha256').update(`${block.cidr}|${[...block.except].sort().join(',')}`).digest('hex').slice(0, 16);
  return `b-${h}`;
}

/** The prefixes of an address block without its exceptions. @throws RangeError on a bad CIDR */
export function blockPrefixes(block: { cidr: string; except: string[] }): Prefix[] {
  const b = parsePrefix(block.cidr);
  return subtractPrefixes(b, block.except.map((e) => parsePrefix(e)));
}

/** The default group: out to the internet, of any protocol; nothing in. */
export function defaultGroup(): SecurityGroup {
  return {
    $typeName: 'feos.network.v1.SecurityGroup',
    id: DEFAULT_GROUP,
    version: 0n,
    ingress: [],
    egress: [{ $typeName: 'feos.network.v1.SecurityGroupRule', protocol: Protocol.UNSPECIFIED, ports: [], icmpTypes: [], description: 'out to the internet', peer: { case: 'internet', value: true } }],
    members: [],
  } as SecurityGroup;
}

/**
 * The match expressions of one rule, one list per family it applies to (none when it applies to
 * no family, such as an ICMP rule with an IPv6 block). `sets` collects the sets the rule names.
 */
function compileRule(r: SecurityGroupRule, dir: 'in' | 'out', sets: Map<string, SetContents>, groups: ReadonlyMap<string, SecurityGroup>, members: Map<string, Prefix[]>): unknown[][] {
  const field = dir === 'out' ? 'daddr' : 'saddr';
  const peers: Array<{ family: Family; set: string }> = [];
  switch (r.peer.case) {
    case 'group': {
      const id = r.peer.value;
      if (!groups.has(id) && id !== DEFAULT_GROUP) return [];
      const name = `g-${id}`;
      sets.set(name, { family: 6, elements: normalizePrefixes(members.get(id) ?? []).map(formatPrefix) });
      peers.push({ family: 6, set: name });
      break;
    }
    case 'block': {
      const name = blockSetName(r.peer.value);
      const prefixes = blockPrefixes(r.peer.value);
      const family = parsePrefix(r.peer.value.cidr).family;
      // An IPv4 block counts in rules out; rules in ignore it.
      if (family === 4 && dir === 'in') return [];
      sets.set(name, { family, elements: normalizePrefixes(prefixes).map(formatPrefix) });
      peers.push({ family, set: name });
      break;
    }
    case 'internet':
      if (dir === 'out') peers.push({ family: 4, set: 'internet4' });
      peers.push({ family: 6, set: 'internet6' });
      break;
    default:
      return [];
  }
  const out: unknown[][] = [];
  for (const p of peers) {
    if (r.protocol === Protocol.ICMP && p.family !== 4) continue;
    if (r.protocol === Protocol.ICMPV6 && p.family !== 6) continue;
    const expr: unknown[] = [match(payload(p.family === 4 ? 'ip' : 'ip6', field), `@${p.set}`)];
    switch (r.protocol) {
      case Protocol.TCP:
      case Protocol.UDP: {
        const proto = r.protocol === Protocol.TCP ? 'tcp' : 'udp';
        expr.push(match(meta('l4proto'), proto));
        if (r.ports.length > 0) {
          const ports = r.ports.map((pr) => (pr.last > pr.first ? { range: [pr.first, pr.last] } : pr.first));
          expr.push(match(payload(proto, 'dport'), { set: ports }));
        }
        break;
      }
      case Protocol.ICMP:
      case Protocol.ICMPV6: {
        const proto = r.protocol === Protocol.ICMP ? 'icmp' : 'icmpv6';
        expr.push(match(meta('l4proto'), proto === 'icmp' ? 'icmp' : 'ipv6-icmp'));
        if (r.icmpTypes.length > 0) expr.push(match(payload(proto, 'type'), { set: [...r.icmpTypes] }));
        break;
      }
      default:
        break;
    }
    out.push(expr);
  }
  return out;
}

/**
 * Compiles the whole table: the base chains prerouting, input, forward, postrouting (and the
 * metadata redirect), the chains from-pods and to-pods with the verdict maps pod-out and pod-in,
 * each pod's out-<TAP> and in-<TAP>, the sets deny4, deny6, internet4, internet6, g-<group> and
 * b-<hash>, and named limits for the logging.
 * @throws RangeError when a group holds a bad address block (groups are checked when put)
 */
export function compileTable(input: TableInput): CompiledTable {
  const sets = new Map<string, SetContents>();
  const cmds: NftCommand[] = [];
  const range = formatPrefix(input.podIpv4Range);
  const groups = new Map(input.groups);
  groups.set(DEFAULT_GROUP, defaultGroup());
  // Members: a group's own, and the pods on the node that name it.
  const members = new Map<string, Prefix[]>();
  for (const g of groups.values()) {
    const list: Prefix[] = [];
    for (const m of g.members) list.push(parsePrefix(m));
    members.set(g.id, list);
  }
  for (const pod of input.pods) {
    if (!pod.ipv6) continue;
    for (const id of pod.groups.length > 0 ? pod.groups : [DEFAULT_GROUP]) members.get(id)?.push(parsePrefix(pod.ipv6));
  }
  sets.set('deny4', { family: 4, elements: normalizePrefixes([...input.denied, input.podIpv4Range].filter((p) => p.family === 4)).map(formatPrefix) });
  sets.set('deny6', { family: 6, elements: normalizePrefixes(input.denied.filter((p) => p.family === 6)).map(formatPrefix) });
  sets.set('internet4', { family: 4, elements: INTERNET4.map(formatPrefix) });
  sets.set('internet6', { family: 6, elements: INTERNET6.map(formatPrefix) });

  const chains: Array<{ name: string; base?: { type: string; hook: string; prio: number } }> = [
    { name: 'prerouting', base: { type: 'filter', hook: 'prerouting', prio: -150 } },
    { name: 'metadata', base: { type: 'nat', hook: 'prerouting', prio: -100 } },
    { name: 'input', base: { type: 'filter', hook: 'input', prio: 0 } },
    { name: 'forward', base: { type: 'filter', hook: 'forward', prio: 0 } },
    { name: 'postrouting', base: { type: 'nat', hook: 'postrouting', prio: 100 } },
    { name: 'from-pods' },
    { name: 'to-pods' },
  ];
  const limits = ['spoofed'];
  const rules: NftCommand[] = [];
  const drop = (chain: string, reason: string, limit: string, ...expr: unknown[]) => {
    rules.push(rule(chain, ...expr, { limit }, { counter: null }, { log: { prefix: reason, group: NFLOG_DROPS } }));
    rules.push(rule(chain, ...expr, { drop: null }));
  };

  // prerouting: spoofed sources, router advertisements and redirects from pods.
  drop('prerouting', 'spoofed', 'lim-spoofed', fromPod, match({ fib: { result: 'oif', flags: ['saddr', 'iif'] } }, false));
  if (input.meshPrefix) {
    const m = input.meshPrefix;
    const ula = { prefix: { addr: formatAddress(6, m.address), len: m.length } };
    drop('prerouting', 'spoofed', 'lim-spoofed', match(payload('ip6', 'saddr'), ula), match({ fib: { result: 'oif', flags: ['saddr', 'iif'] } }, false));
  }
  rules.push(rule('prerouting', fromPod, match(payload('icmpv6', 'type'), { set: ['nd-router-advert', 'nd-redirect'] }), { drop: null }));
  rules.push(rule('prerouting', fromPod, match(payload('icmp', 'type'), 'redirect'), { drop: null }));
  // The metadata service: 169.254.169.254:80 from a pod goes to the node's responder.
  if (input.metadataPort !== undefined) {
    rules.push(
      rule('metadata', fromPod, match(payload('ip', 'daddr'), METADATA_ADDRESS), match(payload('tcp', 'dport'), 80), {
        dnat: { family: 'ip', addr: input.dnsAddress, port: input.metadataPort },
      }),
    );
  }
  // input: neighbour discovery, DNS, OTLP and the metadata service from pods; nothing else.
  rules.push(rule('input', fromPod, match(payload('icmpv6', 'type'), { set: ['nd-neighbor-solicit', 'nd-neighbor-advert'] }), { accept: null }));
  for (const proto of ['udp', 'tcp']) {
    rules.push(rule('input', fromPod, match(payload('ip', 'daddr'), input.dnsAddress), match(payload(proto, 'dport'), 53), { accept: null }));
  }
  rules.push(rule('input', fromPod, match(payload('ip', 'daddr'), input.otlpAddress), match(payload('tcp', 'dport'), { set: [4317, 4318] }), { accept: null }));
  if (input.metadataPort !== undefined) {
    rules.push(rule('input', fromPod, match(payload('ip', 'daddr'), input.dnsAddress), match(payload('tcp', 'dport'), input.metadataPort), { accept: null }));
  }
  rules.push(rule('input', fromPod, { drop: null }));
  // forward
  rules.push(
    rule('forward', fromPod, match(ct('direction'), 'original'), match(ct('packets', 'original'), 5, '<'), match(meta('l4proto'), 'tcp'), {
      log: { group: NFLOG_COPIES },
    }),
  );
  rules.push(rule('forward', match(ct('state'), ['established', 'related'], 'in'), { accept: null }));
  rules.push(rule('forward', fromPod, match(ct('state'), 'invalid', 'in'), { drop: null }));
  rules.push(rule('forward', toPod, match(ct('state'), 'invalid', 'in'), { drop: null }));
  rules.push(rule('forward', fromPod, { jump: { target: 'from-pods' } }));
  rules.push(rule('forward', toPod, { jump: { target: 'to-pods' } }));
  rules.push(rule('postrouting', match(payload('ip', 'saddr'), { prefix: { addr: range.split('/')[0], len: input.podIpv4Range.length } }), match(meta('oifname'), `${TAP_PREFIX}*`, '!='), { masquerade: null }));

  const outMap: unknown[] = [];
  const inMap: unknown[] = [];
  const podChains: NftCommand[] = [];
  for (const pod of [...input.pods].sort((a, b) => a.tap.localeCompare(b.tap))) {
    const out = `out-${pod.tap}`;
    const inn = `in-${pod.tap}`;
    chains.push({ name: out }, { name: inn });
    outMap.push([pod.tap, { goto: { target: out } }]);
    inMap.push([pod.tap, { goto: { target: inn } }]);
    const lDeny = `lim-${pod.tap}-deny`;
    const lNoRule = `lim-${pod.tap}-no-rule`;
    limits.push(`${pod.tap}-deny`, `${pod.tap}-no-rule`);
    const podRules: NftCommand[] = [];
    const pdrop = (chain: string, reason: string, limit: string, ...expr: unknown[]) => {
      podRules.push(rule(chain, ...expr, { limit }, { counter: null }, { log: { prefix: reason, group: NFLOG_DROPS } }));
      podRules.push(rule(chain, ...expr, { drop: null }));
    };
    pdrop(out, 'deny', lDeny, match(payload('ip', 'daddr'), '@deny4'));
    pdrop(out, 'deny', lDeny, match(payload('ip6', 'daddr'), '@deny6'));
    pdrop(inn, 'deny', lDeny, match(payload('ip6', 'saddr'), '@deny6'));
    for (const id of pod.groups.length > 0 ? pod.groups : [DEFAULT_GROUP]) {
      const g = groups.get(id);
      if (!g) continue;
      for (const r of g.egress) for (const e of compileRule(r, 'out', sets, groups, members)) podRules.push(rule(out, ...e, { return: null }));
      for (const r of g.ingress) for (const e of compileRule(r, 'in', sets, groups, members)) podRules.push(rule(inn, ...e, { return: null }));
    }
    pdrop(out, 'no-rule', lNoRule);
    pdrop(inn, 'no-rule', lNoRule);
    podChains.push(...podRules);
  }
  limits.push('no-map');
  // from-pods/to-pods: through the maps, else drop and log (no-rule).
  const fixed = [...rules];
  fixed.push(rule('from-pods', { vmap: { key: meta('iifname'), data: '@pod-out' } }));
  fixed.push(rule('from-pods', { limit: 'lim-no-map' }, { counter: null }, { log: { prefix: 'no-rule', group: NFLOG_DROPS } }));
  fixed.push(rule('from-pods', { drop: null }));
  fixed.push(rule('to-pods', { vmap: { key: meta('oifname'), data: '@pod-in' } }));
  fixed.push(rule('to-pods', { limit: 'lim-no-map' }, { counter: null }, { log: { prefix: 'no-rule', group: NFLOG_DROPS } }));
  fixed.push(rule('to-pods', { drop: null }));

  cmds.push({ add: { table: { family: TABLE.family, name: TABLE.name } } });
  for (const l of limits) cmds.push({ add: { limit: { ...t, name: `lim-${l}`, rate: LOG_RATE_PER_SECOND, per: 'second' } } });
  const setCmds = [...sets].map(([name, s]) => ({
    add: { set: { ...t, name, type: s.family === 4 ? 'ipv4_addr' : 'ipv6_addr', flags: ['interval'], ...(s.elements.length > 0 ? { elem: s.elements.map((e) => element(parsePrefix(e))) } : {}) } },
  }));
  cmds.push(...setCmds);
  // The chains before the maps, whose elements name them.
  for (const c of chains) {
    cmds.push({ add: { chain: { ...t, name: c.name, ...(c.base ? { ...c.base, policy: 'accept' } : {}) } } });
  }
  cmds.push({ add: { map: { ...t, name: 'pod-out', type: 'ifname', map: 'verdict', ...(outMap.length > 0 ? { elem: outMap } : {}) } } });
  cmds.push({ add: { map: { ...t, name: 'pod-in', type: 'ifname', map: 'verdict', ...(inMap.length > 0 ? { elem: inMap } : {}) } } });
  cmds.push(...fixed, ...podChains);
  const shapeCmds = cmds.map((c) => {
    const s = (c.add as { set?: Record<string, unknown> }).set;
    if (!s) return c;
    const { elem: _e, ...rest } = s;
    return { add: { set: rest } };
  });
  return { commands: cmds, sets, shape: JSON.stringify(shapeCmds) };
}

/**
 * The batch that brings the kernel from `prev` (what was written last, or undefined) to `next`:
 * the whole table replaced in one transaction (add, delete and add again, so that it works
 * whether the table is there or not), or, when only set elements differ, their removal and
 * addition in one batch. Undefined when nothing differs.
 */
export function tableUpdate(prev: CompiledTable | undefined, next: CompiledTable, forceReplace = false): NftCommand[] | undefined {
  if (!prev || forceReplace || prev.shape !== next.shape) {
    return [{ add: { table: { family: TABLE.family, name: TABLE.name } } }, { delete: { table: { family: TABLE.family, name: TABLE.name } } }, ...next.commands];
  }
  const del: NftCommand[] = [];
  const add: NftCommand[] = [];
  for (const [name, s] of next.sets) {
    const before = new Set(prev.sets.get(name)?.elements ?? []);
    const after = new Set(s.elements);
    const gone = [...before].filter((e) => !after.has(e));
    const come = [...after].filter((e) => !before.has(e));
    if (gone.length > 0) del.push({ delete: { element: { ...t, name, elem: gone.map((e) => element(parsePrefix(e))) } } });
    if (come.length > 0) add.push({ add: { element: { ...t, name, elem: come.map((e) => element(parsePrefix(e))) } } });
  }
  const batch = [...del, ...add];
  return batch.length > 0 ? batch : undefined;
}
