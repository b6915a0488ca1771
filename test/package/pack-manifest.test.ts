import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { ROOT } from './built-package';

// scripts/pack-manifest.mjs (npm's prepack and postpack) on a copy of a checkout: the packed
// package.json loses its scripts, the checkout gets its own back byte for byte, also after a
// pack that stopped between the two (the consumer test covers a real `npm pack`).

const MANIFEST = `${JSON.stringify(
  { name: 'p', version: '1.2.3', main: 'dist/lib/index.js', types: 'dist/lib/index.d.ts', bin: { p: 'dist/bin/p.js' }, scripts: { prepare: 'node scripts/prepare.mjs', build: 'jsii' }, files: ['dist'] },
  null,
  4,
)}\n`;
const BUILT = ['.jsii', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'assets/webhook/index.js', 'dist/bin/p.js'];

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'wr-pack-manifest-'));
  mkdirSync(join(dir, 'scripts'));
  copyFileSync(join(ROOT, 'scripts', 'pack-manifest.mjs'), join(dir, 'scripts', 'pack-manifest.mjs'));
  writeFileSync(join(dir, 'package.json'), MANIFEST);
  for (const file of BUILT) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), '');
  }
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const step = (command: string) => spawnSync(process.execPath, [join(dir, 'scripts', 'pack-manifest.mjs'), command], { encoding: 'utf8' });
const manifest = () => readFileSync(join(dir, 'package.json'), 'utf8');

it('strips the scripts for the pack and restores the checkout byte for byte', () => {
  expect(step('strip').status).toBe(0);
  const packed = JSON.parse(manifest()) as Record<string, unknown>;
  expect(packed.scripts).toBeUndefined();
  expect(packed).toMatchObject({ name: 'p', version: '1.2.3', bin: { p: 'dist/bin/p.js' }, files: ['dist'] });
  expect(step('restore').status).toBe(0);
  expect(manifest()).toBe(MANIFEST);
  expect(existsSync(join(dir, '.package.json.packing'))).toBe(false);
});

it('starts from the kept manifest when a pack stopped after its strip', () => {
  step('strip');
  expect(step('strip').status).toBe(0);
  expect(JSON.parse(manifest())).not.toHaveProperty('scripts');
  step('restore');
  expect(manifest()).toBe(MANIFEST);
});

it('refuses to pack what is not built, leaving the manifest as it was', () => {
  rmSync(join(dir, 'dist', 'bin', 'p.js'));
  const result = step('strip');
  expect(result.status).toBe(1);
  expect(result.stderr).toContain('the package is not built (dist/bin/p.js missing): run "npm run build" first');
  expect(manifest()).toBe(MANIFEST);
});

it('refuses a publish of the directory, naming the tarball to publish', () => {
  const result = step('refuse-publish');
  expect(result.status).toBe(1);
  expect(result.stderr).toContain('npm pack && npm publish ./p-1.2.3.tgz');
});
