import { App, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { RunnerImage, RunnerVersion, WarmRunners, decodeUserData, type RunnerPoolProps } from '../../lib';
import { DEFAULT_RUNNER_PACKAGES, METRIC_NAMES, Provider, RUNNER_PIN_WARN_DAYS, ssmPaths, type RunnerPackage } from '../../lambdas/shared/contract';

/** Runner updates at synth: the default, the pin, the resolver with its schedule, the alarms. */
const paths = ssmPaths('warm-runners');
const image = ec2.MachineImage.latestAmazonLinux2023();
const mirror: RunnerPackage = {
  version: '2.337.0',
  x64: { url: 'https://mirror.example.com/x64.tar.gz', sha256: DEFAULT_RUNNER_PACKAGES.github.x64.sha256 },
  arm64: { url: 'https://mirror.example.com/arm64.tar.gz', sha256: DEFAULT_RUNNER_PACKAGES.github.arm64.sha256 },
};

function synth(pools: RunnerPoolProps[] | ((stack: Stack) => RunnerPoolProps[]), gitlabOnly = false) {
  const stack = new Stack(new App(), 'S');
  if (typeof pools === 'function') pools = pools(stack);
  const runners = new WarmRunners(stack, 'Runners', {
    vpc: new ec2.Vpc(stack, 'Vpc'),
    ...(gitlabOnly ? {} : { github: { appId: '1', organization: 'org' } }),
    ...(pools.some((p) => p.provider === Provider.GITLAB) ? { gitlab: { url: 'https://gitlab.example.com' } } : {}),
    pools,
  });
  const template = Template.fromStack(stack);
  const config = () => runners.config;
  const userData = (pool: string) => {
    const [lt] = Object.entries(template.findResources('AWS::EC2::LaunchTemplate')).filter(([id]) => id.includes(`LaunchTemplate${pool}`));
    return decodeUserData(lt![1].Properties.LaunchTemplateData.UserData as string);
  };
  const warnings = () => Annotations.fromStack(stack).findWarning('*', Match.anyValue()).map((w) => String(w.entry.data));
  return { template, config, userData, warnings };
}

describe('runner updates at synth', () => {
  it('follows the newest release by default: the resolver runs hourly, the boot reads the release, both alarms exist', () => {
    const { template, config, userData } = synth([{ name: 'linux', provider: Provider.GITHUB, machineImage: image }]);
    expect(config().pools[0]!.runnerVersion).toBe('latest');
    template.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(1 hour)', Description: Match.stringLikeRegexp('runner release resolver') });
    template.hasResourceProperties('AWS::Lambda::Function', { Description: Match.stringLikeRegexp('Resolves the newest runner releases') });
    expect(userData('linux')).toContain(`I_RELEASE=${paths.runnerRelease(Provider.GITHUB)} `);
    expect(userData('linux')).toContain('I_TAG_VERSION=warm-runners:runner-version');
    // Two hourly runs in a row: one transient 5xx of GitHub or GitLab pages no one.
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Threshold: 1,
      EvaluationPeriods: 2,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Metrics: Match.arrayWith([Match.objectLike({ MetricStat: Match.objectLike({ Metric: Match.objectLike({ MetricName: METRIC_NAMES.runnerReleaseProblems }) }) })]),
    });
    expect(JSON.stringify(template.findResources('AWS::CloudWatch::Alarm'))).toContain('could not be resolved or was refused');
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: METRIC_NAMES.runnerDaysLeft,
      Dimensions: [{ Name: 'Pool', Value: 'linux' }],
      Statistic: 'Minimum',
      Period: 3600,
      Threshold: RUNNER_PIN_WARN_DAYS,
      ComparisonOperator: 'LessThanOrEqualToThreshold',
      AlarmDescription: Match.stringLikeRegexp('the last resolved release'),
    });
  });

  it('a pin (a runnerPackage, or RunnerVersion.pinned()) renders the pin only, and its staleness alarm names it', () => {
    const { template, config, userData } = synth([
      { name: 'mirror', provider: Provider.GITHUB, machineImage: image, runnerPackage: mirror },
      { name: 'pinned', provider: Provider.GITHUB, machineImage: image, runnerVersion: RunnerVersion.pinned() },
    ]);
    expect(config().pools.map((p) => p.runnerVersion)).toEqual(['2.337.0', DEFAULT_RUNNER_PACKAGES.github.version]);
    for (const pool of ['mirror', 'pinned']) expect(userData(pool)).toContain("I_RELEASE='' ");
    template.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: METRIC_NAMES.runnerDaysLeft, Dimensions: [{ Name: 'Pool', Value: 'mirror' }], AlarmDescription: Match.stringLikeRegexp('pinned 2.337.0') });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: METRIC_NAMES.runnerDaysLeft, Dimensions: [{ Name: 'Pool', Value: 'pinned' }] });
    // No pool follows a release: nobody may read or write one.
    // The drain's role deletes what is left under the release root, whatever the pools follow now.
    const policies = Object.entries(template.findResources('AWS::IAM::Policy')).filter(([id]) => !id.includes('Drain'));
    expect(policies.length).toBeGreaterThan(0);
    expect(JSON.stringify(policies)).not.toContain('runners/release');
  });

  it('a pool on a RunnerImage runs the runner baked into it: pinned at that version (its expiry alarm watches it), nothing read or rolled; RunnerVersion.latest() there is warned about', () => {
    const baked = { ...mirror, version: '2.336.0' };
    const { template, config, userData, warnings } = synth((stack) => [
      { name: 'image', provider: Provider.GITHUB, machineImage: new RunnerImage(stack, 'Image', { provider: Provider.GITHUB }).machineImage() },
      { name: 'own', provider: Provider.GITHUB, machineImage: new RunnerImage(stack, 'Own', { provider: Provider.GITHUB, runnerPackage: baked }).machineImage(), runnerVersion: RunnerVersion.latest() },
    ]);
    expect(config().pools.map((p) => p.runnerVersion)).toEqual([DEFAULT_RUNNER_PACKAGES.github.version, '2.336.0']);
    for (const pool of ['image', 'own']) expect(userData(pool)).toContain("I_RELEASE='' ");
    template.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: METRIC_NAMES.runnerDaysLeft, Dimensions: [{ Name: 'Pool', Value: 'own' }], AlarmDescription: Match.stringLikeRegexp('pinned 2.336.0') });
    // The resolver still runs (it publishes the days left of GitHub pins), but no instance reads a release.
    expect(JSON.stringify(template.findResources('AWS::IAM::Policy'))).not.toContain('ReadResolvedRunnerRelease');
    expect(warnings().filter((w) => /RunnerVersion.latest\(\) has no effect on a RunnerImage/.test(w))).toEqual([expect.stringMatching(/^pools\[\d\]\.runnerVersion \(pool "own"\) .*carries runner 2\.336\.0/)]);
  });

  it('refuses RunnerVersion.latest() beside a runnerPackage, naming both', () => {
    expect(() => synth([{ name: 'linux', provider: Provider.GITHUB, machineImage: image, runnerVersion: RunnerVersion.latest(), runnerPackage: mirror }])).toThrow(
      /pools\[0\]\.runnerVersion \(pool "linux"\) is RunnerVersion.latest\(\) and runnerPackage pins 2.337.0, which contradict/,
    );
  });

  it('a GitLab pool keeps the pin by default (gitlab-runner must suit the server): no resolver; one that opts in to RunnerVersion.latest() has it, without a GitHub window alarm', () => {
    const resolvers = (t: Template) => Object.keys(t.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('Resolves the newest') } }));
    const byDefault = synth([{ name: 'gl', provider: Provider.GITLAB, machineImage: image }], true);
    expect(byDefault.config().pools[0]!.runnerVersion).toBe(DEFAULT_RUNNER_PACKAGES.gitlab.version);
    expect(byDefault.userData('gl')).toContain("I_RELEASE='' ");
    expect(resolvers(byDefault.template)).toHaveLength(0);
    const pinned = synth([{ name: 'gl', provider: Provider.GITLAB, machineImage: image, runnerVersion: RunnerVersion.pinned() }], true);
    expect(resolvers(pinned.template)).toHaveLength(0);
    const following = synth([{ name: 'gl', provider: Provider.GITLAB, machineImage: image, runnerVersion: RunnerVersion.latest() }], true);
    expect(following.config().pools[0]!.runnerVersion).toBe('latest');
    expect(resolvers(following.template)).toHaveLength(1);
    expect(Object.keys(following.template.findResources('AWS::CloudWatch::Alarm', { Properties: { MetricName: METRIC_NAMES.runnerDaysLeft } }))).toHaveLength(0);
    expect(following.userData('gl')).toContain(`I_RELEASE=${paths.runnerRelease(Provider.GITLAB)} `);
  });

  it('in a mixed fleet the GitHub pool follows by default and the GitLab pool keeps its pin', () => {
    const { config } = synth([
      { name: 'gh', provider: Provider.GITHUB, machineImage: image },
      { name: 'gl', provider: Provider.GITLAB, machineImage: image },
    ]);
    expect(config().pools.map((p) => p.runnerVersion)).toEqual(['latest', DEFAULT_RUNNER_PACKAGES.gitlab.version]);
  });
});
