/**
 * The boot sandbox boots what the construct deploys: the user data render-sandbox.ts writes
 * for the bats suites (the default rendering and the reusable pool's with cache directories)
 * is, line for line, the user data of a WarmRunners pool with the same settings, but for the
 * values the sandbox relocates (host paths, endpoints, time bounds, the runner user and
 * package, the prefix): the code that runs is the same, and so are the settings that choose its
 * paths (provider, reuse, its limits, the number of cache directories).
 */
import { App, Duration, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WarmRunners, type RunnerPoolProps } from '../../lib';
import { Provider } from '../../lambdas/shared/contract';

const REPO = join(__dirname, '..', '..');
const image = ec2.MachineImage.latestAmazonLinux2023();
// render-sandbox.ts's reuse settings, with the production paths of its two cache directories.
const pools: RunnerPoolProps[] = [
  { name: 'plain', provider: Provider.GITHUB, machineImage: image },
  {
    name: 'cached',
    provider: Provider.GITHUB,
    machineImage: image,
    warm: { size: 1 },
    reuse: { maxJobs: 3, maxAge: Duration.hours(1), cacheDirectories: ['/var/cache/tool', '/home/runner/.cache/deps'] },
  },
];

/** The values the sandbox relocates, cut out: the two assignment statements and the arrays. */
function code(userData: string): string {
  return userData
    .replace(/^readonly MODE_RUN=[\s\S]*? RUNNER_HOME=.*$/m, '<start logic values>')
    .replace(/^readonly I_GITHUB=.*$/m, '<install values>')
    .replace(/^PREPARE=\(.*\)$/m, '<prepare commands>')
    .replace(/^CACHES=\(.*\) TEMPS=\(.*\)$/m, '<directories>');
}

/** The settings that choose the script's paths. */
function settings(userData: string): Record<string, string | number> {
  const value = (name: string): string => new RegExp(`[ \\n]${name}=(\\S*)`).exec(userData)?.[1] ?? '(none)';
  const caches = /^CACHES=\((.*)\) TEMPS=/m.exec(userData)?.[1] ?? '';
  return {
    provider: value('PROVIDER'),
    reuse: value('REUSE'),
    maxJobs: value('MAX_JOBS'),
    maxAge: value('MAX_AGE'),
    cacheDirectories: caches.split(' ').filter(Boolean).length,
  };
}

let root: string;
let deployed: Map<string, string>;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'cwr-renderings-'));
  execFileSync(
    'node',
    ['--import', 'tsx', join(REPO, 'test/templates/render-sandbox.ts'), '--root', root, '--imds', 'http://127.0.0.1:9', '--aws', 'http://127.0.0.1:9', '--aws-cli', 'aws', '--runner-user', 'runner'],
    { cwd: REPO, env: { ...process.env, CWR_SLOWDOWN: '1' } },
  );
  const stack = new Stack(new App(), 'S');
  const runners = new WarmRunners(stack, 'Runners', { vpc: new ec2.Vpc(stack, 'Vpc'), github: { appId: '1', organization: 'org' }, pools });
  deployed = new Map(runners.fleet.launchTemplates.map(({ pool, userData }) => [pool.name, userData]));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('the sandbox renderings the bats suites boot', () => {
  it.each([
    ['user-data-github.sh', 'plain'],
    ['user-data-github-reuse.sh', 'cached'],
  ])('%s is the user data of the construct\'s "%s" pool, its values relocated', (file, pool) => {
    const sandbox = readFileSync(join(root, file), 'utf8');
    const construct = deployed.get(pool)!;
    expect(code(sandbox)).toBe(code(construct));
    // Every relocated value was cut out: the code holds none of the sandbox's paths.
    expect(code(sandbox)).not.toContain(root);
    expect(settings(sandbox)).toEqual(settings(construct));
  });

  it('tells the two renderings apart: the reusable one has reuse and two cache directories, the default neither', () => {
    expect(settings(deployed.get('cached')!)).toMatchObject({ reuse: '1', cacheDirectories: 2 });
    expect(settings(deployed.get('plain')!)).toMatchObject({ reuse: '0', cacheDirectories: 0 });
  });
});
