import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Provider } from '../../lambdas/shared/contract';
import { renderUserData } from '../../lib/user-data';
import { publisher, GH, GL, gitlabSums, matching, OTHER } from '../support/runner-publisher';
import { assertBuilt, consumerEnv, packageJson, ROOT, run, type PackageJson, type Run } from './built-package';
import { INSTALL_TIME_SCRIPTS } from './lifecycle';

// What a consumer gets: the packed tarball (as `npm publish` uploads it), installed with npm
// into a scratch CDK app outside the repository, then synthesized with plain node. The
// peers (aws-cdk-lib, constructs) are linked from the repository's node_modules, so the test
// needs no registry; the library itself comes only from the tarball.

// Packing, installing and synthesizing on a loaded machine: a bound far above the work.
const SLOW = 600_000;

let scratch: string;
let app: string;
let installed: string;
let checkoutManifest: { before: string; after: string };
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
  // As a user packs (scripts on): prepack writes the consumer's package.json, postpack puts the
  // checkout's back; the build is done (npm test's jsii step, or npm ci's prepare).
  const before = readFileSync(join(ROOT, 'package.json'), 'utf8');
  const pack = run('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: ROOT });
  checkoutManifest = { before, after: readFileSync(join(ROOT, 'package.json'), 'utf8') };
  const [info] = JSON.parse(pack.stdout.slice(pack.stdout.indexOf('['))) as [{ filename: string; files: { path: string }[] }];
  packedFiles = info.files.map((f) => f.path);

  app = join(scratch, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'scratch-cdk-app', version: '0.0.0', private: true }));
  // Offline and without peers: the tarball has no dependencies of its own; the peers follow.
  // Install scripts stay on, as at a consumer's.
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
    for (const file of ['.jsii', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'dist/lambdas/shared/contract/index.js', 'templates/start-runner.sh', 'CHANGELOG.md', 'README.md', 'LICENSE']) {
      expect(packedFiles).toContain(file);
    }
    for (const fn of ['webhook', 'scale-up', 'pool', 'scale-down', 'drain', 'runner-release']) expect(packedFiles).toContain(`assets/${fn}/index.js`);
    expect(packedFiles.filter((f) => /^(lib|lambdas|bin|local|test|scripts)\//.test(f))).toEqual([]);
  });

  it('is the installed tarball, not the repository', () => {
    expect(summary.resolvedFrom.startsWith(`${scratch}/`)).toBe(true);
  });

  it("synthesizes the library's eight functions on their bundles, and the FleetConfig with the wire values", () => {
    // Five control-plane functions (the reconciler with the GitHub connection), the runner
    // release resolver (the GitHub pool follows the newest runner by default) and the drain's
    // two exports (the provider framework's functions run CDK's code).
    const own = summary.functions.filter((fn) => fn.handler.startsWith('index.'));
    expect(own.map((fn) => fn.handler).sort()).toEqual(['index.handler', 'index.handler', 'index.handler', 'index.handler', 'index.handler', 'index.handler', 'index.isComplete', 'index.onEvent']);
    for (const fn of own) expect(fn).toEqual({ runtime: 'nodejs24.x', handler: fn.handler, assetDir: true });
    // Provider.GITHUB travels as the string the Lambdas parse.
    expect(summary.fleetConfig.pools).toEqual([expect.objectContaining({ provider: 'github', labelMatch: 'exact' })]);
    expect(summary.fleetConfig.github).toMatchObject({ appId: '123456', organization: 'example-org' });
  });

  it('type-checks a TypeScript app against the package types (strict)', () => {
    expect(`${typeCheck.stdout}${typeCheck.stderr}`).toBe('');
    expect(typeCheck.status).toBe(0);
  });

  it('declares no scripts, so nothing runs at its install; the checkout keeps its prepare', () => {
    const pkg = packageJson(installed);
    expect(INSTALL_TIME_SCRIPTS.filter((name) => pkg.scripts?.[name] !== undefined)).toEqual([]);
    // Every script of the checkout needs the repository (tsx, jsii, scripts/): none is shipped.
    expect(pkg.scripts).toBeUndefined();
    expect(checkoutManifest.after).toBe(checkoutManifest.before);
    expect(packageJson().scripts?.prepare).toBe('node scripts/prepare.mjs');
  });

  it('links its commands into the app, each a compiled file with a node shebang', () => {
    const pkg = packageJson(installed) as PackageJson & { bin: Record<string, string> };
    expect(Object.keys(pkg.bin).sort()).toEqual(['cdk-warm-runners-check-pins', 'cdk-warm-runners-render']);
    for (const [name, target] of Object.entries(pkg.bin)) {
      expect(packedFiles).toContain(target);
      expect(readFileSync(join(app, 'node_modules', '.bin', name), 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/);
    }
  });

  it('npx cdk-warm-runners-render prints the user data the library renders', async () => {
    const { stdout } = await npx(['cdk-warm-runners-render', '--provider', 'github']);
    expect(stdout).toBe(renderUserData({ provider: Provider.GITHUB }));
  });

  it('npx cdk-warm-runners-check-pins checks the pins against the publishers (a loopback one here)', async () => {
    const good = await publisher(matching());
    const bad = matching();
    bad.gitlab[GL.version] = gitlabSums(OTHER, GL.arm64.sha256);
    const wrong = await publisher(bad);
    try {
      const ok = await npx(['cdk-warm-runners-check-pins'], { RUNNER_PINS_GITHUB_API: good.url, RUNNER_PINS_GITLAB_DOWNLOADS: good.url });
      expect(ok.stdout).toContain(`ok default github ${GH.version} x64 ${GH.x64.sha256}`);
      expect(ok.stdout).toContain('check-runner-pins: all 4 pinned checksums match');
      expect(good.requests.map((r) => r.path).sort()).toEqual([`/repos/actions/runner/releases/tags/v${GH.version}`, `/v${GL.version}/release.sha256`]);
      // The base URL flags as well as the environment; a mismatch exits 1 and names the file.
      await expect(npx(['cdk-warm-runners-check-pins', '--github-api', wrong.url, '--gitlab-downloads', wrong.url])).rejects.toMatchObject({
        code: 1,
        stderr: expect.stringContaining(`MISMATCH default gitlab ${GL.version} x64: pinned ${GL.x64.sha256}, published ${OTHER}`),
      });
    } finally {
      await Promise.all([good.close(), wrong.close()]);
    }
  }, SLOW);
});

/** npx in the scratch app, offline: the command must come from the installed tarball. Async, so a loopback server in this process can answer it. */
function npx(args: string[], env: Record<string, string> = {}): Promise<{ stdout: string; stderr: string }> {
  return promisify(execFile)('npx', ['--no-install', ...args], { cwd: app, env: consumerEnv({ npm_config_offline: 'true', ...env }), encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
}
