import { App, Stack, Tags } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as kms from 'aws-cdk-lib/aws-kms';
import { expect } from 'vitest';
import { DEFAULT_PREFIX, Provider, ssmPaths, tagKeys } from '../../lambdas/shared/contract';
import { RunnerVersion, WarmRunners, type RunnerPoolProps } from '../../lib';
import type { Statement } from './iam-eval';
import { judge, type AuthorizationRequest } from './iam-reference';

/**
 * A synthesized fleet for the policy-evaluation tests (iam-launch.test.ts,
 * iam-principals.test.ts): every intrinsic resolved to concrete identifiers the requests can
 * name, and the statements of each role.
 */

export const REGION = 'eu-west-1';
export const ACCOUNT = '111122223333';
export const STACK_ID = `arn:aws:cloudformation:${REGION}:${ACCOUNT}:stack/F/00000000-0000-0000-0000-000000000000`;
export const PSEUDO: Record<string, string> = { 'AWS::Partition': 'aws', 'AWS::Region': REGION, 'AWS::AccountId': ACCOUNT, 'AWS::URLSuffix': 'amazonaws.com', 'AWS::StackId': STACK_ID };
export const PREFIX = DEFAULT_PREFIX;
export const keys = tagKeys(PREFIX);
export const paths = ssmPaths(PREFIX);
export const arn = (service: string, resource: string, account = ACCOUNT) => `arn:aws:${service}:${REGION}:${account}:${resource}`;
export const instanceArn = (id: string) => arn('ec2', `instance/${id}`);
export const INSTANCE = 'i-0123456789abcdef0';
export const JOB = { jobId: '42', traceId: 'trace-1' };
export const NOW = new Date('2026-12-06T12:00:00Z');

/** A synthesized fleet: its template with every intrinsic resolved to concrete identifiers the requests can name. */
export interface Fleet {
  readonly template: Template;
  readonly resolve: (value: unknown) => unknown;
  readonly statements: (roleLogicalIdPrefix: string) => Statement[];
  /** The one resource of this type whose logical id starts with the prefix: its `Ref` and its `Arn`, resolved. */
  readonly ref: (logicalIdPrefix: string, type: string) => string;
  readonly arnOf: (logicalIdPrefix: string, type: string) => string;
  /** Per pool; `templateTags`: what its launch template tags at launch, per resource type, as synthesized. */
  readonly pools: { name: string; launchTemplateId: string; spot: boolean; reuse: boolean; templateTags: Record<string, { Key: string; Value: string }[]> }[];
  /** The construct, and a token of it (`runners.pool('x').role.roleArn`) resolved as the requests name it. */
  readonly runners: WarmRunners;
  readonly resolveToken: (token: unknown) => unknown;
  /** Whether the fleet has a GitLab connection (its functions read the GitLab token). */
  readonly gitlab: boolean;
  readonly subnetIds: string[];
  readonly securityGroupId: string;
  readonly instanceRoleArn: string;
  readonly tableArn: string;
  readonly keyArn?: string;
  /** The key's key policy: KMS needs it to allow (it delegates to IAM by naming the account). */
  readonly keyPolicy?: Record<string, unknown>;
}

/** `pools`: the fleet's pools instead of the one pool "linux" the other options shape. */
export function synth(options: { spot?: boolean; reuse?: boolean; key?: boolean; gitlab?: boolean; pinned?: boolean; enterprise?: boolean; pools?: (stack: Stack, vpc: ec2.Vpc) => RunnerPoolProps[] }): Fleet {
  const stack = new Stack(new App(), 'F');
  // A tag on the whole stack, as teams put on theirs (cost allocation): the launch templates
  // carry it to what they launch, and tags at launch are authorized with it.
  Tags.of(stack).add('team', 'platform');
  const vpc = new ec2.Vpc(stack, 'Vpc');
  const key = options.key ? new kms.Key(stack, 'Key') : undefined;
  const runners = new WarmRunners(stack, 'Runners', {
    vpc,
    github: { appId: '1', organization: 'org', ...(options.enterprise ? { enterprise: 'ent' } : {}) },
    ...(options.gitlab ? { gitlab: { url: 'https://gitlab.example.com' } } : {}),
    ...(key ? { encryptionKey: key } : {}),
    pools: options.pools?.(stack, vpc) ?? [
      {
        name: 'linux',
        provider: Provider.GITHUB,
        machineImage: ec2.MachineImage.latestAmazonLinux2023(),
        ...(options.spot ? { spot: true } : {}),
        ...(options.reuse ? { reuse: {} } : {}),
        ...(options.pinned ? { runnerVersion: RunnerVersion.pinned() } : {}),
      },
    ],
  });
  const template = Template.fromStack(stack);
  const resources = template.toJSON().Resources as Record<string, { Type: string }>;
  const physical = (logicalId: string): string => {
    const type = resources[logicalId]?.Type;
    if (type === 'AWS::EC2::LaunchTemplate') return `lt-${logicalId.toLowerCase()}`;
    if (type === 'AWS::EC2::Subnet') return `subnet-${logicalId.toLowerCase()}`;
    if (type === 'AWS::SSM::Parameter') return String((resources[logicalId] as { Properties?: { Name?: string } }).Properties?.Name ?? logicalId);
    if (type === 'AWS::StepFunctions::StateMachine') return arn('states', `stateMachine:${logicalId}`);
    if (type === 'AWS::Lambda::EventSourceMapping') return `esm-${logicalId.toLowerCase()}`;
    if (type === 'AWS::EC2::SecurityGroup') return `sg-${logicalId.toLowerCase()}`;
    return logicalId;
  };
  const attribute = (logicalId: string, name: string): string => {
    const type = resources[logicalId]?.Type;
    if (name === 'Arn') {
      if (type === 'AWS::IAM::Role') return `arn:aws:iam::${ACCOUNT}:role/${logicalId}`;
      if (type === 'AWS::DynamoDB::Table') return arn('dynamodb', `table/${logicalId}`);
      if (type === 'AWS::SQS::Queue') return arn('sqs', logicalId);
      if (type === 'AWS::KMS::Key') return arn('kms', `key/${logicalId}`);
      if (type === 'AWS::Lambda::Function') return arn('lambda', `function:${logicalId}`);
      if (type === 'AWS::Logs::LogGroup') return arn('logs', `log-group:${logicalId}:*`);
      if (type === 'AWS::Events::Rule') return arn('events', `rule/${logicalId}`);
    }
    if (type === 'AWS::EC2::SecurityGroup' && name === 'GroupId') return physical(logicalId);
    if (type === 'AWS::EC2::LaunchTemplate' && name === 'LatestVersionNumber') return '1';
    return `${logicalId}.${name}`;
  };
  const resolve = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(resolve);
    if (value && typeof value === 'object') {
      const o = value as Record<string, unknown>;
      if (typeof o.Ref === 'string') return PSEUDO[o.Ref] ?? physical(o.Ref);
      if ('Fn::GetAtt' in o) {
        const [id, name] = o['Fn::GetAtt'] as [string, string];
        return attribute(id, name);
      }
      if ('Fn::Join' in o) {
        const [sep, parts] = o['Fn::Join'] as [string, unknown[]];
        return (resolve(parts) as unknown[]).map(String).join(sep);
      }
      return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, resolve(v)]));
    }
    return value;
  };
  const statements = (prefix: string): Statement[] => {
    const out: Statement[] = [];
    for (const policy of Object.values(template.findResources('AWS::IAM::Policy')) as { Properties: Record<string, unknown> }[]) {
      // An imported role is attached by its name, a role of the stack by its Ref.
      const roles = (policy.Properties.Roles as ({ Ref: string } | string)[]).map((r) => (typeof r === 'string' ? r : r.Ref));
      if (roles.some((r) => r.startsWith(prefix))) out.push(...(resolve((policy.Properties.PolicyDocument as { Statement: unknown }).Statement) as Statement[]));
    }
    expect(out.length, `statements of ${prefix}`).toBeGreaterThan(0);
    return out;
  };
  const logicalId = (prefix: string, type: string): string => {
    const ids = Object.entries(resources).filter(([id, r]) => id.startsWith(prefix) && r.Type === type).map(([id]) => id);
    expect(ids, `${type} ${prefix}*`).toHaveLength(1);
    return ids[0]!;
  };
  const idOf = (construct: { node: { defaultChild?: unknown } }) => stack.resolve((construct.node.defaultChild as { ref: string }).ref) as { Ref: string };
  return {
    template,
    resolve,
    statements,
    ref: (prefix, type) => physical(logicalId(prefix, type)),
    arnOf: (prefix, type) => attribute(logicalId(prefix, type), 'Arn'),
    pools: runners.fleet.launchTemplates.map(({ pool, launchTemplate }) => ({
      name: pool.name,
      launchTemplateId: physical(idOf(launchTemplate).Ref),
      spot: pool.spot === true,
      reuse: pool.reuse !== undefined,
      templateTags: Object.fromEntries(
        ((template.toJSON().Resources[stack.getLogicalId(launchTemplate.node.defaultChild as ec2.CfnLaunchTemplate)].Properties.LaunchTemplateData.TagSpecifications ?? []) as { ResourceType: string; Tags: { Key: string; Value: string }[] }[]).map(
          (spec) => [spec.ResourceType, spec.Tags],
        ),
      ),
    })),
    runners,
    resolveToken: (token) => resolve(stack.resolve(token)),
    gitlab: options.gitlab === true,
    subnetIds: vpc.privateSubnets.map((s) => physical((stack.resolve(s.subnetId) as { Ref: string }).Ref)),
    securityGroupId: resolve(stack.resolve(runners.fleet.securityGroup.securityGroupId)) as string,
    instanceRoleArn: resolve(stack.resolve(runners.fleet.role.roleArn)) as string,
    tableArn: resolve(stack.resolve(runners.jobRecords.table.tableArn)) as string,
    ...(key
      ? {
          keyArn: resolve(stack.resolve(key.keyArn)) as string,
          keyPolicy: resolve(Object.values(template.findResources('AWS::KMS::Key'))[0]!.Properties.KeyPolicy) as Record<string, unknown>,
        }
      : {}),
  };
}

export const requestTags = (tags: readonly { Key?: string; Value?: string }[]) => ({
  ...Object.fromEntries(tags.map((t) => [`aws:RequestTag/${t.Key!}`, t.Value!])),
  'aws:TagKeys': tags.map((t) => t.Key!),
});
export const resourceTags = (tags: Record<string, string>) => ({
  ...Object.fromEntries(Object.entries(tags).map(([k, v]) => [`aws:ResourceTag/${k}`, v])),
  ...Object.fromEntries(Object.entries(tags).map(([k, v]) => [`ec2:ResourceTag/${k}`, v])),
});


/** The requests the statements do not allow, each with the context the reference let through. */
export async function denials(statements: Statement[], requests: AuthorizationRequest[]): Promise<string[]> {
  const out: string[] = [];
  for (const r of requests) {
    const j = await judge(statements, r, ACCOUNT);
    if (j.result !== 'Allowed') out.push(`${r.name} -> ${j.result} (context ${JSON.stringify(j.context)})`);
  }
  return out;
}

/** The names of the requests the statements allow (a refusal test expects none). */
export async function allowed(statements: Statement[], requests: AuthorizationRequest[]): Promise<string[]> {
  const out: string[] = [];
  for (const r of requests) if ((await judge(statements, r, ACCOUNT)).result === 'Allowed') out.push(r.name);
  return out;
}
