#!/usr/bin/env node
// Bundles every Lambda entry point into assets/<name>/index.js at library build time, so a
// consumer's `cdk synth` needs neither esbuild nor Docker: the constructs only point at the
// finished directories.
import { build } from 'esbuild';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const FUNCTIONS = ['webhook', 'scale-up', 'pool', 'scale-down', 'reconcile', 'drain', 'runner-release', 'scale-set-listener', 'scale-set-resource'];

for (const name of FUNCTIONS) {
  const entry = join(root, 'lambdas', name, 'index.ts');
  if (!existsSync(entry)) {
    console.error(`bundle-lambdas: missing entry point ${entry}`);
    process.exit(1);
  }
  const outdir = join(root, 'assets', name);
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  await build({
    entryPoints: [entry],
    outfile: join(outdir, 'index.js'),
    bundle: true,
    platform: 'node',
    // Matches the runtime the constructs pin (Node.js 24); the SDK is bundled too, so the
    // deployed code runs the versions the tests ran, not whatever the runtime ships.
    target: 'node24',
    format: 'cjs',
    minify: true,
    // Minified, but with function names kept, so stack traces in the logs stay readable.
    keepNames: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
}
console.log(`bundle-lambdas: ${FUNCTIONS.length} functions bundled into assets/`);
