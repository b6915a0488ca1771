#!/usr/bin/env node
// The package.json a consumer gets (npm's prepack and postpack in this checkout):
//
//   node scripts/pack-manifest.mjs strip     (prepack)  checks the build is there, keeps
//       package.json aside and writes it without `scripts`
//   node scripts/pack-manifest.mjs restore   (postpack) puts the kept package.json back
//   node scripts/pack-manifest.mjs refuse-publish (prepublishOnly)
//
// Every script here needs the repository (tsx, jsii, the sources, scripts/): none can run where
// the package is installed, and `prepare` would run at an install from a git or directory
// spec. npm 11 tars package.json as it is on disk after prepack, and reads `prepare` for the
// pack from that file too, so the stripped copy is what the tarball holds and the pack does
// not rebuild; postpack runs from the manifest npm read before prepack.
//
// `npm publish` in this directory is refused: npm reads package.json again after postpack and
// would upload the checkout's scripts as the version's metadata. Publish the packed tarball
// (`npm publish ./cdk-warm-runners-<version>.tgz`), whose package.json is the one it holds.
import { copyFileSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const manifest = join(root, 'package.json');
/** The checkout's package.json while a pack runs; a leftover means a pack was interrupted. */
const kept = join(root, '.package.json.packing');

function fail(message) {
  console.error(`pack-manifest: ${message}`);
  process.exit(1);
}

function strip() {
  // An interrupted pack left the stripped file in place: start again from the kept one.
  if (existsSync(kept)) renameSync(kept, manifest);
  const text = readFileSync(manifest, 'utf8');
  const pkg = JSON.parse(text);
  const built = ['.jsii', pkg.main, pkg.types, 'assets/webhook/index.js', ...Object.values(pkg.bin ?? {})];
  const missing = built.filter((file) => !existsSync(join(root, file)));
  if (missing.length > 0) fail(`the package is not built (${missing.join(', ')} missing): run "npm run build" first`);
  copyFileSync(manifest, kept);
  delete pkg.scripts;
  writeFileSync(manifest, `${JSON.stringify(pkg, null, 2)}\n`);
}

function restore() {
  if (existsSync(kept)) renameSync(kept, manifest);
}

const command = process.argv[2];
if (command === 'strip') strip();
else if (command === 'restore') restore();
else if (command === 'refuse-publish') {
  const { name, version } = JSON.parse(readFileSync(manifest, 'utf8'));
  fail(`publish the packed tarball, not this directory: npm pack && npm publish ./${name}-${version}.tgz`);
} else fail(`usage: node scripts/pack-manifest.mjs strip|restore|refuse-publish (got ${command ?? 'nothing'})`);
