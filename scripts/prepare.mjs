#!/usr/bin/env node
// npm's `prepare` (run by `npm ci`, `npm install` and `npm pack` in a checkout): names any
// missing test tool, then builds (the jsii assembly, the Lambda bundles and the commands). The
// packed package declares no scripts (scripts/pack-manifest.mjs) and does not ship this file;
// a copy without the sources has nothing to build, so this does nothing there.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
if (!existsSync(join(root, 'lib', 'index.ts'))) process.exit(0);

for (const [cmd, args] of [
  ['node', [join(root, 'scripts', 'check-tools.mjs')]],
  ['npm', ['run', 'build']],
]) {
  const result = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
}
