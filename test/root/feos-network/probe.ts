// A TCP probe for the root suites, run inside a pod's namespace: `probe.ts HOST PORT TIMEOUT_MS [LOCAL_ADDRESS]`.
// Exits 0 when it connected and its bytes came back, 1 otherwise (printing why).
import net from 'node:net';

const [host, port, timeout, localAddress] = process.argv.slice(2);
const c = net.connect({ host, port: Number(port), ...(localAddress ? { localAddress } : {}) });
const timer = setTimeout(() => {
  console.log('timeout');
  process.exit(1);
}, Number(timeout));
c.on('connect', () => c.write('ping'));
c.on('data', (d) => {
  if (d.toString() === 'ping') {
    clearTimeout(timer);
    console.log('ok');
    process.exit(0);
  }
});
c.on('error', (err) => {
  console.log(err.message);
  process.exit(1);
});
