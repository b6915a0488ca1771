import { beforeAll, describe, expect, it } from 'vitest';
import {
  LAUNCH_TICKET_KEY_PREFIX,
  PARAMETER_INSTANCE_ARN_TAG,
  PARAMETER_INSTANCE_TAG,
  activationKeys,
  activationTags,
  coldLaunchTags,
  standbyLaunchTags,
  type PoolConfig,
} from '../../lambdas/shared/contract';
import { runStandbys } from '../../lambdas/pool/handler';
import { fleetCommand } from '../../lambdas/scale-up/cold';
import type { Statement } from './iam-eval';
import { ACCOUNT, INSTANCE, JOB, NOW, REGION, arn, denials, instanceArn, keys, paths, requestTags, resourceTags, synth, type Fleet } from './iam-fleet';
import { judge, referenceVersion, requiredResourceTypes, type AuthorizationRequest } from './iam-reference';

/**
 * Every AWS call the control plane's launch, tagging, parameter and ticket paths make, per
 * principal, expanded into the authorization requests AWS evaluates (one per resource type the
 * Service Authorization Reference lists for the action), judged by iam-simulate against the
 * synthesized policies with only the condition keys the reference lists (iam-reference.ts).
 * moto enforces no IAM, and iam-eval.ts judges whatever context a test hands it: this is the
 * check that a statement which can never match on AWS fails here.
 */

type Market = 'on-demand' | 'spot';

/**
 * What a launch from one of the fleet's templates presents to IAM, per resource type, before
 * the reference filters it: every part of the call "knows" its launch template; only the rows
 * that list `ec2:LaunchTemplate` keep it.
 */
function launchFacts(f: Fleet, pool: Fleet['pools'][number], market: Market, tags: { instance: ReturnType<typeof requestTags> | object; volume: object }) {
  const template = arn('ec2', `launch-template/${pool.launchTemplateId}`);
  const vpc = arn('ec2', 'vpc/vpc-1');
  const subnet = f.subnetIds[0]!;
  const common = { 'ec2:Region': REGION, 'ec2:LaunchTemplate': template, 'ec2:IsLaunchTemplateResource': 'true' };
  return {
    parts: {
      image: { arn: `arn:aws:ec2:${REGION}::image/ami-0123456789abcdef0`, facts: { ...common, 'ec2:ImageID': 'ami-0123456789abcdef0', 'ec2:Owner': 'amazon', 'ec2:Public': 'true', 'ec2:RootDeviceType': 'ebs' } },
      instance: { arn: arn('ec2', 'instance/*'), facts: { ...common, ...tags.instance, 'ec2:InstanceType': 'm7i.large', 'ec2:InstanceMarketType': market, 'ec2:MetadataHttpTokens': 'required' } },
      'network-interface': { arn: arn('ec2', 'network-interface/*'), facts: { ...common, 'ec2:Subnet': arn('ec2', `subnet/${subnet}`), 'ec2:Vpc': vpc } },
      'security-group': { arn: arn('ec2', `security-group/${f.securityGroupId}`), facts: { ...common, 'ec2:SecurityGroupID': f.securityGroupId, 'ec2:Vpc': vpc } },
      subnet: { arn: arn('ec2', `subnet/${subnet}`), facts: { ...common, 'ec2:SubnetID': subnet, 'ec2:Vpc': vpc } },
      volume: { arn: arn('ec2', 'volume/*'), facts: { ...common, ...tags.volume, 'ec2:Encrypted': 'true', 'ec2:VolumeType': 'gp3', 'ec2:VolumeSize': '30' } },
      'launch-template': { arn: template, facts: common },
      'spot-instances-request': { arn: arn('ec2', 'spot-instances-request/*'), facts: { ...common } },
      fleet: { arn: arn('ec2', 'fleet/*'), facts: { ...common } },
    } as Record<string, { arn: string; facts: Record<string, string | string[]> }>,
  };
}

/** One launch call expanded into its resource types; the reference's required types must all be among them. */
async function launchRequests(name: string, action: string, types: string[], parts: ReturnType<typeof launchFacts>['parts']): Promise<AuthorizationRequest[]> {
  for (const required of await requiredResourceTypes(action)) expect(types, `${name}: ${action} requires ${required}`).toContain(required);
  return types.map((t) => ({ name: `${name}: ${action} ${t}`, action, resourceType: t, resource: parts[t]!.arn, facts: parts[t]!.facts }));
}

/** Tags on create: CreateTags per tagged resource, with `ec2:CreateAction` (EC2 user guide, "Grant permission to tag Amazon EC2 resources during creation"). */
function tagOnCreate(name: string, createAction: string, resourceType: string, resource: string, tags: { Key?: string; Value?: string }[]): AuthorizationRequest {
  return { name: `${name}: tags on create (${resourceType})`, action: 'ec2:CreateTags', resourceType, resource, facts: { ...requestTags(tags), 'ec2:CreateAction': createAction, 'ec2:Region': REGION } };
}

function passRole(name: string, f: Fleet): AuthorizationRequest {
  return { name: `${name}: PassRole`, action: 'iam:PassRole', resourceType: 'role', resource: f.instanceRoleArn, facts: { 'iam:PassedToService': 'ec2.amazonaws.com' } };
}

/**
 * What a launch tags per resource type: the launch template's tags (as synthesized) merged with
 * the call's TagSpecifications, the call's value winning for a key in both (EC2 user guide,
 * "Launch template restrictions": tags of the template and the request are merged). Tags at
 * launch are authorized with all of them.
 */
function launchTags(pool: Fleet['pools'][number], specs: readonly { ResourceType?: string; Tags?: { Key?: string; Value?: string }[] }[] | undefined) {
  const merged: Record<string, { Key?: string; Value?: string }[]> = {};
  for (const type of new Set([...Object.keys(pool.templateTags), ...(specs ?? []).map((s) => s.ResourceType!)])) {
    const byKey = new Map<string, string>();
    for (const t of pool.templateTags[type] ?? []) byKey.set(t.Key, t.Value);
    for (const t of specs?.find((s) => s.ResourceType === type)?.Tags ?? []) byKey.set(t.Key!, t.Value!);
    merged[type] = [...byKey].map(([Key, Value]) => ({ Key, Value }));
  }
  return merged;
}

const poolConfig = (pool: Fleet['pools'][number]) => ({ name: pool.name, launchTemplateId: pool.launchTemplateId, launchTemplateVersion: '1', spot: pool.spot, instanceTypes: ['m7i.large'], subnetIds: ['subnet-1'] }) as unknown as PoolConfig;

/** The pool's standby launch: the command `runStandbys` builds (lambdas/pool/handler.ts), from the template. */
async function poolLaunch(f: Fleet, pool: Fleet['pools'][number]): Promise<AuthorizationRequest[]> {
  const command = runStandbys(poolConfig(pool), keys, 1, 'm7i.large', 'subnet-1', 'token-1');
  const tags = launchTags(pool, command.input.TagSpecifications);
  const market: Market = pool.spot ? 'spot' : 'on-demand';
  const { parts } = launchFacts(f, pool, market, { instance: requestTags(tags.instance ?? []), volume: requestTags(tags.volume ?? []) });
  const name = `pool standby launch (${market})`;
  const types = ['image', 'instance', 'network-interface', 'security-group', 'subnet', 'volume', 'launch-template', ...(pool.spot ? ['spot-instances-request'] : [])];
  return [
    ...(await launchRequests(name, 'ec2:RunInstances', types, parts)),
    ...Object.entries(tags).map(([type, t]) => tagOnCreate(name, 'RunInstances', type, parts[type]!.arn, t)),
    passRole(name, f),
  ];
}

/**
 * Scale-up's cold launch (lambdas/scale-up/cold.ts `fleetOnce`): an instant CreateFleet from
 * the pool's template with the instance tags of `coldLaunchTags`, on the pool's market and, for
 * a spot pool, on-demand again when spot capacity is short. CreateFleet authorizes its own
 * resource types; an instant fleet has no service-linked role (EC2 user guide, "EC2 Fleet
 * prerequisites": "An instant EC2 Fleet does not require this role"), so EC2 launches with the
 * caller's RunInstances permission too, with the template's key where the reference lists it
 * (published CreateFleet policies, Karpenter's, grant both actions for that reason).
 */
async function coldLaunch(f: Fleet, pool: Fleet['pools'][number], market: Market): Promise<AuthorizationRequest[]> {
  const command = fleetCommand(poolConfig(pool), market, 'token-1', coldLaunchTags(keys, pool.name, JOB, NOW, 'token-1', pool.reuse ? 'org/repo' : undefined));
  const tags = launchTags(pool, command.input.TagSpecifications);
  const { parts } = launchFacts(f, pool, market, { instance: requestTags(tags.instance ?? []), volume: requestTags(tags.volume ?? []) });
  const name = `scale-up cold launch (${market})`;
  const runTypes = ['image', 'instance', 'network-interface', 'security-group', 'subnet', 'volume', 'launch-template', ...(market === 'spot' ? ['spot-instances-request'] : [])];
  return [
    ...(await launchRequests(name, 'ec2:CreateFleet', ['fleet', 'instance', 'image', 'launch-template', 'subnet', 'volume'], parts)),
    ...(await launchRequests(`${name}, the fleet's launch`, 'ec2:RunInstances', runTypes, parts)),
    ...Object.entries(tags).map(([type, t]) => tagOnCreate(name, 'CreateFleet', type, parts[type]!.arn, t)),
    passRole(name, f),
  ];
}

/** A call on an existing fleet instance (tagged with its pool) that writes or removes tags. */
function onInstance(name: string, action: string, tags: Record<string, string>, extra: Record<string, string | string[]> = {}): AuthorizationRequest {
  return { name, action, resourceType: 'instance', resource: instanceArn(INSTANCE), facts: { ...resourceTags(tags), 'ec2:Region': REGION, ...extra } };
}

const parked = (pool: string) => ({ [keys.pool]: pool, [keys.warmStandby]: 'true', [keys.createdBy]: 'pool' });
const parameter = (name: string) => arn('ssm', `parameter${name}`);
const ssmRequest = (name: string, action: string, parameterName: string, facts: Record<string, string | string[]> = {}): AuthorizationRequest => ({
  name,
  action,
  resourceType: 'parameter',
  resource: parameter(parameterName),
  facts,
});
const configTags = [
  { Key: PARAMETER_INSTANCE_TAG, Value: INSTANCE },
  { Key: PARAMETER_INSTANCE_ARN_TAG, Value: instanceArn(INSTANCE) },
];
const ticketRequests = (name: string, f: Fleet, key: string): AuthorizationRequest[] =>
  ['dynamodb:UpdateItem', 'dynamodb:GetItem', 'dynamodb:DeleteItem'].map((action) => ({ name: `${name} ${action}`, action, resourceType: 'table', resource: f.tableArn, facts: { 'dynamodb:LeadingKeys': [key] } }));
const viaSsm = { 'kms:ViaService': `ssm.${REGION}.amazonaws.com`, 'kms:CallerAccount': ACCOUNT };
const queueArn = (f: Fleet, id: 'RunnersJobsQueue' | 'RunnersJobsDeadLetterQueue') => f.arnOf(id, 'AWS::SQS::Queue');
const sqsRequest = (name: string, action: string, queue: string): AuthorizationRequest => ({ name, action, resourceType: 'queue', resource: queue, facts: {} });
/** What every control-plane function reads first (fleet-config-source.ts) and, with a CI connection, its credentials (lambdas/ci/index.ts). */
const configAndCredentials = (f: Fleet): AuthorizationRequest[] => [
  ssmRequest('fleet config', 'ssm:GetParameter', paths.fleetConfig),
  ssmRequest('GitHub App key', 'ssm:GetParameter', paths.github.appPrivateKey),
  ...(f.gitlab ? [ssmRequest('GitLab token', 'ssm:GetParameter', paths.gitlab.token)] : []),
  ...(f.keyArn ? [{ name: 'CI secrets: kms:Decrypt through SSM', action: 'kms:Decrypt', resourceType: 'key', resource: f.keyArn, facts: viaSsm, resourcePolicy: f.keyPolicy! }] : []),
];

/** Scale-up's calls other than launches: warm activation and its rollback, cold settling, records, tickets. */
function scaleUpCalls(f: Fleet, pool: Fleet['pools'][number]): AuthorizationRequest[] {
  const activation = activationTags(keys, JOB, 'runner-1', NOW, pool.reuse ? 'org/repo' : undefined);
  const config = paths.runnerConfig(INSTANCE);
  const calls: AuthorizationRequest[] = [
    // claim.ts: the claim is a SecureString put that refuses to overwrite, with its tags.
    ssmRequest('warm claim: PutParameter', 'ssm:PutParameter', config, { ...requestTags(configTags), 'ssm:Overwrite': 'false' }),
    ssmRequest('warm claim: its tags', 'ssm:AddTagsToResource', config, requestTags(configTags)),
    ssmRequest('warm claim: read back', 'ssm:GetParameter', config, resourceTags({ [PARAMETER_INSTANCE_TAG]: INSTANCE })),
    ssmRequest('rollback: release the claim', 'ssm:DeleteParameter', config, resourceTags({ [PARAMETER_INSTANCE_TAG]: INSTANCE })),
    onInstance('warm activation: tags', 'ec2:CreateTags', parked(pool.name), requestTags(activation)),
    onInstance('warm activation: start', 'ec2:StartInstances', { ...parked(pool.name), [keys.activatedAt]: NOW.toISOString() }),
    onInstance('rollback: remove activation tags', 'ec2:DeleteTags', { ...parked(pool.name), [keys.activatedAt]: NOW.toISOString() }, requestTags(activation.filter((t) => activationKeys(keys).includes(t.Key!)))),
    onInstance('rollback / cold failure: terminate', 'ec2:TerminateInstances', { [keys.pool]: pool.name }),
    // cold.ts: the runner id on the instance CreateFleet launched.
    onInstance('cold launch: runner id', 'ec2:CreateTags', { [keys.pool]: pool.name, [keys.createdBy]: 'scale-up' }, requestTags([{ Key: keys.runnerId, Value: 'runner-1' }])),
    { name: 'describe', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: { 'ec2:Region': REGION } },
    ssmRequest('cold gate: prime state', 'ssm:GetParameter', paths.primeState(pool.name)),
    ...ticketRequests('job record', f, '42'),
    ...ticketRequests('launch ticket', f, `${LAUNCH_TICKET_KEY_PREFIX}${pool.name}|1`),
    // queue.ts and handler.ts: wait copies, dead letters, a failed message's visibility.
    sqsRequest('wait copy', 'sqs:SendMessage', queueArn(f, 'RunnersJobsQueue')),
    sqsRequest('dead letter', 'sqs:SendMessage', queueArn(f, 'RunnersJobsDeadLetterQueue')),
    sqsRequest('redelivery: visibility', 'sqs:ChangeMessageVisibility', queueArn(f, 'RunnersJobsQueue')),
    ...configAndCredentials(f),
  ];
  if (f.keyArn) {
    // A standard SecureString is encrypted under the key directly (kms:Encrypt), an advanced one
    // by envelope encryption (kms:GenerateDataKey), and read back decrypted (KMS developer guide,
    // "How AWS Systems Manager Parameter Store uses AWS KMS").
    for (const action of ['kms:Encrypt', 'kms:GenerateDataKey', 'kms:Decrypt']) calls.push({ name: `warm claim: ${action} through SSM`, action, resourceType: 'key', resource: f.keyArn, facts: viaSsm, resourcePolicy: f.keyPolicy! });
  }
  return calls;
}

function poolCalls(f: Fleet, pool: Fleet['pools'][number]): AuthorizationRequest[] {
  const marker = paths.runnerConfig(INSTANCE);
  return [
    ssmRequest('eviction lock: PutParameter', 'ssm:PutParameter', marker, { ...requestTags([configTags[0]!]), 'ssm:Overwrite': 'false' }),
    ssmRequest('eviction lock: its tag', 'ssm:AddTagsToResource', marker, requestTags([configTags[0]!])),
    ssmRequest('eviction lock: release', 'ssm:DeleteParameter', marker),
    ssmRequest('config parameters: list', 'ssm:GetParametersByPath', paths.runnerConfigRoot.replace(/\/$/, ''), { 'ssm:Recursive': 'false' }),
    ssmRequest('prime state: read', 'ssm:GetParameter', paths.primeState(pool.name)),
    ssmRequest('prime state: write', 'ssm:PutParameter', paths.primeState(pool.name), { 'ssm:Overwrite': 'true' }),
    onInstance('prime failure reason', 'ec2:CreateTags', parked(pool.name), requestTags([{ Key: keys.primeFailure, Value: 'timeout' }])),
    onInstance('eviction: terminate', 'ec2:TerminateInstances', parked(pool.name)),
    { name: 'eviction: cancel spot request', action: 'ec2:CancelSpotInstanceRequests', resourceType: 'spot-instances-request', resource: arn('ec2', 'spot-instances-request/sir-1'), facts: {} },
    { name: 'describe', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: { 'ec2:Region': REGION } },
    ...ticketRequests('launch ticket', f, `${LAUNCH_TICKET_KEY_PREFIX}${pool.name}|1`),
    ssmRequest('fleet config', 'ssm:GetParameter', paths.fleetConfig),
  ];
}

function scaleDownCalls(f: Fleet, pool: Fleet['pools'][number]): AuthorizationRequest[] {
  const active = { [keys.pool]: pool.name, [keys.activatedAt]: NOW.toISOString(), [keys.runnerId]: 'runner-1' };
  const calls: AuthorizationRequest[] = [
    onInstance('idle mark', 'ec2:CreateTags', active, requestTags([{ Key: keys.idleSince, Value: NOW.toISOString() }])),
    onInstance('idle mark cleared', 'ec2:DeleteTags', { ...active, [keys.idleSince]: NOW.toISOString() }, requestTags([{ Key: keys.idleSince }])),
    onInstance('reclaim: terminate', 'ec2:TerminateInstances', active),
    ssmRequest('sweep: list', 'ssm:GetParametersByPath', paths.runnerConfigRoot.replace(/\/$/, ''), { 'ssm:Recursive': 'false' }),
    ssmRequest('sweep: delete', 'ssm:DeleteParameters', paths.runnerConfig(INSTANCE)),
    { name: 'describe', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: { 'ec2:Region': REGION } },
    ...configAndCredentials(f),
  ];
  if (pool.reuse) {
    calls.push(
      ssmRequest('idle-stop claim', 'ssm:PutParameter', paths.runnerConfig(INSTANCE), { ...requestTags([configTags[0]!]), 'ssm:Overwrite': 'false' }),
      ssmRequest('idle-stop claim: its tag', 'ssm:AddTagsToResource', paths.runnerConfig(INSTANCE), requestTags([configTags[0]!])),
      onInstance('idle-stop: parking tag', 'ec2:CreateTags', active, requestTags([{ Key: keys.parking, Value: NOW.toISOString() }])),
      ssmRequest('idle-stop claim: removed', 'ssm:DeleteParameters', paths.runnerConfig(INSTANCE)),
    );
  }
  return calls;
}

const VARIANTS = {
  'default (on-demand)': {},
  spot: { spot: true },
  reuse: { reuse: true },
  'customer managed key': { key: true },
  'with GitLab': { gitlab: true },
} as const;


it('judges against the reference data this file documents', async () => {
  // iam-reference.ts cites rows of this version; a newer one may differ: read them again.
  expect(await referenceVersion()).toMatchObject({ version: '0.21.202609261' });
});

for (const [variant, options] of Object.entries(VARIANTS)) {
  describe(`the listed calls of each principal's paths are allowed: ${variant}`, () => {
    let f: Fleet;
    beforeAll(() => {
      f = synth(options);
    });

    it('scale-up: cold launches (the pool market, and on-demand after short spot capacity), warm activation, rollback, records, tickets', async () => {
      const statements = f.statements('RunnersScaleUpRole');
      const requests: AuthorizationRequest[] = [];
      for (const pool of f.pools) {
        for (const market of pool.spot ? (['spot', 'on-demand'] as const) : (['on-demand'] as const)) requests.push(...(await coldLaunch(f, pool, market)));
        requests.push(...scaleUpCalls(f, pool));
      }
      expect(await denials(statements, requests)).toEqual([]);
    });

    it('pool: standby launches, eviction, prime back-off, tickets', async () => {
      const statements = f.statements('RunnersPoolRole');
      const requests: AuthorizationRequest[] = [];
      for (const pool of f.pools) requests.push(...(await poolLaunch(f, pool)), ...poolCalls(f, pool));
      expect(await denials(statements, requests)).toEqual([]);
    });

    it('scale-down: idle marks, reclaim, sweeps, idle-stop', async () => {
      const statements = f.statements('RunnersScaleDownRole');
      expect(await denials(statements, f.pools.flatMap((pool) => scaleDownCalls(f, pool)))).toEqual([]);
    });
  });
}

describe('what no path needs is refused', () => {
  let f: Fleet;
  let keyed: Fleet;
  beforeAll(() => {
    f = synth({ spot: true, reuse: true });
    keyed = synth({ key: true });
  });
  const refused = async (statements: Statement[], requests: AuthorizationRequest[]) => {
    for (const r of requests) expect((await judge(statements, r, ACCOUNT)).result, r.name).not.toBe('Allowed');
  };

  it('scale-up: a DeleteTags without keys (it removes every tag, the pool tag too) and any tag key it never writes', async () => {
    const pool = f.pools[0]!;
    const tagged = { ...parked(pool.name), [keys.activatedAt]: NOW.toISOString() };
    await refused(f.statements('RunnersScaleUpRole'), [
      onInstance('DeleteTags without keys', 'ec2:DeleteTags', tagged),
      onInstance('DeleteTags of the pool tag', 'ec2:DeleteTags', tagged, requestTags([{ Key: keys.pool }])),
      onInstance('DeleteTags of the affinity', 'ec2:DeleteTags', tagged, requestTags([{ Key: keys.affinity }])),
      onInstance('CreateTags of the pool tag', 'ec2:CreateTags', tagged, requestTags([{ Key: keys.pool, Value: pool.name }])),
      onInstance('CreateTags of the warm-standby tag', 'ec2:CreateTags', tagged, requestTags([{ Key: keys.warmStandby, Value: 'true' }])),
      onInstance('CreateTags of the job-started tag', 'ec2:CreateTags', tagged, requestTags([{ Key: keys.jobStarted, Value: 'x' }])),
      onInstance('CreateTags with an activation key and the pool tag', 'ec2:CreateTags', tagged, requestTags([{ Key: keys.runnerId, Value: '1' }, { Key: keys.pool, Value: 'other' }])),
      onInstance('CreateTags on an instance outside the fleet', 'ec2:CreateTags', {}, requestTags([{ Key: keys.runnerId, Value: '1' }])),
    ]);
  });

  it('launches: only from the fleet\'s templates, only instances tagged with a pool of the fleet', async () => {
    const pool = f.pools[0]!;
    const foreign = { ...pool, launchTemplateId: 'lt-0foreign', name: 'linux' };
    const unknownPool = { ...pool, name: 'other' };
    const fromForeignTemplate = (await coldLaunch(f, foreign, 'on-demand')).filter((r) => r.resourceType === 'launch-template');
    const untaggedPool = (await coldLaunch(f, unknownPool, 'on-demand')).filter((r) => r.action === 'ec2:CreateFleet' && r.resourceType === 'instance');
    expect(fromForeignTemplate.length).toBeGreaterThan(0);
    expect(untaggedPool).toHaveLength(1);
    await refused(f.statements('RunnersScaleUpRole'), [...fromForeignTemplate, ...untaggedPool]);
    const poolForeign = (await poolLaunch(f, foreign)).filter((r) => r.action === 'ec2:RunInstances' && r.resourceType !== 'spot-instances-request');
    await refused(f.statements('RunnersPoolRole'), poolForeign);
    // Tags at creation only for the fleet's pools.
    await refused(f.statements('RunnersPoolRole'), [tagOnCreate('foreign tags', 'RunInstances', 'instance', instanceArn('*'), standbyLaunchTags(keys, 'other', 't'))]);
  });

  it('KMS: the pool uses no key; scale-up encrypts and decrypts through SSM only', async () => {
    const key = keyed.keyArn!;
    const kmsRequest = (action: string, facts: Record<string, string>): AuthorizationRequest => ({ name: action, action, resourceType: 'key', resource: key, facts, resourcePolicy: keyed.keyPolicy! });
    await refused(keyed.statements('RunnersPoolRole'), ['kms:Encrypt', 'kms:Decrypt', 'kms:GenerateDataKey'].map((a) => kmsRequest(a, viaSsm)));
    await refused(keyed.statements('RunnersScaleUpRole'), [kmsRequest('kms:Encrypt', { 'kms:CallerAccount': ACCOUNT }), kmsRequest('kms:Decrypt', { 'kms:CallerAccount': ACCOUNT })]);
  });

  it('no EC2 Fleet service-linked role: instant fleets need none', async () => {
    const request: AuthorizationRequest = { name: 'ec2fleet SLR', action: 'iam:CreateServiceLinkedRole', resourceType: 'role', resource: `arn:aws:iam::${ACCOUNT}:role/aws-service-role/ec2fleet.amazonaws.com/AWSServiceRoleForEC2Fleet`, facts: { 'iam:AWSServiceName': 'ec2fleet.amazonaws.com' } };
    await refused(f.statements('RunnersScaleUpRole'), [request]);
    await refused(f.statements('RunnersPoolRole'), [request]);
  });
});
