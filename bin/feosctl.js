#!/usr/bin/env node
// Thin executable: runs feosctl, built or from the sources (bin/fresh-entry.js says which). A stale
// dist/ is passed over silently: feosctl's output stays the command's own.
import { freshEntry } from './fresh-entry.js';
const { entry } = freshEntry('feos/ctl/main');
const { main } = await import(entry.href);
await main(process.argv);
