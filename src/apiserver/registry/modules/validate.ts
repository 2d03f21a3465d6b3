/**
 * Checks a Module's bytes before they are stored (`PUT /apis/kube32.io/v1/modules/<name>/data`):
 * the bytes must be a module a kubelet can load as a pod (seed "Pod ABI"), so that a truncated or
 * foreign module is refused at push time rather than failing every pod that names it.
 */
import { ModuleError, loadModule } from '../../../wasm/index.ts';
import { ApiError } from '../../errors.ts';

/**
 * Loads `bytes` as the pod runtime would (parse, `WebAssembly.validate`, the k32 imports and the
 * ABI exports), without running them.
 * @param name the Module's name (for the message)
 * @param bytes the module's bytes, whole
 * @throws ApiError `Invalid` (422) with a `FieldValueInvalid` cause on field `data` giving the
 *   runtime's reason (for example "the module does not parse: section 2 runs past the end of the
 *   module (at byte 83)"); other errors propagate
 */
export async function validateModuleBytes(name: string, bytes: Uint8Array): Promise<void> {
  try {
    await loadModule(bytes);
  } catch (err: unknown) {
    if (!(err instanceof ModuleError)) throw err;
    const reason = `not a module a pod can run: ${err.message}`;
    throw new ApiError('Invalid', `Module.kube32.io "${name}" is invalid: data: ${reason}`, {
      name,
      group: 'kube32.io',
      kind: 'Module',
      causes: [{ reason: 'FieldValueInvalid', message: reason, field: 'data' }],
    });
  }
}
