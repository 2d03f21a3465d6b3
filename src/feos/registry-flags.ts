/** feosd's `--insecure-registry` flag (src/feos/main.ts); what the guest makes of it: pods/registries.ts. */
import { isIP } from 'node:net';
import { InvalidArgumentError } from 'commander';

/**
 * `--insecure-registry`'s value (repeatable): `host:port` or `[IPv6]:port`, as image references name the
 * registry, with a port from 1 to 65535.
 * @throws InvalidArgumentError naming the flag and the value
 */
export function insecureRegistry(v: string, prev: string[] = []): string[] {
  const m = /^(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$/.exec(v);
  const port = m ? Number(m[1]) : 0;
  if (!m || port < 1 || port > 65535 || (v.startsWith('[') && isIP(v.slice(1, v.lastIndexOf(']'))) !== 6)) {
    throw new InvalidArgumentError(`--insecure-registry ${JSON.stringify(v)}: want host:port or [IPv6]:port with a port from 1 to 65535, as image references name the registry (such as registry.lan:5000)`);
  }
  return [...prev, v];
}
