import { App, Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ExampleRunnersStack } from '../../bin/example-stack';
import { FleetDrain, WarmRunners } from '../../lib';
import { Provider, tagKeys } from '../../lambdas/shared/contract';
import { isAllowed, rolePolicyStatements } from './iam-eval';

const STACK_ID = 'arn:aws:cloudformation:eu-west-1:111122223333:stack/Example/0b7e5e40-0000-11ef-0000-000000000000';
const PSEUDO = { 'AWS::StackId': STACK_ID, 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };

let template: Template;
beforeAll(() => {
  template = Template.fromStack(new ExampleRunnersStack(new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-drain-')) }), 'Example'));
});

const idsOf = (type: string, prefix = 'Runners') => Object.keys(template.findResources(type)).filter((id) => id.startsWith(prefix));
const one = (type: string, prefix: string) => {
  const ids = idsOf(type, prefix);
  expect(ids, `${type} ${prefix}`).toHaveLength(1);
  return ids[0]!;
};
const drainResource = () => Object.values(template.findResources('Custom::FleetDrain'))[0]!;
const drainFunctionEnv = (exportName: string) => {
  const [fn] = Object.values(template.findResources('AWS::Lambda::Function', { Properties: { Handler: `index.${exportName}` } }));
  return fn!.Properties.Environment.Variables as Record<string, unknown>;
};

describe('the drain custom resource', () => {
  it('is deleted before the functions, queues, parameters, roles, schedules, mapping and security group it needs (it depends on each)', () => {
    const dependsOn = new Set(drainResource().DependsOn as string[]);
    const needed = [
      ...['RunnersScaleUp3', 'RunnersPool2', 'RunnersScaleDown9', 'RunnersWebhook7'].map((p) => one('AWS::Lambda::Function', p)),
      one('AWS::SQS::Queue', 'RunnersJobsQueue'),
      one('AWS::SSM::Parameter', 'RunnersFleetConfig'),
      one('AWS::EC2::SecurityGroup', 'RunnersFleetSecurityGroup'),
      one('AWS::Lambda::EventSourceMapping', 'RunnersScaleUp'),
      ...idsOf('AWS::Events::Rule'),
      ...idsOf('AWS::IAM::Role').filter((id) => !id.startsWith('RunnersDrain')),
      ...idsOf('AWS::EC2::LaunchTemplate'),
    ];
    expect(needed.length).toBeGreaterThan(12);
    for (const id of needed) expect([id, dependsOn.has(id)]).toEqual([id, true]);
    // Nothing of its own (its functions, roles, provider) is deleted before it.
    expect([...dependsOn].filter((id) => id.startsWith('RunnersDrain'))).toEqual([]);
  });

  it('also depends on a part added to the fleet after its construction', () => {
    const stack = new Stack(new App(), 'S');
    const runners = new WarmRunners(stack, 'Runners', {
      vpc: new ec2.Vpc(stack, 'Vpc'),
      github: { appId: '1', organization: 'org' },
      pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), warm: { size: 1 } }],
    });
    const later = new cloudwatch.Alarm(runners, 'AddedLater', { metric: runners.poolFunction.metricErrors(), threshold: 1, evaluationPeriods: 1 });
    const t = Template.fromStack(stack);
    const [drain] = Object.values(t.findResources('Custom::FleetDrain'));
    expect(drain!.DependsOn).toContain(stack.getLogicalId(later.node.defaultChild as cloudwatch.CfnAlarm));
  });

  it("runs every scheduled function once per event, never after its 60 s maximum age: Lambda's async retries would outlive the quiet period", () => {
    const targets = Object.values(template.findResources('AWS::Events::Rule')).flatMap((r) => (r.Properties.Targets as { Arn: { 'Fn::GetAtt': [string, string] } }[]).map((t) => t.Arn['Fn::GetAtt'][0]));
    // Pool, scale-down, the reconciler and the runner release resolver.
    expect(targets).toHaveLength(4);
    const configs = Object.values(template.findResources('AWS::Lambda::EventInvokeConfig')).map((c) => c.Properties as { FunctionName: { Ref: string } });
    for (const fn of targets) {
      expect(configs).toContainEqual({ FunctionName: { Ref: fn }, MaximumEventAgeInSeconds: 60, MaximumRetryAttempts: 0, Qualifier: '$LATEST' });
    }
  });

  it('disables the jobs queue mapping and every schedule of the fleet, waits out the longest function timeout, and fails itself before the framework does', () => {
    for (const exportName of ['onEvent', 'isComplete']) {
      const env = drainFunctionEnv(exportName);
      expect(env.DRAIN_EVENT_SOURCE_MAPPINGS).toEqual({ Ref: one('AWS::Lambda::EventSourceMapping', 'RunnersScaleUp') });
      const rules = idsOf('AWS::Events::Rule');
      // Pool, scale-down, the reconciler (the example has a GitHub connection) and the runner
      // release resolver (its GitHub pool follows the newest runner): a resolution after the
      // drain would write a release parameter the drain has removed.
      expect(rules).toHaveLength(4);
      const ref = (prefix: string) => ({ Ref: rules.find((r) => r.startsWith(prefix)) });
      const joined = (env.DRAIN_SCHEDULES as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1];
      expect(joined.filter((part) => part !== ',')).toEqual(
        expect.arrayContaining([ref('RunnersPoolSchedule'), ref('RunnersScaleDownSchedule'), ref('RunnersReconcileSchedule'), ref('RunnersRunnerReleaseSchedule')]),
      );
      expect(joined.filter((part) => part !== ',')).toHaveLength(4);
      // Pool and scale-down time out at 120 s, a scheduled event waits at most 60 s, and a
      // minute more for a mapping still disabling.
      expect(env.DRAIN_QUIET_SECONDS).toBe('240');
      expect(env.DRAIN_DEADLINE_SECONDS).toBe(String(30 * 60 - 120));
    }
  });

  it('polls through the provider framework every 15 s for at most 30 minutes', () => {
    const [machine] = Object.values(template.findResources('AWS::StepFunctions::StateMachine'));
    const definition = JSON.stringify(machine!.Properties.DefinitionString);
    expect(definition).toMatch(/\\"IntervalSeconds\\":15,\\"MaxAttempts\\":120,\\"BackoffRate\\":1/);
    const [isComplete] = Object.keys(template.findResources('AWS::Lambda::Function', { Properties: { Handler: 'index.isComplete' } }));
    template.hasResourceProperties('AWS::Lambda::Function', {
      Handler: 'framework.onEvent',
      Environment: { Variables: { USER_IS_COMPLETE_FUNCTION_ARN: { 'Fn::GetAtt': [isComplete, 'Arn'] } } },
    });
  });

  it('refuses a timeout the drain cannot work within, naming it', () => {
    const stack = new Stack(new App(), 'S');
    const props = { prefix: 'p', fleet: stack, configParameter: new ssm.StringParameter(stack, 'P', { stringValue: '{}' }), secretParameterNames: [] };
    expect(() => new FleetDrain(stack, 'Short', { ...props, timeout: Duration.minutes(5) })).toThrow(/drain timeout 5 minutes is outside 10 minutes to 1 hour/);
    expect(() => new FleetDrain(stack, 'Long', { ...props, timeout: Duration.hours(2) })).toThrow(/outside 10 minutes to 1 hour/);
  });
});

describe('drain permissions (only the fleet\'s resources)', () => {
  const acct = 'arn:aws:ec2:eu-west-1:111122223333';
  const ssmArn = (name: string) => `arn:aws:ssm:eu-west-1:111122223333:parameter${name}`;
  const poolTag = { [`aws:ResourceTag/${tagKeys('warm-runners').pool}`]: 'linux-x64' };
  const check = (role: string, rows: [string, string, Record<string, string>, boolean][]) => {
    const statements = rolePolicyStatements(template, role, PSEUDO);
    for (const [action, resource, context, allowed] of rows) expect(isAllowed(statements, { action, resource, context }), `${role} ${action} on ${resource}`).toBe(allowed);
  };
  const mapping = () => `arn:aws:lambda:eu-west-1:111122223333:event-source-mapping:<ref:${one('AWS::Lambda::EventSourceMapping', 'RunnersScaleUp')}>`;
  const rule = (prefix: string) => `<getatt:${one('AWS::Events::Rule', prefix)}.Arn>`;

  it('isComplete: terminates fleet instances only, deletes only the run-time parameters, reads the CI credentials, disables only the fleet\'s triggers', () =>
    check('RunnersDrainDrainRole', [
      ['ec2:TerminateInstances', `${acct}:instance/i-0aaaaaaaaaaaaaaaa`, poolTag, true],
      ['ec2:TerminateInstances', `${acct}:instance/i-0aaaaaaaaaaaaaaaa`, {}, false],
      ['ec2:DescribeInstances', '*', {}, true],
      ['ec2:CancelSpotInstanceRequests', `${acct}:spot-instances-request/sir-1`, {}, true],
      ['ec2:StartInstances', `${acct}:instance/i-0aaaaaaaaaaaaaaaa`, poolTag, false],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/runners/config/i-0aaaaaaaaaaaaaaaa'), {}, true],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/pools/linux-x64/prime-state'), {}, true],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/runners/release/gitlab'), {}, true],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/ci/github/app-private-key'), {}, false],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/fleet/config'), {}, false],
      ['ssm:DeleteParameters', ssmArn('/other-fleet/runners/config/i-0aaaaaaaaaaaaaaaa'), {}, false],
      ['ssm:GetParametersByPath', ssmArn('/warm-runners/runners/config'), {}, true],
      ['ssm:GetParametersByPath', ssmArn('/warm-runners/pools'), {}, true],
      ['ssm:GetParametersByPath', ssmArn('/warm-runners/runners/release'), {}, true],
      ['ssm:GetParametersByPath', ssmArn('/warm-runners/ci'), {}, false],
      ['ssm:GetParameter', ssmArn('/warm-runners/ci/github/app-private-key'), {}, true],
      ['ssm:GetParameter', ssmArn('/warm-runners/ci/gitlab/runner-token'), {}, true],
      ['ssm:GetParameter', ssmArn('/warm-runners/ci/github/webhook-secret'), {}, false],
      ['ssm:GetParameter', ssmArn('/warm-runners/runners/config/i-0aaaaaaaaaaaaaaaa'), {}, false],
      ['lambda:UpdateEventSourceMapping', mapping(), {}, true],
      ['lambda:GetEventSourceMapping', mapping(), {}, true],
      ['lambda:UpdateEventSourceMapping', 'arn:aws:lambda:eu-west-1:111122223333:event-source-mapping:other', {}, false],
      ['lambda:DeleteEventSourceMapping', mapping(), {}, false],
      ['events:DisableRule', rule('RunnersPoolSchedule'), {}, true],
      ['events:DescribeRule', rule('RunnersScaleDownSchedule'), {}, true],
      ['events:DisableRule', 'arn:aws:events:eu-west-1:111122223333:rule/other', {}, false],
      ['events:DeleteRule', rule('RunnersPoolSchedule'), {}, false],
      ['cloudformation:DescribeStacks', STACK_ID, {}, false],
    ]));

  it('onEvent: reads only its own stack\'s status, only disables the fleet\'s mapping and schedules', () =>
    check('RunnersDrainStopScalingRole', [
      ['cloudformation:DescribeStacks', STACK_ID, {}, true],
      ['cloudformation:DescribeStacks', 'arn:aws:cloudformation:eu-west-1:111122223333:stack/Other/0b7e5e40-0000-11ef-0000-000000000001', {}, false],
      ['cloudformation:DeleteStack', STACK_ID, {}, false],
      ['lambda:UpdateEventSourceMapping', mapping(), {}, true],
      ['events:DisableRule', rule('RunnersPoolSchedule'), {}, true],
      ['events:DisableRule', rule('RunnersScaleDownSchedule'), {}, true],
      ['ec2:TerminateInstances', `${acct}:instance/i-0aaaaaaaaaaaaaaaa`, poolTag, false],
      ['ssm:DeleteParameters', ssmArn('/warm-runners/runners/config/i-0aaaaaaaaaaaaaaaa'), {}, false],
      ['ssm:GetParameter', ssmArn('/warm-runners/ci/github/app-private-key'), {}, false],
    ]));
});
