// A stand-in for a QEMU that a killed feosd left behind, for the takeover suites: it serves QMP on the
// socket given and answers query-status / query-migrate as told, `cont` (running then) and `quit`
// (it exits). Usage: node fake-qemu.ts QMP_SOCKET STATUS MIGRATION ("none": no migration) [ioerror].
// With `ioerror`, 300 ms after a client connects it stops as QEMU's werror=enospc does on a full disk:
// BLOCK_IO_ERROR (action stop, nospace) and status `io-error`; `cont` then sends RESUME.
import net from 'node:net';

const [sockPath, initial, migration, mode] = process.argv.slice(2);
let status = initial;
const server = net.createServer((sock) => {
  sock.setEncoding('utf8');
  sock.write(`${JSON.stringify({ QMP: { version: { qemu: { major: 7, minor: 2, micro: 0 } }, capabilities: [] } })}\n`);
  let buf = '';
  sock.on('data', (d: string) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const msg = JSON.parse(line) as { execute: string; id: number };
      let ret: unknown = {};
      if (msg.execute === 'query-status') ret = { status, running: status === 'running' };
      if (msg.execute === 'query-migrate') ret = migration === 'none' ? {} : { status: migration };
      if (msg.execute === 'cont') {
        status = 'running';
        if (mode === 'ioerror') sock.write(`${JSON.stringify({ event: 'RESUME', data: {} })}\n`);
      }
      sock.write(`${JSON.stringify({ return: ret, id: msg.id })}\n`);
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
