#!/usr/bin/env node
// Thin executable: runs feosd, built or from the sources (bin/fresh-entry.js says which).
import { freshEntry } from './fresh-entry.js';
const { entry, stale } = freshEntry('feos/main');
if (stale) process.stderr.write('feosd: dist/ was not built from these sources (run npm run build); running the sources\n');
const { main } = await import(entry.href);
await main(process.argv);
