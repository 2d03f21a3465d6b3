/**
 * Preloaded with `node --import` by the start-up tests: records the URL of every module the process
 * loads, one a line, in the file `$KUBE32_TRACE_IMPORTS` (appended synchronously, so the list is whole
 * even when the process exits at once).
 */
import { appendFileSync } from 'node:fs';
import { registerHooks } from 'node:module';

const out = process.env.KUBE32_TRACE_IMPORTS;
if (out) {
  registerHooks({
    load(url, context, nextLoad) {
      appendFileSync(out, `${url}\n`);
      return nextLoad(url, context);
    },
  });
}
