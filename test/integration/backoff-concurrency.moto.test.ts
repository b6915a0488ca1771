import { type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CreateLaunchTemplateCommand, CreateTagsCommand, DescribeInstancesCommand, EC2Client, TerminateInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { GetParameterCommand } from '@aws-sdk/client-ssm';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { decodeStreak } from '../../lambdas/pool/backoff';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { Provider, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { DynamoLaunchTickets } from '../../lambdas/shared/launch-tickets';
import { seededRandom } from '../../local/fault-plan';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

/**
 * The prime back-off's bound under concurrency, against moto: a pool whose every launch fails
 * (standbys never park, cold instances tag a start failure and terminate), fed a stream of
 * jobs by several scale-up invocations at once plus the pool Lambda, on a simulated clock.
 * DescribeInstances is eventually consistent: every invocation of a step sees none of the
 * instances launched in that step (a middleware hides them), which is what lets invocations
 * that look in the same moment each see "no probe on its way". Only the launch tickets then
 * keep the bound: launches per pool per hour <= limit + 3600 / cap, and at most `limit`
 * launches of a template before its streak backs off, also after a template change.
 */
const TABLE = 'job-records';
const LIMIT = 3;
const CAP = 300;
const STEP_SECONDS = 60;
const INVOCATIONS = 4;
const BOUND = LIMIT + 3600 / CAP;

let moto: MotoServer;
let c: MotoClients;
let dynamo: DynamoDBClient;
let config: FleetConfig;

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
  dynamo = motoDynamo(moto.endpoint);
});
afterAll(async () => moto?.stop());
beforeEach(async () => {
  await moto.reset();
  config = await motoFleet(c, { warmSize: 2, primeFailureLimit: LIMIT, primeBackoffCapSeconds: CAP, primingTimeoutSeconds: 300 });
  await createJobRecordTable(dynamo, TABLE);
});

/** An EC2 client whose DescribeInstances answers leave out every instance not in `visible()`. */
function staleEc2(visible: () => ReadonlySet<string>): EC2Client {
  const ec2 = new EC2Client({ endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 });
  ec2.middlewareStack.add(
    (next, context) => async (args) => {
      const out = await next(args);
      if (context.commandName !== 'DescribeInstancesCommand') return out;
      const o = out.output as { Reservations?: { Instances?: Instance[] }[] };
      for (const r of o.Reservations ?? []) r.Instances = (r.Instances ?? []).filter((i) => visible().has(i.InstanceId!));
      return out;
    },
    { step: 'initialize' },
  );
  return ec2;
}

async function allInstances(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}

const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;

interface Run {
  /** Simulated launch times (ms), with the phase (template) each launch belongs to. */
  readonly launches: { readonly at: number; readonly phase: number }[];
  /** Per phase, the step end at which the stored streak first reached the limit. */
  readonly backingOffAt: (number | undefined)[];
  readonly held: number;
}

/**
 * `steps` steps of STEP_SECONDS: the boot of each cold instance launched earlier fails (its
 * start-failure tag, then it terminates), then INVOCATIONS scale-up invocations (one to three
 * fresh jobs each) and one pool run, all at once, on the same stale view; then the step's
 * launches are counted from moto's own answer. At `switchAt` the pool gets a new template.
 */
async function simulate(steps: number, switchAt: number, tickets: boolean, seed: number): Promise<Run> {
  const random = seededRandom(seed);
  let clock = Date.now();
  const now = () => new Date(clock);
  let visible = new Set<string>();
  const ec2 = staleEc2(() => visible);
  const aws = new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
  const launchTickets = tickets ? new DynamoLaunchTickets(aws, dynamo, TABLE) : undefined;
  let held = 0;
  const sqs = { send: async () => ((held += 1), {}) } as unknown as SQSClient;
  const lines = new Lines();
  const common = { ...c, ec2, aws, loadConfig: async () => config, now, ...(launchTickets ? { launchTickets } : {}) };
  const pool = createPoolHandler({ ...common, sink: () => {} });
  const scaleUp = createScaleUpHandler({
    ...common,
    sqs,
    providers: () => ({ github: new FakeCi(Provider.GITHUB, PREFIX) }),
    queueUrl: 'q',
    deadLetterQueueUrl: 'dlq',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    random,
    sink: lines.sink,
  });
  const seen = new Set<string>();
  const launches: { at: number; phase: number }[] = [];
  const backingOffAt: (number | undefined)[] = [undefined, undefined];
  let phase = 0;
  let n = 0;
  for (let step = 0; step < steps; step++) {
    if (step === switchAt) {
      const lt = await c.ec2.send(new CreateLaunchTemplateCommand({ LaunchTemplateName: `runners-next-${seed}`, LaunchTemplateData: { ImageId: 'ami-12c6146b', InstanceType: 't3.micro' } }));
      config = { ...config, pools: [{ ...config.pools[0]!, launchTemplateId: lt.LaunchTemplate!.LaunchTemplateId! }] };
      phase = 1;
    }
    // 1. Every cold boot fails before its runner starts, as the boot script reports it.
    const failing = (await allInstances()).filter((i) => !tag(i, KEYS.warmStandby) && i.State?.Name === 'running' && !tag(i, KEYS.startFailure));
    if (failing.length) {
      const ids = failing.map((i) => i.InstanceId!);
      await c.ec2.send(new CreateTagsCommand({ Resources: ids, Tags: [{ Key: KEYS.startFailure, Value: 'RUN failed: the runner package: refused' }] }));
      await c.ec2.send(new TerminateInstancesCommand({ InstanceIds: ids }));
    }
    // 2. The invocations and the pool run, at once, on the same view.
    const batches = Array.from({ length: INVOCATIONS }, () => Array.from({ length: 1 + Math.floor(random() * 3) }, () => job(++n, { receivedAt: now().toISOString() })));
    await Promise.all([pool(), ...batches.map((b) => scaleUp(jobEvent(b)))]);
    // 3. What launched, from moto's own answer; from the next step on, everyone sees it.
    const all = await allInstances();
    for (const i of all) {
      if (seen.has(i.InstanceId!)) continue;
      seen.add(i.InstanceId!);
      launches.push({ at: clock, phase });
    }
    visible = new Set(all.map((i) => i.InstanceId!));
    // Broken already: stop here (a run without the tickets launches more each step, and slower).
    if (mostInAnHour(launches.map((l) => l.at)) > BOUND) break;
    const streak = decodeStreak((await c.ssm.send(new GetParameterCommand({ Name: ssmPaths(PREFIX).primeState('linux') })).catch(() => undefined))?.Parameter?.Value);
    if (backingOffAt[phase] === undefined && streak && streak.template.startsWith(`${config.pools[0]!.launchTemplateId}:`) && streak.failures >= LIMIT) backingOffAt[phase] = clock;
    clock += STEP_SECONDS * 1000;
  }
  return { launches, backingOffAt, held };
}

/** The most launches in any hour: every window [t, t + 3600 s) that starts at a launch. */
function mostInAnHour(times: readonly number[]): number {
  return Math.max(0, ...times.map((t) => times.filter((u) => u >= t && u < t + 3_600_000).length));
}

describe('the prime back-off under concurrent scale-up invocations and pool runs, against moto', () => {
  it(`keeps launches per hour at most limit + 3600 / cap (${BOUND}) and at most the limit before the streak backs off, also for a new template`, async () => {
    const steps = 200;
    const run = await simulate(steps, 100, true, 7);
    const times = run.launches.map((l) => l.at);
    expect(mostInAnHour(times)).toBeLessThanOrEqual(BOUND);
    for (const phase of [0, 1]) {
      const until = run.backingOffAt[phase];
      expect(until).toBeDefined();
      expect(run.launches.filter((l) => l.phase === phase && l.at <= until!).length).toBeLessThanOrEqual(LIMIT);
      // It keeps probing while it backs off (it resumes by itself once one succeeds).
      expect(run.launches.filter((l) => l.phase === phase && l.at > until!).length).toBeGreaterThan(0);
    }
    // The jobs were held as wait copies, not launched.
    expect(run.held).toBeGreaterThan(steps);
  }, scaled(900_000));

  it('without the tickets, the same run breaks the bound (the test can fail)', async () => {
    const run = await simulate(200, 1000, false, 7);
    expect(mostInAnHour(run.launches.map((l) => l.at))).toBeGreaterThan(BOUND);
  }, scaled(300_000));
});
