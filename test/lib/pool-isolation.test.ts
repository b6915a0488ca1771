import { App, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { AwsSolutionsChecks } from 'cdk-nag';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, Provider, bootLogGroupName } from '../../lambdas/shared/contract';
import { WarmRunners, type RunnerPoolProps } from '../../lib';
import { ACCOUNT, PREFIX, allowed, arn, denials, instanceArn, keys, paths, requestTags, resourceTags, synth, type Fleet } from './iam-fleet';
import type { AuthorizationRequest } from './iam-reference';

/**
 * Per-pool isolation (RunnerPoolProps.instanceRole, securityGroups, vpcSubnets): two pools
 * with roles and security groups of their own beside one on the fleet's shared set. Each role
 * is judged with the Service Authorization Reference's evaluator (iam-reference.ts), as the
 * boot script's calls reach AWS: signed with the instance's role credentials, so carrying its
 * `ec2:SourceInstanceARN`.
 */

const PR = 'i-0aaaaaaaaaaaaaaa1';
/** A CA certificate for `caCertificates` (a throwaway one, made by the real openssl). */
const CA_PEM = execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', '/dev/null', '-days', '1', '-subj', '/CN=isolation'], {
  encoding: 'utf8',
  stdio: ['ignore', 'pipe', 'ignore'],
});
const DEPLOY = 'i-0bbbbbbbbbbbbbbb2';
const SHARED = 'i-0ccccccccccccccc3';
const fromInstance = (id: string) => ({ 'ec2:SourceInstanceARN': instanceArn(id) });
const parameter = (name: string) => arn('ssm', `parameter${name}`);
const parameterTags = (tags: Record<string, string>) => Object.fromEntries(Object.entries(tags).map(([k, v]) => [`aws:ResourceTag/${k}`, v]));
/** An instance's config parameter as scale-up writes it (claim.ts, cold.ts): tagged with its id and ARN. */
const configOf = (id: string) => parameterTags({ [PARAMETER_INSTANCE_TAG]: id, [PARAMETER_INSTANCE_ARN_TAG]: instanceArn(id) });
const ssm = (name: string, action: string, parameterName: string, facts: Record<string, string | string[]>): AuthorizationRequest => ({ name, action, resourceType: 'parameter', resource: parameter(parameterName), facts });
const ec2On = (name: string, action: string, id: string, pool: string, caller: string, extra: Record<string, string | string[]> = {}): AuthorizationRequest => ({
  name,
  action,
  resourceType: 'instance',
  resource: instanceArn(id),
  facts: { ...resourceTags({ [keys.pool]: pool }), 'ec2:InstanceID': id, ...fromInstance(caller), ...extra },
});
const logStream = (id: string) => arn('logs', `log-group:${bootLogGroupName(PREFIX)}:log-stream:${id}`);

/** The boot script's own calls of an instance of `pool`, on itself. */
const ownCalls = (id: string, pool: string): AuthorizationRequest[] => [
  ssm(`${pool}: get_config`, 'ssm:GetParameter', paths.runnerConfig(id), { ...configOf(id), ...fromInstance(id) }),
  ssm(`${pool}: WAIT before its config exists`, 'ssm:GetParameter', paths.runnerConfig(id), fromInstance(id)),
  ssm(`${pool}: delete_config`, 'ssm:DeleteParameter', paths.runnerConfig(id), { ...configOf(id), ...fromInstance(id) }),
  { name: `${pool}: create-log-stream`, action: 'logs:CreateLogStream', resourceType: 'log-stream', resource: logStream(id), facts: fromInstance(id) },
  { name: `${pool}: put-log-events`, action: 'logs:PutLogEvents', resourceType: 'log-stream', resource: logStream(id), facts: fromInstance(id) },
  ec2On(`${pool}: tag_job_started`, 'ec2:CreateTags', id, pool, id, requestTags([{ Key: keys.jobStarted, Value: 'now' }])),
  ec2On(`${pool}: tag_failure`, 'ec2:CreateTags', id, pool, id, requestTags([{ Key: keys.startFailure, Value: 'reason' }])),
  ec2On(`${pool}: tag_version`, 'ec2:CreateTags', id, pool, id, requestTags([{ Key: keys.runnerVersion, Value: '2.339.0' }])),
  ec2On(`${pool}: terminate`, 'ec2:TerminateInstances', id, pool, id),
];

/** What an instance of `pool` (`id`) must not do to an instance of `otherPool` (`other`), nor to the other pool's state. */
const crossPoolCalls = (id: string, pool: string, other: string, otherPool: string): AuthorizationRequest[] => [
  ssm(`${pool} reads ${otherPool}'s config`, 'ssm:GetParameter', paths.runnerConfig(other), { ...configOf(other), ...fromInstance(id) }),
  ssm(`${pool} deletes ${otherPool}'s config`, 'ssm:DeleteParameter', paths.runnerConfig(other), { ...configOf(other), ...fromInstance(id) }),
  ssm(`${pool} lists the configs`, 'ssm:GetParametersByPath', paths.runnerConfigRoot.replace(/\/$/, ''), fromInstance(id)),
  ssm(`${pool} reads ${otherPool}'s prime state`, 'ssm:GetParameter', paths.primeState(otherPool), fromInstance(id)),
  ssm(`${pool} reads the fleet config`, 'ssm:GetParameter', paths.fleetConfig, fromInstance(id)),
  ssm(`${pool} reads the GitHub App key`, 'ssm:GetParameter', paths.github.appPrivateKey, fromInstance(id)),
  ec2On(`${pool} terminates ${otherPool}'s instance`, 'ec2:TerminateInstances', other, otherPool, id),
  ec2On(`${pool} tags ${otherPool}'s instance`, 'ec2:CreateTags', other, otherPool, id, requestTags([{ Key: keys.jobStarted, Value: 'x' }])),
  ec2On(`${pool} parks ${otherPool}'s instance`, 'ec2:CreateTags', other, otherPool, id, requestTags([{ Key: keys.parking, Value: 'x' }])),
  ec2On(`${pool} untags ${otherPool}'s activation`, 'ec2:DeleteTags', other, otherPool, id, requestTags([{ Key: keys.activatedAt }])),
  // Its own ARN, but the other pool's tag: the pool condition alone refuses it.
  ec2On(`${pool} terminates itself tagged as ${otherPool}`, 'ec2:TerminateInstances', id, otherPool, id),
  ec2On(`${pool} tags itself tagged as ${otherPool}`, 'ec2:CreateTags', id, otherPool, id, requestTags([{ Key: keys.jobStarted, Value: 'x' }])),
];

/** Two pools apart (`pr` and `deploy`, each with its own role, security groups and subnets) and one on the fleet's shared set. */
function isolatedPools(stack: Stack, vpc: ec2.Vpc): RunnerPoolProps[] {
  const machineImage = ec2.MachineImage.latestAmazonLinux2023();
  const ec2Role = (id: string) => new iam.Role(stack, id, { assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com') });
  const sg = (id: string) => new ec2.SecurityGroup(stack, id, { vpc, allowAllOutbound: false });
  return [
    { name: 'pr', provider: Provider.GITHUB, machineImage, instanceRole: ec2Role('PrRole'), securityGroups: [sg('PrSg')], vpcSubnets: { subnets: [vpc.privateSubnets[0]!] } },
    {
      name: 'deploy',
      provider: Provider.GITHUB,
      machineImage,
      reuse: {},
      warm: { size: 1 },
      instanceRole: ec2Role('DeployRole'),
      securityGroups: [sg('DeploySgA'), sg('DeploySgB')],
      vpcSubnets: { subnets: [vpc.privateSubnets[1]!] },
    },
    { name: 'shared', provider: Provider.GITHUB, machineImage },
  ];
}

describe('per-pool isolation: two pools with roles, security groups and subnets of their own', () => {
  let f: Fleet;
  beforeAll(() => {
    f = synth({ pools: isolatedPools });
  });

  it("each pool's role allows its instances' own calls", async () => {
    expect(await denials(f.statements('PrRole'), ownCalls(PR, 'pr'))).toEqual([]);
    expect(await denials(f.statements('DeployRole'), ownCalls(DEPLOY, 'deploy'))).toEqual([]);
    expect(await denials(f.statements('RunnersFleetRole'), ownCalls(SHARED, 'shared'))).toEqual([]);
    // Parking only for the reusable pool's role.
    const park = (id: string, pool: string) => ec2On(`${pool}: park`, 'ec2:CreateTags', id, pool, id, requestTags([{ Key: keys.parking, Value: 'a b' }]));
    expect(await denials(f.statements('DeployRole'), [park(DEPLOY, 'deploy')])).toEqual([]);
    expect(await allowed(f.statements('PrRole'), [park(PR, 'pr')])).toEqual([]);
  });

  it("no pool's role reads, deletes, tags or terminates anything of another pool's", async () => {
    const members = [
      ['PrRole', PR, 'pr'],
      ['DeployRole', DEPLOY, 'deploy'],
      ['RunnersFleetRole', SHARED, 'shared'],
    ] as const;
    for (const [role, id, pool] of members) {
      for (const [, other, otherPool] of members.filter(([, , p]) => p !== pool)) {
        expect(await allowed(f.statements(role), crossPoolCalls(id, pool, other, otherPool)), `${role} on ${otherPool}`).toEqual([]);
      }
    }
  });

  it("each pool's launch template carries its own instance profile and security groups; the control plane launches it in its own subnets", () => {
    const resources = f.template.toJSON().Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>;
    const data = (pool: string) => {
      const logicalId = Stack.of(f.runners).getLogicalId(f.runners.pool(pool).launchTemplate.node.defaultChild as ec2.CfnLaunchTemplate);
      return f.resolve(resources[logicalId]!.Properties.LaunchTemplateData) as { SecurityGroupIds: string[]; IamInstanceProfile: { Arn: string } };
    };
    const profileRoles = (pool: string) => {
      const profileArn = data(pool).IamInstanceProfile.Arn; // <logicalId>.Arn
      const profile = resources[profileArn.replace(/\.Arn$/, '')]!;
      expect(profile.Type).toBe('AWS::IAM::InstanceProfile');
      return f.resolve(profile.Properties.Roles);
    };
    const sgIds = (pool: string) => f.runners.pool(pool).securityGroups.map((g) => f.resolveToken(g.securityGroupId));
    const roleName = (pool: string) => f.resolveToken(f.runners.pool(pool).role.roleName);
    for (const pool of ['pr', 'deploy', 'shared']) {
      expect(data(pool).SecurityGroupIds, pool).toEqual(sgIds(pool));
      expect(profileRoles(pool), pool).toEqual([roleName(pool)]);
    }
    expect(sgIds('deploy')).toHaveLength(2);
    expect(new Set(['pr', 'deploy', 'shared'].map(roleName)).size).toBe(3);
    expect(sgIds('shared')).toEqual([f.securityGroupId]);
    // Cold launches and standbys go to the subnets of each pool's FleetConfig entry.
    const subnetsOf = (pool: string) => f.resolveToken(f.runners.config.pools.find((p) => p.name === pool)!.subnetIds);
    expect(subnetsOf('pr')).toEqual([f.subnetIds[0]]);
    expect(subnetsOf('deploy')).toEqual([f.subnetIds[1]]);
    expect(subnetsOf('shared')).toEqual(f.subnetIds);
  });

  it('scale-up and the pool pass exactly the pools\' roles, to EC2 only', async () => {
    const roleArn = (pool: string) => f.resolveToken(f.runners.pool(pool).role.roleArn) as string;
    const pass = (name: string, role: string, service = 'ec2.amazonaws.com'): AuthorizationRequest => ({ name, action: 'iam:PassRole', resourceType: 'role', resource: role, facts: { 'iam:PassedToService': service } });
    for (const fn of ['RunnersScaleUpRole', 'RunnersPoolRole']) {
      const statements = f.statements(fn);
      expect(await denials(statements, ['pr', 'deploy', 'shared'].map((p) => pass(p, roleArn(p)))), fn).toEqual([]);
      expect(
        await allowed(statements, [
          pass('a role of no pool', `arn:aws:iam::${ACCOUNT}:role/admin`),
          pass("a pool's role to Lambda", roleArn('deploy'), 'lambda.amazonaws.com'),
          pass('a function role', f.resolveToken((f.runners.scaleUpFunction.role as iam.IRole).roleArn) as string),
        ]),
        fn,
      ).toEqual([]);
    }
    // The instant CreateFleet names each pool's subnets.
    const subnet = (id: string): AuthorizationRequest => ({ name: id, action: 'ec2:CreateFleet', resourceType: 'subnet', resource: arn('ec2', `subnet/${id}`), facts: {} });
    expect(await denials(f.statements('RunnersScaleUpRole'), f.subnetIds.map(subnet))).toEqual([]);
  });

  it('grants and connections through a pool reach its role and security groups only', () => {
    const stack = Stack.of(f.runners);
    expect(f.runners.pool('deploy').grantPrincipal).toBe(f.runners.pool('deploy').role);
    expect(f.runners.grantPrincipal).toBe(f.runners.fleet.role);
    expect(f.runners.pool('shared').grantPrincipal).toBe(f.runners.fleet.role);
    expect(() => f.runners.pool('nope')).toThrow('no pool is named "nope": the fleet\'s pools are "pr", "deploy", "shared"');
    // The connections of a pool are its own groups: a rule through them names them.
    expect(f.runners.pool('deploy').connections.securityGroups.map((g) => stack.resolve(g.securityGroupId))).toEqual(
      f.runners.pool('deploy').securityGroups.map((g) => stack.resolve(g.securityGroupId)),
    );
  });
});

describe('per-pool isolation: the grants a user adds', () => {
  it('a grant to a pool lands on its role alone; a rule through its connections names its groups', () => {
    const stack = new Stack(new App(), 'G');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    const runners = new WarmRunners(stack, 'Runners', { vpc, github: { appId: '1', organization: 'org' }, pools: isolatedPools(stack, vpc) });
    const bucket = new s3.Bucket(stack, 'Artifacts');
    bucket.grantRead(runners.pool('deploy'));
    const db = new ec2.SecurityGroup(stack, 'Db', { vpc });
    runners.pool('deploy').connections.allowTo(db, ec2.Port.tcp(5432));
    const t = Template.fromStack(stack);
    const readsBucket = (roleLogicalId: string) =>
      Object.values(t.findResources('AWS::IAM::Policy')).some(
        (p) => JSON.stringify(p.Properties.Roles).includes(roleLogicalId) && JSON.stringify(p.Properties.PolicyDocument).includes('s3:GetObject'),
      );
    const roleId = (r: iam.IRole) => stack.getLogicalId(r.node.defaultChild as iam.CfnRole);
    expect(readsBucket(roleId(runners.pool('deploy').role))).toBe(true);
    expect(readsBucket(roleId(runners.pool('pr').role))).toBe(false);
    expect(readsBucket(roleId(runners.fleet.role))).toBe(false);
    const sgId = (g: ec2.ISecurityGroup) => stack.getLogicalId(g.node.defaultChild as ec2.CfnSecurityGroup);
    for (const g of runners.pool('deploy').securityGroups) {
      t.hasResourceProperties('AWS::EC2::SecurityGroupIngress', { GroupId: { 'Fn::GetAtt': [sgId(db), 'GroupId'] }, SourceSecurityGroupId: { 'Fn::GetAtt': [sgId(g), 'GroupId'] }, FromPort: 5432 });
    }
    t.resourcePropertiesCountIs('AWS::EC2::SecurityGroupIngress', { SourceSecurityGroupId: { 'Fn::GetAtt': [sgId(runners.pool('pr').securityGroups[0]!), 'GroupId'] } }, 0);
  });
});

describe('per-pool isolation: roles of every kind', () => {
  const fleetWith = (instanceRole: (stack: Stack) => iam.IRole, extra: Partial<RunnerPoolProps> = {}, caCertificates?: string[]) => {
    const stack = new Stack(new App(), 'R', { env: { account: ACCOUNT, region: 'eu-west-1' } });
    const vpc = new ec2.Vpc(stack, 'Vpc');
    const runners = new WarmRunners(stack, 'Runners', {
      vpc,
      github: { appId: '1', organization: 'org' },
      ...(caCertificates ? { caCertificates } : {}),
      pools: [{ name: 'deploy', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), instanceRole: instanceRole(stack), ...extra }],
    });
    return { stack, runners };
  };

  it('an imported role gets the instance grants as a policy of this stack, and its own instance profile; the shared role gets none and is passed to no one', async () => {
    const importedArn = `arn:aws:iam::${ACCOUNT}:role/platform/deploy-runner`;
    const f = synth({
      pools: (stack) => [{ name: 'deploy', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), instanceRole: iam.Role.fromRoleArn(stack, 'Imported', importedArn) }],
    });
    expect(await denials(f.statements('deploy-runner'), ownCalls(DEPLOY, 'deploy'))).toEqual([]);
    expect(await allowed(f.statements('deploy-runner'), crossPoolCalls(DEPLOY, 'deploy', PR, 'pr'))).toEqual([]);
    f.template.hasResourceProperties('AWS::IAM::InstanceProfile', { Roles: ['deploy-runner'] });
    // No pool uses the shared role: it holds no grant and no function may pass it.
    expect(Object.values(f.template.findResources('AWS::IAM::Policy')).filter((p) => JSON.stringify(p.Properties.Roles).includes('RunnersFleetRole'))).toEqual([]);
    const pass = (role: string): AuthorizationRequest => ({ name: role, action: 'iam:PassRole', resourceType: 'role', resource: role, facts: { 'iam:PassedToService': 'ec2.amazonaws.com' } });
    expect(await denials(f.statements('RunnersScaleUpRole'), [pass(importedArn)])).toEqual([]);
    expect(await allowed(f.statements('RunnersScaleUpRole'), [pass(f.instanceRoleArn)])).toEqual([]);
  });

  it('an imported role marked immutable takes no policy: synth warns, and the pool lists the statements to attach', () => {
    const { runners, stack } = fleetWith((st) => iam.Role.fromRoleArn(st, 'Imported', `arn:aws:iam::${ACCOUNT}:role/deploy-runner`, { mutable: false }), {}, [CA_PEM]);
    const warnings = Annotations.fromStack(Stack.of(runners)).findWarning('*', Match.stringLikeRegexp('instance-role-immutable'));
    expect(warnings.map((w) => w.entry.data)).toEqual([expect.stringContaining('pools[0].instanceRole (pool "deploy"): the role takes no policy from this stack')]);
    const statements = runners.pool('deploy').instanceStatements;
    expect(statements.map((s) => s.sid)).toEqual(expect.arrayContaining(['ReadAndDeleteOwnRunnerConfig', 'TerminateSelf', 'WriteOwnBootLog', 'ReadFleetCaCertificates']));
    // The boot's one call on the CA parameter (install_cas), the owner attaches it with the rest.
    const readCas = stack.resolve(statements.find((s) => s.sid === 'ReadFleetCaCertificates')!.toStatementJson());
    expect(readCas.Action).toBe('ssm:GetParameter');
    expect(JSON.stringify(readCas.Resource)).toContain(`parameter${paths.caCertificates}`);
    // Without caCertificates the statement is not there.
    const plain = fleetWith((st) => iam.Role.fromRoleArn(st, 'Imported', `arn:aws:iam::${ACCOUNT}:role/deploy-runner`, { mutable: false }));
    expect(plain.runners.pool('deploy').instanceStatements.map((s) => s.sid)).not.toContain('ReadFleetCaCertificates');
  });

  it('refuses a role EC2 cannot assume, a role of another account, no security group, and subnets the VPC lacks, naming the prop', () => {
    expect(() => fleetWith((stack) => new iam.Role(stack, 'Lambda', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') }))).toThrow(
      /^pools\[0\]\.instanceRole \(pool "deploy"\) is not assumable by ec2\.amazonaws\.com/,
    );
    expect(() => fleetWith((stack) => iam.Role.fromRoleArn(stack, 'Foreign', 'arn:aws:iam::999988887777:role/runner'))).toThrow(
      /^pools\[0\]\.instanceRole \(pool "deploy"\) is a role of account 999988887777, but the fleet's stack deploys to 111122223333/,
    );
    const ec2Role = (stack: Stack) => new iam.Role(stack, 'Own', { assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com') });
    expect(() => fleetWith(ec2Role, { securityGroups: [] })).toThrow(/^pools\[0\]\.securityGroups \(pool "deploy"\) is empty/);
    expect(() => fleetWith(ec2Role, { vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED } })).toThrow(/^pools\[0\]\.vpcSubnets \(pool "deploy"\) selects no subnet of the fleet's VPC/);
  });
});

describe('cdk-nag', () => {
  it('finds nothing unacknowledged in a fleet of pools with their own roles (one imported) and security groups', () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-iso-nag-')) });
    // Environment-agnostic, as the fleet's cdk-nag acknowledgements are written.
    const stack = new Stack(app, 'N');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    vpc.addFlowLog('FlowLog');
    const pools = isolatedPools(stack, vpc);
    pools.push({ name: 'imported', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), instanceRole: iam.Role.fromRoleArn(stack, 'Imported', `arn:aws:iam::${ACCOUNT}:role/runner`) });
    new WarmRunners(stack, 'Runners', { vpc, github: { appId: '1', organization: 'org' }, pools });
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
    const report = readFileSync(join(app.outdir, 'validation-report.json'), 'utf8');
    expect(report).not.toMatch(/"status":\s*"failure"/);
  });
});
