import { createHash } from 'node:crypto';
import { SSMClient } from '@aws-sdk/client-ssm';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RunnerVersion, WarmRunners } from '../../lib';
import { createRunnerReleaseHandler } from '../../lambdas/runner-release/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { parseFleetConfig, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { alarmFires, emfDatapoints, type Datapoint } from '../support/alarm-eval';
import { FakeAws } from '../support/fake-aws';
import { Lines } from '../support/fixtures';
import { startLoopback, type Loopback } from '../support/loopback';

/**
 * The runner-update alarms fire on what the real release resolver publishes: its hourly runs
 * against a loopback GitHub, their EMF records evaluated against the synthesized alarms.
 */
const HOUR = 3_600_000;
const NOW = new Date('2026-12-06T12:00:00.000Z');

const stack = new Stack(new App(), 'S');
const runners = new WarmRunners(stack, 'Runners', {
  vpc: new ec2.Vpc(stack, 'Vpc'),
  github: { appId: '1', organization: 'org' },
  pools: [
    { name: 'following', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() },
    { name: 'pinned', provider: Provider.GITHUB, labels: ['pinned'], machineImage: ec2.MachineImage.latestAmazonLinux2023(), runnerVersion: RunnerVersion.pinned() },
  ],
});
const template = Template.fromStack(stack);
const alarm = (id: string): Record<string, unknown> => {
  const child = runners.node.tryFindChild(id) as cloudwatch.Alarm | undefined;
  if (!child) throw new Error(`no alarm ${id}`);
  return (template.findResources('AWS::CloudWatch::Alarm')[stack.getLogicalId(child.node.defaultChild as cloudwatch.CfnAlarm)] as { Properties: Record<string, unknown> }).Properties;
};
const config: FleetConfig = parseFleetConfig(JSON.stringify(runners.config));
const pinnedVersion = config.pools.find((p) => p.name === 'pinned')!.runnerVersion;
const resolver = runners.runnerReleaseFunction!;

let releases: { version: string; publishedAt: string }[] = [];
let down = false;
let server: Loopback;
beforeAll(async () => {
  server = await startLoopback((req) => {
    if (down) return { status: 503, body: 'down' };
    if (!req.path.startsWith('/repos/actions/runner/releases')) return { status: 404, body: 'not found' };
    return {
      status: 200,
      body: releases.map((r) => ({
        tag_name: `v${r.version}`,
        draft: false,
        prerelease: false,
        published_at: r.publishedAt,
        body: ['x64', 'arm64'].map((a) => `<!-- BEGIN SHA linux-${a} -->${createHash('sha256').update(`${r.version}-${a}`).digest('hex')}<!-- END SHA linux-${a} -->`).join('\n'),
        assets: ['x64', 'arm64'].map((a) => ({ name: `actions-runner-linux-${a}-${r.version}.tar.gz`, browser_download_url: `https://github.com/actions/runner/releases/download/v${r.version}/actions-runner-linux-${a}-${r.version}.tar.gz` })),
      })),
    };
  });
});
let aws: FakeAws;
beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  down = false;
  // Newer than the library's pin, so the pin has a refusal date.
  releases = [{ version: '2.400.0', publishedAt: '2026-11-20T10:00:00Z' }];
});
afterAll(async () => {
  aws.restore();
  await server.close();
});

/** The resolver's `Errors` as AWS/Lambda publishes it: 1 for an invocation that threw. */
const resolverErrors = (value: number, at: number): Datapoint => ({
  namespace: 'AWS/Lambda',
  name: 'Errors',
  dimensions: { FunctionName: { Ref: stack.getLogicalId(resolver.node.defaultChild as lambda.CfnFunction) } },
  value,
  timestamp: at,
});

/**
 * One hourly run: the resolver's datapoints placed in hour `hour` (EMF stamps the wall clock;
 * the runs of a test are seconds apart), and an `Errors` datapoint of 1 when the run threw
 * (`RunnerReleaseAlarm` adds the two; a term without data counts as 0).
 */
async function hourlyRun(hour: number, loadConfig: () => Promise<FleetConfig> = async () => config): Promise<Datapoint[]> {
  const lines = new Lines();
  const threw = await createRunnerReleaseHandler({
    ssm: new SSMClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig,
    sources: { githubApi: server.url, gitlabApi: `${server.url}/api/v4`, gitlabDownloads: `${server.url}/downloads`, timeoutMs: 5_000 },
    now: () => NOW,
    sink: lines.sink,
  })().then(
    () => false,
    () => true,
  );
  const at = NOW.getTime() + hour * HOUR;
  return [...emfDatapoints(lines.lines).map((p) => ({ ...p, timestamp: at })), ...(threw ? [resolverErrors(1, at)] : [])];
}

describe('runner-update alarms fire on the resolver\'s own metrics', () => {
  it('RunnerReleaseAlarm: two hourly runs in a row that cannot resolve fire it; one does not', async () => {
    down = true;
    const first = await hourlyRun(0);
    expect(alarmFires(alarm('RunnerReleaseAlarm'), first)).toBe(false);
    const second = await hourlyRun(1);
    expect(alarmFires(alarm('RunnerReleaseAlarm'), [...first, ...second])).toBe(true);
    down = false;
    const recovered = await hourlyRun(1);
    expect(alarmFires(alarm('RunnerReleaseAlarm'), [...first, ...recovered])).toBe(false);
  });

  it('RunnerReleaseAlarm: two hourly runs in a row where the resolver throws (only its Lambda Errors) fire it; one does not', async () => {
    const broken = async (): Promise<FleetConfig> => {
      throw new Error('AccessDeniedException: not authorized to perform ssm:GetParameter');
    };
    const first = await hourlyRun(0, broken);
    const second = await hourlyRun(1, broken);
    expect([...first, ...second]).toEqual([resolverErrors(1, NOW.getTime()), resolverErrors(1, NOW.getTime() + HOUR)]);
    expect(alarmFires(alarm('RunnerReleaseAlarm'), first)).toBe(false);
    expect(alarmFires(alarm('RunnerReleaseAlarm'), [...first, ...second])).toBe(true);
  });

  it('RunnerVersionExpiring: fires for the pinned pool within a week of GitHub refusing its runner, not before', async () => {
    // A newer release 20 days old: the pin has 10 days left.
    releases = [{ version: '2.400.0', publishedAt: new Date(NOW.getTime() - 20 * 24 * HOUR).toISOString() }];
    expect(alarmFires(alarm('RunnerVersionExpiring-pinned'), await hourlyRun(0))).toBe(false);
    // 25 days old: 5 days left.
    releases = [{ version: '2.400.0', publishedAt: new Date(NOW.getTime() - 25 * 24 * HOUR).toISOString() }];
    const late = await hourlyRun(0);
    expect(pinnedVersion).not.toBe('2.400.0');
    expect(alarmFires(alarm('RunnerVersionExpiring-pinned'), late)).toBe(true);
    // The following pool runs the newest release: never expiring.
    expect(alarmFires(alarm('RunnerVersionExpiring-following'), late)).toBe(false);
  });
});
