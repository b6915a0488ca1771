import { existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, consumerEnv, packageJson, ROOT, run, type PackageJson, type Run } from './built-package';
import { installTimeProblems, INSTALL_TIME_SCRIPTS } from './lifecycle';

// What a consumer gets: the packed tarball (as `npm publish` uploads it), installed with npm
// into a scratch CDK app outside the repository, then synthesized with plain node. The
// peers (aws-cdk-lib, constructs) are linked from the repository's node_modules, so the test
// needs no registry; the library itself comes only from the tarball.

// Packing, installing and synthesizing on a loaded machine: a bound far above the work.
const SLOW = 600_000;

let scratch: string;
let installed: string;
let packedFiles: string[];
let typeCheck: Run;
let summary: {
  readonly resolvedFrom: string;
  readonly functions: { readonly runtime: string; readonly handler: string; readonly assetDir: boolean }[];
  readonly fleetConfig: { readonly pools: { readonly provider: string; readonly labelMatch: string }[]; readonly github?: object };
};

beforeAll(() => {
  assertBuilt();
  scratch = realpathSync(mkdtempSync(join(tmpdir(), 'wr-consumer-')));
  // --ignore-scripts: the build is done (npm test's jsii step, or npm ci); prepare would rebuild it.
  const pack = run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', scratch], { cwd: ROOT });
  const [info] = JSON.parse(pack.stdout.slice(pack.stdout.indexOf('['))) as [{ filename: string; files: { path: string }[] }];
  packedFiles = info.files.map((f) => f.path);

  const app = join(scratch, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'scratch-cdk-app', version: '0.0.0', private: true }));
  // Offline and without peers: the tarball has no dependencies of its own; the peers follow.
  // Install scripts stay on: any the package carried would run here, as at a consumer's.
  run('npm', ['install', '--offline', '--legacy-peer-deps', '--no-audit', '--no-fund', '--no-package-lock', join(scratch, info.filename)], {
    cwd: app,
    env: consumerEnv(),
  });
  installed = join(app, 'node_modules', packageJson().name);
  mkdirSync(join(app, 'node_modules', '@types'), { recursive: true });
  for (const peer of ['aws-cdk-lib', 'constructs', '@types/node']) symlinkSync(realpathSync(join(ROOT, 'node_modules', peer)), join(app, 'node_modules', peer), 'dir');

  writeFileSync(
    join(app, 'app.js'),
    `const { App, Stack } = require('aws-cdk-lib');
const ec2 = require('aws-cdk-lib/aws-ec2');
const { WarmRunners, Provider } = require('cdk-warm-runners');

const app = new App({ outdir: 'cdk.out' });
const stack = new Stack(app, 'Consumer', { env: { account: '111122223333', region: 'eu-west-1' } });
const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2 });
new WarmRunners(stack, 'Runners', {
  vpc,
  github: { appId: '123456', organization: 'example-org' },
  pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), warm: { size: 1 } }],
});
const assembly = app.synth();
const template = assembly.getStackByName('Consumer').template;
const resources = Object.values(template.Resources);
const functions = resources
  .filter((r) => r.Type === 'AWS::Lambda::Function')
  .map((r) => {
    // The code's S3 key is the asset's hash; synth stages the bundle as asset.<hash>/.
    const hash = String(r.Properties.Code.S3Key).replace('.zip', '');
    return {
      runtime: r.Properties.Runtime,
      handler: r.Properties.Handler,
      assetDir: require('node:fs').existsSync(require('node:path').join(assembly.directory, 'asset.' + hash, 'index.js')),
    };
  });
const parameter = resources.find((r) => r.Type === 'AWS::SSM::Parameter' && String(r.Properties.Name).endsWith('/fleet/config'));
// The value is a Fn::Join of the JSON text and the launch template and subnet references.
const value = parameter.Properties.Value;
const text = typeof value === 'string' ? value : value['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : 'ref')).join('');
process.stdout.write(JSON.stringify({ resolvedFrom: require.resolve('cdk-warm-runners'), functions, fleetConfig: JSON.parse(text) }));
`,
  );
  const synth = run('node', ['app.js'], { cwd: app, env: consumerEnv() });
  summary = JSON.parse(synth.stdout) as typeof summary;

  // A TypeScript consumer reads the package's `types`: the same app, type-checked strictly.
  writeFileSync(
    join(app, 'typed.ts'),
    `import { App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { LabelMatch, Provider, RunnerUserData, WarmRunners, type FleetConfig, type RunnerPoolProps } from 'cdk-warm-runners';

const pool: RunnerPoolProps = { name: 'linux', provider: Provider.GITHUB, labelMatch: LabelMatch.SUBSET, machineImage: ec2.MachineImage.latestAmazonLinux2023() };
const stack = new Stack(new App(), 'Typed');
const runners = new WarmRunners(stack, 'Runners', { vpc: new ec2.Vpc(stack, 'Vpc'), github: { appId: '1', organization: 'o' }, pools: [pool] });
const config: FleetConfig = runners.config;
export const wire: 'github' | 'gitlab' | undefined = config.pools[0]?.provider;
export const encoded: string = RunnerUserData.encode('#!/bin/bash\\n');
`,
  );
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', skipLibCheck: false, types: ['node'] },
      files: ['typed.ts'],
    }),
  );
  typeCheck = run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], { cwd: app, env: consumerEnv(), allowFailure: true });
}, SLOW);

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the packed library in a scratch CDK app', () => {
  it('ships the assembly, the compiled library, the Lambda bundles and the templates, and no sources', () => {
    for (const file of ['.jsii', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'dist/lambdas/shared/contract/index.js', 'templates/start-runner.sh']) {
      expect(packedFiles).toContain(file);
    }
    for (const fn of ['webhook', 'scale-up', 'pool', 'scale-down', 'drain']) expect(packedFiles).toContain(`assets/${fn}/index.js`);
    expect(packedFiles.filter((f) => /^(lib|lambdas|bin|local|test)\//.test(f))).toEqual([]);
  });

  it('is the installed tarball, not the repository', () => {
    expect(summary.resolvedFrom.startsWith(`${scratch}/`)).toBe(true);
  });

  it("synthesizes the library's seven functions on their bundles, and the FleetConfig with the wire values", () => {
    // Five control-plane functions (the reconciler with the GitHub connection) and the drain's two
    // exports (the provider framework's functions run CDK's code).
    const own = summary.functions.filter((fn) => fn.handler.startsWith('index.'));
    expect(own.map((fn) => fn.handler).sort()).toEqual(['index.handler', 'index.handler', 'index.handler', 'index.handler', 'index.handler', 'index.isComplete', 'index.onEvent']);
    for (const fn of own) expect(fn).toEqual({ runtime: 'nodejs24.x', handler: fn.handler, assetDir: true });
    // Provider.GITHUB travels as the string the Lambdas parse.
    expect(summary.fleetConfig.pools).toEqual([expect.objectContaining({ provider: 'github', labelMatch: 'exact' })]);
    expect(summary.fleetConfig.github).toMatchObject({ appId: '123456', organization: 'example-org' });
  });

  it('type-checks a TypeScript app against the package types (strict)', () => {
    expect(`${typeCheck.stdout}${typeCheck.stderr}`).toBe('');
    expect(typeCheck.status).toBe(0);
  });

  it('carries no install-time script that needs something it does not ship', () => {
    const pkg = packageJson(installed);
    expect(installTimeProblems(pkg.scripts ?? {}, (path) => existsSync(join(installed, path)))).toEqual([]);
    // And the one it carries runs to its end there, leaving the package as installed.
    const before = readdirSync(installed).sort();
    for (const name of INSTALL_TIME_SCRIPTS.filter((n) => pkg.scripts?.[n] !== undefined)) {
      run('npm', ['run', name], { cwd: installed, env: consumerEnv({ npm_config_offline: 'true' }) });
    }
    expect(readdirSync(installed).sort()).toEqual(before);
  });
});

describe('installTimeProblems', () => {
  const scripts = (extra: PackageJson['scripts']) => ({ build: 'jsii && node scripts/bundle-lambdas.mjs', test: 'vitest', ...extra });
  const ships = (files: string[]) => (path: string) => files.includes(path);

  it('finds a prepare that needs build scripts the package does not ship, through npm run', () => {
    expect(installTimeProblems(scripts({ prepare: 'node scripts/check-tools.mjs && npm run build' }), ships([]))).toEqual([
      'prepare: needs scripts/check-tools.mjs, which the package does not ship',
      'prepare -> build: runs "jsii", which an installed package does not have (a devDependency\'s binary?)',
      'prepare -> build: needs scripts/bundle-lambdas.mjs, which the package does not ship',
    ]);
  });

  it('finds a postinstall that runs a script the package does not define', () => {
    expect(installTimeProblems(scripts({ postinstall: 'npm run setup' }), ships([]))).toEqual(['postinstall: runs "npm run setup", which the package does not define']);
  });

  it('accepts scripts that only need shipped files, and ignores scripts npm does not run at install', () => {
    expect(installTimeProblems(scripts({ prepare: 'node scripts/prepare.mjs' }), ships(['scripts/prepare.mjs']))).toEqual([]);
  });
});
