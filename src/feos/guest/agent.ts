/**
 * The FeOS guest agent (seed 000, "The guest"; docs/feos/guest.md): runs in a pod's microVM, started by
 * the initramfs's /init, and serves feos.guest.v1.GuestService over the virtio-serial port `feos.guest`
 * (/dev/vport0p1) to feosd. The port is one byte stream: each host connection opens with the channel's
 * handshake (channel.ts) and then carries one HTTP/2 connection with feosd as the client.
 *
 * Self-contained: imports only node:, the generated guest_pb.js and @bufbuild/protobuf, which the
 * initramfs carries (scripts/build-guest.sh). The calls live in agent-unary.ts and agent-streams.ts, the
 * port's end in agent-port.ts, the system steps in agent-system.ts, what they share in agent-base.ts.
 */
import fs from 'node:fs';
import { AgentState } from '../gen/feos/guest/v1/guest_pb.js';
import { AGENT_VERSION, log, readFileOr, status } from './agent-base.ts';
import { PORT_PATH, serve } from './agent-port.ts';
import { handlers } from './agent-unary.ts';
import { streams } from './agent-streams.ts';

export { AGENT_VERSION } from './agent-base.ts';

const mounts = readFileOr('/proc/mounts', '');
if (fs.existsSync('/dev/feos-data') && !mounts.includes(`${fs.realpathSync('/dev/feos-data')} /data `)) {
  status.state = AgentState.DEGRADED;
  status.reason = 'the data disk is not mounted at /data';
}

if (import.meta.main) {
  process.on('uncaughtException', (err) => log(`uncaught: ${err.stack ?? String(err)}`));
  log(`agent ${AGENT_VERSION} serving on ${PORT_PATH}`);
  void serve(handlers, streams);
}
