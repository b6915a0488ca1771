import { GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CreateFleetCommand, DescribeInstancesCommand, EC2Client, type Instance } from '@aws-sdk/client-ec2';
import { ChangeMessageVisibilityCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { coldLaunchTags, JOB_QUEUE_REDRIVE, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { launchToken } from '../../lambdas/scale-up/cold-tokens';
import { DynamoLaunchTickets, ticketKey } from '../../lambdas/shared/launch-tickets';
import { FakeCi } from '../support/fake-ci';
import { FAULT_KINDS, injectOnce, keepClientTokens, type FaultKind } from '../support/fault-kinds';
import { INSTANCE_ARN_PREFIX, job, KEYS, Lines, PREFIX, record, sqsEvent } from '../support/fixtures';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * Issue 23, "one lost answer stalls a new template": each unknown-outcome fault kind, once, on
 * a ticketed launch of a template that is not proven yet (the pool's RunInstances, scale-up's
 * CreateFleet) and on the ticket's release (DeleteItem), against moto with real SDK clients.
 * A single fault costs at most one pool interval: by the next pool run (or the message's next
 * receive) the standbys are there and the job is served, each launched once, and no ticket is
 * held beyond the instances that launched. A single `throttle` is absorbed by AwsCaller's own
 * retries before the code under test sees it: those cases prove the absorption only. EC2's ClientToken idempotency, which moto does not
 * keep, is kept by `keepClientTokens`.
 */
const TABLE = 'job-records';
const POOL_INTERVAL_MS = 60_000;
// Short enough that a `slow` answer costs seconds, long enough for moto on a loaded machine.
const TIMEOUT_MS = scaled(4_000);
const SLOW_MS = TIMEOUT_MS + 1_000;

let config: FleetConfig;
const { moto, c } = motoForFile();
const dynamo = (): DynamoDBClient => motoDynamo(moto.endpoint);
const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: TIMEOUT_MS });
const ec2 = () => new EC2Client({ endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 });
const tickets = (client: DynamoDBClient) => new DynamoLaunchTickets(aws(), client, TABLE);
const isTicket = (input: Record<string, unknown>) => String((input.Key as { jobId?: { S?: string } })?.jobId?.S).startsWith('launch-ticket|');

async function setUp(pool: Parameters<typeof motoFleet>[1]): Promise<void> {
  await moto.reset();
  config = await motoFleet(c, pool);
  await createJobRecordTable(dynamo(), TABLE);
}

async function instances(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).filter((i) => i.State?.Name !== 'terminated');
}
const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;

/** The start tickets of the pool's template still held. */
async function heldTickets(): Promise<number> {
  const template = `${config.pools[0]!.launchTemplateId}:${config.pools[0]!.launchTemplateVersion}`;
  const slots = Array.from({ length: config.pools[0]!.warm.primeFailureLimit }, (_, k) => `start#${k + 1}`);
  const items = await Promise.all(slots.map((slot) => dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: ticketKey('linux', template, slot) } }, ConsistentRead: true }))));
  return items.filter((o) => o.Item).length;
}

describe("the pool's ticketed refill, one fault, against moto", () => {
  const poolRun = (client: EC2Client, dynamodb: DynamoDBClient, now: Date) =>
    createPoolHandler({ ...c, ec2: client, aws: aws(), loadConfig: async () => config, launchTickets: tickets(dynamodb), now: () => now, sink: () => {} })();

  it.each(FAULT_KINDS)('RunInstances %s: the next pool run has the standbys, each launched once, no ticket beyond them', async (kind: FaultKind) => {
    // One slot more than the standbys: a ticket held beyond them would show.
    await setUp({ warmSize: 3, primeFailureLimit: 4, primeBackoffCapSeconds: 3600 });
    const faulty = ec2();
    keepClientTokens(faulty);
    injectOnce(faulty, 'RunInstancesCommand', kind, { slowMs: SLOW_MS });
    const t0 = new Date();
    await poolRun(faulty, dynamo(), t0);
    await poolRun(faulty, dynamo(), new Date(t0.getTime() + POOL_INTERVAL_MS));
    const standbys = (await instances()).filter((i) => tag(i, KEYS.warmStandby));
    expect(standbys).toHaveLength(3);
    expect(await heldTickets()).toBeLessThanOrEqual(standbys.length);
  }, scaled(120_000));

  it.each(FAULT_KINDS)('DeleteItem %s after a refused launch: the next pool run launches every standby', async (kind: FaultKind) => {
    await setUp({ warmSize: 3, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 });
    // The first run's launch is refused outright (nothing launched): its tickets go back.
    const refusing = ec2();
    refusing.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'RunInstancesCommand') throw Object.assign(new Error('bad'), { name: 'InvalidParameterValue', $fault: 'client', $metadata: { httpStatusCode: 400 } });
        return next(args);
      },
      { step: 'initialize' },
    );
    const faultyDynamo = dynamo();
    injectOnce(faultyDynamo, 'DeleteItemCommand', kind, { slowMs: SLOW_MS, when: isTicket });
    const t0 = new Date();
    expect((await poolRun(refusing, faultyDynamo, t0))[0]!.launched).toBe(0);
    expect(await heldTickets()).toBe(0);
    await poolRun(ec2(), faultyDynamo, new Date(t0.getTime() + POOL_INTERVAL_MS));
    expect((await instances()).filter((i) => tag(i, KEYS.warmStandby))).toHaveLength(3);
    expect(await heldTickets()).toBe(3);
  }, scaled(120_000));
});

describe("scale-up's ticketed cold launch, faults, against moto", () => {
  /** The visibility scale-up set on a message's receive (ChangeMessageVisibility), by receipt handle. */
  const hidden = new Map<string, number>();
  const scaleUp = (client: EC2Client, dynamodb: DynamoDBClient, now: Date, lines: Lines, ssm = c.ssm) =>
    createScaleUpHandler({
      ...c,
      ssm,
      ec2: client,
      // Wait copies (a held job) go nowhere: the test asserts the job is served instead. A
      // visibility change is kept: it says when SQS redelivers the message.
      sqs: {
        send: async (command: unknown) => {
          if (command instanceof ChangeMessageVisibilityCommand) hidden.set(command.input.ReceiptHandle!, command.input.VisibilityTimeout!);
          return {};
        },
      } as unknown as SQSClient,
      aws: aws(),
      loadConfig: async () => config,
      providers: () => ({ github: new FakeCi(Provider.GITHUB, PREFIX) }),
      queueUrl: 'q',
      deadLetterQueueUrl: 'dlq',
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      launchTickets: tickets(dynamodb),
      now: () => now,
      sink: lines.sink,
    });
  /** Job 1's receive `n` (SQS redelivers a failed message under its id; each receive has a receipt handle of its own). */
  const receive = (n: number) => {
    const r = record(JSON.stringify(job(1, { receivedAt: T0.toISOString() })), { id: 'msg-1', receiveCount: n });
    return sqsEvent({ ...r, receiptHandle: `${r.receiptHandle}-${n}` });
  };
  let T0 = new Date();

  /**
   * When SQS redelivers a message failed on its receive `n` (at `at`): after the visibility
   * scale-up set on that receive, else the queue's visibility timeout, as production does.
   */
  const redeliveredAt = (n: number, at: Date) => new Date(at.getTime() + (hidden.get(`rh-msg-1-${n}`) ?? JOB_QUEUE_REDRIVE.visibilityTimeoutSeconds) * 1000);

  /** Serves job 1: receive 1 at T0, and while it fails, the next receive when SQS redelivers it (at most 3). */
  async function serve(client: EC2Client, dynamodb: DynamoDBClient, lines: Lines): Promise<number> {
    T0 = new Date();
    hidden.clear();
    let now = T0;
    for (let n = 1; n <= 3; n++) {
      if ((await scaleUp(client, dynamodb, now, lines)(receive(n))).batchItemFailures.length === 0) return n;
      now = redeliveredAt(n, now);
    }
    return Infinity;
  }

  /** Job 1 has one instance, with its runner: served, launched once; no ticket beyond it. */
  async function expectServedOnce(): Promise<void> {
    const mine = (await instances()).filter((i) => tag(i, KEYS.jobId) === 'github:1');
    expect(mine).toHaveLength(1);
    expect(tag(mine[0]!, KEYS.runnerId)).toBeDefined();
    expect(await heldTickets()).toBeLessThanOrEqual(1);
  }

  it.each(FAULT_KINDS)('CreateFleet %s: the job is served by its first receive, launched once', async (kind: FaultKind) => {
    // Two slots for one job: a second ticket held for it would show.
    await setUp({ warmSize: 0, primeFailureLimit: 2, primeBackoffCapSeconds: 3600 });
    const faulty = ec2();
    keepClientTokens(faulty);
    injectOnce(faulty, 'CreateFleetCommand', kind, { slowMs: SLOW_MS });
    expect(await serve(faulty, dynamo(), new Lines())).toBe(1);
    await expectServedOnce();
  }, scaled(120_000));

  it.each(FAULT_KINDS)('DeleteItem %s after a refused CreateFleet: the next receive launches', async (kind: FaultKind) => {
    await setUp({ warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
    let refuse = true;
    const client = ec2();
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'CreateFleetCommand' && refuse) {
          refuse = false;
          throw Object.assign(new Error('bad'), { name: 'InvalidParameterValue', $fault: 'client', $metadata: { httpStatusCode: 400 } });
        }
        return next(args);
      },
      { step: 'initialize' },
    );
    const faultyDynamo = dynamo();
    injectOnce(faultyDynamo, 'DeleteItemCommand', kind, { slowMs: SLOW_MS, when: isTicket });
    const lines = new Lines();
    T0 = new Date();
    hidden.clear();
    expect((await scaleUp(client, faultyDynamo, T0, lines)(receive(1))).batchItemFailures).toHaveLength(1);
    // The release was resent until it landed: the slot is free for any launcher, not only
    // this message's redelivery (which would take its own ticket again).
    expect(await heldTickets()).toBe(0);
    expect((await scaleUp(client, faultyDynamo, redeliveredAt(1, T0), lines)(receive(2))).batchItemFailures).toEqual([]);
    await expectServedOnce();
  }, scaled(120_000));

  it('a failure after the launch spends the ticket: the redelivery launches nothing more on it (its message does not own it any more)', async () => {
    await setUp({ warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
    // The config write after the launch is refused on every receive: each launched instance is terminated.
    const ssm = motoClients(moto.endpoint).ssm;
    ssm.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'PutParameterCommand') throw Object.assign(new Error('denied'), { name: 'AccessDeniedException', $fault: 'client', $metadata: { httpStatusCode: 400 } });
        return next(args);
      },
      { step: 'initialize' },
    );
    const client = ec2();
    let launches = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'CreateFleetCommand') launches++;
        return next(args);
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    T0 = new Date();
    hidden.clear();
    expect((await scaleUp(client, dynamo(), T0, lines, ssm)(receive(1))).batchItemFailures).toHaveLength(1);
    expect(launches).toBe(1);
    expect(await heldTickets()).toBe(1);
    // Receive 2 finds the start ticket held by another owner: its job waits (a wait copy).
    expect((await scaleUp(client, dynamo(), redeliveredAt(1, T0), lines, ssm)(receive(2))).batchItemFailures).toEqual([]);
    // One start ticket, one launch: the redelivery waits for the ticket's expiry or a proven template.
    expect(launches).toBe(1);
    expect(lines.logs('the cold launch happened before the failure: its launch ticket is spent until its expiry')).toHaveLength(1);
  }, scaled(120_000));

  it('CreateFleet unanswered on every send (nothing launched): the next receive launches on the ticket its message holds', async () => {
    await setUp({ warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
    const faulty = ec2();
    keepClientTokens(faulty);
    injectOnce(faulty, 'CreateFleetCommand', '500', { slowMs: SLOW_MS, times: 3 });
    const lines = new Lines();
    expect(await serve(faulty, dynamo(), lines)).toBe(2);
    await expectServedOnce();
    expect(lines.logs('the cold launch may have happened: its launch ticket is kept until its expiry')).toHaveLength(1);
  }, scaled(120_000));

  it('a take-over that fails after all spends the ticket its earlier receive kept: the next receive launches nothing on it', async () => {
    await setUp({ warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
    // Receive 1: every CreateFleet send unanswered and nothing launched, so its ticket is kept.
    const faulty = ec2();
    keepClientTokens(faulty);
    faulty.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'CreateFleetCommand') return next(args);
        throw Object.assign(new Error('internal'), { name: 'InternalError', $fault: 'server', $metadata: { httpStatusCode: 500 } });
      },
      { step: 'initialize', priority: 'high' },
    );
    const lines = new Lines();
    T0 = new Date();
    hidden.clear();
    expect((await scaleUp(faulty, dynamo(), T0, lines)(receive(1))).batchItemFailures).toHaveLength(1);
    expect(await heldTickets()).toBe(1);
    // Its launch lands late, under receive 1's token.
    const token = launchToken({ messageId: 'msg-1', receiveCount: 1 }, 'on-demand');
    await ec2().send(
      new CreateFleetCommand({
        Type: 'instant',
        ClientToken: token,
        LaunchTemplateConfigs: [{ LaunchTemplateSpecification: { LaunchTemplateId: config.pools[0]!.launchTemplateId, Version: config.pools[0]!.launchTemplateVersion } }],
        TargetCapacitySpecification: { TotalTargetCapacity: 1, DefaultTargetCapacityType: 'on-demand' },
        TagSpecifications: [{ ResourceType: 'instance', Tags: coldLaunchTags(KEYS, 'linux', job(1), T0, token) }],
      }),
    );
    // Receive 2 takes it over, but its config write is refused: the instance is rolled back.
    const ssm = motoClients(moto.endpoint).ssm;
    ssm.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'PutParameterCommand') throw Object.assign(new Error('denied'), { name: 'AccessDeniedException', $fault: 'client', $metadata: { httpStatusCode: 400 } });
        return next(args);
      },
      { step: 'initialize' },
    );
    const at2 = redeliveredAt(1, T0);
    expect((await scaleUp(ec2(), dynamo(), at2, lines, ssm)(receive(2))).batchItemFailures).toHaveLength(1);
    expect(lines.logs('taking over the instance an earlier receive of the message launched, instead of launching')).toHaveLength(1);
    expect(await instances()).toHaveLength(0);
    expect(lines.logs('the taken-over instance was launched before the failure: its launch ticket is spent until its expiry')).toHaveLength(1);
    // Receive 3 finds no instance of its message and the ticket not its own: it waits, launching nothing.
    const counting = ec2();
    let launches = 0;
    counting.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'CreateFleetCommand') launches++;
        return next(args);
      },
      { step: 'initialize' },
    );
    expect((await scaleUp(counting, dynamo(), redeliveredAt(2, at2), lines)(receive(3))).batchItemFailures).toEqual([]);
    expect(launches).toBe(0);
    expect(await heldTickets()).toBe(1);
  }, scaled(120_000));

  it('a CreateFleet that lands after every look-up of its receive is taken over by the next receive, past the cold gate', async () => {
    await setUp({ warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
    const faulty = ec2();
    keepClientTokens(faulty);
    // Receive 1's sends: two unanswered, the third lands after its look-up (the first of the
    // message's next receive's calls runs it): unknown for receive 1.
    let sends = 0;
    faulty.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'CreateFleetCommand' || ++sends > 3) return next(args);
        throw Object.assign(new Error('internal'), { name: 'InternalError', $fault: 'server', $metadata: { httpStatusCode: 500 } });
      },
      { step: 'initialize', priority: 'high' },
    );
    const late = ec2();
    keepClientTokens(late);
    const lines = new Lines();
    T0 = new Date();
    hidden.clear();
    expect((await scaleUp(faulty, dynamo(), T0, lines)(receive(1))).batchItemFailures).toHaveLength(1);
    expect(await instances()).toHaveLength(0);
    const sent = lines.logs('CreateFleet outcome unknown, settled by its token');
    expect(sent).toEqual([expect.objectContaining({ outcome: 'unknown', lostAnswers: 3 })]);
    // The launch lands now (as a request that reached EC2 late): receive 1's token.
    const token = launchToken({ messageId: 'msg-1', receiveCount: 1 }, 'on-demand');
    await late.send(
      new CreateFleetCommand({
        Type: 'instant',
        ClientToken: token,
        LaunchTemplateConfigs: [{ LaunchTemplateSpecification: { LaunchTemplateId: config.pools[0]!.launchTemplateId, Version: config.pools[0]!.launchTemplateVersion } }],
        TargetCapacitySpecification: { TotalTargetCapacity: 1, DefaultTargetCapacityType: 'on-demand' },
        TagSpecifications: [{ ResourceType: 'instance', Tags: coldLaunchTags(KEYS, 'linux', job(1), T0, token) }],
      }),
    );
    expect(await instances()).toHaveLength(1);
    // Receive 2, when SQS redelivers it: the gate counts that instance as a launch in flight
    // (limit 1) and would hold the job; it is taken over instead, with no launch. After the
    // visibility timeout it would be too old to take over (the end of its boot wait).
    const now = redeliveredAt(1, T0);
    expect((await scaleUp(ec2(), dynamo(), now, lines)(receive(2))).batchItemFailures).toEqual([]);
    expect(lines.logs('taking over the instance an earlier receive of the message launched, instead of launching')).toHaveLength(1);
    await expectServedOnce();
  }, scaled(120_000));
});
