/**
 * Connection tracking's events as `conntrack -E -o extended,id,timestamp,ktimestamp` prints them,
 * one a line (the seed's "Traffic records": flows "from connection tracking's events over
 * ctnetlink, with nf_conntrack_acct and nf_conntrack_timestamp on"). conntrack(8) reads ctnetlink
 * and prints, per event, both directions' tuples, the counters (nf_conntrack_acct) and, for an
 * entry that ended, its start and stop (nf_conntrack_timestamp, to the second, in the zone of its
 * TZ: feosd runs it with TZ=UTC). Pure and total: a line it does not understand gives undefined.
 *
 *   [1796186864.082746]	[DESTROY] ipv6     10 tcp      6 TIME_WAIT src=::1 dst=::1 sport=53086 dport=8080
 *     packets=5 bytes=406 src=::1 dst=::1 sport=8080 dport=53086 packets=5 bytes=482 [ASSURED]
 *     delta-time=1 [start=Wed Dec  2 04:47:20 2026] [stop=Wed Dec  2 04:47:21 2026] id=2472184360
 */

/** One direction of a connection. */
export interface ConntrackTuple {
  source: string;
  destination: string;
  /** 0 for protocols without ports. */
  sourcePort: number;
  destinationPort: number;
  /** The counters (nf_conntrack_acct); 0 without. */
  packets: number;
  bytes: number;
}

/** One event. */
export interface ConntrackEvent {
  /** "new" or "end" (conntrack's NEW and DESTROY). */
  event: 'new' | 'end';
  /** When conntrack read it, ms since the epoch. */
  timeMs: number;
  /** The protocol's number: 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6. */
  protocol: number;
  /** From the opener (original) and back (reply). */
  original: ConntrackTuple;
  reply: ConntrackTuple;
  /** The kernel's start and stop of the entry, ms since the epoch (to the second); 0 when not given. */
  startMs: number;
  stopMs: number;
  /** conntrack's ID of the entry; 0 when not given. */
  id: number;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** ctime(3)'s "Wed Dec  2 04:47:20 2026", in UTC, as ms since the epoch; 0 when it is not one. */
export function parseCtimeUtc(text: string): number {
  const m = /^\w{3} (\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/.exec(text.trim());
  if (!m) return 0;
  const month = MONTHS.indexOf(m[1]);
  if (month < 0) return 0;
  return Date.UTC(Number(m[6]), month, Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]));
}

/** Parses one line of `conntrack -E -o extended,id,timestamp,ktimestamp`; undefined for any other line. */
export function parseConntrackLine(line: string): ConntrackEvent | undefined {
  const head = /^\s*\[(\d+)\.(\d+)\]\s+\[(NEW|DESTROY)\]\s+(.*)$/.exec(line);
  if (!head) return undefined;
  let rest = head[4];
  const grab = (key: string): string | undefined => {
    const m = new RegExp(`\\[${key}=([^\\]]*)\\]`).exec(rest);
    if (!m) return undefined;
    rest = rest.replace(m[0], ' ');
    return m[1];
  };
  const start = grab('start');
  const stop = grab('stop');
  const tokens = rest.split(/\s+/).filter(Boolean);
  // "ipv4 2 tcp 6 ..." (extended): the layer 3 name and number, the layer 4 name and number.
  if (tokens.length < 4 || !/^\d+$/.test(tokens[3])) return undefined;
  const protocol = Number(tokens[3]);
  const tuples: ConntrackTuple[] = [];
  let cur: ConntrackTuple | undefined;
  let id = 0;
  for (const t of tokens.slice(4)) {
    const eq = t.indexOf('=');
    if (eq <= 0) continue;
    const k = t.slice(0, eq);
    const v = t.slice(eq + 1);
    if (k === 'src') {
      cur = { source: v, destination: '', sourcePort: 0, destinationPort: 0, packets: 0, bytes: 0 };
      tuples.push(cur);
      continue;
    }
    const n = Number(v);
    if (k === 'id') {
      // An ICMP tuple's own id= comes after its type and code; the entry's is the last id= (before
      // a delete's "[USERSPACE] portid=...").
      if (Number.isFinite(n)) id = n;
      continue;
    }
    if (!cur) continue;
    if (k === 'dst') cur.destination = v;
    else if (k === 'sport' && Number.isInteger(n)) cur.sourcePort = n;
    else if (k === 'dport' && Number.isInteger(n)) cur.destinationPort = n;
    else if (k === 'packets' && Number.isFinite(n)) cur.packets = n;
    else if (k === 'bytes' && Number.isFinite(n)) cur.bytes = n;
  }
  if (tuples.length < 2 || !tuples[0].destination || !tuples[1].destination) return undefined;
  return {
    event: head[3] === 'NEW' ? 'new' : 'end',
    timeMs: Number(head[1]) * 1000 + Math.floor(Number(`0.${head[2]}`) * 1000),
    protocol,
    original: tuples[0],
    reply: tuples[1],
    startMs: start ? parseCtimeUtc(start) : 0,
    stopMs: stop ? parseCtimeUtc(stop) : 0,
    id,
  };
}
