import { App, Duration, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { AwsSolutionsChecks } from 'cdk-nag';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ReuseScope, WarmRunners, type RunnerPoolProps, type WarmRunnersProps } from '../../lib';
import { METRIC_NAMES, parseFleetConfig, Provider, tagKeys } from '../../lambdas/shared/contract';
import { isAllowed, rolePolicyStatements, type Statement } from './iam-eval';

const PSEUDO = { 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };
const image = ec2.MachineImage.latestAmazonLinux2023();
const cached: RunnerPoolProps = {
  name: 'cached',
  provider: Provider.GITHUB,
  machineImage: image,
  warm: { size: 2 },
  reuse: { maxJobs: 5, maxAge: Duration.hours(12), cacheDirectories: ['/var/cache/ci', '/home/runner/.cache'] },
};
const plain: RunnerPoolProps = { name: 'plain', provider: Provider.GITHUB, machineImage: image, warm: { size: 1 } };

function synth(pools: RunnerPoolProps[], extra: Partial<WarmRunnersProps> = {}, app = new App()) {
  // Environment-agnostic, as the fleet's cdk-nag acknowledgements are written.
  const stack = new Stack(app, 'S');
  const vpc = new ec2.Vpc(stack, 'Vpc');
  vpc.addFlowLog('FlowLog');
  const runners = new WarmRunners(stack, 'Runners', { vpc, github: { appId: '1', organization: 'org' }, pools, ...extra });
  return { stack, runners };
}

describe('instance role: parking after a job (contract reuse.ts, step 4)', () => {
  const keys = tagKeys('warm-runners');
  const own = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0aaaaaaaaaaaaaaaa';
  const other = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0bbbbbbbbbbbbbbbb';
  const poolTag = `aws:ResourceTag/${keys.pool}`;
  const ctx = (target: string, tagKeys: string[], pool = 'cached') => ({ 'ec2:SourceInstanceARN': own, 'aws:ARN': target, 'aws:TagKeys': tagKeys, [poolTag]: pool });
  let statements: Statement[];
  beforeAll(() => {
    const { stack } = synth([cached, plain]);
    statements = rolePolicyStatements(Template.fromStack(stack), 'RunnersFleetRole', PSEUDO);
  });
  const activation = () => [keys.activatedAt, keys.traceId, keys.jobId, keys.runnerId, keys.jobStarted, keys.idleSince];

  it.each<[string, string, string, Record<string, string | string[]>, boolean]>([
    ['its parking mark', 'ec2:CreateTags', own, ctx(own, [keys.parking]), true],
    ['its use count and standby mark, in one request', 'ec2:CreateTags', own, ctx(own, [keys.uses, keys.warmStandby]), true],
    ['its own affinity (only scale-up writes it: R1)', 'ec2:CreateTags', own, ctx(own, [keys.affinity]), false],
    ['its affinity beside its use count and standby mark', 'ec2:CreateTags', own, ctx(own, [keys.affinity, keys.uses, keys.warmStandby]), false],
    ['removing its activation tags, in one request', 'ec2:DeleteTags', own, ctx(own, activation()), true],
    ['removing its parking mark (the park keeps it: the pool bounds a parking instance by it)', 'ec2:DeleteTags', own, ctx(own, [...activation(), keys.parking]), false],
    ["another instance's affinity", 'ec2:CreateTags', other, ctx(other, [keys.affinity]), false],
    ["removing another instance's activation", 'ec2:DeleteTags', other, ctx(other, [keys.activatedAt]), false],
    ['its affinity in a pool without reuse', 'ec2:CreateTags', own, ctx(own, [keys.affinity], 'plain'), false],
    ['removing its activation in a pool without reuse', 'ec2:DeleteTags', own, ctx(own, [keys.activatedAt], 'plain'), false],
    ['its affinity outside the fleet (no pool tag)', 'ec2:CreateTags', own, { 'ec2:SourceInstanceARN': own, 'aws:ARN': own, 'aws:TagKeys': [keys.affinity] }, false],
    ['its activation tag (only scale-up activates)', 'ec2:CreateTags', own, ctx(own, [keys.activatedAt]), false],
    ['its affinity beside its runner id', 'ec2:CreateTags', own, ctx(own, [keys.affinity, keys.runnerId]), false],
    ['removing its pool tag', 'ec2:DeleteTags', own, ctx(own, [keys.pool]), false],
    ['removing its affinity (the caches stay: never removed)', 'ec2:DeleteTags', own, ctx(own, [keys.affinity]), false],
    ['a DeleteTags without keys (removes every tag)', 'ec2:DeleteTags', own, { 'ec2:SourceInstanceARN': own, 'aws:ARN': own, [poolTag]: 'cached' }, false],
    ['stopping itself (it parks by powering off)', 'ec2:StopInstances', own, ctx(own, []), false],
  ])('%s', (_name, action, resource, context, allowed) => {
    expect(isAllowed(statements, { action, resource, context })).toBe(allowed);
  });

  it('is not granted at all in a fleet without a reusable pool', () => {
    const { stack } = synth([plain]);
    const s = rolePolicyStatements(Template.fromStack(stack), 'RunnersFleetRole', PSEUDO);
    expect(isAllowed(s, { action: 'ec2:CreateTags', resource: own, context: ctx(own, [keys.uses], 'plain') })).toBe(false);
    expect(s.some((st) => [st.Action].flat().includes('ec2:DeleteTags'))).toBe(false);
  });
});

describe('dashboard', () => {
  it('shows reuse hits, misses, the hit rate, idle-stops and parked reused instances per reusable pool', () => {
    const { stack, runners } = synth([cached, plain]);
    const dashboards = Object.values(Template.fromStack(stack).findResources('AWS::CloudWatch::Dashboard'));
    expect(dashboards).toHaveLength(1);
    const body = JSON.stringify(dashboards[0]!.Properties.DashboardBody);
    const widgets = [...body.matchAll(/\\"title\\":\\"([^\\]+)\\"/g)].map((m) => m[1]);
    expect(widgets).toContain('Reuse cached');
    expect(widgets).not.toContain('Reuse plain');
    const reuse = body.slice(body.indexOf('Reuse cached'));
    for (const name of [METRIC_NAMES.reuseHits, METRIC_NAMES.reuseMisses, METRIC_NAMES.idleStops, METRIC_NAMES.parkedReused]) {
      expect(reuse.slice(0, reuse.indexOf('"title') > 0 ? reuse.indexOf('\\"title') : undefined)).toContain(`\\"${name}\\"`);
    }
    expect(reuse).toContain('100 * hits / (hits + misses)');
    expect(runners.dashboard).toBeDefined();
  });
});

describe('validation at synth names the prop and the pool', () => {
  const reuseOf = (reuse: RunnerPoolProps['reuse'], pool: Partial<RunnerPoolProps> = {}) => () => synth([{ ...cached, reuse, ...pool }]);
  it.each<[string, () => unknown, RegExp]>([
    ['a scope the provider does not have', reuseOf({ scope: ReuseScope.PROJECT }), /pools\[0\]\.reuse\.scope \(pool "cached"\) is "project".*repository/],
    ['maxJobs 0', reuseOf({ maxJobs: 0 }), /pools\[0\]\.reuse\.maxJobs \(pool "cached"\) must be a whole number from 1 to/],
    ['a relative cache directory', reuseOf({ cacheDirectories: ['cache'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "cache" must be an absolute path/],
    ['a system cache directory', reuseOf({ cacheDirectories: ['/etc/ci'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "\/etc\/ci" overlaps the system directory \/etc/],
    ['a maxAge under five minutes', reuseOf({ maxAge: Duration.minutes(1) }), /pools\[0\]\.reuse\.maxAge \(pool "cached"\) must be from 5 minutes to 30 days, got 1 minute/],
    ['the runner directory as a cache', reuseOf({ cacheDirectories: ['/opt/actions-runner/_work'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "\/opt\/actions-runner\/_work" overlaps the runner directory/],
    ['a directory holding the runner directory', reuseOf({ cacheDirectories: ['/opt'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "\/opt" overlaps the runner directory/],
    ["the runner user's home itself", reuseOf({ cacheDirectories: ['/home/runner'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "\/home\/runner" is or holds the runner user's home/],
    ["the home of a renamed runner user", reuseOf({ cacheDirectories: ['/home/ci'] }, { runnerUser: 'ci' }), /is or holds the runner user's home \/home\/ci/],
    ['a runner directory in the runner user\'s home (every job would terminate)', reuseOf({}, { runnerDirectory: '/home/runner/actions-runner' }), /pools\[0\]\.runnerDirectory \(pool "cached"\) \/home\/runner\/actions-runner lies in the runner user's home/],
    ["the boot script's state", reuseOf({ cacheDirectories: ['/var/lib/warm-runners'] }), /pools\[0\]\.reuse\.cacheDirectories\[0\] \(pool "cached"\) "\/var\/lib\/warm-runners" overlaps \/var\/lib\/warm-runners, which the boot script owns/],
  ])('refuses %s', (_name, build, message) => {
    expect(build).toThrow(message);
  });

  it('accepts directories inside the home and of their own, and reuse on a spot pool', () => {
    const { runners } = synth([{ ...cached, spot: true }]);
    const pool = parseFleetConfig(JSON.stringify(runners.config)).pools[0]!;
    expect(pool.reuse).toEqual({ scope: ReuseScope.REPOSITORY, maxJobs: 5, maxAgeSeconds: 12 * 3600, cacheDirectories: ['/var/cache/ci', '/home/runner/.cache'] });
    expect(pool.spot).toBe(true);
  });
});

describe('a reusable pool without a warm pool', () => {
  const warnings = (pool: RunnerPoolProps) => Annotations.fromStack(synth([pool]).stack).findWarning('*', Match.stringLikeRegexp('reuse \\(pool "[a-z]+"\\) is set but the pool has no warm pool'));
  it('is warned about at synth, naming the pool: no job would find a cache', () => {
    expect(warnings({ ...cached, warm: { size: 0 } })).toHaveLength(1);
    expect(JSON.stringify(warnings({ ...cached, warm: undefined }))).toContain('pools[0].reuse (pool \\"cached\\")');
  });
  it('is not warned about with a warm size or a schedule window above 0', () => {
    expect(warnings(cached)).toHaveLength(0);
    expect(warnings({ ...cached, warm: { size: 0, schedule: [{ window: 'MON-FRI 07:00-19:00', size: 2 }] } })).toHaveLength(0);
  });
});

describe('cdk-nag', () => {
  it('finds nothing unacknowledged in a fleet with a reusable pool', () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-reuse-nag-')) });
    synth([cached, plain], {}, app);
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
    const report = JSON.parse(readFileSync(join(app.outdir, 'validation-report.json'), 'utf8'));
    expect(JSON.stringify(report)).not.toMatch(/"status":\s*"failure"/);
  });
});
