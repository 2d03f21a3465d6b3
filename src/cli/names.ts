/** Object names as Kubernetes takes them, checked by kube32-cli before it sends anything. */

/** A DNS-1123 subdomain (Kubernetes' `IsDNS1123Subdomain`): what most object names must be. */
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The longest DNS-1123 subdomain, in characters. */
export const DNS1123_SUBDOMAIN_MAX = 253;

/**
 * Why `name` is not a valid object name, in the API server's words, or `undefined` when it is.
 * @example dnsSubdomainProblem('Hello_World') // "a lowercase RFC 1123 subdomain must consist of ..."
 */
export function dnsSubdomainProblem(name: string): string | undefined {
  if (name.length > DNS1123_SUBDOMAIN_MAX) return `must be no more than ${DNS1123_SUBDOMAIN_MAX} characters (it has ${name.length})`;
  if (!DNS1123_SUBDOMAIN.test(name)) {
    return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')";
  }
  return undefined;
}
