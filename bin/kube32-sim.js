#!/usr/bin/env node
// Thin executable: runs kube32-sim, built or from the sources (bin/fresh-entry.js says which).
import { KUBE32_SOURCES, freshEntry } from './fresh-entry.js';
const { entry, stale } = freshEntry('kubelet/main', KUBE32_SOURCES);
if (stale) process.stderr.write('kube32-sim: dist/ was not built from these sources (run npm run build); running the sources\n');
const { main } = await import(entry.href);
await main(process.argv);
