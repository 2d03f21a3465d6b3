/** Loading a pod module: check, classify, instrument (pod-abi.md; seed "What moves"). */
import type { LoadOptions, PodModule } from './types.ts';

/**
 * Checks, classifies and instruments a module.
 * @throws ModuleError naming the cause
 */
export async function loadModule(_bytes: Uint8Array, _opts: LoadOptions = {}): Promise<PodModule> {
  throw new Error('loadModule: not implemented yet');
}
