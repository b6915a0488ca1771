import { App, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { CfnParameter } from 'aws-cdk-lib/aws-ssm';
import { AwsSolutionsChecks } from 'cdk-nag';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { WarmRunners, WebhookExposure, type RunnerPoolProps } from '../../lib';
import { SCALE_SET_LISTENER_TIMEOUT } from '../../lib/scale-set-listener';
import { JOB_RECORD_ATTRIBUTES, LAMBDA_ENV, LAUNCH_TICKET_KEY_PREFIX, Provider, scaleSetLeaseKey } from '../../lambdas/shared/contract';
import { arn, allowed, denials, instanceArn, INSTANCE, keys, paths, requestTags, resourceTags, synth, type Fleet } from './iam-fleet';
import type { AuthorizationRequest } from './iam-reference';

/** Runner scale-set pools in the construct (docs/scale-set.md): the listener, its role, the scale-set resource, the webhook's absence. */
const image = ec2.MachineImage.latestAmazonLinux2023();
const scaleSetPool: RunnerPoolProps = { name: 'fast', provider: Provider.GITHUB, machineImage: image, scaleSetName: 'fast-linux' };
const webhookPool: RunnerPoolProps = { name: 'linux', provider: Provider.GITHUB, machineImage: image };

function template(pools: RunnerPoolProps[], extra: { gitlab?: boolean; exposure?: WebhookExposure } = {}): { t: Template; runners: WarmRunners; stack: Stack } {
  const stack = new Stack(new App(), 'S');
  const runners = new WarmRunners(stack, 'Runners', {
    vpc: new ec2.Vpc(stack, 'Vpc'),
    github: { appId: '1', organization: 'org' },
    ...(extra.gitlab ? { gitlab: { url: 'https://gitlab.example.com' } } : {}),
    ...(extra.exposure ? { webhookExposure: extra.exposure } : {}),
    pools,
  });
  return { t: Template.fromStack(stack), runners, stack };
}

/** Every resource `id` waits for, directly or through others (DependsOn and Ref/GetAtt). */
function dependsOnAll(t: Template, id: string): string[] {
  const all = t.toJSON().Resources as Record<string, { DependsOn?: string[]; Properties?: unknown }>;
  const seen = new Set<string>();
  const visit = (at: string) => {
    const r = all[at];
    if (!r) return;
    const refs = [...JSON.stringify(r.Properties ?? {}).matchAll(/"(?:Ref|Fn::GetAtt)":\s*\[?"([A-Za-z0-9]+)/g)].map((m) => m[1]!);
    for (const next of [...(r.DependsOn ?? []), ...refs]) {
      if (seen.has(next)) continue;
      seen.add(next);
      visit(next);
    }
  };
  visit(id);
  return [...seen];
}

const listenerOf = (t: Template) => Object.entries(t.findResources('AWS::Lambda::Function', { Properties: { Description: Match.stringLikeRegexp('Long-polls the runner scale sets') } }));

describe('a fleet with a scale-set pool', () => {
  let t: Template;
  let stack: Stack;
  let runners: WarmRunners;
  beforeAll(() => ({ t, stack, runners } = template([scaleSetPool, webhookPool])));

  it('runs one listener every minute, with its timeout, the scale-up function and the lease table in its environment', () => {
    const listeners = listenerOf(t);
    expect(listeners).toHaveLength(1);
    const [id, fn] = listeners[0]!;
    expect(fn.Properties.Timeout).toBe(SCALE_SET_LISTENER_TIMEOUT.toSeconds());
    const env = fn.Properties.Environment.Variables;
    expect(env[LAMBDA_ENV.listenerTimeoutSeconds]).toBe(String(SCALE_SET_LISTENER_TIMEOUT.toSeconds()));
    expect(env[LAMBDA_ENV.scaleUpFunctionName]).toEqual(stack.resolve(runners.scaleUpFunction.functionName));
    expect(env[LAMBDA_ENV.jobRecordTable]).toEqual(stack.resolve(runners.jobRecords.table.tableName));
    expect(env[LAMBDA_ENV.fleetConfigParameter]).toBe(paths.fleetConfig);
    const rules = Object.values(t.findResources('AWS::Events::Rule')).filter((r) => r.Properties.Targets.some((x: { Arn: unknown }) => JSON.stringify(x.Arn).includes(id)));
    expect(rules).toHaveLength(1);
    expect(rules[0]!.Properties.ScheduleExpression).toBe('rate(1 minute)');
    // Each tick runs once: no Lambda retry of a scheduled event (it would outlive the drain's quiet period).
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', { FunctionName: { Ref: id }, MaximumRetryAttempts: 0 });
  });

  it('creates the scale sets with the stack, after the FleetConfig and before the drain', () => {
    const resources = t.findResources('Custom::RunnerScaleSets');
    expect(Object.keys(resources)).toHaveLength(1);
    const [id, resource] = Object.entries(resources)[0]!;
    expect(JSON.parse(resource.Properties.ScaleSets)).toEqual([{ pool: 'fast', name: 'fast-linux', runnerGroup: 'Default', organization: 'org' }]);
    // Its handler reads the FleetConfig parameter at run time: CloudFormation must have written it first.
    const config = stack.getLogicalId(runners.configParameter.node.defaultChild as CfnParameter);
    expect(dependsOnAll(t, id)).toContain(config);
    // The drain is deleted first (it depends on the resource): the runners are gone before the scale sets.
    const [drainId] = Object.keys(t.findResources('Custom::FleetDrain'));
    expect(dependsOnAll(t, drainId!)).toContain(id);
    expect(dependsOnAll(t, id)).not.toContain(drainId);
  });

  it('ensures the scale sets on every deploy: a property that changes with each synthesis', () => {
    const nonce = (tt: Template) => Object.values(tt.findResources('Custom::RunnerScaleSets'))[0]!.Properties.DeployNonce;
    expect(nonce(t)).toEqual(expect.any(String));
    expect(nonce(template([scaleSetPool, webhookPool]).t)).not.toEqual(nonce(t));
  });

  it('keeps the webhook for the pool that is no scale set', () => {
    t.resourceCountIs('AWS::Lambda::Url', 1);
  });
});

describe('the listener role', () => {
  let f: Fleet;
  let statements: ReturnType<Fleet['statements']>;
  beforeAll(() => {
    f = synth({ pools: () => [scaleSetPool, webhookPool] });
    statements = f.statements('RunnersScaleSetListenerFunctionRole');
  });
  const item = (name: string, action: string, key: string): AuthorizationRequest => ({ name: `${name} ${action}`, action, resourceType: 'table', resource: f.tableArn, facts: { 'dynamodb:LeadingKeys': [key] } });
  const ITEM_ACTIONS = ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'];
  const leaseCalls = (name: string, key: string, actions = ITEM_ACTIONS) => actions.map((action) => item(name, action, key));
  const parameter = (name: string): AuthorizationRequest => ({ name: `read ${name}`, action: 'ssm:GetParameter', resourceType: 'parameter', resource: arn('ssm', `parameter${name}`), facts: {} });
  const invoke = (name: string, fnArn: string): AuthorizationRequest => ({ name, action: 'lambda:InvokeFunction', resourceType: 'function', resource: fnArn, facts: {} });

  it('may take, renew, read and give back its lease (GetItem and UpdateItem, as lease.ts calls them), read the App key and the FleetConfig, invoke scale-up and describe instances', async () => {
    expect(await allowed(statements, leaseCalls('lease', scaleSetLeaseKey('fast'), ['dynamodb:PutItem', 'dynamodb:DeleteItem']))).toEqual([]);
    expect(
      await denials(statements, [
        ...leaseCalls('lease', scaleSetLeaseKey('fast'), ['dynamodb:GetItem', 'dynamodb:UpdateItem']),
        parameter(paths.github.appPrivateKey),
        parameter(paths.fleetConfig),
        invoke('invoke scale-up', f.arnOf('RunnersScaleUp', 'AWS::Lambda::Function')),
        { name: 'DescribeInstances', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: {} },
      ]),
    ).toEqual([]);
  });

  // The job events' marks (lambdas/scale-set-listener/jobs.ts, CreateTags of MarkJobs).
  const tagInstance = (name: string, tags: Record<string, string>, on: Record<string, string> = { [keys.pool]: 'fast' }): AuthorizationRequest => ({
    name,
    action: 'ec2:CreateTags',
    resourceType: 'instance',
    resource: instanceArn(INSTANCE),
    facts: { ...requestTags(Object.entries(tags).map(([Key, Value]) => ({ Key, Value }))), ...resourceTags(on) },
  });

  it("may mark a fleet instance's job started or finished (job events), and no other tag nor instance", async () => {
    const at = '2026-12-06T12:00:00.000Z';
    expect(await denials(statements, [tagInstance('job started', { [keys.jobStarted]: at }), tagInstance('job finished', { [keys.idleSince]: at })])).toEqual([]);
    expect(
      await allowed(statements, [
        tagInstance('activation tag', { [keys.activatedAt]: at }),
        tagInstance('runner id', { [keys.runnerId]: '1' }),
        tagInstance('with another tag', { [keys.jobStarted]: at, [keys.warmStandby]: 'true' }),
        tagInstance("another fleet's instance", { [keys.jobStarted]: at }, {}),
        tagInstance("a webhook pool's instance", { [keys.jobStarted]: at }, { [keys.pool]: 'linux' }),
        tagInstance("a webhook pool's instance, finished", { [keys.idleSince]: at }, { [keys.pool]: 'linux' }),
      ]),
    ).toEqual([]);
  });

  it('may not touch a job record or a launch ticket, invoke another function, read another secret, or start anything', async () => {
    expect(
      await allowed(statements, [
        ...leaseCalls('job record', '42'),
        ...leaseCalls('launch ticket', `${LAUNCH_TICKET_KEY_PREFIX}fast|1`),
        item('scan', 'dynamodb:Scan', scaleSetLeaseKey('fast')),
        invoke('invoke the pool function', f.arnOf('RunnersPool', 'AWS::Lambda::Function')),
        invoke('invoke a scale-up version', `${f.arnOf('RunnersScaleUp', 'AWS::Lambda::Function')}:1`),
        parameter(paths.github.webhookSecret),
        parameter(paths.githubEnterpriseToken),
        parameter(paths.runnerConfig('i-0123456789abcdef0')),
        { name: 'RunInstances', action: 'ec2:RunInstances', resourceType: 'instance', resource: arn('ec2', 'instance/*'), facts: {} },
        { name: 'StartInstances', action: 'ec2:StartInstances', resourceType: 'instance', resource: arn('ec2', 'instance/i-0123456789abcdef0'), facts: {} },
      ]),
    ).toEqual([]);
    expect(JOB_RECORD_ATTRIBUTES.key).toBeDefined();
  });

  it('the scale-set resource may read the App key, its own stack, and read and delete the lease items (their sessions), nothing else of the fleet', async () => {
    const resource = f.statements('RunnersScaleSetsFunctionRole');
    expect(
      await denials(resource, [parameter(paths.github.appPrivateKey), parameter(paths.fleetConfig), ...leaseCalls('lease', scaleSetLeaseKey('fast'), ['dynamodb:GetItem', 'dynamodb:DeleteItem'])]),
    ).toEqual([]);
    expect(
      await allowed(resource, [
        parameter(paths.github.webhookSecret),
        ...leaseCalls('lease', scaleSetLeaseKey('fast'), ['dynamodb:PutItem', 'dynamodb:UpdateItem']),
        ...leaseCalls('job record', '42'),
        ...leaseCalls('launch ticket', `${LAUNCH_TICKET_KEY_PREFIX}fast|1`),
        invoke('invoke scale-up', f.arnOf('RunnersScaleUp', 'AWS::Lambda::Function')),
        { name: 'DescribeInstances', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: {} },
      ]),
    ).toEqual([]);
  });
});

describe('a fleet whose GitHub pools are all scale sets', () => {
  it('has no webhook endpoint, no webhook secret to fill in and no reconciler', () => {
    const { t, runners } = template([scaleSetPool]);
    t.resourceCountIs('AWS::Lambda::Url', 0);
    expect(runners.webhookEndpoint).toBeUndefined();
    expect(runners.reconcileFunction).toBeUndefined();
    expect(JSON.stringify(t.findOutputs('SecretParameters'))).not.toContain(paths.github.webhookSecret);
    expect(Object.keys(t.findOutputs('GitHubWebhookUrl*'))).toEqual([]);
  });

  it('warns that a webhook exposure it was given goes unused', () => {
    const { stack } = template([scaleSetPool], { exposure: WebhookExposure.functionUrl() });
    Annotations.fromStack(stack).hasWarning('*', Match.stringLikeRegexp('webhookExposure is set, but every pool is a runner scale set'));
    Template.fromStack(stack).resourceCountIs('AWS::Lambda::Url', 0);
  });

  it('keeps the endpoint when a GitLab pool needs it', () => {
    const { t } = template([scaleSetPool, { name: 'gl', provider: Provider.GITLAB, machineImage: image }], { gitlab: true });
    t.resourceCountIs('AWS::Lambda::Url', 1);
  });
});

describe('a fleet without a scale-set pool', () => {
  it('has no listener and no scale-set resource', () => {
    const { t, runners } = template([webhookPool]);
    expect(listenerOf(t)).toEqual([]);
    t.resourceCountIs('Custom::RunnerScaleSets', 0);
    expect(runners.scaleSetListenerFunction).toBeUndefined();
  });
});

describe('cdk-nag on a scale-set fleet', () => {
  it('finds nothing unacknowledged', () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-nag-ss-')) });
    const stack = new Stack(app, 'Nagged');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    // The test's own VPC, not the construct's concern.
    Validations.of(vpc).acknowledge({ id: 'AwsSolutions::AwsSolutions-VPC7', reason: 'The test VPC: flow logs are the application\'s choice, not the construct\'s.' });
    new WarmRunners(stack, 'Runners', { vpc, github: { appId: '1', organization: 'org' }, pools: [scaleSetPool], alarmActions: [] });
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
    const report = JSON.parse(readFileSync(join(app.outdir, 'validation-report.json'), 'utf8'));
    expect(JSON.stringify(report)).not.toMatch(/"status":\s*"failure"/);
  });
});
