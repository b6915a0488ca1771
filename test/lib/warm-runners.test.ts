import { App, type CfnElement, Duration, Size, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { AwsSolutionsChecks } from 'cdk-nag';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ExampleRunnersStack } from '../../bin/example-stack';
import { ParameterMachineImage, USER_DATA_LIMIT_BYTES, WarmRunners, decodeUserData, renderStartLogic, renderUserData, type RunnerPoolProps, type WarmRunnersProps } from '../../lib';
import { INSTANCE_LEDGER_STAGES, LAUNCH_TICKET_KEY_PREFIX, LEDGER_LOG_FIELDS, LEDGER_LOG_KEYS, LEDGER_STAGE_NAMES, METRIC_DIMENSIONS, JOB_MESSAGE_MAX_BYTES, QUEUE_MAX_MESSAGE_BYTES, buildFleetConfig, METRIC_NAMES, PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, bootLogGroupName, parseFleetConfig, tagKeys, GitLabRunnerType, Provider, FLEET_DEFAULTS, UNKNOWN_LAUNCH_REDELIVERY_SECONDS } from '../../lambdas/shared/contract';
import { adoptWindowSeconds } from '../../lambdas/scale-up/cold-tokens';
import { isAllowed, resolvePseudo, rolePolicyStatements as statementsOf, type Statement } from './iam-eval';
import { fleetConfigInput } from '../../lib/fleet-config-input';
import { poolPrepareCommands } from '../../lib/pool-prepare-commands';
import { RunnerImage, RunnerImageArchitecture } from '../../lib/runner-image';

const PSEUDO = { 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };

let stack: ExampleRunnersStack;
let template: Template;
beforeAll(() => {
  const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-synth-')) });
  stack = new ExampleRunnersStack(app, 'Example');
  template = Template.fromStack(stack);
});

const rolePolicyStatements = (roleLogicalIdPrefix: string): Statement[] => statementsOf(template, roleLogicalIdPrefix, PSEUDO);

describe('launch templates', () => {
  it('require IMDSv2 with instance tags, stop on shutdown, encrypted gp3 root, no public address', () => {
    const templates = template.findResources('AWS::EC2::LaunchTemplate');
    expect(Object.keys(templates)).toHaveLength(2);
    for (const lt of Object.values(templates)) {
      const data = lt.Properties.LaunchTemplateData;
      expect(data.MetadataOptions).toMatchObject({ HttpTokens: 'required', InstanceMetadataTags: 'enabled', HttpPutResponseHopLimit: 1 });
      expect(data.InstanceInitiatedShutdownBehavior).toBe('stop');
      expect(data.BlockDeviceMappings[0].Ebs).toMatchObject({ Encrypted: true, VolumeType: 'gp3', DeleteOnTermination: true });
      expect(data.NetworkInterfaces).toBeUndefined();
    }
  });

  it('carry the rendered boot script gzip-compressed, base64 of the gzip bytes, under EC2\'s 16 KB', () => {
    const templates = template.findResources('AWS::EC2::LaunchTemplate');
    const fleet = stack.runners.fleet;
    expect(fleet.launchTemplates).toHaveLength(2);
    for (const { pool, launchTemplate, userData } of fleet.launchTemplates) {
      const encoded = templates[stack.getLogicalId(launchTemplate.node.defaultChild as CfnElement)]?.Properties.LaunchTemplateData.UserData as string;
      const gzip = Buffer.from(encoded, 'base64');
      // cloud-init recognizes gzip by its magic bytes and runs what it decompresses to.
      expect([...gzip.subarray(0, 2)]).toEqual([0x1f, 0x8b]);
      // The worst case (every bounded input at its bound, incompressible prepare commands) is test/templates/render.test.ts's.
      expect(gzip.length).toBeLessThan(USER_DATA_LIMIT_BYTES);
      expect(decodeUserData(encoded)).toBe(userData);
      // ...which is exactly what the renderer gives for the pool (npm run render, the docs).
      // The GitHub pool follows the newest runner by default; the GitLab pool keeps the pin.
      expect(userData).toBe(renderUserData({ prefix: 'warm-runners', provider: pool.provider, prepareCommands: poolPrepareCommands(pool), followLatestRunner: pool.provider === Provider.GITHUB, ...(pool.docker ? { docker: pool.docker } : {}) }));
    }
  });
});

describe('instance role', () => {
  const own = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0aaaaaaaaaaaaaaaa';
  const other = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0bbbbbbbbbbbbbbbb';
  const param = (id: string) => `arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/runners/config/${id}`;
  const tag = `aws:ResourceTag/${PARAMETER_INSTANCE_ARN_TAG}`;
  let statements: Statement[];
  beforeAll(() => {
    statements = rolePolicyStatements('RunnersFleetRole');
    expect(statements.length).toBeGreaterThan(0);
  });

  it('reads and deletes its own config parameter', () => {
    for (const action of ['ssm:GetParameter', 'ssm:DeleteParameter']) {
      expect(isAllowed(statements, { action, resource: param('i-0aaaaaaaaaaaaaaaa'), context: { [tag]: own, 'ec2:SourceInstanceARN': own } })).toBe(true);
    }
  });
  it("cannot read or delete another instance's parameter", () => {
    for (const action of ['ssm:GetParameter', 'ssm:DeleteParameter']) {
      expect(isAllowed(statements, { action, resource: param('i-0bbbbbbbbbbbbbbbb'), context: { [tag]: other, 'ec2:SourceInstanceARN': own } })).toBe(false);
    }
  });
  it("cannot read or delete the pool's eviction marker (an id tag, no ARN tag)", () => {
    const idTag = `aws:ResourceTag/${PARAMETER_INSTANCE_TAG}`;
    for (const action of ['ssm:GetParameter', 'ssm:DeleteParameter']) {
      expect(isAllowed(statements, { action, resource: param('i-0bbbbbbbbbbbbbbbb'), context: { [idTag]: 'i-0bbbbbbbbbbbbbbbb', 'ec2:SourceInstanceARN': own } })).toBe(false);
      expect(isAllowed(statements, { action, resource: param('i-0aaaaaaaaaaaaaaaa'), context: { [idTag]: 'i-0aaaaaaaaaaaaaaaa', 'ec2:SourceInstanceARN': own } })).toBe(false);
    }
    // ...while its own config, which carries both tags, stays readable.
    expect(isAllowed(statements, { action: 'ssm:GetParameter', resource: param('i-0aaaaaaaaaaaaaaaa'), context: { [idTag]: 'i-0aaaaaaaaaaaaaaaa', [tag]: own, 'ec2:SourceInstanceARN': own } })).toBe(true);
  });
  it('may ask for its own parameter before it exists, so WAIT sees ParameterNotFound rather than AccessDenied', () => {
    // IAM evaluates a request for a missing parameter without resource tags.
    expect(isAllowed(statements, { action: 'ssm:GetParameter', resource: param('i-0aaaaaaaaaaaaaaaa'), context: { 'ec2:SourceInstanceARN': own } })).toBe(true);
  });
  it('cannot read the CI credentials or anything else in SSM', () => {
    for (const name of ['ci/github/app-private-key', 'ci/gitlab/runner-token', 'fleet/config']) {
      const resource = `arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/${name}`;
      expect(isAllowed(statements, { action: 'ssm:GetParameter', resource, context: { [tag]: own, 'ec2:SourceInstanceARN': own } })).toBe(false);
    }
    expect(isAllowed(statements, { action: 'ssm:PutParameter', resource: param('i-0aaaaaaaaaaaaaaaa'), context: { [tag]: own, 'ec2:SourceInstanceARN': own } })).toBe(false);
  });
  it('creates its log stream and puts events in the fleet boot log group only', () => {
    const group = (name: string) => `arn:aws:logs:eu-west-1:111122223333:log-group:${name}`;
    const ownGroup = bootLogGroupName('warm-runners');
    const rows: [action: string, resource: string, allowed: boolean][] = [
      ['logs:CreateLogStream', `${group(ownGroup)}:*`, true],
      ['logs:CreateLogStream', `${group(ownGroup)}:log-stream:i-0aaaaaaaaaaaaaaaa`, true],
      ['logs:PutLogEvents', `${group(ownGroup)}:log-stream:i-0aaaaaaaaaaaaaaaa`, true],
      ['logs:PutLogEvents', `${group('/warm-runners/other')}:log-stream:i-0aaaaaaaaaaaaaaaa`, false],
      ['logs:CreateLogStream', `${group('/aws/lambda/anything')}:*`, false],
      ['logs:PutLogEvents', `${group(`${ownGroup}-x`)}:log-stream:i-0aaaaaaaaaaaaaaaa`, false],
      ['logs:CreateLogGroup', `${group('/warm-runners/other')}:*`, false],
      ['logs:DeleteLogStream', `${group(ownGroup)}:log-stream:i-0aaaaaaaaaaaaaaaa`, false],
      ['logs:GetLogEvents', `${group(ownGroup)}:log-stream:i-0aaaaaaaaaaaaaaaa`, false],
    ];
    for (const [action, resource, allowed] of rows) {
      expect(isAllowed(statements, { action, resource, context: { 'ec2:SourceInstanceARN': own } }), `${action} on ${resource}`).toBe(allowed);
    }
  });
  it('terminates only itself, only inside the fleet', () => {
    const poolTag = `aws:ResourceTag/${tagKeys('warm-runners').pool}`;
    const ctx = (target: string, tagged: boolean) => ({ 'ec2:SourceInstanceARN': own, 'aws:ARN': target, ...(tagged ? { [poolTag]: 'linux-x64' } : {}) });
    expect(isAllowed(statements, { action: 'ec2:TerminateInstances', resource: own, context: ctx(own, true) })).toBe(true);
    expect(isAllowed(statements, { action: 'ec2:TerminateInstances', resource: other, context: ctx(other, true) })).toBe(false);
    expect(isAllowed(statements, { action: 'ec2:TerminateInstances', resource: own, context: ctx(own, false) })).toBe(false);
    expect(isAllowed(statements, { action: 'ec2:StopInstances', resource: own, context: ctx(own, true) })).toBe(false);
  });
  it('reports its job start as one tag on itself alone (moto enforces no IAM: this is the proof)', () => {
    const keys = tagKeys('warm-runners');
    const poolTag = `aws:ResourceTag/${keys.pool}`;
    const ctx = (target: string, tagKeys: string[], tagged = true) => ({ 'ec2:SourceInstanceARN': own, 'aws:ARN': target, 'aws:TagKeys': tagKeys, ...(tagged ? { [poolTag]: 'linux-x64' } : {}) });
    const rows: [string, string, string, Record<string, string | string[]>, boolean][] = [
      ['its own job-start tag', 'ec2:CreateTags', own, ctx(own, [keys.jobStarted]), true],
      ['its own start failure (a cold launch, before terminating)', 'ec2:CreateTags', own, ctx(own, [keys.startFailure]), true],
      ["another instance's start failure", 'ec2:CreateTags', other, ctx(other, [keys.startFailure]), false],
      ['its own start failure once its job started (job code charging the back-off)', 'ec2:CreateTags', own, { ...ctx(own, [keys.startFailure]), [`aws:ResourceTag/${keys.jobStarted}`]: '2026-12-01T12:00:00Z' }, false],
      ['its own job start beside a start failure, in one request', 'ec2:CreateTags', own, ctx(own, [keys.jobStarted, keys.startFailure]), false],
      ["another instance's job-start tag", 'ec2:CreateTags', other, ctx(other, [keys.jobStarted]), false],
      ['another tag on itself (the idle mark)', 'ec2:CreateTags', own, ctx(own, [keys.idleSince]), false],
      ['another tag beside its own (the runner id)', 'ec2:CreateTags', own, ctx(own, [keys.jobStarted, keys.runnerId]), false],
      ['its activation tag', 'ec2:CreateTags', own, ctx(own, [keys.activatedAt]), false],
      ['a request without tag keys', 'ec2:CreateTags', own, { 'ec2:SourceInstanceARN': own, 'aws:ARN': own, [poolTag]: 'linux-x64' }, false],
      ['outside the fleet', 'ec2:CreateTags', own, ctx(own, [keys.jobStarted], false), false],
      ['deleting its job-start tag', 'ec2:DeleteTags', own, ctx(own, [keys.jobStarted]), false],
    ];
    for (const [name, action, resource, context, allowed] of rows) expect(isAllowed(statements, { action, resource, context }), name).toBe(allowed);
  });
});

describe('control plane', () => {
  it('pins the runtime, sets log retention and uses its own roles', () => {
    // The library's own: the five control-plane functions (reconcile with a GitHub connection), the release resolver and the
    // drain's two (the provider framework's three run CDK's code on CDK's runtime).
    const fns = Object.values(template.findResources('AWS::Lambda::Function')).filter((fn) => /^index\./.test(fn.Properties.Handler));
    expect(fns).toHaveLength(8);
    for (const fn of fns) {
      expect(fn.Properties.Runtime).toBe('nodejs24.x');
      expect(fn.Properties.LoggingConfig).toMatchObject({ LogFormat: 'JSON' });
      expect(fn.Properties.Environment.Variables).toHaveProperty('FLEET_CONFIG_PARAMETER', '/warm-runners/fleet/config');
    }
    const fleetLogGroups = Object.entries(template.findResources('AWS::Logs::LogGroup')).filter(([id]) => id.startsWith('Runners'));
    expect(fleetLogGroups).toHaveLength(10); // the fleet's, the eight functions', the drain's provider framework
    for (const [, group] of fleetLogGroups) expect(group.Properties.RetentionInDays).toBe(30);
    template.resourceCountIs('AWS::IAM::ManagedPolicy', 0);
    for (const role of Object.values(template.findResources('AWS::IAM::Role'))) expect(role.Properties.ManagedPolicyArns).toBeUndefined();
  });

  it('feeds scale-up from the FIFO jobs queue with partial batch responses', () => {
    template.hasResourceProperties('AWS::SQS::Queue', { FifoQueue: true, RedrivePolicy: { maxReceiveCount: 5, deadLetterTargetArn: Match.anyValue() } });
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      BatchSize: 10,
      ScalingConfig: { MaximumConcurrency: 5 },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
  });

  it("brings a message whose cold launch is unknown back inside the take-over window of the pools' rendered boot wait", () => {
    // A redelivery takes over a late instance of an earlier receive only while that instance
    // waits for its config (cold-tokens.ts). The redelivery comes at most scale-up's timeout
    // (the receive that failed) plus its batching window plus the visibility it sets later.
    const [fn] = Object.values(template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('^Serves queued jobs') } }));
    const [mapping] = Object.values(template.findResources('AWS::Lambda::EventSourceMapping'));
    const [queue] = Object.values(template.findResources('AWS::SQS::Queue', { Properties: { RedrivePolicy: Match.anyValue() } }));
    const redelivery = Number(fn!.Properties.Timeout) + Number(mapping!.Properties.MaximumBatchingWindowInSeconds ?? 0) + UNKNOWN_LAUNCH_REDELIVERY_SECONDS;
    const [param] = Object.values(template.findResources('AWS::SSM::Parameter'));
    const config = parseFleetConfig((resolvePseudo(param!.Properties.Value, { ...PSEUDO }) as string).replace(/<ref:[^>]+>/g, 'lt-0123456789abcdef0'));
    for (const { pool, userData } of stack.runners.fleet.launchTemplates) {
      const rendered = Number(/WAIT_SECONDS='?(\d+)/.exec(userData)![1]);
      // What scale-up assumes of the boot wait is what the instance does.
      expect(config.pools.find((p) => p.name === pool.name)!.bootWaitSeconds ?? FLEET_DEFAULTS.bootWaitSeconds).toBe(rendered);
      expect(redelivery).toBeLessThan(adoptWindowSeconds({ bootWaitSeconds: rendered }));
      // ...which the queue's visibility timeout alone would miss.
      expect(queue!.Properties.VisibilityTimeout).toBeGreaterThan(adoptWindowSeconds({ bootWaitSeconds: rendered }));
    }
  });

  it('runs pool and scale-down on schedules and serves the webhook through a Function URL', () => {
    template.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(1 minute)' });
    template.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(5 minutes)' });
    template.hasResourceProperties('AWS::Lambda::Url', { AuthType: 'NONE' });
  });

  it('alarms on the dead-letter queue, failures, scale-up errors and parked below target per warm pool', () => {
    const alarms = Object.values(template.findResources('AWS::CloudWatch::Alarm'));
    const byDescription = (text: string) => alarms.filter((a) => String(a.Properties.AlarmDescription).includes(text));
    expect(byDescription('dead-letter')[0]?.Properties).toMatchObject({ Threshold: 1, EvaluationPeriods: 1, ComparisonOperator: 'GreaterThanOrEqualToThreshold' });
    expect(byDescription('failed to get a runner')[0]?.Properties).toMatchObject({ MetricName: METRIC_NAMES.jobsFailed, Threshold: 1 });
    expect(byDescription('scale-up Lambda failed')).toHaveLength(1);
    expect(byDescription('fewer parked instances')).toHaveLength(2);
    expect(byDescription('fewer parked instances')[0]?.Properties).toMatchObject({ EvaluationPeriods: 3, Threshold: 1 });
  });

  it("turns the boot script's ledger lines into the ledger and activation latency metrics through a Grok transformer", () => {
    const [transformer] = Object.values(template.findResources('AWS::Logs::Transformer'));
    const grok = transformer!.Properties.TransformerConfig[0].Grok.Match as string;
    // The pattern reads the line the boot script writes: its own functions, rendered from the
    // contract, run by bash (the line it ships to the log group as it is). Activated at 100 s
    // past the epoch, the stage at 103.25 s.
    const logic = renderStartLogic({ provider: Provider.GITHUB });
    const fn = (name: string) => new RegExp(`^${name}\\(\\) \\{\\n[\\s\\S]*?\\n\\}$`, 'm').exec(logic)?.[0] ?? `missing ${name}`;
    const k = LEDGER_LOG_KEYS;
    const vars = `export TZ=UTC; L_TRACE=trace-id TRACE=t-1 LOG_FILE=/dev/null POOL=pool-a ACTIVATED=1970-01-01T00:01:40.000Z ACT_MS='' L_POOL=${k.pool} L_STAGE=${k.stage} L_SECS=${k.seconds}`;
    const run = spawnSync('bash', ['-c', `${vars}\n${fn('log')}\n${fn('since_activated')}\n${fn('ledger')}\nledger runner-started 103.250000`], { encoding: 'utf8' });
    const line = run.stderr.trim();
    expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z start-runner\[\d+\]: trace-id=t-1 ledger-pool=pool-a ledger-stage=runner-started ledger-seconds=3\.250$/);
    const regex = new RegExp(grok.replace('%{GREEDYDATA}', '.*').replace(/%\{NOTSPACE:(\w+)\}/g, '(?<$1>\\S+)').replace(/%\{NUMBER:(\w+)\}/, '(?<$1>[0-9.]+)'));
    const f = LEDGER_LOG_FIELDS;
    expect(regex.exec(line)?.groups).toEqual({ [f.pool]: 'pool-a', [f.stage]: 'runner-started', [f.seconds]: '3.250' });
    expect(transformer!.Properties.TransformerConfig[1]).toEqual({ TypeConverter: { Entries: [{ Key: f.seconds, Type: 'double' }] } });
    template.hasResourceProperties('AWS::Logs::MetricFilter', {
      ApplyOnTransformedLogs: true,
      // A negative sample (an instance clock behind its activation tag) never reaches the metric.
      FilterPattern: `{ ($.${f.stage} = "runner-started") && ($.${f.seconds} >= 0) }`,
      MetricTransformations: [Match.objectLike({ MetricName: METRIC_NAMES.activationLatency, MetricValue: `$.${f.seconds}`, Unit: 'Seconds' })],
    });
    // One filter per instance stage, with the pool and the stage as dimensions.
    for (const stage of INSTANCE_LEDGER_STAGES) {
      template.hasResourceProperties('AWS::Logs::MetricFilter', {
        ApplyOnTransformedLogs: true,
        FilterPattern: `{ ($.${f.stage} = "${stage}") && ($.${f.seconds} >= 0) }`,
        MetricTransformations: [
          Match.objectLike({
            MetricName: METRIC_NAMES.jobStageSeconds,
            MetricValue: `$.${f.seconds}`,
            Unit: 'Seconds',
            Dimensions: [
              { Key: METRIC_DIMENSIONS.pool, Value: `$.${f.pool}` },
              { Key: METRIC_DIMENSIONS.stage, Value: `$.${f.stage}` },
            ],
          }),
        ],
      });
    }
  });

  it("shows each pool's ledger on the dashboard: p50 and p95 of every stage in one widget", () => {
    const body = (Object.values(template.findResources('AWS::CloudWatch::Dashboard'))[0] as { Properties: { DashboardBody: { 'Fn::Join': [string, unknown[]] } } }).Properties.DashboardBody;
    const widgets = (JSON.parse(body['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : 'x')).join('')) as { widgets: { properties: { title: string; metrics: unknown[][] } }[] }).widgets;
    const ledgers = widgets.filter((w) => w.properties.title.startsWith('Job ledger '));
    expect(ledgers.map((w) => w.properties.title)).toEqual(stack.runners.config.pools.map((p) => `Job ledger ${p.name} (p50, p95 s)`));
    expect(ledgers.length).toBeGreaterThan(0);
    for (const w of ledgers) {
      const pool = /^Job ledger (\S+)/.exec(w.properties.title)![1]!;
      const lines = w.properties.metrics.map((m) => {
        const stats = m.at(-1) as { stat: string };
        return [m[1], m[2], m[3], m[4], m[5], stats.stat];
      });
      expect(lines).toEqual(LEDGER_STAGE_NAMES.flatMap((stage) => ['p50', 'p95'].map((stat) => [METRIC_NAMES.jobStageSeconds, METRIC_DIMENSIONS.pool, pool, METRIC_DIMENSIONS.stage, stage, stat])));
    }
  });

  it('outputs the webhook URLs and the secret parameters to fill in', () => {
    const outputs = template.findOutputs('*');
    const names = Object.values(outputs).map((o) => JSON.stringify(o.Value));
    expect(names.some((v) => v.includes('github'))).toBe(true);
    expect(names.some((v) => v.includes('gitlab'))).toBe(true);
    expect(names.some((v) => v.includes('/warm-runners/ci/github/app-private-key') && v.includes('/warm-runners/ci/gitlab/runner-token'))).toBe(true);
  });

  it('lets each function read only the secrets it needs', () => {
    const secretsOf = (prefix: string) =>
      rolePolicyStatements(prefix)
        .filter((s) => [s.Action].flat().includes('ssm:GetParameter'))
        .flatMap((s) => [s.Resource].flat())
        .filter((r) => r.includes('/ci/'))
        .sort();
    expect(secretsOf('RunnersPoolRole')).toEqual([]);
    expect(secretsOf('RunnersWebhookRole').some((r) => r.endsWith('app-private-key'))).toBe(false);
    expect(secretsOf('RunnersScaleUpRole').some((r) => r.endsWith('webhook-secret'))).toBe(false);
  });
});

describe('encryption key', () => {
  it('encrypts the runner configs with it and lets each function use it only through SSM', () => {
    const app = new App();
    const s = new Stack(app, 'K');
    const key = new kms.Key(s, 'Key');
    new WarmRunners(s, 'Runners', {
      vpc: new ec2.Vpc(s, 'Vpc'),
      github: { appId: '1', organization: 'org' },
      encryptionKey: key,
      pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() }],
    });
    const t = Template.fromStack(s);
    const [param] = Object.values(t.findResources('AWS::SSM::Parameter'));
    expect(JSON.stringify(param!.Properties.Value)).toContain('kmsKeyId');
    const policies = Object.values(t.findResources('AWS::IAM::Policy')).map((p) => JSON.stringify(p.Properties.PolicyDocument));
    const kmsStatements = policies.filter((p) => p.includes('kms:'));
    expect(kmsStatements.length).toBe(6); // four functions (the pool uses no key), the drain and the instance role
    for (const p of kmsStatements) {
      expect(p).toContain('kms:ViaService');
      expect(p).not.toMatch(/kms:[A-Za-z]+\*/);
    }
  });
});

describe('scale-down permissions for idle-stop (pools with reuse)', () => {
  it('may write the idle-stop marker (never over a parameter) and the parking tag, only when a pool reuses instances', () => {
    const synth = (reuse: boolean) => {
      const s = new Stack(new App(), reuse ? 'Reuse' : 'NoReuse');
      new WarmRunners(s, 'Runners', {
        vpc: new ec2.Vpc(s, 'Vpc'),
        github: { appId: '1', organization: 'org' },
        pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), ...(reuse ? { reuse: {} } : {}) }],
      });
      return statementsOf(Template.fromStack(s), 'RunnersScaleDownRole', PSEUDO);
    };
    const keys = tagKeys('warm-runners');
    const acct = 'arn:aws:ec2:eu-west-1:111122223333';
    const instance = `${acct}:instance/i-0aaaaaaaaaaaaaaaa`;
    const config = 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/runners/config/i-0aaaaaaaaaaaaaaaa';
    const poolTag = { [`aws:ResourceTag/${keys.pool}`]: 'linux' };
    const rows: [string, string, Record<string, string | string[]>, boolean, boolean][] = [
      // action, resource, context, allowed with reuse, allowed without
      ['ssm:PutParameter', config, { 'ssm:Overwrite': 'false' }, true, false],
      ['ssm:PutParameter', config, { 'ssm:Overwrite': 'true' }, false, false],
      ['ssm:AddTagsToResource', config, {}, true, false],
      ['ec2:CreateTags', instance, { ...poolTag, 'aws:TagKeys': [keys.parking] }, true, false],
      ['ec2:CreateTags', instance, { 'aws:TagKeys': [keys.parking] }, false, false],
      ['ec2:CreateTags', instance, { ...poolTag, 'aws:TagKeys': [keys.parking, keys.activatedAt] }, false, false],
      ['ec2:DeleteTags', instance, { ...poolTag, 'aws:TagKeys': [keys.parking] }, false, false],
    ];
    for (const [reuse, column] of [[true, 3], [false, 4]] as const) {
      const statements = synth(reuse);
      for (const row of rows) expect(isAllowed(statements, { action: row[0], resource: row[1], context: row[2] }), `reuse=${reuse} ${row[0]} ${JSON.stringify(row[2])}`).toBe(row[column]);
    }
  });
});

describe('fleet config', () => {
  it('refuses a configuration that no SSM parameter holds, naming its size', () => {
    const s = new Stack(new App(), 'Big');
    const pools = Array.from({ length: 30 }, (_, i) => ({
      name: `pool-${i}`,
      provider: Provider.GITHUB,
      // Labels of their own: pools with the same labels are refused before the size is measured.
      labels: ['linux', 'x64', 'large', 'docker', 'gpu', `arm${i}`],
      machineImage: ec2.MachineImage.latestAmazonLinux2023(),
    }));
    expect(() => new WarmRunners(s, 'R', { vpc: new ec2.Vpc(s, 'Vpc'), github: { appId: '1', organization: 'o' }, pools })).toThrow(
      /fleet configuration is about \d+ characters, above the 8 KB an SSM parameter holds/,
    );
  });

  it('carries requireSelfHostedLabel from the pool props, only when true (absent is false)', () => {
    const placement = () => ({ launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'] });
    const machineImage = ec2.MachineImage.latestAmazonLinux2023();
    const input = fleetConfigInput(
      {
        github: { appId: '1', organization: 'o' },
        pools: [
          { name: 'strict', provider: Provider.GITHUB, requireSelfHostedLabel: true, machineImage },
          { name: 'loose', provider: Provider.GITHUB, machineImage },
        ],
      },
      placement,
    );
    const config = parseFleetConfig(JSON.stringify(buildFleetConfig(input)));
    expect(config.pools.map((p) => [p.name, p.requireSelfHostedLabel])).toEqual([
      ['strict', true],
      ['loose', undefined],
    ]);
    expect(JSON.stringify(buildFleetConfig(input)).match(/requireSelfHostedLabel/g)).toHaveLength(1);
  });

  it('carries idleConfirmation and maxJobDuration from the pool props in seconds, only when set', () => {
    const placement = () => ({ launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'] });
    const machineImage = ec2.MachineImage.latestAmazonLinux2023();
    const input = fleetConfigInput(
      {
        github: { appId: '1', organization: 'o' },
        pools: [
          { name: 'long', provider: Provider.GITHUB, idleConfirmation: Duration.minutes(4), maxJobDuration: Duration.hours(30), machineImage },
          { name: 'plain', provider: Provider.GITHUB, machineImage },
        ],
      },
      placement,
    );
    const config = parseFleetConfig(JSON.stringify(buildFleetConfig(input)));
    expect(config.pools.map((p) => [p.name, p.idleConfirmSeconds, p.maxJobSeconds])).toEqual([
      ['long', 240, 108_000],
      ['plain', undefined, undefined],
    ]);
    const refused = JSON.parse(JSON.stringify(buildFleetConfig(input))) as { pools: { maxJobSeconds?: number }[] };
    refused.pools[0]!.maxJobSeconds = 10;
    expect(() => parseFleetConfig(JSON.stringify(refused))).toThrow(/maxJobSeconds/);
  });

  it("sets both queues' message size to the bound the webhook's size check leaves room below", () => {
    const queues = Object.values(template.findResources('AWS::SQS::Queue'));
    expect(queues).toHaveLength(2);
    for (const q of queues) expect(q.Properties.MaximumMessageSize).toBe(QUEUE_MAX_MESSAGE_BYTES);
    expect(JOB_MESSAGE_MAX_BYTES).toBeLessThan(QUEUE_MAX_MESSAGE_BYTES);
  });

  it('is synthesized so the Lambdas reader accepts it', () => {
    const [param] = Object.values(template.findResources('AWS::SSM::Parameter'));
    const value = resolvePseudo(param!.Properties.Value, { ...PSEUDO }) as string;
    const concrete = value.replace(/<ref:[^>]+>/g, 'lt-0123456789abcdef0');
    const config = parseFleetConfig(concrete);
    expect(config.pools.map((p) => p.name)).toEqual(['linux-x64', 'gitlab-docker']);
    expect(config.pools[0]).toMatchObject({ provider: Provider.GITHUB, maxRunners: 20, warm: { size: 3, maxAgeSeconds: 43_200 } });
  });
});

describe('cdk-nag', () => {
  it('finds nothing unacknowledged in the example app, and every acknowledgement sits on its construct with a reason', () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-nag-')) });
    const example = new ExampleRunnersStack(app, 'Nagged');
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
    const acknowledged: string[] = [];
    for (const construct of [app, ...app.node.findAll()]) {
      for (const entry of construct.node.metadata.filter((m) => m.type === 'aws:cdk:acknowledged-rules')) {
        for (const [id, reason] of Object.entries(entry.data as Record<string, string>)) {
          if (!id.startsWith('AwsSolutions::')) continue; // CDK's own CloudFormation-Validate notes
          // On the construct that carries the finding: never the app or a whole stack.
          expect(construct.node.path.split('/').length, `${id} acknowledged on ${construct.node.path || 'the app'}`).toBeGreaterThan(2);
          expect(reason.length, `reason of ${id}`).toBeGreaterThan(30);
          acknowledged.push(`${construct.node.path.split('/').slice(1).join('/')} ${id}`);
        }
      }
    }
    void example;
    // A new acknowledgement shows here in review.
    expect(acknowledged.sort()).toMatchSnapshot();
    const report = JSON.parse(readFileSync(join(app.outdir, 'validation-report.json'), 'utf8'));
    expect(JSON.stringify(report)).not.toMatch(/"status":\s*"failure"/);
  });
});

describe('props validation', () => {
  const image = ec2.MachineImage.latestAmazonLinux2023();
  const base = (): WarmRunnersProps => ({
    vpc: new ec2.Vpc(new Stack(new App(), 'V'), 'Vpc'),
    github: { appId: '1', organization: 'org' },
    pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: image }],
  });
  const build = (change: (p: WarmRunnersProps) => WarmRunnersProps) => {
    const props = change(base());
    new WarmRunners(props.vpc.stack, 'Runners', props);
  };
  it.each<[string, (p: WarmRunnersProps) => WarmRunnersProps, RegExp]>([
    ['warm size above maximum', (p) => ({ ...p, pools: [{ ...p.pools[0]!, maxRunners: 2, warm: { size: 3 } }] }), /pools\[0\]\.warm\.size \(pool "linux"\) is 3, above the pool's maxRunners 2/],
    ['two pools with one name', (p) => ({ ...p, pools: [p.pools[0]!, p.pools[0]!] }), /"linux" is used by two pools/],
    ['GitLab group runners without a group id', (p) => ({ ...p, gitlab: { url: 'https://gitlab.example.com', runnerType: GitLabRunnerType.GROUP } }), /gitlab\.scopeId/],
    ['disk below 8 GiB', (p) => ({ ...p, pools: [{ ...p.pools[0]!, diskSize: Size.gibibytes(4) }] }), /pools\[0\]\.diskSize \(pool "linux"\) must be from 8 GiB to 16384 GiB \(16 TiB, the most a gp3 volume holds\), got 4 GiB/],
    ['maximum concurrency below 2', (p) => ({ ...p, scaleUpMaxConcurrency: 1 }), /scaleUpMaxConcurrency 1 must be an integer from 2 to 1000/],
    ['empty instance types', (p) => ({ ...p, pools: [{ ...p.pools[0]!, instanceTypes: [] }] }), /pools\[0\]\.instanceTypes \(pool "linux"\) is empty/],
    ['prefix with a slash', (p) => ({ ...p, prefix: 'ci/fleet' }), /prefix "ci\/fleet"/],
    ['label with a space', (p) => ({ ...p, pools: [{ ...p.pools[0]!, labels: ['has space'] }] }), /pools\[0\]\.labels\[0\] \(pool "linux"\) "has space" must be/],
    ['pool naming a missing connection', (p) => ({ ...p, pools: [{ ...p.pools[0]!, provider: Provider.GITLAB }] }), /no gitlab connection is configured/],
    ['GitLab without URL', (p) => ({ ...p, gitlab: { url: '' } }), /gitlab\.url/],
    ['a GitLab group on a GitHub pool', (p) => ({ ...p, pools: [{ ...p.pools[0]!, gitlabGroupId: 7 }] }), /pools\[0\]\.gitlabGroupId \(pool "linux"\) is set on a github pool/],
    [
      'a GitLab pool with both a group and a project',
      (p) => ({ ...p, gitlab: { url: 'https://gitlab.example.com' }, pools: [{ ...p.pools[0]!, provider: Provider.GITLAB, gitlabGroupId: 7, gitlabProjectId: 8 }] }),
      /pools\[0\]\.gitlabProjectId \(pool "linux"\) is set together with gitlabGroupId/,
    ],
    [
      'two GitLab groups whose pools can match one job',
      (p) => ({ ...p, gitlab: { url: 'https://gitlab.example.com' }, pools: [{ ...p.pools[0]!, provider: Provider.GITLAB, gitlabGroupId: 7 }, { ...p.pools[0]!, name: 'b', provider: Provider.GITLAB, labels: ['linux'], gitlabGroupId: 8 }] }),
      /pools\[1\]\.labels \(pool "b", gitlabGroupId 8\) and pools\[0\]\.labels \(pool "linux", gitlabGroupId 7\) can match the same GitLab job/,
    ],
    ['schedule that does not parse', (p) => ({ ...p, pools: [{ ...p.pools[0]!, warm: { schedule: [{ window: 'weekdays', size: 1 }] } }] }), /pools\[0\]\.warm\.schedule\[0\]\.window \(pool "linux"\) "weekdays" must be/],
    ['no pools', (p) => ({ ...p, pools: [] }), /pools is empty/],
    ['batch size above FIFO maximum', (p) => ({ ...p, scaleUpBatchSize: 11 }), /scaleUpBatchSize 11/],
    ['interval below a minute', (p) => ({ ...p, poolInterval: Duration.seconds(30) }), /poolInterval 30 seconds/],
    [
      'user data over 16 KB',
      (p) => ({ ...p, pools: [{ ...p.pools[0]!, prepareCommands: Array.from({ length: 16 }, (_, i) => `echo prepare-step-${i} ${'x'.repeat(400)}`) }] }),
      /pools\[0\] \(pool "linux"\): cannot render the boot script:\n- prepareCommands total 6[0-9]{3} bytes, at most 1024 fit in user data/,
    ],
  ])('%s', (_name, change, message) => {
    expect(() => build(change)).toThrow(message);
  });

  it('warns at synth when a GitHub pool that serves jobs without "self-hosted" carries a hosted runner label', () => {
    const warnings = (change: (p: WarmRunnersProps) => WarmRunnersProps) => {
      const props = change(base());
      new WarmRunners(props.vpc.stack, 'Runners', props);
      return Annotations.fromStack(props.vpc.stack).findWarning('*', Match.stringLikeRegexp('look(s)? like GitHub-hosted runner labels'));
    };
    const pool = (extra: object) => (p: WarmRunnersProps) => ({ ...p, pools: [{ ...p.pools[0]!, ...extra }] });
    expect(warnings(pool({ name: 'ubuntu-latest' }))).toHaveLength(1);
    expect(warnings(pool({ labels: ['linux', 'windows-2022'] }))[0]!.entry.data).toMatch(/^pools\[0\]\.labels \(pool "linux"\): label "windows-2022" looks like/);
    // Not with the old rule, nor with labels no hosted runner has.
    expect(warnings(pool({ name: 'ubuntu-latest', requireSelfHostedLabel: true }))).toHaveLength(0);
    expect(warnings(pool({ labels: ['linux', 'x64', 'gpu'] }))).toHaveLength(0);
  });
});

describe('prepare commands', () => {
  const fleet = (pool: Partial<RunnerPoolProps>) => {
    const s = new Stack(new App(), 'P');
    const runners = new WarmRunners(s, 'Runners', {
      vpc: new ec2.Vpc(s, 'Vpc'),
      github: { appId: '1', organization: 'org' },
      pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), ...pool }],
    });
    const warnings = Annotations.fromStack(s).findWarning('*', Match.anyValue()).map((w) => String(w.entry.data));
    return { userData: runners.fleet.launchTemplates[0]!.userData, warnings };
  };
  const commands = ['docker pull public.ecr.aws/docker/library/node:22', 'mkdir -p /opt/tools'];

  it('render into the boot script of a pool with or without a warm pool, silently', () => {
    const cold = fleet({ prepareCommands: commands });
    expect(cold.userData).toBe(renderUserData({ prefix: 'warm-runners', provider: Provider.GITHUB, prepareCommands: commands, followLatestRunner: true }));
    expect(cold.warnings.filter((w) => /prepare/.test(w))).toEqual([]);
  });

  it('take the deprecated warm.prepareCommands as the same list, with a warning that says where to move them', () => {
    const legacy = fleet({ warm: { size: 1, prepareCommands: commands } });
    expect(legacy.userData).toBe(fleet({ warm: { size: 1 }, prepareCommands: commands }).userData);
    expect(legacy.warnings.filter((w) => !w.includes('notify no one'))).toEqual([expect.stringMatching(/^pools\[0\]\.warm\.prepareCommands \(pool "linux"\) is deprecated: the prepare commands now run on cold launches too[^]*Move them to the pool's prepareCommands/)]);
  });

  it('refuse both names at once, naming both', () => {
    expect(() => fleet({ prepareCommands: commands, warm: { prepareCommands: ['true'] } })).toThrow(
      /pools\[0\]\.prepareCommands \(pool "linux"\) and warm\.prepareCommands are both set; warm\.prepareCommands is the deprecated name of prepareCommands: keep one list, in prepareCommands/,
    );
  });

  it('warn for a reusable pool, whose reused instances do not run them again', () => {
    const reused = fleet({ warm: { size: 1 }, reuse: {}, prepareCommands: commands });
    expect(reused.warnings.filter((w) => /prepare commands/.test(w))).toEqual([
      expect.stringMatching(/pools\[0\]\.prepareCommands \(pool "linux"\): a reused instance does not run its prepare commands again: a later job finds what they made as the earlier jobs of the same repository left it/),
    ]);
    expect(fleet({ warm: { size: 1 }, reuse: {} }).warnings.filter((w) => /prepare commands/.test(w))).toEqual([]);
  });
});

describe('architectures', () => {
  const x86 = ec2.MachineImage.latestAmazonLinux2023();
  const arm = ec2.MachineImage.latestAmazonLinux2023({ cpuType: ec2.AmazonLinuxCpuType.ARM_64 });
  const types = (...names: string[]) => names.map((n) => new ec2.InstanceType(n));
  const build = (...pools: Partial<RunnerPoolProps>[]) => {
    const s = new Stack(new App(), 'A');
    new WarmRunners(s, 'Runners', {
      vpc: new ec2.Vpc(s, 'Vpc'),
      github: { appId: '1', organization: 'org' },
      pools: pools.map((p, i) => ({ name: `pool-${i}`, provider: Provider.GITHUB, machineImage: x86, ...p })),
    });
    return s;
  };

  it.each<[string, () => Partial<RunnerPoolProps>[], RegExp]>([
    [
      'arm64 types for an x86_64 image',
      () => [{}, { machineImage: x86, instanceTypes: types('m7i.large', 'm7g.large') }],
      /pools\[1\]\.instanceTypes \(pool "pool-1"\) mixes architectures: m7i\.large is x86_64, m7g\.large is arm64/,
    ],
    [
      'arm64 types for an x86_64 image (one architecture)',
      () => [{}, { instanceTypes: types('c7gn.xlarge', 't4g.large') }],
      /pools\[1\]\.instanceTypes \(pool "pool-1"\) holds c7gn\.xlarge \(arm64\), t4g\.large \(arm64\), but the pool's machineImage is x86_64: every launch would fail\. Give x86_64 instance types \(such as m7i\.large\), or an image of arm64/,
    ],
    [
      'the default x86_64 type for an arm64 image',
      () => [{ machineImage: arm }],
      /pools\[0\]\.instanceTypes \(pool "pool-0"\) is not set, and its default m7i\.large is x86_64, but the pool's machineImage is arm64[^]*Give arm64 instance types \(such as m7g\.large\)/,
    ],
    [
      'x86_64 types for an arm64 RunnerImage',
      () => [{ machineImage: new RunnerImage(new Stack(new App(), 'I'), 'Image', { provider: Provider.GITHUB, architecture: RunnerImageArchitecture.ARM64 }).machineImage(), instanceTypes: types('m7i.large') }],
      /pools\[0\]\.instanceTypes \(pool "pool-0"\) holds m7i\.large \(x86_64\), but the pool's machineImage is arm64/,
    ],
    [
      'a pool mixing architectures whose image says nothing',
      () => [{ machineImage: ec2.MachineImage.genericLinux({ 'us-east-1': 'ami-12345678' }), instanceTypes: types('a1.large', 'c6i.large') }],
      /pools\[0\]\.instanceTypes \(pool "pool-0"\) mixes architectures: a1\.large is arm64, c6i\.large is x86_64[^]*make one pool per architecture/,
    ],
  ])('refuses %s', (_name, pools, message) => {
    expect(() => build(...pools())).toThrow(message);
  });

  it('accepts types of the image\'s architecture, a RunnerImage\'s, and Ubuntu\'s public parameters', () => {
    const image = new RunnerImage(new Stack(new App(), 'I'), 'Image', { provider: Provider.GITHUB, architecture: RunnerImageArchitecture.ARM64 });
    const ubuntu = (arch: string) => ec2.MachineImage.fromSsmParameter(`/aws/service/canonical/ubuntu/server/24.04/stable/current/${arch}/hvm/ebs-gp3/ami-id`);
    expect(() =>
      build(
        {},
        { machineImage: arm, instanceTypes: types('m7g.large', 'c7gn.xlarge', 't4g.large', 'im4gn.large', 'g5g.xlarge') },
        { machineImage: image.machineImage(), instanceTypes: types('m8g.large') },
        { machineImage: ubuntu('arm64'), instanceTypes: types('r7g.large') },
        { machineImage: ubuntu('amd64'), instanceTypes: types('c7a.large', 'm7i-flex.large') },
      ),
    ).not.toThrow();
    expect(() => build({ machineImage: ubuntu('amd64'), instanceTypes: types('r7g.large') })).toThrow(/holds r7g\.large \(arm64\), but the pool's machineImage is x86_64/);
  });

  it('says nothing where the image\'s architecture is unknown (an AMI id, a parameter of the team\'s own), nor for types it cannot tell', () => {
    const s = build(
      { machineImage: ec2.MachineImage.genericLinux({ 'us-east-1': 'ami-12345678' }), instanceTypes: types('m7g.large') },
      { machineImage: ec2.MachineImage.fromSsmParameter('/team/images/arm64-runner'), instanceTypes: types('m7i.large') },
      { machineImage: new ParameterMachineImage('/team/images/runner'), instanceTypes: types('m7g.large') },
      { machineImage: arm, instanceTypes: types('m7g.large', 'u-6tb1.metal') },
    );
    expect(Annotations.fromStack(s).findWarning('*', Match.stringLikeRegexp('architecture'))).toEqual([]);
  });
});

describe('composition', () => {
  it('grants to the runners and connects their security group with the usual CDK verbs', () => {
    const app = new App();
    const s = new Stack(app, 'C');
    const vpc = new ec2.Vpc(s, 'Vpc');
    const runners = new WarmRunners(s, 'Runners', {
      vpc,
      github: { appId: '1', organization: 'org' },
      pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() }],
    });
    const role = new iam.Role(s, 'Reader', { assumedBy: new iam.AccountRootPrincipal() });
    void role;
    iam.Grant.addToPrincipal({ grantee: runners, actions: ['s3:GetObject'], resourceArns: ['arn:aws:s3:::bucket/*'] });
    const cache = new ec2.SecurityGroup(s, 'Cache', { vpc });
    cache.connections.allowFrom(runners, ec2.Port.tcp(6379));
    const t = Template.fromStack(s);
    t.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Action: 's3:GetObject', Resource: 'arn:aws:s3:::bucket/*' })]) },
    });
    t.hasResourceProperties('AWS::EC2::SecurityGroupIngress', { FromPort: 6379, ToPort: 6379 });
  });
});

describe('snapshot', () => {
  it('of the example app, asset hashes scrubbed, so the deployed shape shows in review', () => {
    // The user data as its script text: a review diff shows the script, and the snapshot does
    // not depend on the zlib build that compressed it.
    const synthesized = JSON.parse(JSON.stringify(template.toJSON())) as { Resources: Record<string, { Type: string; Properties: { LaunchTemplateData: { UserData: unknown } } }> };
    for (const resource of Object.values(synthesized.Resources)) {
      if (resource.Type !== 'AWS::EC2::LaunchTemplate') continue;
      const data = resource.Properties.LaunchTemplateData;
      data.UserData = { 'base64(gzip(...)) of': decodeUserData(data.UserData as string) };
    }
    const json = JSON.stringify(synthesized, null, 1)
      .replace(/[0-9a-f]{64}(\.zip)?/g, '<asset-hash>')
      .replace(/"S3Key": "[^"]+"/g, '"S3Key": "<asset>"');
    expect(json).toMatchSnapshot();
  });
});

describe('control plane permissions (what the handlers call, and no more)', () => {
  const acct = 'arn:aws:ec2:eu-west-1:111122223333';
  const fleetInstance = `${acct}:instance/i-0aaaaaaaaaaaaaaaa`;
  const config = 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/runners/config/i-0aaaaaaaaaaaaaaaa';
  const configRoot = 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/runners/config';
  const poolTag = { [`aws:ResourceTag/${tagKeys('warm-runners').pool}`]: 'linux-x64' };
  type Row = [action: string, resource: string, context: Record<string, string | string[]>, allowed: boolean];
  const check = (role: string, rows: Row[]) => {
    const statements = rolePolicyStatements(role);
    for (const [action, resource, context, allowed] of rows) {
      expect(isAllowed(statements, { action, resource, context }), `${role} ${action} on ${resource} ${JSON.stringify(context)}`).toBe(allowed);
    }
  };
  const fleetRoleArn = () => {
    const statement = rolePolicyStatements('RunnersScaleUpRole').find((st) => [st.Action].flat().includes('iam:PassRole'))!;
    return [statement.Resource].flat()[0]!;
  };
  it('scale-up passes only the instance role, only to EC2', () => {
    const role = fleetRoleArn();
    expect(role).toMatch(/^<getatt:RunnersFleetRole[0-9A-F]+\.Arn>$/);
    check('RunnersScaleUpRole', [
      ['iam:PassRole', role, { 'iam:PassedToService': 'ec2.amazonaws.com' }, true],
      ['iam:PassRole', role, { 'iam:PassedToService': 'lambda.amazonaws.com' }, false],
      ['iam:PassRole', 'arn:aws:iam::111122223333:role/admin', { 'iam:PassedToService': 'ec2.amazonaws.com' }, false],
    ]);
  });
  it('scale-up', () =>
    check('RunnersScaleUpRole', [
      ['ec2:CreateFleet', `${acct}:fleet/fleet-1`, {}, true],
      ['ec2:StartInstances', fleetInstance, poolTag, true],
      ['ec2:StartInstances', fleetInstance, {}, false],
      // Only its activation keys (test/lib/iam-launch.test.ts judges every call and key).
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').runnerId] }, true],
      ['ec2:CreateTags', fleetInstance, poolTag, false],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').pool] }, false],
      ['ec2:DeleteTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').runnerId] }, true],
      // DeleteTags without tag keys deletes every tag.
      ['ec2:DeleteTags', fleetInstance, poolTag, false],
      ['ec2:TerminateInstances', fleetInstance, poolTag, true],
      ['ec2:TerminateInstances', fleetInstance, {}, false],
      ['ec2:DescribeInstances', '*', {}, true],
      ['ssm:PutParameter', config, {}, true],
      ['ssm:AddTagsToResource', config, {}, true],
      ['ssm:DeleteParameter', config, {}, true],
      ['ssm:PutParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/github/app-private-key', {}, false],
      ['ssm:GetParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/github/app-private-key', {}, true],
      ['ssm:GetParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/github/webhook-secret', {}, false],
      ['ec2:StopInstances', fleetInstance, poolTag, false],
      // The prime back-off: reads its pools' state parameters, writes none.
      ['ssm:GetParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/pools/linux-x64/prime-state', {}, true],
      ['ssm:PutParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/pools/linux-x64/prime-state', {}, false],
    ]));
  it('pool', () =>
    check('RunnersPoolRole', [
      ['ec2:RunInstances', `${acct}:launch-template/<ref:RunnersFleetLaunchTemplatelinuxx6402BDBB00>`, {}, true],
      ['iam:CreateServiceLinkedRole', '*', { 'iam:AWSServiceName': 'spot.amazonaws.com' }, true],
      ['iam:CreateServiceLinkedRole', '*', { 'iam:AWSServiceName': 'rds.amazonaws.com' }, false],
      ['ec2:CreateTags', fleetInstance, poolTag, false],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').primeFailure] }, true],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').primeFailure, tagKeys('warm-runners').activatedAt] }, false],
      ['ec2:CreateTags', fleetInstance, { 'aws:TagKeys': [tagKeys('warm-runners').primeFailure] }, false],
      ['ec2:CreateFleet', `${acct}:fleet/fleet-1`, {}, false],
      ['ssm:GetParameter', config, {}, false],
      ['ec2:TerminateInstances', fleetInstance, poolTag, true],
      ['ec2:TerminateInstances', fleetInstance, {}, false],
      ['ssm:PutParameter', config, {}, true],
      ['ssm:DeleteParameter', config, {}, true],
      ['ssm:GetParametersByPath', configRoot, {}, true],
      ['ec2:CancelSpotInstanceRequests', `${acct}:spot-instances-request/sir-1`, {}, true],
      ['ec2:StartInstances', fleetInstance, poolTag, false],
      ['ssm:GetParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/gitlab/runner-token', {}, false],
      // The prime-failure back-off: its pool's state parameter, and only the prime-failure tag.
      ['ssm:GetParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/pools/linux-x64/prime-state', {}, true],
      ['ssm:PutParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/pools/linux-x64/prime-state', {}, true],
      ['ssm:PutParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/pools/other/prime-state', {}, false],
      ['ssm:PutParameter', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/github/webhook-secret', {}, false],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').primeFailure] }, true],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').primeFailure, tagKeys('warm-runners').activatedAt] }, false],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').warmStandby] }, false],
      ['ec2:CreateTags', fleetInstance, { 'aws:TagKeys': [tagKeys('warm-runners').primeFailure] }, false],
    ]));
  it('scale-down', () =>
    check('RunnersScaleDownRole', [
      ['ec2:TerminateInstances', fleetInstance, poolTag, true],
      ['ec2:TerminateInstances', fleetInstance, {}, false],
      ['ssm:GetParametersByPath', configRoot, {}, true],
      ['ssm:DeleteParameters', config, {}, true],
      ['ssm:DeleteParameter', config, {}, false],
      ['ssm:PutParameter', config, {}, false],
      ['ec2:StartInstances', fleetInstance, poolTag, false],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').idleSince] }, true],
      ['ec2:DeleteTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').idleSince] }, true],
      ['ec2:CreateTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').jobStarted] }, false],
      ['ec2:DeleteTags', fleetInstance, { ...poolTag, 'aws:TagKeys': [tagKeys('warm-runners').jobStarted] }, false],
      ['ec2:CreateTags', fleetInstance, { 'aws:TagKeys': [tagKeys('warm-runners').idleSince] }, false],
      // DeleteTags without tag keys deletes every tag.
      ['ec2:DeleteTags', fleetInstance, poolTag, false],
    ]));
  it('webhook: sends to the jobs queue and, for jobs too large to queue, to the dead-letter queue; reads from neither', () => {
    const queueArn = (logicalIdPrefix: string) => {
      const [id] = Object.keys(template.findResources('AWS::SQS::Queue')).filter((k) => k.startsWith(logicalIdPrefix));
      return `<getatt:${id}.Arn>`;
    };
    const jobs = queueArn('RunnersJobsQueue');
    const dlq = queueArn('RunnersJobsDeadLetterQueue');
    check('RunnersWebhookRole', [
      ['sqs:SendMessage', jobs, {}, true],
      ['sqs:SendMessage', dlq, {}, true],
      ['sqs:SendMessage', 'arn:aws:sqs:eu-west-1:111122223333:other.fifo', {}, false],
      ['sqs:ReceiveMessage', dlq, {}, false],
      ['sqs:DeleteMessage', dlq, {}, false],
      ['sqs:PurgeQueue', dlq, {}, false],
    ]);
    const [fn] = Object.values(template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('Verifies GitHub and GitLab') } }));
    expect(fn!.Properties.Environment.Variables.DEAD_LETTER_QUEUE_URL).toEqual({ Ref: Object.keys(template.findResources('AWS::SQS::Queue')).find((k) => k.startsWith('RunnersJobsDeadLetterQueue')) });
  });
  it('scale-up gets the dead-letter queue and the instance ARN prefix', () => {
    const [fn] = Object.values(template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('Serves queued jobs') } }));
    const vars = resolvePseudo(fn!.Properties.Environment.Variables, PSEUDO) as Record<string, string>;
    expect(vars.INSTANCE_ARN_PREFIX).toBe('arn:aws:ec2:eu-west-1:111122223333:instance/');
    expect(vars.DEAD_LETTER_QUEUE_URL).toBeDefined();
  });
});

describe('reconciler and per-job records', () => {
  const logicalId = (type: string, prefix: string) => Object.keys(template.findResources(type)).find((id) => id.startsWith(prefix))!;

  it('keeps the per-job records in an on-demand table with a TTL that cdk destroy removes', () => {
    const tables = template.findResources('AWS::DynamoDB::Table');
    expect(Object.keys(tables)).toHaveLength(1);
    const [table] = Object.values(tables);
    expect(table).toMatchObject({ DeletionPolicy: 'Delete', UpdateReplacePolicy: 'Delete' });
    expect(table!.Properties).toMatchObject({ BillingMode: 'PAY_PER_REQUEST', KeySchema: [{ AttributeName: 'jobId', KeyType: 'HASH' }], TimeToLiveSpecification: { AttributeName: 'expiresAt', Enabled: true } });
    const scaleUp = template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('^Serves queued jobs') } });
    expect(Object.values(scaleUp)[0]!.Properties.Environment.Variables.JOB_RECORD_TABLE).toEqual({ Ref: logicalId('AWS::DynamoDB::Table', 'RunnersJobRecords') });
  });

  it('lets scale-up (records and launch tickets) and the pool (launch tickets) only put, read and release items of its table, and no other function touch the table', () => {
    const tableStatements = (prefix: string) => rolePolicyStatements(prefix).filter((s) => [s.Action].flat().some((a) => a.startsWith('dynamodb:')));
    const table = stack.resolve((stack.runners.jobRecords.table.node.defaultChild as CfnElement).logicalId);
    for (const role of ['RunnersScaleUpRole', 'RunnersPoolRole']) {
      expect(tableStatements(role).map((s) => [s.Action].flat().sort())).toEqual([['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem']]);
      expect(tableStatements(role).map((s) => s.Resource)).toEqual([`<getatt:${table}.Arn>`]);
    }
    // The pool may touch launch tickets only, never a job's record (its key is the job id).
    expect(tableStatements('RunnersPoolRole').map((s) => s.Condition)).toEqual([{ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${LAUNCH_TICKET_KEY_PREFIX}*`] } }]);
    expect(tableStatements('RunnersScaleUpRole').map((s) => s.Condition)).toEqual([undefined]);
    const pool = template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('^Keeps each warm pool') } });
    expect(Object.values(pool)[0]!.Properties.Environment.Variables.JOB_RECORD_TABLE).toEqual({ Ref: logicalId('AWS::DynamoDB::Table', 'RunnersJobRecords') });
    for (const other of ['RunnersWebhookRole', 'RunnersScaleDownRole', 'RunnersReconcile']) expect(tableStatements(other)).toEqual([]);
  });

  it('runs the reconciler on its own clearly named schedule, exposed for the drain, and lets it send jobs and read the CI credentials only', () => {
    const rule = template.findResources('AWS::Events::Rule', { Properties: { Description: 'Runs the reconciler of warm-runners' } });
    expect(Object.values(rule)).toHaveLength(1);
    expect(Object.values(rule)[0]!.Properties.ScheduleExpression).toBe('rate(5 minutes)');
    expect(Object.keys(rule)).toEqual([stack.resolve((stack.runners.reconcileSchedule!.node.defaultChild as CfnElement).logicalId)]);
    const statements = rolePolicyStatements('RunnersReconcile');
    const secrets = statements.filter((s) => [s.Action].flat().includes('ssm:GetParameter')).flatMap((s) => [s.Resource].flat()).filter((r) => r.includes('/ci/'));
    expect(secrets).toEqual(['arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/github/app-private-key', 'arn:aws:ssm:eu-west-1:111122223333:parameter/warm-runners/ci/gitlab/runner-token']);
    expect(statements.some((s) => [s.Action].flat().some((a) => a.startsWith('ec2:')))).toBe(false);
    const env = Object.values(template.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('^Redelivers') } }))[0]!.Properties.Environment.Variables;
    expect(JSON.parse(env.RECONCILE_OPTIONS)).toEqual({
      github: { redeliverLimit: 10, runReadLimit: 100, repositoriesPerRun: 50, intervalSeconds: 300 },
      gitlab: { resendLimit: 10, projectsPerRun: 50, intervalSeconds: 300 },
    });
  });

  it('names the GitLab webhook\'s owner from the runner scope, and refuses a webhook id without one', () => {
    const build = (gitlab: WarmRunnersProps['gitlab']) => {
      const s = new Stack(new App(), 'S');
      const pools = [{ name: 'gl', provider: Provider.GITLAB, labels: ['linux'], machineImage: ec2.MachineImage.latestAmazonLinux2023() }];
      return new WarmRunners(s, 'R', { vpc: new ec2.Vpc(s, 'Vpc'), ...(gitlab ? { gitlab } : {}), pools });
    };
    const grouped = build({ url: 'https://gitlab.example.com', runnerType: GitLabRunnerType.GROUP, scopeId: 7, webhookId: 3 });
    expect(grouped.config.gitlab?.webhook).toEqual({ owner: 'group', ownerId: 7, hookId: 3 });
    expect(grouped.reconcileFunction).toBeDefined();
    expect(() => build({ url: 'https://gitlab.example.com', webhookId: 3 })).toThrow(/gitlab.webhookId 3 needs its owner: set gitlab.webhookProjectId or gitlab.webhookGroupId/);
    expect(() => build({ url: 'https://gitlab.example.com', webhookId: 3, webhookGroupId: 1, webhookProjectId: 2 })).toThrow(/both set/);
    expect(build({ url: 'https://gitlab.example.com', webhookId: 3, webhookProjectId: 9 }).config.gitlab?.webhook).toEqual({ owner: 'project', ownerId: 9, hookId: 3 });
  });

  it('refuses reconcile limits it cannot honour, naming the prop', () => {
    const build = (extra: Partial<WarmRunnersProps>) => {
      const s = new Stack(new App(), 'S');
      const pools = [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], machineImage: ec2.MachineImage.latestAmazonLinux2023() }];
      return () => new WarmRunners(s, 'R', { vpc: new ec2.Vpc(s, 'Vpc'), github: { appId: '1', organization: 'o' }, pools, ...extra });
    };
    expect(build({ redeliverLimit: -1 })).toThrow(/redeliverLimit -1 must be an integer from 0 to 100/);
    expect(build({ reconcileRunReadLimit: 1.5 })).toThrow(/reconcileRunReadLimit 1.5 must be an integer/);
    expect(build({ reconcileInterval: Duration.seconds(30) })).toThrow(/reconcileInterval 30 seconds must be a whole number of minutes/);
    expect(build({ reconcileRepositoriesPerRun: 0 })).toThrow(/reconcileRepositoriesPerRun 0 must be an integer from 1 to 500/);
    expect(build({ reconcileRepositoriesPerRun: 2.5 })).toThrow(/reconcileRepositoriesPerRun 2.5 must be an integer/);
    expect(build({ redeliverLimit: 0 })).not.toThrow();
    expect(build({ reconcileRepositoriesPerRun: 500 })).not.toThrow();
  });
});
