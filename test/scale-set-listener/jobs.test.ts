import { CreateTagsCommand, DescribeInstancesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { CAPACITY_CALL, demandRefused, requestCapacity } from '../../lambdas/scale-set-listener/capacity';
import { createListenerHandler, LISTENER_DEADLINE_RESERVE_MS, LISTENER_DEFAULTS, LISTENER_SCHEDULE_PERIOD_MS, type ListenerDeps } from '../../lambdas/scale-set-listener/handler';
import { DEMAND_BOUND_MS, LEASE_HANDOVER_WAIT_MS } from '../../lambdas/scale-set-listener/poll';
import { SCALE_SET_LISTENER_TIMEOUT } from '../../lib/scale-set-listener';
import { jobMarks, markJobEvents } from '../../lambdas/scale-set-listener/jobs';
import type { ScaleSetLeases } from '../../lambdas/scale-set-listener/lease';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { SCALE_UP_TIMEOUT_SECONDS, type ScaleSetDemand, type ScaleSetJobEvent } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { createLogger } from '../../lambdas/shared/log';
import { FakeScaleSet } from '../support/fake-scale-set';
import { fleetConfig, KEYS, Lines } from '../support/fixtures';

const NOW = new Date('2026-12-06T12:00:00Z');
const ACTIVATED = '2026-12-06T11:50:00.000Z';
const event = (kind: 'started' | 'completed', runnerId: number): ScaleSetJobEvent => ({ kind, runnerId, runnerName: `test-i-0000000${runnerId}-abc`, jobId: `job-${runnerId}` });
const instance = (id: string, runnerId: string, tags: Record<string, string> = {}): ObservedInstance => ({
  id,
  state: 'running',
  launchTime: new Date(ACTIVATED),
  tags: new Map(Object.entries({ [KEYS.pool]: 'linux', [KEYS.activatedAt]: ACTIVATED, [KEYS.runnerId]: runnerId, ...tags })),
});

describe('jobMarks', () => {
  const idOf = (e: ScaleSetJobEvent) => String(e.runnerId);

  it('job-started marks the instance carrying the runner busy (its job report); job-completed marks it finished for the sweep', () => {
    const marks = jobMarks([event('started', 1), event('completed', 2)], [instance('i-a', '1'), instance('i-b', '2')], idOf, KEYS, NOW);
    expect(marks).toEqual({ started: ['i-a'], finished: ['i-b'], unmatched: [] });
  });

  it('a repeated event writes nothing again; a report of an earlier activation does not count', () => {
    const marks = jobMarks(
      [event('started', 1), event('completed', 2), event('started', 3)],
      [instance('i-a', '1', { [KEYS.jobStarted]: '2026-12-06T11:55:00Z' }), instance('i-b', '2', { [KEYS.idleSince]: '2026-12-06T11:58:00Z' }), instance('i-c', '3', { [KEYS.jobStarted]: '2026-12-01T00:00:00Z' })],
      idOf,
      KEYS,
      NOW,
    );
    expect(marks).toEqual({ started: ['i-c'], finished: [], unmatched: [] });
  });

  it("finds the instance by its runner-id tag, not by the instance id in the runner's name (a carried registration)", () => {
    const marks = jobMarks([event('started', 1)], [instance('i-other', '1')], idOf, KEYS, NOW);
    expect(marks.started).toEqual(['i-other']);
    expect(jobMarks([event('started', 9)], [instance('i-a', '1')], idOf, KEYS, NOW).unmatched).toHaveLength(1);
  });
});

describe('markJobEvents', () => {
  const ec2 = mockClient(EC2Client);
  beforeEach(() => ec2.reset());
  const deps = () => ({ aws: new AwsCaller({ sleep: async () => {} }), ec2: new EC2Client({}), config: fleetConfig(), keys: KEYS, now: () => NOW, log: createLogger({}, () => {}) });
  const described = (instances: { id: string; runnerId: string }[]) => ({
    Reservations: [{ Instances: instances.map((i) => ({ InstanceId: i.id, State: { Name: 'running' as const }, LaunchTime: new Date(ACTIVATED), Tags: [{ Key: KEYS.pool, Value: 'linux' }, { Key: KEYS.activatedAt, Value: ACTIVATED }, { Key: KEYS.runnerId, Value: i.runnerId }] })) }],
  });

  it("looks the instances up by the runners' REST ids and tags them, one CreateTags per mark", async () => {
    ec2.on(DescribeInstancesCommand).resolves(described([{ id: 'i-a', runnerId: '11' }, { id: 'i-b', runnerId: '12' }]));
    ec2.on(CreateTagsCommand).resolves({});
    await markJobEvents(deps(), fleetConfig().pools[0]!, [event('started', 11), event('completed', 12)]);
    const filters = ec2.commandCalls(DescribeInstancesCommand)[0]!.args[0].input.Filters!;
    expect(filters).toContainEqual({ Name: `tag:${KEYS.runnerId}`, Values: ['11', '12'] });
    const tags = ec2.commandCalls(CreateTagsCommand).map((c) => c.args[0].input);
    expect(tags).toEqual([
      { Resources: ['i-a'], Tags: [{ Key: KEYS.jobStarted, Value: NOW.toISOString() }] },
      { Resources: ['i-b'], Tags: [{ Key: KEYS.idleSince, Value: NOW.toISOString() }] },
    ]);
  });

  it('throws when a mark cannot be written: the message is then not acknowledged', async () => {
    ec2.on(DescribeInstancesCommand).resolves(described([{ id: 'i-a', runnerId: '11' }]));
    ec2.on(CreateTagsCommand).rejects(Object.assign(new Error('denied'), { name: 'UnauthorizedOperation' }));
    await expect(markJobEvents(deps(), fleetConfig().pools[0]!, [event('started', 11)])).rejects.toThrow();
  });
});

describe('requestCapacity', () => {
  const lambda = mockClient(LambdaClient);
  beforeEach(() => lambda.reset());
  const demand: ScaleSetDemand = { kind: 'scale-set-demand', pool: 'linux', scaleSetId: 7, assignedJobs: 3, traceId: 't' };
  const encode = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

  it("invokes scale-up synchronously with the demand and returns its answer", async () => {
    const startedRunners = [{ instanceId: 'i-1', startedAt: '2026-12-06T00:00:00.000Z' }, { instanceId: 'i-2', startedAt: '2026-12-06T00:00:01.000Z' }];
    lambda.on(InvokeCommand).resolves({ StatusCode: 200, Payload: encode({ observed: 1, started: 2, unserved: 0, startedRunners }) as never });
    expect(await requestCapacity(new AwsCaller({ sleep: async () => {} }), new LambdaClient({}), 'scale-up', demand)).toEqual({ observed: 1, started: 2, unserved: 0, startedRunners });
    const input = lambda.commandCalls(InvokeCommand)[0]!.args[0].input;
    expect(input.InvocationType).toBe('RequestResponse');
    expect(JSON.parse(new TextDecoder().decode(input.Payload as Uint8Array))).toEqual(demand);
  });

  it.each([
    ['a function error', { StatusCode: 200, FunctionError: 'Unhandled', Payload: encode({ errorMessage: 'boom' }) }],
    ['an answer that is not a result', { StatusCode: 200, Payload: encode({ batchItemFailures: [] }) }],
    ['started runners that are not runners', { StatusCode: 200, Payload: encode({ observed: 0, started: 1, unserved: 0, startedRunners: [{ instanceId: 'i-1' }] }) }],
  ])('throws on %s', async (_, answer) => {
    lambda.on(InvokeCommand).resolves(answer as never);
    await expect(requestCapacity(new AwsCaller({ sleep: async () => {} }), new LambdaClient({}), 'scale-up', demand)).rejects.toThrow(/did not serve/);
  });

  it("waits longer than scale-up's timeout, so an answer that does not come means scale-up has ended", () => {
    expect(CAPACITY_CALL.timeoutMs).toBeGreaterThan(SCALE_UP_TIMEOUT_SECONDS * 1000);
  });

  // Invoke's documented errors: the 4xx come before the function runs, but for 410 (EFSIOException, from a running function).
  it.each<[string, number, boolean]>([
    ['TooManyRequestsException', 429, true],
    ['ResourceNotFoundException', 404, true],
    ['AccessDeniedException', 403, true],
    ['EFSIOException', 410, false],
  ])('a demand Lambda answered %s (%i) never ran scale-up: %s', async (name, status, refused) => {
    lambda.on(InvokeCommand).rejects(Object.assign(new Error(name), { name, $fault: 'client', $metadata: { httpStatusCode: status } }));
    const error = await requestCapacity(new AwsCaller({ sleep: async () => {} }), new LambdaClient({}), 'scale-up', demand).catch((e: unknown) => e);
    expect(demandRefused(error)).toBe(refused);
  });

  it('a lost answer is not resent beside a scale-up that may still run', async () => {
    lambda.on(InvokeCommand).rejects(Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' }));
    await expect(requestCapacity(new AwsCaller({ sleep: async () => {} }), new LambdaClient({}), 'scale-up', demand)).rejects.toThrow(/outcome unknown/);
    expect(lambda.commandCalls(InvokeCommand)).toHaveLength(1);
  });
});

describe('the listener handler', () => {
  it("polls every scale-set pool at once; one pool's failure is logged and counted, the other's poll goes on", async () => {
    const base = fleetConfig();
    const pool = base.pools[0]!;
    const config = {
      ...base,
      pools: [
        { ...pool, name: 'broken', scaleSet: { name: 'broken-set', runnerGroup: 'Default' } },
        { ...pool, name: 'linux', scaleSet: { name: 'linux-set', runnerGroup: 'Default' } },
        { ...pool, name: 'webhook' },
      ],
    };
    const api = new FakeScaleSet(['linux-set']);
    api.emptyWaitMs = 1;
    api.push(api.sets.get('linux-set')!, 2);
    const held = new Map<string, string>();
    const releases: Date[] = [];
    const leases: ScaleSetLeases = {
      acquire: async (p, holder, times) => {
        if (p === 'broken') throw new Error('table unreachable');
        held.set(p, holder);
        releases.push(times.releaseAt);
        return { kind: 'acquired', lease: { pool: p, holder, expiresAt: times.expiresAt.getTime() / 1000 }, state: {} };
      },
      renew: async () => 'done',
      record: async () => 'done',
      release: async () => 'done',
    };
    const demands: ScaleSetDemand[] = [];
    const lines = new Lines();
    let clock = NOW.getTime();
    const handler = createListenerHandler({
      ec2: new EC2Client({}),
      aws: new AwsCaller({ sleep: async () => {} }),
      loadConfig: async () => config,
      scaleSetApi: () => api,
      leases,
      requestCapacity: async (d) => {
        demands.push(d);
        return { observed: 0, started: 0, unserved: 0 };
      },
      now: () => new Date((clock += 1_000)),
      sink: lines.sink,
      options: { marginMs: 120_000 },
    });
    const outcomes = await handler({}, { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 300_000 });
    expect(outcomes).toEqual({ broken: 'failed', linux: 'polled' });
    expect(held.get('linux')).toBe('req-1');
    expect(demands.every((d) => d.pool === 'linux' && d.assignedJobs === 2)).toBe(true);
    expect(lines.metric('ScaleSetListenerErrors', { Pool: 'broken', Reason: 'failed' })).toBe(1);
    expect(lines.metric('ScaleSetListenerErrors', { Pool: 'linux' })).toBe(0);
    expect(lines.metric('ScaleSetMessages', { Pool: 'linux' })).toBe(1);
    // The deadline is the invocation's end less a reserve (the release is planned a margin before it); each reading of the clock moves it a second.
    expect(releases[0]!.getTime()).toBeLessThanOrEqual(NOW.getTime() + 300_000 - LISTENER_DEADLINE_RESERVE_MS - 120_000 + 3_000);
    expect(releases[0]!.getTime()).toBeGreaterThan(NOW.getTime() + 300_000 - LISTENER_DEADLINE_RESERVE_MS - 120_000);
  });

  /** The listener over one scale-set pool "linux", with the given leases and options. */
  const listener = (leases: ScaleSetLeases, lines: Lines, now: () => Date, options?: ListenerDeps['options']) => {
    const pool = fleetConfig().pools[0]!;
    const config = { ...fleetConfig(), pools: [{ ...pool, name: 'linux', scaleSet: { name: 'linux-set', runnerGroup: 'Default' } }] };
    const api = new FakeScaleSet(['linux-set']);
    api.emptyWaitMs = 1;
    return createListenerHandler({
      ec2: new EC2Client({}),
      aws: new AwsCaller({ sleep: async () => {} }),
      loadConfig: async () => config,
      scaleSetApi: () => api,
      leases,
      requestCapacity: async () => ({ observed: 0, started: 0, unserved: 0 }),
      now,
      sink: lines.sink,
      ...(options ? { options } : {}),
    });
  };

  it("the holder's release falls on a schedule tick (within the hand-over wait of it), the deadline reserve included (review R5)", async () => {
    const releases: Date[] = [];
    const leases: ScaleSetLeases = {
      acquire: async (_p, _holder, times) => {
        releases.push(times.releaseAt);
        return { kind: 'held' };
      },
      renew: async () => 'done',
      record: async () => 'done',
      release: async () => 'done',
    };
    // The construct's timeout and the default margin; the clock stands still.
    const timeoutMs = SCALE_SET_LISTENER_TIMEOUT.toMilliseconds();
    expect(timeoutMs % LISTENER_SCHEDULE_PERIOD_MS).toBe(0);
    await listener(leases, new Lines(), () => NOW)({}, { awsRequestId: 'req-1', getRemainingTimeInMillis: () => timeoutMs });
    const offset = releases[0]!.getTime() - NOW.getTime();
    // The invocation that starts on the tick at or before the release finds it at most the hand-over wait away, and waits for it.
    expect(offset % LISTENER_SCHEDULE_PERIOD_MS).toBeLessThanOrEqual(LEASE_HANDOVER_WAIT_MS);
    // ...and the margin still holds a message in hand's demand at its bound before the deadline.
    expect(LISTENER_DEFAULTS.marginMs).toBeGreaterThanOrEqual(DEMAND_BOUND_MS);
    expect(offset).toBe(timeoutMs - LISTENER_DEADLINE_RESERVE_MS - LISTENER_DEFAULTS.marginMs);
  });

  it('a message read too late in the window for its demand is routine: logged, not counted as an error', async () => {
    const leases: ScaleSetLeases = {
      acquire: async (p, holder, times) => ({ kind: 'acquired', lease: { pool: p, holder, expiresAt: times.expiresAt.getTime() / 1000 }, state: {} }),
      renew: async () => 'done',
      record: async () => 'done',
      release: async () => 'done',
    };
    const lines = new Lines();
    let clock = NOW.getTime();
    // The window ends before a demand's bound: the session's reading is not sent.
    const outcomes = await listener(leases, lines, () => new Date((clock += 1_000)), { marginMs: 10_000, demandBoundMs: DEMAND_BOUND_MS })({}, { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 60_000 });
    expect(outcomes).toEqual({ linux: 'polled' });
    expect(lines.logs('scale-set poll ended')[0]).toMatchObject({ stopped: 'no-time-for-demand' });
    expect(lines.metric('ScaleSetListenerErrors', { Pool: 'linux' })).toBe(0);
  });
});
