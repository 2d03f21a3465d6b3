/**
 * Pod images that name a pushed module by its bare name (`counter`: no scheme, registry, tag or
 * digest), as `kubectl run --image=counter` sends them: the API server resolves them at a pod's
 * create, and the kubelet looks them up itself when no Module had that name then.
 */

/** A Module's name used as an image: a DNS subdomain (lower case), up to 253 characters. */
const BARE_MODULE_IMAGE = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

/** Whether `image` is a bare module name (see the module comment). */
export function isBareModuleImage(image: string): boolean {
  return BARE_MODULE_IMAGE.test(image);
}
