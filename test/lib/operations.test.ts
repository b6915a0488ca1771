import { EC2Client } from '@aws-sdk/client-ec2';
import { SSMClient } from '@aws-sdk/client-ssm';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ExampleRunnersStack } from '../../bin/example-stack';
import { WarmRunners, type WarmRunnersProps } from '../../lib';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { INSTANCE_LEDGER_STAGES, METRIC_NAMES, parseFleetConfig, Provider } from '../../lambdas/shared/contract';
import { awsError, FakeAws } from '../support/fake-aws';
import { Lines } from '../support/fixtures';

type Resource = { Properties: Record<string, unknown> };

const image = ec2.MachineImage.latestAmazonLinux2023();
const fleetProps = (vpc: ec2.IVpc, extra: Partial<WarmRunnersProps> = {}): WarmRunnersProps => ({
  vpc,
  github: { appId: '1', organization: 'org' },
  pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: image, warm: { size: 2 } }],
  ...extra,
});

describe('alarm actions', () => {
  it('go on every alarm in the fleet, including one added under it after construction', () => {
    const stack = new Stack(new App(), 'S');
    const topic = new sns.Topic(stack, 'Topic');
    const runners = new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { alarmActions: [new actions.SnsAction(topic)] }));
    new cloudwatch.Alarm(runners, 'AddedLater', { metric: runners.poolFunction.metricErrors(), threshold: 1, evaluationPeriods: 1 });
    const alarms = Object.entries(Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm'));
    expect(alarms.length).toBe(runners.alarms.length + 1);
    for (const [id, alarm] of alarms) expect([id, (alarm as Resource).Properties.AlarmActions]).toEqual([id, [{ Ref: stack.getLogicalId(topic.node.defaultChild as sns.CfnTopic) }]]);
  });

  it('are absent when none are configured', () => {
    const stack = new Stack(new App(), 'S');
    new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc')));
    for (const alarm of Object.values(Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm'))) {
      expect((alarm as Resource).Properties.AlarmActions).toBeUndefined();
    }
  });
});

/** GitHub's heading anchors: lower case, punctuation other than "-" and "_" dropped, spaces to "-". */
function anchors(markdown: string): Set<string> {
  const out = new Set<string>();
  for (const [, heading] of markdown.matchAll(/^#{1,6} (.+)$/gm)) {
    out.add(heading!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-'));
  }
  return out;
}

/**
 * An alarm description as CloudWatch would store it: a joined one (it names a function) with
 * each reference taken at Lambda's longest function name (64 characters).
 */
function alarmDescription(value: unknown): string {
  if (typeof value === 'string') return value;
  const join = (value as { 'Fn::Join'?: [string, unknown[]] })['Fn::Join'];
  if (!join) throw new Error(`unexpected alarm description ${JSON.stringify(value)}`);
  return join[1].map((part) => (typeof part === 'string' ? part : 'f'.repeat(64))).join(join[0]);
}

describe('alarm descriptions', () => {
  it('each point at a section of the docs that exists', () => {
    const template = Template.fromStack(new ExampleRunnersStack(new App(), 'Example'));
    const alarms = Object.entries(template.findResources('AWS::CloudWatch::Alarm'));
    expect(alarms.length).toBeGreaterThan(0);
    for (const [id, alarm] of alarms) {
      const description = alarmDescription((alarm as Resource).Properties.AlarmDescription);
      // CloudWatch refuses a description over 1024 characters (a deploy-time failure).
      expect([id, description.length]).toEqual([id, expect.toSatisfy((n: number) => n <= 1024)]);
      const ref = /docs\/([\w-]+\.md)#([\w-]+)/.exec(description);
      expect([id, ref?.[0]]).toEqual([id, expect.any(String)]);
      const doc = readFileSync(join(__dirname, '..', '..', 'docs', ref![1]!), 'utf8');
      expect([id, anchors(doc).has(ref![2]!)]).toEqual([id, true]);
    }
  });
});

describe('the drain\'s failure reasons', () => {
  it('point at a section of docs/operations.md that exists', () => {
    const source = readFileSync(join(__dirname, '..', '..', 'lambdas', 'drain', 'handler.ts'), 'utf8');
    const refs = [...source.matchAll(/docs\/operations\.md#([\w-]+)/g)].map((m) => m[1]!);
    expect(refs.length).toBeGreaterThan(2);
    const doc = anchors(readFileSync(join(__dirname, '..', '..', 'docs', 'operations.md'), 'utf8'));
    for (const ref of refs) expect([ref, doc.has(ref)]).toEqual([ref, true]);
  });
});

/** One metric as CloudWatch identifies it: namespace, name and the exact dimension set. */
type MetricId = string;
const metricId = (namespace: unknown, name: unknown, dimensions: Record<string, unknown>): MetricId =>
  JSON.stringify([namespace, name, Object.entries(dimensions).sort(([a], [b]) => a.localeCompare(b))]);

/** The metrics an alarm watches (a single metric, or each metric of a math expression). */
function watchedMetrics(props: Record<string, unknown>): MetricId[] {
  const dims = (list: unknown) => Object.fromEntries(((list ?? []) as { Name: string; Value: unknown }[]).map((d) => [d.Name, d.Value]));
  if (props.MetricName) return [metricId(props.Namespace, props.MetricName, dims(props.Dimensions))];
  return ((props.Metrics ?? []) as { MetricStat?: { Metric: { Namespace: string; MetricName: string; Dimensions?: unknown } } }[])
    .filter((m) => m.MetricStat)
    .map(({ MetricStat }) => metricId(MetricStat!.Metric.Namespace, MetricStat!.Metric.MetricName, dims(MetricStat!.Metric.Dimensions)));
}

/** Every metric the EMF records of `lines` publish, with each dimension set the records declare. */
function emittedMetrics(lines: Lines): Set<MetricId> {
  const out = new Set<MetricId>();
  for (const record of lines.json()) {
    const aws = record._aws as { CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[] } | undefined;
    for (const directive of aws?.CloudWatchMetrics ?? []) {
      for (const set of directive.Dimensions) {
        for (const { Name } of directive.Metrics) out.add(metricId(directive.Namespace, Name, Object.fromEntries(set.map((k) => [k, record[k]]))));
      }
    }
  }
  return out;
}

describe('two fleets in one account', () => {
  let aws: FakeAws | undefined;
  afterEach(() => aws?.restore());

  /** Runs the real pool handler on the fleet's own FleetConfig (as the Lambdas parse it): once failing, once healthy. */
  async function poolHandlerMetrics(runners: WarmRunners): Promise<Set<MetricId>> {
    const lines = new Lines();
    const config = parseFleetConfig(JSON.stringify(runners.config));
    for (const failing of [true, false]) {
      aws?.restore();
      aws = new FakeAws();
      if (failing) aws.fault('DescribeInstances', ...Array.from({ length: 5 }, () => awsError('UnauthorizedOperation', 403)));
      const handler = createPoolHandler({
        ec2: new EC2Client({}),
        ssm: new SSMClient({}),
        aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
        loadConfig: async () => config,
        now: () => aws!.now,
        sink: lines.sink,
      });
      await handler();
    }
    return emittedMetrics(lines);
  }

  it('watch disjoint metrics, and each fleet alarms on the metrics its own Lambdas emit', async () => {
    // Same pool name in both: only the fleet can tell their metrics apart.
    const stack = new Stack(new App(), 'S');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    const fleets = { TeamA: new WarmRunners(stack, 'TeamA', fleetProps(vpc, { prefix: 'team-a' })), TeamB: new WarmRunners(stack, 'TeamB', fleetProps(vpc, { prefix: 'team-b' })) };
    const template = Template.fromStack(stack);
    const alarms = Object.entries(template.findResources('AWS::CloudWatch::Alarm'));
    const watched = (fleet: string) => alarms.filter(([id]) => id.startsWith(fleet)).flatMap(([, a]) => watchedMetrics((a as Resource).Properties));
    const a = watched('TeamA');
    const b = watched('TeamB');
    expect(a.length).toBeGreaterThanOrEqual(fleets.TeamA.alarms.length);
    expect(b.length).toBe(a.length);
    expect(a.filter((m) => b.includes(m))).toEqual([]);

    for (const [name, runners] of Object.entries(fleets)) {
      const other = name === 'TeamA' ? fleets.TeamB : fleets.TeamA;
      const emitted = await poolHandlerMetrics(runners);
      // Every alarm on a metric of ours (not AWS/SQS, AWS/Lambda) watches the fleet's namespace,
      // the one the Lambdas write their EMF into.
      const custom = watched(name).filter((m) => !(JSON.parse(m) as [string])[0].startsWith('AWS/'));
      for (const m of custom) expect([m, (JSON.parse(m) as [string])[0]]).toEqual([m, runners.metricNamespace]);
      expect(new Set([...emitted].map((m) => (JSON.parse(m) as [string])[0]))).toEqual(new Set([runners.metricNamespace]));
      // JobsFailed fleet-wide, ParkedInstances and TargetInstances per pool: emitted by the pool Lambda, exactly as watched.
      const fromPool = custom.filter((m) => [METRIC_NAMES.jobsFailed, METRIC_NAMES.parked, METRIC_NAMES.target].includes((JSON.parse(m) as [string, never])[1]));
      expect(fromPool).toHaveLength(3);
      for (const m of fromPool) expect([m, emitted.has(m)]).toEqual([m, true]);
      expect([...emitted].filter((m) => watched(name === 'TeamA' ? 'TeamB' : 'TeamA').includes(m))).toEqual([]);
      // The instance log metric filter publishes into the same namespace.
      const filters = Object.entries(template.findResources('AWS::Logs::MetricFilter')).filter(([id]) => id.startsWith(name));
      // (the activation latency, and the instance's ledger stages)
      expect(filters.map(([, f]) => ((f as Resource).Properties.MetricTransformations as { MetricNamespace: string }[])[0]!.MetricNamespace)).toEqual(
        [METRIC_NAMES.activationLatency, ...INSTANCE_LEDGER_STAGES].map(() => runners.metricNamespace),
      );
      expect(runners.metricNamespace).not.toBe(other.metricNamespace);
    }
    expect(fleets.TeamA.metricNamespace).toBe('CdkWarmRunners/team-a');
  });

  it('are refused when they would share a prefix or a metric namespace in one account and region', () => {
    const app = new App();
    const stack = new Stack(app, 'S');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    new WarmRunners(stack, 'TeamA', fleetProps(vpc, { prefix: 'team-a', metricNamespace: 'Shared/Runners' }));
    expect(() => new WarmRunners(stack, 'TeamB', fleetProps(vpc, { prefix: 'team-b', metricNamespace: 'Shared/Runners' }))).toThrow(/S\/TeamB has the metric namespace "Shared\/Runners" of S\/TeamA.*own `metricNamespace`/);
    // Another env-agnostic stack of the same app deploys to the same account and region.
    const other = new Stack(app, 'Other');
    expect(() => new WarmRunners(other, 'TeamA', fleetProps(new ec2.Vpc(other, 'Vpc'), { prefix: 'team-a' }))).toThrow(/has the prefix "team-a" of S\/TeamA/);
    // Another region is another fleet, whatever its names.
    const west = new Stack(app, 'West', { env: { account: '111111111111', region: 'eu-west-1' } });
    const east = new Stack(app, 'East', { env: { account: '111111111111', region: 'us-east-1' } });
    new WarmRunners(west, 'Runners', fleetProps(new ec2.Vpc(west, 'Vpc')));
    expect(() => new WarmRunners(east, 'Runners', fleetProps(new ec2.Vpc(east, 'Vpc')))).not.toThrow();
  });
});

describe('webhook reserved concurrency', () => {
  const build = (extra: Partial<WarmRunnersProps>) => {
    const stack = new Stack(new App(), 'S');
    const runners = new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), extra));
    const fn = Template.fromStack(stack).findResources('AWS::Lambda::Function')[stack.getLogicalId(runners.webhookFunction.node.defaultChild as lambda.CfnFunction)];
    return (fn as Resource).Properties.ReservedConcurrentExecutions;
  };

  it('is unset by default and set on the webhook function when given', () => {
    expect(build({})).toBeUndefined();
    expect(build({ webhookReservedConcurrency: 20 })).toBe(20);
  });

  it.each([0, -1, 2.5])('refuses %s at synth, naming the value and what to do', (value) => {
    expect(() => build({ webhookReservedConcurrency: value })).toThrow(
      new RegExp(`webhookReservedConcurrency ${value} must be a positive integer .*leave it unset`),
    );
  });
});

describe('metric namespace', () => {
  it('refuses a namespace CloudWatch refuses', () => {
    const stack = new Stack(new App(), 'S');
    expect(() => new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { metricNamespace: 'AWS/Runners' }))).toThrow(/metricNamespace "AWS\/Runners" must .* not begin with "AWS\/"/);
  });

  // Both are valid for PutMetricData but not deployable: the instance log metric filter's
  // namespace refuses ":" (PutMetricFilter pattern [^:*$]*), CloudWatch needs a non-space.
  it.each(['Ci:Runners', '   '])('refuses %j at synth, which would fail the deployment', (namespace) => {
    const stack = new Stack(new App(), 'S');
    expect(() => new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { metricNamespace: namespace }))).toThrow(
      new RegExp(`metricNamespace "${namespace}" must be .*no ":"`),
    );
  });

  it('when set, is the one every reader and the instance log metric filter use', () => {
    const stack = new Stack(new App(), 'S');
    const runners = new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { metricNamespace: 'Ci/Runners' }));
    const template = Template.fromStack(stack);
    // The dashboard body is a Fn::Join: tokens (region, queue name) stand in as "x".
    const body = (Object.values(template.findResources('AWS::CloudWatch::Dashboard'))[0] as Resource).Properties.DashboardBody as { 'Fn::Join': [string, unknown[]] };
    const widgets = (JSON.parse(body['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : 'x')).join('')) as { widgets: { properties: { metrics: unknown[][] } }[] }).widgets;
    const dashboard = widgets.flatMap((w) => w.properties.metrics).map((m) => [m[0], m[1]] as [string, string]);
    const custom = dashboard.filter(([namespace]) => !namespace.startsWith('AWS/'));
    expect(custom.length).toBeGreaterThan(0);
    expect(custom.filter(([namespace]) => namespace !== 'Ci/Runners')).toEqual([]);
    // The latency widget reads what the boot log's metric filter publishes.
    const filters = Object.values(template.findResources('AWS::Logs::MetricFilter')).flatMap((f) => (f as Resource).Properties.MetricTransformations as { MetricNamespace: string; MetricName: string }[]);
    expect(filters.map((t) => [t.MetricNamespace, t.MetricName])).toEqual([
      ['Ci/Runners', METRIC_NAMES.activationLatency],
      ...INSTANCE_LEDGER_STAGES.map(() => ['Ci/Runners', METRIC_NAMES.jobStageSeconds]),
    ]);
    expect(dashboard).toContainEqual(['Ci/Runners', METRIC_NAMES.activationLatency]);
    expect(dashboard).toContainEqual(['Ci/Runners', METRIC_NAMES.jobStageSeconds]);
    for (const alarm of Object.values(template.findResources('AWS::CloudWatch::Alarm'))) {
      for (const m of watchedMetrics((alarm as Resource).Properties)) {
        const namespace = (JSON.parse(m) as [string])[0];
        if (!namespace.startsWith('AWS/')) expect([m, namespace]).toEqual([m, 'Ci/Runners']);
      }
    }
    expect(runners.config.metrics.namespace).toBe('Ci/Runners');
  });

  it('is the given one when set', () => {
    const stack = new Stack(new App(), 'S');
    const runners = new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { metricNamespace: 'Ci/Runners', poolInterval: Duration.minutes(2) }));
    expect([runners.metricNamespace, runners.config.metrics.namespace]).toEqual(['Ci/Runners', 'Ci/Runners']);
  });
});
