#!/usr/bin/env node
// Thin executable: runs the CLI, built or from the sources (bin/fresh-entry.js says which).
import { KUBE32_SOURCES, freshEntry } from './fresh-entry.js';
const { entry } = freshEntry('cli/main', KUBE32_SOURCES);
const { main } = await import(entry.href);
await main(process.argv);
