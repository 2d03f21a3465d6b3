// A stand-in for a QEMU that a killed feosd left behind, for the takeover suites: it serves QMP on the
// socket given and answers query-status / query-migrate as told, `cont` (running then) and `quit`
// (it exits). Usage: node fake-qemu.ts QMP_SOCKET STATUS MIGRATION ("none": no migration) [ioerror|suspend].
// With `ioerror`, 300 ms after a client connects it stops as QEMU's werror=enospc does on a full disk:
// BLOCK_IO_ERROR (action stop, nospace) and status `io-error`; `cont` then sends RESUME.
// With `suspend`, it takes a suspend as QEMU does: `stop` (paused), `migrate` to `exec:cat > 'FILE'`
// writes a 64 KiB stream into FILE at once, and the migration is `completed` (status postmigrate). As
// QEMU 7.2 does, `migrate-set-capabilities` events on makes it send MIGRATION setup (before the
// command's answer), active and completed (after), and `stop` sends STOP.
import { writeFileSync } from 'node:fs';
import net from 'node:net';

const [sockPath, initial, migration, mode] = process.argv.slice(2);
let status = initial;
let migrationNow = migration;
let migrationEvents = false;
const server = net.createServer((sock) => {
  sock.setEncoding('utf8');
  sock.write(`${JSON.stringify({ QMP: { version: { qemu: { major: 7, minor: 2, micro: 0 } }, capabilities: [] } })}\n`);
  let buf = '';
  sock.on('data', (d: string) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const msg = JSON.parse(line) as { execute: string; id: number; arguments?: { uri?: string; capabilities?: { capability: string; state: boolean }[] } };
      let ret: unknown = {};
      const event = (name: string, data?: unknown) => sock.write(`${JSON.stringify(data ? { event: name, data } : { event: name })}\n`);
      const after: string[] = [];
      if (msg.execute === 'migrate-set-capabilities') {
        for (const c of msg.arguments?.capabilities ?? []) if (c.capability === 'events') migrationEvents = c.state;
      }
      if (msg.execute === 'query-status') ret = { status, running: status === 'running' };
      if (msg.execute === 'query-migrate') ret = migrationNow === 'none' ? {} : { status: migrationNow };
      if (mode === 'suspend' && msg.execute === 'stop') {
        status = 'paused';
        event('STOP');
      }
      if (mode === 'suspend' && msg.execute === 'migrate') {
        const file = /^exec:cat > '(.*)'$/.exec(msg.arguments?.uri ?? '')?.[1];
        if (file === undefined) throw new Error(`migrate: a URI this stand-in does not take: ${msg.arguments?.uri}`);
        writeFileSync(file, Buffer.alloc(64 * 1024, 5));
        migrationNow = 'completed';
        status = 'postmigrate';
        if (migrationEvents) {
          event('MIGRATION', { status: 'setup' });
          after.push('active', 'completed');
        }
      }
      if (msg.execute === 'cont') {
        status = 'running';
        if (mode === 'ioerror') sock.write(`${JSON.stringify({ event: 'RESUME', data: {} })}\n`);
      }
      sock.write(`${JSON.stringify({ return: ret, id: msg.id })}\n`);
      for (const st of after) event('MIGRATION', { status: st });
      if (msg.execute === 'quit') setImmediate(() => process.exit(0));
    }
  });
  sock.on('error', () => {});
  if (mode === 'ioerror') {
    setTimeout(() => {
      status = 'io-error';
      const data = { device: 'data', 'node-name': '#block344', operation: 'write', action: 'stop', nospace: true, reason: 'No space left on device' };
      sock.write(`${JSON.stringify({ event: 'BLOCK_IO_ERROR', data })}\n${JSON.stringify({ event: 'STOP' })}\n`);
    }, 300);
  }
});
server.listen(sockPath);
