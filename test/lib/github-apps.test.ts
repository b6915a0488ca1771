import { SSMClient, GetParameterCommand } from '@aws-sdk/client-ssm';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WarmRunners, type WarmRunnersProps } from '../../lib';
import { createCiProviders } from '../../lambdas/ci';
import { GITHUB_APPS_LOW_FRACTION, JOB_MESSAGE_SCHEMA_VERSION, METRIC_NAMES, parseFleetConfig, Provider, ssmPaths, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { isAllowed, rolePolicyStatements } from './iam-eval';

/**
 * Several GitHub Apps in the construct: each further App's key parameter, granted to exactly the
 * functions that call GitHub, listed in the outputs; the alarm when every App is nearly spent,
 * made to fire by the figures the functions publish against a loopback GitHub whose budgets are low.
 */
const PSEUDO = { 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };
const APP_1 = '7001';
const APP_2 = '7002';
const ORG = 'acme';

let gh: LoopbackGitHub;
beforeAll(async () => {
  gh = await startLoopbackGitHub({ organization: ORG, appId: APP_1, additionalAppIds: [APP_2], rateLimit: 1000 });
});
afterAll(async () => gh?.close());

function fleet(github: Partial<NonNullable<WarmRunnersProps['github']>> = {}): { stack: Stack; runners: WarmRunners } {
  const stack = new Stack(new App(), 'S');
  const runners = new WarmRunners(stack, 'Runners', {
    vpc: new ec2.Vpc(stack, 'Vpc'),
    github: { appId: APP_1, additionalAppIds: [APP_2], organization: ORG, apiUrl: gh.url, ...github },
    pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], machineImage: ec2.MachineImage.latestAmazonLinux2023() }],
  });
  return { stack, runners };
}

describe('several GitHub Apps in the construct', () => {
  let built: ReturnType<typeof fleet>;
  let template: Template;
  beforeAll(() => {
    built = fleet();
    template = Template.fromStack(built.stack);
  });

  it('lets exactly the functions that call GitHub read each App key, and lists every key parameter in the outputs', () => {
    const paths = ssmPaths('warm-runners');
    const keys = [paths.github.appPrivateKey, paths.githubAppPrivateKey(APP_2)];
    expect(paths.githubAppPrivateKey(APP_2)).toBe(`/warm-runners/ci/github/apps/${APP_2}/private-key`);
    const arn = (name: string) => `arn:aws:ssm:eu-west-1:111122223333:parameter${name}`;
    const roles = Object.keys(template.findResources('AWS::IAM::Role'));
    const canRead = (prefix: string) => {
      expect(roles.some((r) => r.startsWith(prefix)), prefix).toBe(true);
      const statements = rolePolicyStatements(template, prefix, PSEUDO);
      return keys.map((k) => isAllowed(statements, { action: 'ssm:GetParameter', resource: arn(k), context: {} }));
    };
    for (const fn of ['RunnersScaleUp', 'RunnersScaleDown', 'RunnersReconcile', 'RunnersDrain']) expect([fn, canRead(fn)]).toEqual([fn, [true, true]]);
    for (const fn of ['RunnersWebhook', 'RunnersPool', 'RunnersFleetRole']) expect([fn, canRead(fn)]).toEqual([fn, [false, false]]);
    const outputs = template.findOutputs('*');
    const secrets = Object.entries(outputs).find(([id]) => id.includes('SecretParameters'))![1].Value as string;
    for (const k of keys) expect(secrets.split(',')).toContain(k);
    expect(built.runners.secretParameterNames).toEqual(expect.arrayContaining(keys));
  });

  it('shows each App in the dashboard', () => {
    const body = JSON.stringify(Object.values(template.findResources('AWS::CloudWatch::Dashboard'))[0]!.Properties.DashboardBody);
    for (const id of [APP_1, APP_2]) expect(body).toContain(`\\"${METRIC_NAMES.githubAppRateRemaining}\\",\\"AppId\\",\\"${id}\\"`);
  });

  it('refuses an App id that is not a number or is listed twice, naming the prop', () => {
    expect(() => fleet({ additionalAppIds: ['my-app'] })).toThrow(/github\.additionalAppIds\[0\] must be an App's numeric id.*"my-app"/);
    expect(() => fleet({ additionalAppIds: [APP_2, APP_1] })).toThrow(/github\.additionalAppIds\[1\] App 7001 is listed twice/);
  });

  it('GitHubAppsRateLimitLow fires on the figures the functions publish when every App is nearly spent, and not before', async () => {
    const alarm = built.runners.alarms.find((a) => a.node.id === 'GitHubAppsRateLimitLow');
    expect(alarm).toBeDefined();
    const [props] = Object.values(template.findResources('AWS::CloudWatch::Alarm')).filter((a) => (a.Properties as { MetricName?: string }).MetricName === METRIC_NAMES.githubAppsBestRemainingFraction).map((a) => a.Properties as Record<string, unknown>);
    expect(props).toMatchObject({ Namespace: built.runners.metricNamespace, Statistic: 'Minimum', ComparisonOperator: 'LessThanThreshold', Threshold: GITHUB_APPS_LOW_FRACTION, EvaluationPeriods: 3, DatapointsToAlarm: 2 });
    expect(props!.Dimensions).toBeUndefined();

    // The functions' own config, as they parse it, and the providers every one of them builds.
    const config = parseFleetConfig(JSON.stringify(built.runners.config));
    const ssm = mockClient(SSMClient);
    try {
      const keyOf = new Map([
        [config.parameters.github.appPrivateKey, gh.apps[0]!.privateKeyPem],
        [ssmPaths(config.prefix).githubAppPrivateKey(APP_2), gh.apps[1]!.privateKeyPem],
      ]);
      ssm.on(GetParameterCommand).callsFake((input: { Name: string }) => ({ Parameter: { Value: keyOf.get(input.Name) } }));
      const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
      const message: JobMessage = { schemaVersion: JOB_MESSAGE_SCHEMA_VERSION, provider: Provider.GITHUB, jobId: `github:${job.id}`, providerJobId: String(job.id), pool: 'linux', owner: ORG, project: 'app', labels: job.labels, labelsResolved: true, traceId: 't', deliveryId: 'd', receivedAt: new Date().toISOString() };
      /** The alarm's evaluation of one period: the Minimum of the published data points against its threshold. */
      const fires = async (budgets: [number, number]): Promise<boolean> => {
        gh.setRateLimitRemaining('installation', budgets[0], APP_1);
        gh.setRateLimitRemaining('installation', budgets[1], APP_2);
        const lines: string[] = [];
        const github = createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }), metricSink: (l) => lines.push(l) }).github!;
        for (let i = 0; i < 4; i++) await github.isJobQueued(message);
        const points = lines
          .map((l) => JSON.parse(l) as { _aws: { CloudWatchMetrics: { Namespace: string; Dimensions: string[][] }[] } } & Record<string, unknown>)
          .filter((r) => r._aws.CloudWatchMetrics[0]!.Namespace === props!.Namespace && r._aws.CloudWatchMetrics[0]!.Dimensions.some((d) => d.length === 0) && typeof r[props!.MetricName as string] === 'number')
          .map((r) => r[props!.MetricName as string] as number);
        expect(points.length).toBeGreaterThan(0);
        return Math.min(...points) < (props!.Threshold as number);
      };
      // One App nearly spent, the other not: the fleet still has budget.
      expect(await fires([40, 900])).toBe(false);
      // Both nearly spent.
      expect(await fires([40, 30])).toBe(true);
    } finally {
      ssm.restore();
    }
  });
});
