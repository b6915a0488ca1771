import { DeleteItemCommand, GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { beforeEach, describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_ATTRIBUTES, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { DynamoLaunchTickets, ticketKey } from '../../lambdas/shared/launch-tickets';
import { LAUNCH_SENDS } from '../../lambdas/shared/launch-outcome';
import type { TicketNeed } from '../../lambdas/pool/backoff';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { losingFirstAnswer } from '../support/lose-answer';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, type MotoClients } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const TABLE = 'job-records';
const NOW = new Date();
const need: TicketNeed = { template: 'lt-1:1', slots: ['probe#2026-12-02T08:00:00.000Z'], holdSeconds: 3600 };
const start: TicketNeed = { template: 'lt-1:1', slots: ['start#1', 'start#2', 'start#3'], holdSeconds: 3600 };

const { moto, c } = motoForFile(async () => createJobRecordTable(dynamo(), TABLE));
const dynamo = (): DynamoDBClient => motoDynamo(moto.endpoint);
const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
const isTicket = (input: Record<string, unknown>) => String((input.Key as { jobId?: { S?: string } })?.jobId?.S).startsWith('launch-ticket|');

async function owner(slot: string): Promise<string | undefined> {
  const out = await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: ticketKey('linux', 'lt-1:1', slot) } }, ConsistentRead: true }));
  return out.Item?.ticketOwner?.S;
}

describe('launch tickets against moto', () => {
  it('go to one taker only; the others lose, however many race', async () => {
    const takers = Array.from({ length: 8 }, () => new DynamoLaunchTickets(aws(), dynamo(), TABLE));
    const probes = await Promise.all(takers.map((t) => t.take('linux', need, 1, NOW)));
    expect(probes.flatMap((o) => o.taken)).toHaveLength(1);
    const starts = await Promise.all(takers.map((t) => t.take('linux', start, 3, NOW)));
    expect(starts.flatMap((o) => o.taken)).toHaveLength(3);
    expect(starts.flatMap((o) => o.errors)).toEqual([]);
  });

  it('a put that landed but whose answer was lost is read back as won, without a second write', async () => {
    const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand');
    const out = await new DynamoLaunchTickets(aws(), client, TABLE).take('linux', need, 1, NOW);
    expect(out.taken).toHaveLength(1);
    expect(client.calls()).toBe(1);
    expect(await owner(need.slots[0]!)).toBe(out.taken[0]!.owner);
  });

  it('a put that did not land is read back as absent and sent once more', async () => {
    const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { lands: false });
    const out = await new DynamoLaunchTickets(aws(), client, TABLE).take('linux', need, 1, NOW);
    expect(out.taken).toHaveLength(1);
    expect(client.calls()).toBe(2);
  });

  it("a put refused because another launcher took the slot first, its answer lost, is read back as lost (the other's token)", async () => {
    const other = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    let theirs = '';
    const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { before: async () => void (theirs = (await other.take('linux', need, 1, NOW)).taken[0]!.owner) });
    const out = await new DynamoLaunchTickets(aws(), client, TABLE).take('linux', need, 1, NOW);
    expect(out).toEqual({ taken: [], errors: [] });
    expect(await owner(need.slots[0]!)).toBe(theirs);
  });

  it('frees an expired ticket for the next taker, and a release removes only its own ticket', async () => {
    const tickets = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    const [first] = (await tickets.take('linux', need, 1, NOW)).taken;
    expect((await tickets.take('linux', need, 1, NOW)).taken).toHaveLength(0);
    const later = new Date(NOW.getTime() + (need.holdSeconds + 1) * 1000);
    const [second] = (await tickets.take('linux', need, 1, later)).taken;
    expect(second).toBeDefined();
    // The first taker's release (its ticket expired and was taken over) leaves the second's.
    expect((await tickets.release(first!)).released).toBe(false);
    expect(await owner(need.slots[0]!)).toBe(second!.owner);
    expect((await tickets.release(second!)).released).toBe(true);
    expect(await owner(need.slots[0]!)).toBeUndefined();
  });
});

describe('owned tickets against moto: a redelivered job, a spent launch, a lost release', () => {
  it("a job whose live ticket another job of the batch runs into gets that ticket back, whatever its place in the batch", async () => {
    const tickets = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    // B's earlier receive holds start#1 (its launch never answered); the pool holds start#2.
    expect((await tickets.take('linux', start, 1, NOW, ['message:B'])).taken.map((t) => t.owner)).toEqual(['message:B']);
    await tickets.take('linux', { ...start, slots: ['start#2'] }, 1, NOW);
    const out = await tickets.take('linux', start, 2, NOW, ['message:A', 'message:B']);
    expect(Object.fromEntries(out.taken.map((t) => [t.owner, t.key]))).toEqual({
      'message:B': ticketKey('linux', 'lt-1:1', 'start#1'),
      'message:A': ticketKey('linux', 'lt-1:1', 'start#3'),
    });
    expect(out.errors).toEqual([]);
  });

  it('a redelivered job whose ticket is in a later slot than a free one gets its own back and takes no second slot', async () => {
    const tickets = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    // A's earlier receive holds start#2; start#1 was the pool's, given back since.
    const [pools] = (await tickets.take('linux', start, 1, NOW)).taken;
    await tickets.take('linux', { ...start, slots: ['start#2'] }, 1, NOW, ['message:A']);
    expect(await tickets.release(pools!)).toEqual({ released: true });
    const later = new Date(NOW.getTime() + 600_000);
    const out = await tickets.take('linux', start, 2, later, ['message:A', 'message:B']);
    expect(Object.fromEntries(out.taken.map((t) => [t.owner, t.key]))).toEqual({
      'message:A': ticketKey('linux', 'lt-1:1', 'start#2'),
      'message:B': ticketKey('linux', 'lt-1:1', 'start#1'),
    });
    expect(await Promise.all(start.slots.map(owner))).toEqual(['message:B', 'message:A', undefined]);
    // A's ticket is held afresh: its expiry counts from this take, as its new launch's does.
    expect(out.taken.find((t) => t.owner === 'message:A')!.expiresAt).toBe(new Date((Math.floor(later.getTime() / 1000) + start.holdSeconds) * 1000).toISOString());
  });

  it('a slot that cannot be read may be a redelivered job\'s: that job takes no new slot that time; a first receive does', async () => {
    const client = dynamo();
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') throw Object.assign(new Error('denied'), { name: 'AccessDeniedException', $fault: 'client', $metadata: { httpStatusCode: 400 } });
        return next(args);
      },
      { step: 'initialize' },
    );
    const out = await new DynamoLaunchTickets(aws(), client, TABLE).take('linux', { ...start, slots: ['start#1'] }, 1, NOW, ['message:D']);
    expect(out.taken).toEqual([]);
    expect(out.errors).toEqual(['start#1: read failed: AccessDeniedException']);
    expect(await Promise.all(start.slots.map(owner))).toEqual([undefined, undefined, undefined]);
    // A first receive's message cannot hold a ticket: nothing is read for it, and it takes its slot.
    const first = await new DynamoLaunchTickets(aws(), client, TABLE).take('linux', { ...start, slots: ['start#1'] }, 1, NOW, ['message:D'], []);
    expect(first).toEqual({ taken: [expect.objectContaining({ owner: 'message:D' })], errors: [] });
  });

  it('spendHeld spends the live tickets its owner holds, and no other', async () => {
    const tickets = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    await tickets.take('linux', start, 1, NOW, ['message:E']);
    await tickets.take('linux', start, 1, NOW, ['message:F']);
    const out = await tickets.spendHeld('linux', start, 'message:E', NOW);
    expect(out).toEqual({ spent: [expect.objectContaining({ key: ticketKey('linux', 'lt-1:1', 'start#1'), owner: 'message:E' })], errors: [] });
    const owners = await Promise.all(start.slots.map(owner));
    expect(owners[0]).toEqual(expect.any(String));
    expect(owners[0]).not.toBe('message:E');
    expect(owners.slice(1)).toEqual(['message:F', undefined]);
  });

  it('a spend whose answer was lost is read back: landed, it is done without a resend; not landed, it is sent again', async () => {
    for (const lands of [true, false]) {
      const [ticket] = (await new DynamoLaunchTickets(aws(), dynamo(), TABLE).take('linux', need, 1, NOW, ['message:G'])).taken;
      const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { when: isTicket, lands });
      expect(await new DynamoLaunchTickets(aws(), client, TABLE).spend(ticket!)).toEqual({ spent: true });
      expect(client.calls()).toBe(lands ? 1 : 2);
      expect(await owner(need.slots[0]!)).toEqual(expect.any(String));
      expect(await owner(need.slots[0]!)).not.toBe('message:G');
      // Given back for the next round of the loop (a spent ticket is nobody's to release).
      await dynamo().send(new DeleteItemCommand({ TableName: TABLE, Key: { jobId: { S: ticketKey('linux', 'lt-1:1', need.slots[0]!) } } }));
    }
  });

  it('a spent ticket stays held until its expiry, but not under its message: the redelivery cannot take it again', async () => {
    const tickets = new DynamoLaunchTickets(aws(), dynamo(), TABLE);
    const [ticket] = (await tickets.take('linux', need, 1, NOW, ['message:C'])).taken;
    expect(await tickets.spend(ticket!)).toEqual({ spent: true });
    expect(await owner(need.slots[0]!)).not.toBe('message:C');
    expect((await tickets.take('linux', need, 1, NOW, ['message:C'])).taken).toEqual([]);
  });

  it('a release whose answer was lost is read back: landed, it is done without a resend; not landed, it is sent again', async () => {
    for (const lands of [true, false]) {
      const [ticket] = (await new DynamoLaunchTickets(aws(), dynamo(), TABLE).take('linux', need, 1, NOW)).taken;
      const client = losingFirstAnswer(dynamo(), 'DeleteItemCommand', { when: isTicket, lands });
      expect(await new DynamoLaunchTickets(aws(), client, TABLE).release(ticket!)).toEqual({ released: true });
      expect(client.calls()).toBe(lands ? 1 : 2);
      expect(await owner(need.slots[0]!)).toBeUndefined();
    }
  });
});

describe("scale-up's cold launch with a lost ticket answer, against moto", () => {
  let config: FleetConfig;
  beforeEach(async () => {
    config = await motoFleet(c, { warmSize: 0, primeFailureLimit: 1, primeBackoffCapSeconds: 3600 });
  });
  const coldInstances = async (): Promise<Instance[]> =>
    ((await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }] }))).Reservations ?? []).flatMap((r) => r.Instances ?? []);
  const handler = (client: DynamoDBClient, lines: Lines, ec2 = c.ec2) =>
    createScaleUpHandler({
      ...c,
      ec2,
      sqs: { send: async () => ({}) } as never,
      aws: aws(),
      loadConfig: async () => config,
      providers: () => ({ github: new FakeCi(Provider.GITHUB, PREFIX) }),
      queueUrl: 'q',
      deadLetterQueueUrl: 'dlq',
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      launchTickets: new DynamoLaunchTickets(aws(), client, TABLE),
      sink: lines.sink,
    });

  it('an unproven template (limit 1): the ticket that landed unheard is won, and exactly one instance launches for two jobs', async () => {
    const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { when: isTicket });
    const lines = new Lines();
    expect((await handler(client, lines)(jobEvent([job(1), job(2)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(1);
    expect(client.calls()).toBe(1);
    // A second invocation that does not see that instance yet (DescribeInstances is eventually
    // consistent) finds the only start ticket taken: its job waits, nothing launches.
    const blind = motoClients(moto.endpoint).ec2;
    blind.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        if (context.commandName === 'DescribeInstancesCommand') (out.output as { Reservations?: unknown[] }).Reservations = [];
        return out;
      },
      { step: 'initialize' },
    );
    expect((await handler(dynamo(), lines, blind)(jobEvent([job(3)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(1);
    expect(lines.logs(/launch tickets taken elsewhere/)).toHaveLength(1);
  });

  it('gives the ticket back when EC2 refused the cold launch outright, so the next job may launch', async () => {
    const refusing = motoClients(moto.endpoint).ec2;
    refusing.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'CreateFleetCommand') throw Object.assign(new Error('bad'), { name: 'InvalidParameterValue', $metadata: { httpStatusCode: 400 } });
        return next(args);
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    expect((await handler(dynamo(), lines, refusing)(jobEvent([job(1)]))).batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    const slot = await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: ticketKey('linux', `${config.pools[0]!.launchTemplateId}:${config.pools[0]!.launchTemplateVersion}`, 'start#1') } }, ConsistentRead: true }));
    expect(slot.Item).toBeUndefined();
    expect((await handler(dynamo(), lines)(jobEvent([job(2)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(1);
  });

  it('keeps the ticket when CreateFleet launched but its answer was lost and every resend was throttled: no second launch on it', async () => {
    // The first CreateFleet lands and answers 500; the look-ups by its token see nothing yet
    // (DescribeInstances lags); each resend is throttled (not executed: no answer about the
    // token). The launch happened: not a refusal.
    const lagging = motoClients(moto.endpoint).ec2;
    let fleets = 0;
    let lag = true;
    lagging.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'CreateFleetCommand' && ++fleets === 1) {
          await next(args);
          throw Object.assign(new Error('internal'), { name: 'InternalError', $fault: 'server', $metadata: { httpStatusCode: 500 } });
        }
        if (context.commandName === 'CreateFleetCommand') throw Object.assign(new Error('slow down'), { name: 'RequestLimitExceeded', $metadata: { httpStatusCode: 400 } });
        const out = await next(args);
        if (context.commandName === 'DescribeInstancesCommand' && fleets >= 1 && lag) (out.output as { Reservations?: unknown[] }).Reservations = [];
        return out;
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    expect((await handler(dynamo(), lines, lagging)(jobEvent([job(1)]))).batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    lag = false;
    expect(lines.logs('CreateFleet outcome unknown, settled by its token')).toEqual([expect.objectContaining({ outcome: 'unknown', lostAnswers: LAUNCH_SENDS })]);
    expect(await coldInstances()).toHaveLength(1);
    const slot = await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: ticketKey('linux', `${config.pools[0]!.launchTemplateId}:${config.pools[0]!.launchTemplateVersion}`, 'start#1') } }, ConsistentRead: true }));
    expect(slot.Item).toBeDefined();
    // The kept ticket is named in the log: its key, owner token and expiry (the item's).
    expect(lines.logs('the cold launch may have happened: its launch ticket is kept until its expiry')).toEqual([
      expect.objectContaining({
        pool: 'linux',
        ticketKey: slot.Item![JOB_RECORD_ATTRIBUTES.key]!.S,
        ticketOwner: slot.Item![LAUNCH_TICKET_ATTRIBUTES.owner]!.S,
        ticketExpiresAt: new Date(Number(slot.Item![JOB_RECORD_ATTRIBUTES.expiresAt]!.N) * 1000).toISOString(),
      }),
    ]);
    // The next job finds the only start slot spent: it waits, nothing more launches.
    expect((await handler(dynamo(), lines)(jobEvent([job(2)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(1);
  });

  it('a ticket whose put outcome stays unknown (and unreadable) launches nothing', async () => {
    const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { when: isTicket, lands: false });
    // The read-back fails too: undecided, so no launch (failing safe).
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') throw Object.assign(new Error('denied'), { name: 'AccessDeniedException' });
        return next(args);
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    expect((await handler(client, lines)(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(0);
    expect(lines.logs('taking launch tickets failed: those cold launches wait')).toHaveLength(1);
  });
});

describe("the pool's standby launches with launch tickets, against moto", () => {
  let config: FleetConfig;
  beforeEach(async () => {
    config = await motoFleet(c, { warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600 });
  });
  /** An EC2 client whose RunInstances fails once as `error` (its answer lost when `lands`). */
  const failingRun = (error: string, lands: boolean) => {
    const ec2 = motoClients(moto.endpoint).ec2;
    let failed = false;
    ec2.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'RunInstancesCommand' || failed) return next(args);
        failed = true;
        if (lands) await next(args);
        throw Object.assign(new Error(error), { name: error, $metadata: { httpStatusCode: lands ? 503 : 400 } });
      },
      { step: 'initialize' },
    );
    return ec2;
  };
  const run = (ec2: MotoClients['ec2']) => createPoolHandler({ ...c, ec2, aws: aws(), loadConfig: async () => config, launchTickets: new DynamoLaunchTickets(aws(), dynamo(), TABLE), sink: () => {} })();
  const template = () => `${config.pools[0]!.launchTemplateId}:${config.pools[0]!.launchTemplateVersion}`;
  const held = async () => {
    const keys = ['start#1', 'start#2'].map((slot) => ({ jobId: { S: ticketKey('linux', template(), slot) } }));
    const out = await Promise.all(keys.map((Key) => dynamo().send(new GetItemCommand({ TableName: TABLE, Key, ConsistentRead: true }))));
    return out.filter((o) => o.Item).length;
  };

  it('takes one start ticket per standby of an unproven template', async () => {
    const [summary] = await run(c.ec2);
    expect(summary!.launched).toBe(2);
    expect(await held()).toBe(2);
  });

  it('gives the tickets back when EC2 refused the launch outright (nothing launched)', async () => {
    const [summary] = await run(failingRun('InvalidParameterValue', false));
    expect(summary!.launched).toBe(0);
    expect(await held()).toBe(0);
  });

  it('keeps them when the answer was lost (the launch happened): the slots are spent', async () => {
    await run(failingRun('InternalError', true));
    expect(await held()).toBe(2);
  });
});
