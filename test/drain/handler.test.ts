import { CloudFormationClient, DescribeStacksCommand, StackStatus } from '@aws-sdk/client-cloudformation';
import { EC2Client } from '@aws-sdk/client-ec2';
import { DescribeRuleCommand, DisableRuleCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { GetEventSourceMappingCommand, LambdaClient, UpdateEventSourceMappingCommand } from '@aws-sdk/client-lambda';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { GitHubApiError, GitLabProvider } from '../../lambdas/ci';
import { createDrainHandlers, DrainFailedError, type DrainDeps, type IsCompleteEvent } from '../../lambdas/drain/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, GitLabRunnerType, JOB_MESSAGE_SCHEMA_VERSION, runnerName, ssmPaths, Provider } from '../../lambdas/shared/contract';
import { startLoopbackGitLab } from '../../local/ci/gitlab-server';
import { awsError, FakeAws, lostAnswer } from '../support/fake-aws';
import { FakeCi } from '../support/fake-ci';
import { fleetConfig, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

const paths = ssmPaths(PREFIX);
const config = fleetConfig();

/**
 * Lambda's mappings, EventBridge's rules and the stack's status behind aws-sdk-client-mock,
 * as the drain's SDK calls see them.
 */
class FakeScaling {
  readonly lambda = mockClient(LambdaClient);
  readonly events = mockClient(EventBridgeClient);
  readonly cloudformation = mockClient(CloudFormationClient);
  readonly mappings = new Map<string, string>([['uuid-1', 'Enabled']]);
  readonly rules = new Map<string, string>([
    ['pool-schedule', 'ENABLED'],
    ['scale-down-schedule', 'ENABLED'],
  ]);
  stackStatus: string = StackStatus.DELETE_IN_PROGRESS;
  readonly stackReads: string[] = [];
  readonly stackFaults: Error[] = [];
  readonly calls: string[] = [];
  readonly faults: (Error | undefined)[] = [];
  constructor(private readonly log: string[]) {
    const notFound = () => awsError('ResourceNotFoundException', 404);
    this.lambda.on(UpdateEventSourceMappingCommand).callsFake((i: { UUID: string; Enabled: boolean }) =>
      this.run(`UpdateEventSourceMapping ${i.UUID}`, () => {
        if (!this.mappings.has(i.UUID)) throw notFound();
        this.mappings.set(i.UUID, i.Enabled ? 'Enabled' : 'Disabled');
        return { State: i.Enabled ? 'Enabling' : 'Disabling' };
      }),
    );
    this.lambda.on(GetEventSourceMappingCommand).callsFake((i: { UUID: string }) =>
      this.run(`GetEventSourceMapping ${i.UUID}`, () => {
        const state = this.mappings.get(i.UUID);
        if (!state) throw notFound();
        return { State: state };
      }),
    );
    this.events.on(DisableRuleCommand).callsFake((i: { Name: string }) =>
      this.run(`DisableRule ${i.Name}`, () => {
        if (!this.rules.has(i.Name)) throw notFound();
        this.rules.set(i.Name, 'DISABLED');
        return {};
      }),
    );
    this.events.on(DescribeRuleCommand).callsFake((i: { Name: string }) =>
      this.run(`DescribeRule ${i.Name}`, () => {
        const rule = this.rules.get(i.Name);
        if (!rule) throw notFound();
        return { Name: i.Name, State: rule };
      }),
    );
    this.cloudformation.on(DescribeStacksCommand).callsFake((i: { StackName: string }) => {
      this.stackReads.push(i.StackName);
      const fault = this.stackFaults.shift();
      if (fault) throw fault;
      return { Stacks: [{ StackId: i.StackName, StackName: 'Example', CreationTime: new Date(0), StackStatus: this.stackStatus }] };
    });
  }
  private run(call: string, answer: () => unknown): unknown {
    this.calls.push(call);
    this.log.push(call);
    const fault = this.faults.shift();
    if (fault) throw fault;
    return answer();
  }
  restore(): void {
    this.lambda.restore();
    this.events.restore();
    this.cloudformation.restore();
  }
}

let aws: FakeAws;
let ci: FakeCi;
let scaling: FakeScaling;
let lines: Lines;
/** Every call in order, AWS and scaling alike. */
let order: string[];
let clock: number;

beforeEach(() => {
  aws?.restore();
  scaling?.restore();
  aws = new FakeAws();
  order = [];
  const push = (action: string) => order.push(action);
  const original = aws.calls.push.bind(aws.calls);
  aws.calls.push = (...items: string[]) => {
    items.forEach(push);
    return original(...items);
  };
  ci = new FakeCi(Provider.GITHUB, PREFIX, () => aws.now.getTime());
  scaling = new FakeScaling(order);
  lines = new Lines();
  clock = aws.now.getTime();
  // The credential the fleet's provider uses exists (as after the operator filled it in).
  aws.parameters.set(config.parameters.github.appPrivateKey, { value: 'pem', tags: {}, at: aws.now });
});
afterAll(() => {
  aws.restore();
  scaling.restore();
});

function handlers(overrides: Partial<DrainDeps> = {}) {
  return createDrainHandlers({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    lambda: new LambdaClient({}),
    events: new EventBridgeClient({}),
    cloudformation: new CloudFormationClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    sources: { eventSourceMappings: ['uuid-1'], schedules: ['pool-schedule', 'scale-down-schedule'] },
    settings: { quietMs: 180_000, deadlineMs: 1_680_000 },
    now: () => new Date(clock),
    sink: lines.sink,
    ...overrides,
  });
}

const base = { ServiceToken: 'arn', ResponseURL: 'https://cfn', StackId: 'stack', RequestId: 'r', LogicalResourceId: 'Drain', ResourceType: 'Custom::FleetDrain', ResourceProperties: { ServiceToken: 'arn' } };
const event = (RequestType: 'Create' | 'Update' | 'Delete'): CloudFormationCustomResourceEvent =>
  (RequestType === 'Create' ? { ...base, RequestType } : { ...base, RequestType, PhysicalResourceId: 'drain-1', ...(RequestType === 'Update' ? { OldResourceProperties: {} } : {}) }) as CloudFormationCustomResourceEvent;

/** onEvent for Delete, then the isComplete request the framework builds from its answer. */
async function startDrain(h = handlers()): Promise<IsCompleteEvent> {
  const answer = await h.onEvent(event('Delete'));
  return { ...event('Delete'), ...answer } as IsCompleteEvent;
}

/** The fleet as a destroy finds it: parked, running and spot instances, their parameters and runners, an orphan runner. */
function fleet() {
  const parked = aws.addInstance({ state: 'stopped', tags: standbyTags() });
  const running = aws.addInstance({ state: 'running', tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.runnerId]: '1' } });
  const spot = aws.addInstance({ state: 'stopped', tags: standbyTags(), spotRequestId: 'sir-1' });
  const other = aws.addInstance({ state: 'running', tags: { Name: 'not-the-fleet' } });
  for (const id of [parked.id, running.id]) aws.parameters.set(paths.runnerConfig(id), { value: 'x', tags: {}, at: aws.now });
  aws.parameters.set(paths.primeState('linux'), { value: '{}', tags: {}, at: aws.now, type: 'String' });
  aws.parameters.set(paths.runnerRelease(Provider.GITHUB), { value: '2.338.0 https://x a https://y b 2026-01-01T00:00:00Z', tags: {}, at: aws.now, type: 'String' });
  aws.parameters.set(paths.fleetConfig, { value: '{}', tags: {}, at: aws.now, type: 'String' });
  ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, running.id, aws.now), status: 'online', busy: false, instanceId: running.id, jobId: 'github:1' });
  ci.runners.set('2', { runnerId: '2', name: runnerName(PREFIX, 'i-00000000000000abc', aws.now), status: 'offline', busy: false, instanceId: 'i-00000000000000abc', jobId: 'github:2' });
  return { parked, running, spot, other };
}

describe('drain: Create and Update', () => {
  it('do nothing and succeed at once', async () => {
    const h = handlers();
    fleet();
    expect(await h.onEvent(event('Create'))).toEqual({});
    expect(await h.onEvent(event('Update'))).toEqual({ PhysicalResourceId: 'drain-1' });
    expect(await h.isComplete(event('Create') as IsCompleteEvent)).toEqual({ IsComplete: true });
    expect(await h.isComplete(event('Update') as IsCompleteEvent)).toEqual({ IsComplete: true });
    expect(order).toEqual([]);
    expect(scaling.stackReads).toEqual([]);
  });
});

describe('drain: Delete', () => {
  it('onEvent stops scaling first (the mapping and every schedule), and touches nothing else', async () => {
    fleet();
    const request = await startDrain();
    expect(order).toEqual(['UpdateEventSourceMapping uuid-1', 'DisableRule pool-schedule', 'DisableRule scale-down-schedule']);
    expect([...scaling.mappings.values(), ...scaling.rules.values()]).toEqual(['Disabled', 'DISABLED', 'DISABLED']);
    expect(request.Data?.DrainStartedAt).toBe(new Date(clock).toISOString());
  });

  it('isComplete terminates every fleet instance (parked and spot too, spot requests cancelled first), deletes its parameters, deregisters its runners, then completes after the quiet period', async () => {
    const { parked, running, spot, other } = fleet();
    const h = handlers();
    const request = await startDrain(h);
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect([parked, running, spot].map((i) => i.state)).toEqual(['terminated', 'terminated', 'terminated']);
    expect(other.state).toBe('running');
    expect(order.indexOf('CancelSpotInstanceRequests')).toBeLessThan(order.indexOf('TerminateInstances'));
    // The fleet's run-time parameters go; the FleetConfig (CloudFormation's) and the CI secrets (the operator's) stay.
    expect([...aws.parameters.keys()].sort()).toEqual([config.parameters.github.appPrivateKey, paths.fleetConfig].sort());
    expect(ci.deleted.sort()).toEqual(['1', '2']);

    // Nothing left, but an invocation started before the stop may still launch: wait it out.
    clock += 60_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(lines.logs('draining').at(-1)?.remaining).toEqual(['waiting 120 s for invocations started before the stop']);
    clock += 120_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('an instance launched by an invocation that started before the stop is found and terminated by a later poll', async () => {
    const h = handlers();
    const request = await startDrain(h);
    await h.isComplete(request);
    const late = aws.addInstance({ state: 'pending', tags: { ...standbyTags(), [KEYS.jobId]: 'github:9' } });
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(late.state).toBe('terminated');
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('a terminate whose answer was lost is resolved by observing, not assumed: done if it happened, sent again if not', async () => {
    const { parked } = fleet();
    const h = handlers();
    const request = await startDrain(h);
    // Executed, answer lost (503 after the fact): every retry is lost too; the next poll sees it terminated.
    aws.fault('TerminateInstances', ...Array.from({ length: 6 }, () => lostAnswer()));
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(parked.state).toBe('terminated');
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
    expect(aws.count('TerminateInstances')).toBe(6);
  });

  it('a terminate that timed out without executing is sent again by the next poll, which observes the instance still there', async () => {
    const { parked } = fleet();
    const h = handlers();
    const request = await startDrain(h);
    aws.fault('TerminateInstances', ...Array.from({ length: 6 }, () => 'hang' as const));
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(parked.state).toBe('stopped');
    expect(lines.logs('terminated failed; the next poll retries')).toHaveLength(1);
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(parked.state).toBe('terminated');
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('a mapping observed enabled again (a lost disable, or one re-enabled by hand) is disabled again and holds completion', async () => {
    const h = handlers();
    const request = await startDrain(h);
    scaling.mappings.set('uuid-1', 'Enabled');
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(scaling.calls.filter((c) => c === 'UpdateEventSourceMapping uuid-1')).toHaveLength(2);
    expect(scaling.mappings.get('uuid-1')).toBe('Disabled');
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('a mapping or schedule already deleted counts as stopped', async () => {
    scaling.mappings.clear();
    scaling.rules.delete('pool-schedule');
    const h = handlers();
    const request = await startDrain(h);
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('onEvent rides out throttling and a lost answer of a disable (idempotent: sent again through AwsCaller)', async () => {
    scaling.faults.push(awsError('ThrottlingException', 400), awsError('ServiceException', 500));
    await startDrain();
    expect(order).toEqual(['UpdateEventSourceMapping uuid-1', 'UpdateEventSourceMapping uuid-1', 'UpdateEventSourceMapping uuid-1', 'DisableRule pool-schedule', 'DisableRule scale-down-schedule']);
    expect(scaling.mappings.get('uuid-1')).toBe('Disabled');
  });

  it('onEvent fails the delete when scaling cannot be stopped (a definite refusal), naming the call', async () => {
    fleet();
    scaling.faults.push(undefined, awsError('AccessDeniedException', 403));
    const failure = await startDrain().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(DrainFailedError);
    expect((failure as Error).message).toMatch(/could not stop scaling: DisableRule \{"Name":"pool-schedule"\} failed with AccessDeniedException/);
    expect(aws.count('TerminateInstances')).toBe(0);
  });

  it('never completes while a provider cannot list its runners, and past the deadline fails the delete naming what is left', async () => {
    fleet();
    const h = handlers();
    const request = await startDrain(h);
    ci.listRunners = async () => {
      throw new Error('github down');
    };
    for (let poll = 0; poll < 3; poll++) {
      expect(await h.isComplete(request)).toEqual({ IsComplete: false });
      clock += 200_000;
    }
    clock += 1_680_000;
    const failure = await h.isComplete(request).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(DrainFailedError);
    expect((failure as Error).message).toBe(
      'the drain of test did not finish within 28 min; left: github runners unknown (listing failed: Error: github down). See docs/operations.md#a-stack-left-in-delete_failed',
    );
  });

  it('a busy runner refused by the provider is deregistered by a later poll', async () => {
    const { running } = fleet();
    ci.runners.get('1')!.busy = true;
    const h = handlers();
    const request = await startDrain(h);
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(running.state).toBe('terminated');
    expect(ci.runners.has('1')).toBe(true);
    // Its instance gone, the provider sees the runner lost and no longer busy.
    ci.runners.get('1')!.busy = false;
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(ci.runners.size).toBe(0);
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });

  it('a provider whose credential was never put in has no runners to deregister: logged, not listed', async () => {
    aws.parameters.delete(config.parameters.github.appPrivateKey);
    let listed = 0;
    ci.listRunners = async () => {
      listed++;
      throw new Error('SSM parameter does not exist');
    };
    const h = handlers();
    const request = await startDrain(h);
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
    expect(listed).toBe(0);
    expect(lines.logs('the provider credential does not exist; no runner of this fleet can be registered there')).toHaveLength(1);
  });

  it('an observation refused for authorization fails the delete at once; a transient one waits for the next poll', async () => {
    fleet();
    const h = handlers();
    const request = await startDrain(h);
    aws.fault('DescribeInstances', ...Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)));
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(aws.count('TerminateInstances')).toBe(0);
    aws.fault('DescribeInstances', awsError('UnauthorizedOperation', 403));
    await expect(h.isComplete(request)).rejects.toThrow(/could not observe the fleet: UnauthorizedOperation/);
  });
});

describe('drain: a GitLab fleet in two groups and a project', () => {
  it('deregisters the runners of every scope its pools register in, each scope listed once', async () => {
    const gl = await startLoopbackGitLab({ groupId: 42, groups: [{ id: 43, projectIds: [21] }] });
    try {
      const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
      const glConfig = buildFleetConfig({
        prefix: PREFIX,
        gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: 42 },
        pools: [
          { name: 'linux', provider: Provider.GITLAB, labels: ['linux'], ...pool },
          { name: 'other', provider: Provider.GITLAB, labels: ['other'], gitlabGroupId: 43, ...pool },
          { name: 'app', provider: Provider.GITLAB, labels: ['app'], gitlabProjectId: 7, ...pool },
        ],
      });
      aws.parameters.set(glConfig.parameters.gitlab.token, { value: gl.accessToken, tags: {}, at: aws.now });
      const provider = new GitLabProvider({ prefix: PREFIX, gitlab: glConfig.gitlab!, pools: glConfig.pools, token: async () => gl.accessToken, sleep: async () => {} });
      for (const [name, projectId] of [['linux', 7], ['other', 21], ['app', 7]] as const) {
        const job = gl.addJob(projectId, [name]);
        await provider.createRunner({ schemaVersion: JOB_MESSAGE_SCHEMA_VERSION, provider: Provider.GITLAB, jobId: `gitlab:${job.id}`, providerJobId: String(job.id), pool: name, owner: 'g', project: 'p', projectId, labels: [], labelsResolved: true, traceId: 't', deliveryId: 'd', receivedAt: aws.now.toISOString() }, `i-0000000000000000${job.id % 10}`, name);
      }
      expect(new Set(gl.runners().map((r) => r.groupId ?? r.projectId))).toEqual(new Set([42, 43, 7]));
      const h = handlers({ loadConfig: async () => glConfig, providers: () => ({ gitlab: provider }) });
      const request = await startDrain(h);
      expect(await h.isComplete(request)).toEqual({ IsComplete: false });
      expect(gl.runners()).toEqual([]);
      const lists = gl.requests().filter((r) => r.method === 'GET' && r.path.endsWith('/runners'));
      expect(lists.map((r) => r.path).sort()).toEqual(['/groups/42/runners', '/groups/43/runners', '/projects/7/runners']);
    } finally {
      await gl.close();
    }
  });
});

describe('drain: authorization, config and truncated lists', () => {
  const failureOf = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: unknown) => e as Error,
    );

  it('a credential read refused (as by a KMS key the drain may not use) fails the delete at once, naming the credential', async () => {
    fleet();
    const h = handlers();
    const request = await startDrain(h);
    ci.listRunners = async () => {
      throw awsError('AccessDeniedException', 400);
    };
    const failure = await failureOf(h.isComplete(request));
    expect(failure).toBeInstanceOf(DrainFailedError);
    expect(failure!.message).toContain(`the drain of test cannot list its github runners: AccessDeniedException`);
    expect(failure!.message).toContain(config.parameters.github.appPrivateKey);
  });

  it('a 401 or a 403 from the CI service fails the delete at once; a 403 rate limit waits for the next poll', async () => {
    fleet();
    const h = handlers();
    const request = await startDrain(h);
    ci.listRunners = async () => {
      throw new GitHubApiError('list runners', 403, 'API rate limit exceeded for installation');
    };
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    for (const status of [401, 403]) {
      ci.listRunners = async () => {
        throw new GitHubApiError('list runners', status, 'Resource not accessible by integration');
      };
      expect((await failureOf(h.isComplete(request)))?.message).toMatch(new RegExp(`cannot list its github runners: GitHubApiError \\(GitHub list runners failed: HTTP ${status}`));
    }
  });

  it('a config that cannot be read is retried by the next poll, and fails the delete only past the deadline', async () => {
    fleet();
    let failing = true;
    const h = handlers({
      loadConfig: async () => {
        if (failing) throw awsError('ThrottlingException', 400);
        return config;
      },
    });
    const request = await startDrain(h);
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(aws.count('DescribeInstances')).toBe(0);
    failing = false;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(aws.count('TerminateInstances')).toBe(1);
    failing = true;
    clock += 1_680_000;
    expect((await failureOf(h.isComplete(request)))?.message).toMatch(/^the drain could not observe the fleet: ThrottlingException/);
  });

  it('a runner list stopped at the page cap is never read as empty: what it lists is deregistered, and the drain waits for a whole list', async () => {
    fleet();
    const truncatedLists = new Set<Provider>();
    let truncate = true;
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      const runners = await list();
      if (truncate) truncatedLists.add(Provider.GITHUB);
      return runners;
    };
    const h = handlers({ truncatedLists });
    const request = await startDrain(h);
    clock += 200_000;
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(ci.runners.size).toBe(0);
    expect(await h.isComplete(request)).toEqual({ IsComplete: false });
    expect(lines.logs('draining').at(-1)?.remaining).toEqual(["github runners beyond the list's page cap unknown (0 listed)"]);
    truncate = false;
    expect(await h.isComplete(request)).toEqual({ IsComplete: true });
  });
});

describe('drain: a Delete that is not the stack going away', () => {
  const untouched = () => expect({ order, terminated: aws.count('TerminateInstances'), deletes: aws.count('DeleteParameters'), deregistered: ci.deleted }).toEqual({ order: [], terminated: 0, deletes: 0, deregistered: [] });

  it.each([StackStatus.UPDATE_COMPLETE_CLEANUP_IN_PROGRESS, StackStatus.UPDATE_ROLLBACK_IN_PROGRESS, StackStatus.UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS])(
    'in %s (the drain replaced or removed by an update) touches nothing, logs why and completes at once',
    async (status) => {
      const { parked, running } = fleet();
      scaling.stackStatus = status;
      const h = handlers();
      const answer = await h.onEvent(event('Delete'));
      expect(answer.PhysicalResourceId).toBe('drain-1');
      expect(answer.Data).toEqual({ DrainSkipped: expect.stringContaining(status) });
      expect(await h.isComplete({ ...event('Delete'), ...answer } as IsCompleteEvent)).toEqual({ IsComplete: true });
      expect(scaling.stackReads).toEqual(['stack']);
      expect([parked.state, running.state]).toEqual(['stopped', 'running']);
      expect([...scaling.mappings.values(), ...scaling.rules.values()]).toEqual(['Enabled', 'ENABLED', 'ENABLED']);
      untouched();
      expect(lines.logs('delete without draining')[0]?.reason).toMatch(/the stack and the fleet under its prefix stay, so nothing is drained/);
    },
  );

  it('in ROLLBACK_IN_PROGRESS (a failed create deletes everything) drains', async () => {
    const { parked } = fleet();
    scaling.stackStatus = StackStatus.ROLLBACK_IN_PROGRESS;
    const h = handlers();
    const request = await startDrain(h);
    expect(request.Data?.DrainStartedAt).toBeDefined();
    expect(lines.logs('the stack goes away; draining')[0]?.reason).toMatch(/creation failed.*\(ROLLBACK_IN_PROGRESS\)/);
    await h.isComplete(request);
    expect(parked.state).toBe('terminated');
  });

  it('reads the status through AwsCaller: throttling is ridden out, then the drain runs', async () => {
    fleet();
    scaling.stackFaults.push(awsError('Throttling', 400), awsError('Throttling', 400));
    const request = await startDrain();
    expect(scaling.stackReads).toHaveLength(3);
    expect(request.Data?.DrainStartedAt).toBeDefined();
  });

  it.each([
    ['unreadable after retries', () => Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)), /could not read the status of stack stack \(ServiceUnavailable/],
    ['refused', () => [awsError('AccessDenied', 403)], /could not read the status of stack stack \(AccessDenied/],
  ])('a status %s fails the Delete with the reason and touches nothing', async (_, faults, reason) => {
    const { parked } = fleet();
    scaling.stackFaults.push(...faults());
    const failure = await handlers()
      .onEvent(event('Delete'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(failure).toBeInstanceOf(DrainFailedError);
    expect((failure as Error).message).toMatch(reason);
    expect((failure as Error).message).toMatch(/nothing was touched/);
    expect(parked.state).toBe('stopped');
    untouched();
  });

  it('a status in which no Delete is expected fails the Delete, touching nothing', async () => {
    fleet();
    scaling.stackStatus = StackStatus.UPDATE_COMPLETE;
    await expect(handlers().onEvent(event('Delete'))).rejects.toThrow(/the drain did not run: the stack is UPDATE_COMPLETE/);
    untouched();
  });
});

