import { CloudFormationClient, DescribeStacksCommand, StackStatus } from '@aws-sdk/client-cloudformation';
import { GetParameterCommand, ParameterNotFound, SSMClient } from '@aws-sdk/client-ssm';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { GetItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders } from '../../lambdas/ci';
import { installationCallerOf, scaleSetApiAt } from '../../lambdas/ci/scale-set';
import { createScaleSetResourceHandler, SCALE_SET_RESOURCE_ID, type ScaleSetApiFactory } from '../../lambdas/scale-set-resource/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, JOB_RECORD_ATTRIBUTES, Provider, SCALE_SET_LEASE_ATTRIBUTES as A, scaleSetEntries, scaleSetLeaseKey, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { matchJobPool } from '../../lambdas/shared/match-pool';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { awsError } from '../support/fake-aws';
import { Lines } from '../support/fixtures';
import { createJobRecordTable, motoDynamo } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';

/**
 * The scale-set resource's onEvent against the real scale-set client and the loopback GitHub's
 * scale-set service, the listener's lease items in moto's DynamoDB; only CloudFormation's
 * DescribeStacks (the Delete's stack status) and SSM's App key are mocked.
 */
const PREFIX = 'ssr';
const ORG = 'acme';
const STACK = 'arn:aws:cloudformation:eu-west-1:111111111111:stack/Example/1';
const TABLE = 'job-records';
const { moto } = motoForFile(async (m) => {
  await createJobRecordTable(m.dynamo, TABLE);
});
const ssm = mockClient(SSMClient);
const cloudformation = mockClient(CloudFormationClient);

let gh: LoopbackGitHub;
let lines: Lines;
let stackStatus: string;
let stackReads: number;
let stackFault: Error | undefined;
/** The FleetConfig the handler loads (CloudFormation's parameter at the time of the event). */
let current: FleetConfig;
/** The fetch the client speaks through (a test loses answers with it). */
let fetchFn: typeof fetch;

interface PoolSpec {
  readonly name: string;
  readonly scaleSetName?: string;
  readonly scaleSetRunnerGroup?: string;
  readonly repositories?: string[];
  readonly labels?: string[];
}

function fleet(pools: PoolSpec[]): FleetConfig {
  const base = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: gh.url },
    pools: pools.map((p) => ({ provider: Provider.GITHUB, labels: [p.name], ...base, ...p })),
  });
}

/** Two scale sets (the organisation's and a repository's) and a webhook pool. */
function fleetA(): FleetConfig {
  return fleet([
    { name: 'linux', scaleSetName: 'arc-linux', labels: ['linux', 'x64'] },
    { name: 'app', scaleSetName: 'arc-app', repositories: [`${ORG}/app`] },
    { name: 'hooks', labels: ['hooks'] },
  ]);
}

/** As the construct renders the resource's properties (lib/scale-set-resource.ts). */
function properties(config: FleetConfig): Record<string, unknown> {
  return { ServiceToken: 'arn:aws:lambda:eu-west-1:111111111111:function:x', ScaleSets: JSON.stringify(scaleSetEntries(config)) };
}

const base = { ServiceToken: 'arn', ResponseURL: 'https://cfn', StackId: STACK, RequestId: 'r', LogicalResourceId: 'ScaleSets', ResourceType: 'Custom::RunnerScaleSets' };
const create = (config: FleetConfig) => ({ ...base, RequestType: 'Create', ResourceProperties: properties(config) }) as CloudFormationCustomResourceEvent;
const update = (from: FleetConfig, to: FleetConfig) =>
  ({ ...base, RequestType: 'Update', PhysicalResourceId: SCALE_SET_RESOURCE_ID, ResourceProperties: properties(to), OldResourceProperties: properties(from) }) as CloudFormationCustomResourceEvent;
const remove = (config: FleetConfig) => ({ ...base, RequestType: 'Delete', PhysicalResourceId: SCALE_SET_RESOURCE_ID, ResourceProperties: properties(config) }) as CloudFormationCustomResourceEvent;

/** As lambdas/scale-set-resource/index.ts builds it: the fleet's GitHub provider mints the registration tokens. */
const scaleSetApiFor: ScaleSetApiFactory = (config, scope) => {
  const github = installationCallerOf(createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github);
  return scaleSetApiAt(config, scope, { github, fetch: fetchFn, timeoutMs: 5_000 });
};

function handler(apiFor: ScaleSetApiFactory = scaleSetApiFor) {
  return createScaleSetResourceHandler({
    cloudformation: new CloudFormationClient({ region: 'eu-west-1' }),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 2_000 }),
    ssm: new SSMClient({ region: 'eu-west-1' }),
    dynamodb: motoDynamo(moto.endpoint),
    tableName: TABLE,
    loadConfig: async () => current,
    scaleSetApiFor: apiFor,
    sink: lines.sink,
  });
}

/** The loopback's scale sets as `scope name`, sorted. */
function held(): string[] {
  return gh.scaleSets
    .list()
    .map((s) => `${s.scope} ${s.name}`)
    .sort();
}

const leaseKey = (pool: string) => ({ [JOB_RECORD_ATTRIBUTES.key]: { S: scaleSetLeaseKey(pool) } });

/** The lease item as the listener leaves it between invocations (lambdas/scale-set-listener/lease.ts): released, its session kept. */
async function putLease(pool: string, scaleSetId: number, sessionId: string): Promise<void> {
  await motoDynamo(moto.endpoint).send(
    new PutItemCommand({
      TableName: TABLE,
      Item: { ...leaseKey(pool), [A.expiresAt]: { N: '0' }, [A.sessionId]: { S: sessionId }, [A.scaleSetId]: { N: String(scaleSetId) }, [A.lastMessageId]: { N: '3' } },
    }),
  );
}

async function leaseOf(pool: string): Promise<Record<string, unknown> | undefined> {
  return (await motoDynamo(moto.endpoint).send(new GetItemCommand({ TableName: TABLE, Key: leaseKey(pool), ConsistentRead: true }))).Item;
}

/** Opens a session on the scale set as the listener does, and records it in the pool's lease. */
async function listen(pool: string, scaleSetName: string, scope = { organization: ORG } as { organization?: string; repository?: string }): Promise<{ scaleSetId: number; sessionId: string }> {
  const scaleSetId = gh.scaleSets.list().find((x) => x.name === scaleSetName)!.id;
  const session = await (await scaleSetApiFor(current, scope)).createSession(scaleSetId, 'listener');
  await putLease(pool, scaleSetId, session.sessionId);
  return { scaleSetId, sessionId: session.sessionId };
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(Error);
  return e as Error;
}

beforeEach(async () => {
  gh = await startLoopbackGitHub({ organization: ORG, jobSeconds: 0.2, scaleSet: { longPollSeconds: 0.3, runnerGroups: ['gpu-group'] } });
  lines = new Lines();
  fetchFn = globalThis.fetch;
  stackStatus = StackStatus.DELETE_IN_PROGRESS;
  stackReads = 0;
  stackFault = undefined;
  current = fleetA();
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
  cloudformation.reset();
  cloudformation.on(DescribeStacksCommand).callsFake((i: { StackName: string }) => {
    stackReads++;
    if (stackFault) throw stackFault;
    return { Stacks: [{ StackId: i.StackName, StackName: 'Example', CreationTime: new Date(0), StackStatus: stackStatus }] };
  });
});
afterEach(async () => gh.close());
afterAll(() => {
  ssm.restore();
  cloudformation.restore();
});

const BOTH = [`${ORG}/app arc-app`, `org:${ORG} arc-linux`];

describe('scale-set resource: Create and Update', () => {
  it('Create makes each pool its scale set at its scope, its name its only label, and answers their ids', async () => {
    const answer = await handler()(create(current));
    expect(held()).toEqual(BOTH);
    const sets = gh.scaleSets.list();
    const linux = sets.find((s) => s.name === 'arc-linux')!;
    expect(linux.labels).toEqual(['arc-linux']);
    expect(answer).toEqual({ PhysicalResourceId: SCALE_SET_RESOURCE_ID, Data: { linux: String(linux.id), app: String(sets.find((s) => s.name === 'arc-app')!.id) } });
    expect(stackReads).toBe(0);
  });

  it('the scale set carries its name as its only label: no job reaches both the scale set and a webhook pool (hooks [linux], ss [linux, x64] named fast)', async () => {
    current = fleet([
      { name: 'ss', scaleSetName: 'fast', labels: ['linux', 'x64'] },
      { name: 'hooks', labels: ['linux'] },
    ]);
    await handler()(create(current));
    expect(gh.scaleSets.list().map((s) => s.labels)).toEqual([['fast']]);
    const asks = [['self-hosted', 'linux'], ['linux'], ['self-hosted', 'linux', 'x64'], ['linux', 'x64'], ['fast'], ['self-hosted', 'fast'], ['FAST'], ['fast', 'linux']];
    const jobs = asks.map((labels) => gh.addJob(`${ORG}/app`, labels));
    await fetch(`${gh.url}/`).catch(() => undefined); // the loopback assigns queued jobs on its next request
    const paths = jobs.map((j) => {
      const webhook = matchJobPool(current, Provider.GITHUB, ORG, 'app', j.labels);
      return `${j.labels.join(',')}: ${[gh.scaleSets.assignedTo(j.id) !== undefined ? 'scale set' : '', webhook.pool?.name ?? ''].filter(Boolean).join(' + ') || 'none'}`;
    });
    expect(paths).toEqual([
      'self-hosted,linux: hooks',
      'linux: hooks',
      'self-hosted,linux,x64: none',
      'linux,x64: none',
      'fast: scale set',
      'self-hosted,fast: scale set',
      'FAST: scale set',
      'fast,linux: none',
    ]);
  });

  it('a repeated Create (a retried event) creates nothing twice and answers the same ids', async () => {
    const first = await handler()(create(current));
    const second = await handler()(create(current));
    expect(second).toEqual(first);
    expect(held()).toEqual(BOTH);
    const creates = gh.requests().filter((r) => r.method === 'POST' && /runnerscalesets$/.test(r.path));
    expect(creates).toHaveLength(2);
  });

  it('Update with a renamed scale set deletes the old one and creates the new one; the others stay as they were', async () => {
    const before = fleetA();
    const created = await handler()(create(before));
    current = fleet([
      { name: 'linux', scaleSetName: 'arc-linux-2', labels: ['linux', 'x64'] },
      { name: 'app', scaleSetName: 'arc-app', repositories: [`${ORG}/app`] },
      { name: 'hooks', labels: ['hooks'] },
    ]);
    const answer = await handler()(update(before, current));
    expect(held()).toEqual([`${ORG}/app arc-app`, `org:${ORG} arc-linux-2`]);
    expect(answer.Data?.app).toBe(created.Data?.app);
    expect(answer.Data?.linux).not.toBe(created.Data?.linux);
    expect(lines.logs('scale set deleted')).toMatchObject([{ pool: 'linux', scaleSet: 'arc-linux', reason: 'no longer named by the fleet' }]);
    expect(stackReads).toBe(0);
  });

  it('Update that makes a pool a webhook pool deletes its scale set; one carrying other labels (made before) is updated in place to its name alone', async () => {
    const before = fleetA();
    await handler()(create(before));
    const linux = gh.scaleSets.list().find((s) => s.name === 'arc-linux')!;
    // As an earlier version made it: the pool's labels besides the name.
    const api = await scaleSetApiFor(before, { organization: ORG });
    await api.ensureScaleSet({ name: 'arc-linux', runnerGroup: 'Default', labels: ['linux', 'x64'] });
    expect(gh.scaleSets.list().find((s) => s.id === linux.id)!.labels).toEqual(['arc-linux', 'linux', 'x64']);
    current = fleet([
      { name: 'linux', scaleSetName: 'arc-linux', labels: ['linux', 'arm64'] },
      { name: 'app', repositories: [`${ORG}/app`] },
    ]);
    await handler()(update(before, current));
    expect(gh.scaleSets.list().map((s) => ({ id: s.id, name: s.name, labels: s.labels }))).toEqual([{ id: linux.id, name: 'arc-linux', labels: ['arc-linux'] }]);
  });

  it("Update removing a scale set ends its session and removes its lease; a renamed pool whose scale set stays has its old lease ended too", async () => {
    const before = fleetA();
    await handler()(create(before));
    const linux = await listen('linux', 'arc-linux');
    const app = await listen('app', 'arc-app', { repository: `${ORG}/app` });
    current = fleet([
      { name: 'linux-2', scaleSetName: 'arc-linux', labels: ['linux', 'x64'] }, // the pool renamed, its scale set kept
      { name: 'app', repositories: [`${ORG}/app`] }, // no scale set any more
    ]);
    await handler()(update(before, current));
    expect(held()).toEqual([`org:${ORG} arc-linux`]);
    expect(gh.scaleSets.list()[0]!.session).toBeUndefined();
    const ended = gh.requests().filter((r) => r.method === 'DELETE' && /\/sessions\//.test(r.path)).map((r) => r.path.split('/').pop());
    expect(ended.sort()).toEqual([linux.sessionId, app.sessionId].sort());
    expect(await leaseOf('linux')).toBeUndefined();
    expect(await leaseOf('app')).toBeUndefined();
  });

  it('a lease the listener already wrote for the pool\'s new scale set is kept, its session too', async () => {
    const before = fleetA();
    await handler()(create(before));
    current = fleet([
      { name: 'linux', scaleSetName: 'arc-linux-2', labels: ['linux', 'x64'] },
      { name: 'app', scaleSetName: 'arc-app', repositories: [`${ORG}/app`] },
      { name: 'hooks', labels: ['hooks'] },
    ]);
    await handler()(create(current)); // arc-linux-2 exists: the listener moved to it
    const moved = await listen('linux', 'arc-linux-2');
    await handler()(update(before, current));
    expect(held()).toEqual([`${ORG}/app arc-app`, `org:${ORG} arc-linux-2`]);
    expect((await leaseOf('linux'))?.[A.sessionId]).toEqual({ S: moved.sessionId });
    expect(gh.scaleSets.list().find((x) => x.name === 'arc-linux-2')!.session?.id).toBe(moved.sessionId);
  });

  it('Update moving a scale set to another runner group or scope makes it there and deletes it where it was', async () => {
    const before = fleetA();
    await handler()(create(before));
    current = fleet([
      { name: 'linux', scaleSetName: 'arc-linux', scaleSetRunnerGroup: 'gpu-group', labels: ['linux', 'x64'] },
      { name: 'app', scaleSetName: 'arc-app' },
    ]);
    await handler()(update(before, current));
    expect(gh.scaleSets.list().map((s) => `${s.scope} ${s.runnerGroupId} ${s.name}`).sort()).toEqual([`org:${ORG} 1 arc-app`, `org:${ORG} 2 arc-linux`]);
    expect(lines.logs('scale set deleted').map((l) => l.pool)).toEqual(['linux', 'app']);
  });

  it('a create whose answer was lost is read back by name: one scale set, its id answered', async () => {
    let dropped = 0;
    fetchFn = async (input, init) => {
      const res = await fetch(input, init);
      if (init?.method === 'POST' && /runnerscalesets\?/.test(String(input)) && dropped++ === 0) {
        await res.text();
        throw new TypeError('fetch failed: socket hang up');
      }
      return res;
    };
    const answer = await handler()(create(current));
    expect(dropped).toBe(2);
    expect(held()).toEqual(BOTH);
    const linux = gh.scaleSets.list().find((s) => s.name === 'arc-linux')!;
    expect(answer.Data?.linux).toBe(String(linux.id));
  });

  it('a create GitHub fails outright (503, nothing made) fails the event naming the pool and the scale set; the retry creates it', async () => {
    gh.failNext({ method: 'POST', path: /runnerscalesets$/ }, 503);
    const e = await rejection(handler()(create(current)));
    expect(e.message).toMatch(/pool "linux"/);
    expect(e.message).toMatch(/scale set "arc-linux"/);
    expect(e.message).toMatch(/HTTP 503/);
    expect(held()).toEqual([]);
    await handler()(create(current));
    expect(held()).toEqual(BOTH);
  });

  it("a missing App key parameter fails the Create naming the parameter and the put-parameter command, before any GitHub call", async () => {
    const name = ssmPaths(PREFIX).github.appPrivateKey;
    ssm.on(GetParameterCommand, { Name: name }).rejects(new ParameterNotFound({ message: `Parameter ${name} not found.`, $metadata: {} }));
    const e = await rejection(handler()(create(current)));
    expect(e.message).toContain(`SSM parameter ${name} does not exist`);
    expect(e.message).toContain(`aws ssm put-parameter --type SecureString --name ${name} --value file://`);
    expect(e.message).toMatch(/before the first deploy/);
    expect(held()).toEqual([]);
    expect(gh.requests()).toEqual([]);
  });

  it("a second App's missing key parameter is named too", async () => {
    const second = ssmPaths(PREFIX).githubAppPrivateKey('777');
    current = { ...current, github: { ...current.github!, additionalAppIds: ['777'] } };
    ssm.on(GetParameterCommand, { Name: second }).rejects(new ParameterNotFound({ message: 'not found', $metadata: {} }));
    const e = await rejection(handler()(create(current)));
    expect(e.message).toContain(`SSM parameter ${second} does not exist`);
    expect(held()).toEqual([]);
  });

  it('a runner group that does not exist fails the event naming the pool, the scale set and the group', async () => {
    current = fleet([{ name: 'gpu', scaleSetName: 'arc-gpu', scaleSetRunnerGroup: 'no-such-group' }]);
    const e = await rejection(handler()(create(current)));
    expect(e.message).toMatch(/pool "gpu".*scale set "arc-gpu"/);
    expect(e.message).toMatch(/no runner group named "no-such-group"/);
    expect(held()).toEqual([]);
  });
});

describe('scale-set resource: Delete', () => {
  it('during the stack delete deletes every scale set the resource named', async () => {
    await handler()(create(current));
    const answer = await handler()(remove(current));
    expect(answer).toEqual({ PhysicalResourceId: SCALE_SET_RESOURCE_ID });
    expect(held()).toEqual([]);
    expect(lines.logs('scale set deleted').map((l) => l.scaleSet)).toEqual(['arc-linux', 'arc-app']);
    expect(stackReads).toBe(1);
  });

  it("ends the listener's session before deleting its scale set, and removes the lease item", async () => {
    await handler()(create(current));
    const { scaleSetId, sessionId } = await listen('linux', 'arc-linux');
    await handler()(remove(current));
    expect(held()).toEqual([]);
    const deletes = gh.requests().filter((r) => r.method === 'DELETE').map((r) => r.path);
    const sessionEnd = deletes.findIndex((p) => p.endsWith(`/runnerscalesets/${scaleSetId}/sessions/${sessionId}`));
    const setDelete = deletes.findIndex((p) => p.endsWith(`/runnerscalesets/${scaleSetId}`));
    expect(sessionEnd).toBeGreaterThanOrEqual(0);
    expect(sessionEnd).toBeLessThan(setDelete);
    expect(await leaseOf('linux')).toBeUndefined();
  });

  it('a session the listener records while the old one is being ended is ended too, not left open with its lease deleted', async () => {
    await handler()(create(current));
    const { scaleSetId, sessionId } = await listen('linux', 'arc-linux');
    let fresh: string | undefined;
    const racing: ScaleSetApiFactory = async (config, scope) => {
      const api = await scaleSetApiFor(config, scope);
      return Object.assign(Object.create(api) as typeof api, {
        deleteSession: async (id: number, session: string) => {
          await api.deleteSession(id, session);
          // Meanwhile the listener found its session gone, opened a new one and recorded it.
          if (fresh === undefined) fresh = (await listen('linux', 'arc-linux')).sessionId;
        },
      });
    };
    await handler(racing)(remove(current));
    expect(fresh).toBeDefined();
    const ended = gh.requests().filter((r) => r.method === 'DELETE' && /\/sessions\//.test(r.path)).map((r) => r.path.split('/').pop());
    expect(ended).toEqual(expect.arrayContaining([sessionId, fresh]));
    expect(held()).toEqual([]);
    expect(await leaseOf('linux')).toBeUndefined();
    expect(scaleSetId).toBeGreaterThan(0);
  });

  it('a session already gone (404) is taken as ended; the scale set and the lease go', async () => {
    await handler()(create(current));
    const { scaleSetId } = await listen('linux', 'arc-linux');
    gh.scaleSets.expireSession(scaleSetId);
    await handler()(remove(current));
    expect(held()).toEqual([]);
    expect(await leaseOf('linux')).toBeUndefined();
  });

  it('a retried Delete (the scale sets already gone) succeeds and deletes nothing', async () => {
    await handler()(create(current));
    await handler()(remove(current));
    const deletes = () => gh.requests().filter((r) => r.method === 'DELETE').length;
    const before = deletes();
    expect(await handler()(remove(current))).toEqual({ PhysicalResourceId: SCALE_SET_RESOURCE_ID });
    expect(deletes()).toBe(before);
    expect(lines.logs('scale set already gone').map((l) => l.scaleSet)).toEqual(['arc-linux', 'arc-app']);
  });

  it('a Delete of a scale set removed by hand, or never made, succeeds', async () => {
    expect(await handler()(remove(current))).toEqual({ PhysicalResourceId: SCALE_SET_RESOURCE_ID });
    expect(held()).toEqual([]);
  });

  for (const status of [StackStatus.UPDATE_IN_PROGRESS, StackStatus.UPDATE_COMPLETE_CLEANUP_IN_PROGRESS]) {
    it(`an update replacing the resource (${status}) keeps the scale sets the fleet still names and deletes only the others`, async () => {
      const old = fleet([
        { name: 'linux', scaleSetName: 'arc-linux', labels: ['linux', 'x64'] },
        { name: 'old', scaleSetName: 'arc-old' },
      ]);
      await handler()(create(old));
      // The replacement's Create ran with the fleet as it is now; then the old resource's Delete.
      current = fleetA();
      await handler()(create(current));
      stackStatus = status;
      await handler()(remove(old));
      expect(held()).toEqual(BOTH);
      expect(lines.logs('scale set kept: the fleet still names it')).toMatchObject([{ pool: 'linux', scaleSet: 'arc-linux' }]);
      expect(lines.logs('scale set deleted')).toMatchObject([{ pool: 'old', scaleSet: 'arc-old' }]);
    });
  }

  it('a stack status it cannot tell (DescribeStacks failed) refuses the Delete and touches nothing', async () => {
    await handler()(create(current));
    const before = gh.requests().length;
    stackFault = awsError('AccessDenied', 403);
    const e = await rejection(handler()(remove(current)));
    expect(e.message).toMatch(/nothing was touched/);
    expect(held()).toEqual(BOTH);
    expect(gh.requests().length).toBe(before);
  });

  it('a stack status CloudFormation sends no Delete in refuses it and touches nothing', async () => {
    await handler()(create(current));
    const before = gh.requests().length;
    stackStatus = StackStatus.CREATE_COMPLETE;
    const e = await rejection(handler()(remove(current)));
    expect(e.message).toMatch(/scale sets not deleted: the stack is CREATE_COMPLETE/);
    expect(held()).toEqual(BOTH);
    expect(gh.requests().length).toBe(before);
  });

  it('a delete GitHub fails outright fails the event naming the pool and the scale set; the retry finishes it', async () => {
    await handler()(create(current));
    gh.failNext({ method: 'DELETE', path: /runnerscalesets\/\d+$/ }, 503, 2);
    const e = await rejection(handler()(remove(current)));
    expect(e.message).toMatch(/pool "linux".*scale set "arc-linux"/);
    expect(e.message).toMatch(/HTTP 503/);
    expect(held()).toEqual(BOTH);
    await handler()(remove(current));
    expect(held()).toEqual([]);
  });
});
