// Runs its arguments in place of itself for startInNs (which starts `node FILE ...`): the
// python3 that binds the sockets and execs the layer, with stdout passed through.
import { spawn } from 'node:child_process';

const [cmd, ...args] = process.argv.slice(2);
const child = spawn(cmd, args, { stdio: 'inherit' });
child.on('exit', (code) => process.exit(code ?? 1));
process.on('SIGTERM', () => child.kill('SIGTERM'));
