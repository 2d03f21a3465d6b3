/**
 * Where a pod's guest reaches the images' registries (feos.guest.v1's `registry_endpoints`): the
 * registries feosd forwards into every microVM (`--registry-forward`, a user-mode NIC of the microVM's
 * own; microvm/qemu-args.ts), and the registries an operator names as plain HTTP
 * (`--insecure-registry HOST:PORT`, as container runtimes have it), which the guest reaches through the
 * pod's network at `http://HOST:PORT`. Any other registry is HTTPS (loopback names are HTTP, as Docker
 * takes them; guest/images.ts).
 */
import { registryEndpoints } from '../microvm/index.ts';

/**
 * The guest's endpoints: each insecure registry at `http://HOST:PORT`, then each forward at its link
 * (a registry both forwarded and insecure goes through the forward, which every pod has).
 * @param forwards `--registry-forward`'s values, in order (the i-th is the link's port 5000 + i)
 * @param insecure `--insecure-registry`'s values
 * @returns image reference host (`host:port`) → `http://...`
 */
export function guestRegistryEndpoints(forwards: readonly string[], insecure: readonly string[]): Record<string, string> {
  return { ...Object.fromEntries(insecure.map((r) => [r, `http://${r}`])), ...registryEndpoints(forwards) };
}
