#!/usr/bin/env node
// Compiles the commands the package ships (package.json `bin`) to dist/bin/<name>.js at library
// build time. Each file is transpiled alone, not bundled: its imports (`../lib/...`,
// `../lambdas/shared/contract`) resolve to the jsii build beside it in dist/, so a command
// runs the same compiled library the constructs do. The entry's `#!/usr/bin/env node` line is
// kept, so npm can link it as an executable.
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bins = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).bin ?? {};

for (const [name, target] of Object.entries(bins)) {
  const m = /^dist\/(bin\/[\w-]+)\.js$/.exec(target);
  if (!m) {
    console.error(`compile-bins: bin ${name} -> ${target} is not dist/bin/<file>.js`);
    process.exit(1);
  }
  const entry = join(root, `${m[1]}.ts`);
  if (!readFileSync(entry, 'utf8').startsWith('#!/usr/bin/env node\n')) {
    console.error(`compile-bins: ${entry} must start with #!/usr/bin/env node`);
    process.exit(1);
  }
  await build({
    entryPoints: [entry],
    outfile: join(root, target),
    bundle: false,
    platform: 'node',
    // The package's engines.node floor: a consumer's Node.js, not the Lambdas' runtime.
    target: 'node20',
    format: 'cjs',
    logLevel: 'warning',
  });
}
console.log(`compile-bins: ${Object.keys(bins).length} commands compiled into dist/bin/`);
