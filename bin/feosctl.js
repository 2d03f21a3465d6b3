#!/usr/bin/env node
// Thin executable: runs the built feosctl when `npm run build` has made it, else the TypeScript sources
// directly (Node.js 24 strips types).
import { existsSync } from 'node:fs';
const built = new URL('../dist/src/feos/ctl/main.js', import.meta.url);
const entry = existsSync(built) ? built : new URL('../src/feos/ctl/main.ts', import.meta.url);
const { main } = await import(entry.href);
await main(process.argv);
