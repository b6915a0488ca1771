import { ScanCommand } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand, TerminateInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { GetParametersByPathCommand, PutParameterCommand, type Parameter } from '@aws-sdk/client-ssm';
import { describe, expect, it } from 'vitest';
import { WARM_DEFAULTS } from '../../lambdas/scale-up/activate';
import type { ScaleUpOptions } from '../../lambdas/scale-up/handler';
import { createScaleSetDemandHandler } from '../../lambdas/scale-up/scale-set-handler';
import { scaleSetSlotReserveMs } from '../../lambdas/scale-up/scale-set-serve';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { DynamoLaunchTickets } from '../../lambdas/shared/launch-tickets';
import { decodeRunnerConfig, instanceIdOfRunnerName, ssmPaths, Provider, type FleetConfig, type ScaleSetDemand } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { FakeScaleSet } from '../support/fake-scale-set';
import { INSTANCE_ARN_PREFIX, KEYS, Lines, PREFIX } from '../support/fixtures';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * Scale-up's demand path against moto: the shortfall served warm then cold with JIT configs
 * of the scale set, and recomputed from the instances on every demand, so a demand handled
 * twice (a message delivered again, a crash before its acknowledgement) starts no second runner.
 */

const paths = ssmPaths(PREFIX);
let config: FleetConfig;
const { moto, c } = motoForFile(async (m) => {
  const base = await motoFleet(m.c, { maxRunners: 10 });
  config = { ...base, pools: [{ ...base.pools[0]!, scaleSet: { name: 'linux-set', runnerGroup: 'Default' } }] };
});

function demandHandler(api: FakeScaleSet, ci: FakeCi, clients: MotoClients = c, lines = new Lines(), slotsPerDemand?: number, options?: Partial<ScaleUpOptions>, launchTickets?: DynamoLaunchTickets) {
  return createScaleSetDemandHandler({
    ...(slotsPerDemand === undefined ? {} : { slotsPerDemand }),
    ...(options === undefined ? {} : { options }),
    ...(launchTickets === undefined ? {} : { launchTickets }),
    ...clients,
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) }),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: 'unused',
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    scaleSetApi: () => api,
    sink: lines.sink,
  });
}

const demand = (assignedJobs: number, traceId: string): ScaleSetDemand => ({ kind: 'scale-set-demand', pool: 'linux', scaleSetId: 7, assignedJobs, traceId });

async function serving(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}
const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;

async function parameters(): Promise<Parameter[]> {
  const out = await c.ssm.send(new GetParametersByPathCommand({ Path: paths.runnerConfigRoot, WithDecryption: true }));
  return out.Parameters ?? [];
}

describe("scale-up's scale-set demand path, against moto", () => {
  it('serves the shortfall warm first, then cold, each runner with a JIT config of the scale set', async () => {
    const parked = await parkInMoto(c, config, 2);
    const api = new FakeScaleSet();
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const result = await demandHandler(api, ci)(demand(3, 'trace-a'));
    expect(result).toMatchObject({ observed: 0, started: 3, unserved: 0 });
    const up = await serving();
    expect(up).toHaveLength(3);
    expect(up.filter((i) => parked.includes(i.InstanceId!))).toHaveLength(2);
    // No REST registration: every runner's config is one the scale set generated, named as the fleet names runners.
    expect(ci.created).toBe(0);
    expect(api.jitNames).toHaveLength(3);
    const params = new Map((await parameters()).map((p) => [p.Name!, p.Value!]));
    for (const i of up) {
      const config_ = decodeRunnerConfig(params.get(paths.runnerConfig(i.InstanceId!))!);
      expect(config_).toMatchObject({ provider: Provider.GITHUB, instanceId: i.InstanceId });
      const name = (config_ as { jitConfig: string }).jitConfig.replace(/^jit-/, '');
      expect(instanceIdOfRunnerName(PREFIX, name)).toBe(i.InstanceId);
      // The runner id as GitHub's REST list spells an organisation runner of the connection's organisation: the sweep matches it.
      expect(tag(i, KEYS.runnerId)).toMatch(/^\d+$/);
      expect(tag(i, KEYS.jobId)).toMatch(/^github:scale-set-7-trace-a-\d$/);
    }
  });

  it('a demand handled twice (a message delivered again) starts no second runner', async () => {
    await parkInMoto(c, config, 1);
    const api = new FakeScaleSet();
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const run = demandHandler(api, ci);
    expect(await run(demand(2, 'trace-a'))).toMatchObject({ observed: 0, started: 2, unserved: 0 });
    // The same reading again (a redelivery: another trace id), then a lower one (jobs finished).
    expect(await run(demand(2, 'trace-b'))).toMatchObject({ observed: 2, started: 0, unserved: 0 });
    expect(await run(demand(1, 'trace-c'))).toMatchObject({ observed: 2, started: 0, unserved: 0 });
    expect(await serving()).toHaveLength(2);
    expect(api.jitNames).toHaveLength(2);
    // A higher reading starts only the difference.
    expect(await run(demand(3, 'trace-d'))).toMatchObject({ observed: 2, started: 1, unserved: 0 });
    expect(await serving()).toHaveLength(3);
  });

  it("the pool's bound holds: runners past maxRunners are not wanted", async () => {
    await parkInMoto(c, config, 12);
    const api = new FakeScaleSet();
    const run = demandHandler(api, new FakeCi(Provider.GITHUB, PREFIX));
    expect(await run(demand(25, 'trace-a'))).toMatchObject({ observed: 0, started: 10, unserved: 0 });
    expect(await run(demand(25, 'trace-b'))).toMatchObject({ observed: 10, started: 0, unserved: 0 });
  });

  it('a shortfall larger than a demand serves is served over several demands, the rest answered unserved', async () => {
    await parkInMoto(c, config, 6);
    const run = demandHandler(new FakeScaleSet(), new FakeCi(Provider.GITHUB, PREFIX), c, new Lines(), 2);
    // Three times the cap: each demand starts the cap and answers the rest, the next counting what the last started.
    const first = await run(demand(6, 'trace-a'));
    expect(first).toMatchObject({ started: 2, unserved: 4 });
    const second = await run({ ...demand(6, 'trace-b'), recentlyStarted: first.startedRunners });
    expect(second).toMatchObject({ started: 2, unserved: 2 });
    const third = await run({ ...demand(6, 'trace-c'), recentlyStarted: [...first.startedRunners!, ...second.startedRunners!] });
    expect(third).toMatchObject({ started: 2, unserved: 0 });
    expect(await serving()).toHaveLength(6);
  });

  it("what the prime back-off holds back is reported unserved, for the next demand", async () => {
    // No parked instance and an unproven template: the back-off lets a few cold launches through.
    const lines = new Lines();
    const result = await demandHandler(new FakeScaleSet(), new FakeCi(Provider.GITHUB, PREFIX), c, lines)(demand(5, 'trace-a'));
    expect(result.started).toBeGreaterThan(0);
    expect(result.started + result.unserved).toBe(5);
    expect(result.unserved).toBeGreaterThan(0);
    expect(lines.logs('prime back-off: holding cold launches back')).toHaveLength(1);
    expect(await serving()).toHaveLength(result.started);
  });

  it('a failed warm activation rolls back (config deleted, the JIT runner deregistered by its REST id) and goes cold', async () => {
    const [parkedId] = await parkInMoto(c, config, 1);
    const faulty = motoClients(moto.endpoint);
    faulty.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const tags = (args.input as { Tags?: { Key?: string }[] }).Tags ?? [];
        // The activation's tags are refused.
        if (context.commandName === 'CreateTagsCommand' && tags.some((t) => t.Key === KEYS.activatedAt)) throw Object.assign(new Error('refused'), { name: 'UnauthorizedOperation' });
        return next(args);
      },
      { step: 'initialize' },
    );
    const api = new FakeScaleSet();
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const result = await demandHandler(api, ci, faulty)(demand(1, 'trace-a'));
    expect(result).toMatchObject({ observed: 0, started: 1, unserved: 0 });
    const up = await serving();
    expect(up).toHaveLength(1);
    expect(up[0]!.InstanceId).not.toBe(parkedId);
    // The parked instance's registration went with its rollback; its config parameter too.
    expect(ci.deleted).toEqual(['1001']);
    expect((await parameters()).map((p) => p.Name)).toEqual([paths.runnerConfig(up[0]!.InstanceId!)]);
  });

  it("back-to-back demands: the runners the first started count in the second though EC2's read omits them (reads lag writes)", async () => {
    await parkInMoto(c, config, 1);
    const api = new FakeScaleSet();
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    // A DescribeInstances that does not show the instances started so far (eventual consistency).
    const hidden = new Set<string>();
    const lagging = motoClients(moto.endpoint);
    lagging.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        if (context.commandName !== 'DescribeInstancesCommand') return out;
        const body = out.output as { Reservations?: { Instances?: Instance[] }[] };
        for (const r of body.Reservations ?? []) r.Instances = (r.Instances ?? []).filter((i) => !hidden.has(i.InstanceId!));
        return out;
      },
      { step: 'initialize' },
    );
    const run = demandHandler(api, ci, lagging);
    const first = await run(demand(2, 'trace-a'));
    expect(first).toMatchObject({ observed: 0, started: 2, unserved: 0 });
    expect(first.startedRunners?.map((r) => r.instanceId).sort()).toEqual((await serving()).map((i) => i.InstanceId!).sort());
    for (const r of first.startedRunners ?? []) hidden.add(r.instanceId);
    // The same reading again, carrying what the first started: nothing more starts.
    const second = await run({ ...demand(2, 'trace-b'), recentlyStarted: first.startedRunners! });
    expect(second).toMatchObject({ observed: 2, started: 0, unserved: 0 });
    expect(await serving()).toHaveLength(2);
    expect(api.jitNames).toHaveLength(2);
    // Without them, the lagging read would have started two more: the failure this guards against.
    const blind = await run(demand(2, 'trace-c'));
    expect(blind.started).toBe(2);
  });

  it('a runner a recent demand started that has since ended (its instance terminated) holds no place: the next assigned job gets a runner at once', async () => {
    await parkInMoto(c, config, 1);
    const api = new FakeScaleSet();
    const run = demandHandler(api, new FakeCi(Provider.GITHUB, PREFIX));
    const first = await run(demand(2, 'trace-a'));
    expect(first).toMatchObject({ observed: 0, started: 2, unserved: 0 });
    // One runner's job completed and its ephemeral instance ended; a new job was assigned: still 2.
    const [ended, live] = first.startedRunners!;
    await c.ec2.send(new TerminateInstancesCommand({ InstanceIds: [ended!.instanceId] }));
    const second = await run({ ...demand(2, 'trace-b'), recentlyStarted: first.startedRunners! });
    // Counted as a runner (the live observation omits terminated instances) it would hold the new job's place for SCALE_SET_RECENT_START_MS.
    expect(second).toMatchObject({ observed: 1, started: 1, unserved: 0 });
    expect((await serving()).map((i) => i.InstanceId)).toContain(live!.instanceId);
    expect(await serving()).toHaveLength(2);
  });

  it("a failed lookup of the recently started runners the observation omits does not fail the demand: they count (review R6a)", async () => {
    const faulty = motoClients(moto.endpoint);
    faulty.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const filters = (args.input as { Filters?: { Name?: string }[] }).Filters ?? [];
        // The by-id lookup in every state is refused; the live observation answers.
        if (context.commandName === 'DescribeInstancesCommand' && filters.some((f) => f.Name === 'instance-id')) throw Object.assign(new Error('refused'), { name: 'UnauthorizedOperation' });
        return next(args);
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    const api = new FakeScaleSet();
    const run = demandHandler(api, new FakeCi(Provider.GITHUB, PREFIX), faulty, lines);
    const recentlyStarted = [{ instanceId: 'i-0123456789abcdef0', startedAt: new Date().toISOString() }];
    // The one runner started recently (unseen) holds the one assigned job's place; a second job gets a runner.
    expect(await run({ ...demand(1, 'trace-a'), recentlyStarted })).toMatchObject({ observed: 1, started: 0, unserved: 0 });
    expect(await run({ ...demand(2, 'trace-b'), recentlyStarted })).toMatchObject({ observed: 1, started: 1, unserved: 0 });
    expect(lines.logs('looking up the recently started runners the observation omits failed: they count as runners')).toHaveLength(2);
  });

  describe("the invocation's time budget: no slot starts with less than one slot's reserve left", () => {
    const reserve = scaleSetSlotReserveMs(10_000);
    // Scale-up's whole timeout until the first JIT config is generated (the first slot has started), then just under the reserve.
    const runsLowAfterFirstSlot = (api: FakeScaleSet) => ({ getRemainingTimeInMillis: () => (api.jitNames.length === 0 ? 60_000 : reserve - 1) });

    it('warm: the second lane claims nothing; its slot is answered unserved', async () => {
      await parkInMoto(c, config, 2);
      const api = new FakeScaleSet();
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      const lines = new Lines();
      // One lane at a time, so the second slot starts after the first.
      const run = demandHandler(api, ci, c, lines, undefined, { warm: { ...WARM_DEFAULTS, concurrency: 1 } });
      const result = await run(demand(2, 'trace-a'), runsLowAfterFirstSlot(api));
      expect(result).toMatchObject({ observed: 0, started: 1, unserved: 1 });
      expect(await serving()).toHaveLength(1);
      // Nothing half-done: one registration, one config, no cold launch for the slot not started.
      expect(api.jitNames).toHaveLength(1);
      expect(await parameters()).toHaveLength(1);
      expect(lines.logs('too little time left for another slot: the rest goes to the next demand')).toHaveLength(1);
      // The next demand, with time, serves the rest.
      const next = await run({ ...demand(2, 'trace-b'), recentlyStarted: result.startedRunners! }, { getRemainingTimeInMillis: () => 60_000 });
      expect(next).toMatchObject({ observed: 1, started: 1, unserved: 0 });
    });

    it('warm, a refused claim then no time: the registration the claim carried is deleted, nothing is left (review R6a)', async () => {
      await parkInMoto(c, config, 2);
      // Another invocation claims the lane's first candidate just before it: its config parameter is there, the claim is refused.
      const foreign: string[] = [];
      const contended = motoClients(moto.endpoint);
      contended.ssm.middlewareStack.add(
        (next, context) => async (args) => {
          const name = (args.input as { Name?: string }).Name ?? '';
          if (context.commandName === 'PutParameterCommand' && name.startsWith(paths.runnerConfigRoot) && foreign.length === 0) {
            foreign.push(name);
            await c.ssm.send(new PutParameterCommand({ Name: name, Value: 'another invocation', Type: 'SecureString' }));
          }
          return next(args);
        },
        { step: 'initialize' },
      );
      const api = new FakeScaleSet();
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      const run = demandHandler(api, ci, contended, new Lines(), undefined, { warm: { ...WARM_DEFAULTS, concurrency: 1 } });
      // The clock runs low after the first registration: the lane's next pick ends out-of-time, carrying that registration.
      const result = await run(demand(1, 'trace-a'), runsLowAfterFirstSlot(api));
      expect(result).toMatchObject({ observed: 0, started: 0, unserved: 1 });
      expect(await serving()).toHaveLength(0);
      // One registration, deleted (by its REST id); no config of ours left, only the other invocation's.
      expect(api.jitNames).toHaveLength(1);
      expect(ci.deleted).toEqual(['1001']);
      expect((await parameters()).map((p) => p.Name)).toEqual(foreign);
    });

    it('cold: the second launch is not started; its slot is answered unserved', async () => {
      const api = new FakeScaleSet();
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      const run = demandHandler(api, ci, c, new Lines(), undefined, { coldConcurrency: 1 });
      const result = await run(demand(2, 'trace-a'), runsLowAfterFirstSlot(api));
      expect(result).toMatchObject({ observed: 0, started: 1, unserved: 1 });
      expect(await serving()).toHaveLength(1);
      expect(api.jitNames).toHaveLength(1);
      expect(await parameters()).toHaveLength(1);
    });

    it("cold, ticketed (a template not proven yet): the launch not started gives its ticket back", async () => {
      const dynamo = motoDynamo(moto.endpoint);
      await createJobRecordTable(dynamo, 'job-records');
      const tickets = new DynamoLaunchTickets(new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) }), dynamo, 'job-records');
      const api = new FakeScaleSet();
      const run = demandHandler(api, new FakeCi(Provider.GITHUB, PREFIX), c, new Lines(), undefined, { coldConcurrency: 1 }, tickets);
      const result = await run(demand(2, 'trace-a'), runsLowAfterFirstSlot(api));
      expect(result).toMatchObject({ started: 1, unserved: 1 });
      // One ticket for the one launch; the other slot's was released, so the next demand can launch on it.
      const held = await dynamo.send(new ScanCommand({ TableName: 'job-records' }));
      expect((held.Items ?? []).filter((i) => i.jobId?.S?.startsWith('launch-ticket|'))).toHaveLength(1);
    });

    it('without a Lambda context (a test, the local run) no budget applies', async () => {
      await parkInMoto(c, config, 2);
      const api = new FakeScaleSet();
      const result = await demandHandler(api, new FakeCi(Provider.GITHUB, PREFIX), c, new Lines(), undefined, { warm: { ...WARM_DEFAULTS, concurrency: 1 } })(demand(2, 'trace-a'));
      expect(result).toMatchObject({ started: 2, unserved: 0 });
    });
  });
});
