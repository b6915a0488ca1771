import { GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { beforeEach, describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords, holderDeadline } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { DEFAULT_RATES, Pacer } from '../../lambdas/shared/pacing';
import { JOB_RECORD_HOLD_SECONDS, JOB_RECORD_TTL_SECONDS, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { losingFirstAnswer as loseAnswer, type LoseAnswerOptions } from '../support/lose-answer';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const TABLE = 'job-records';
let config: FleetConfig;
const { moto, c } = motoForFile(async (m) => {
  config = await motoFleet(m.c);
  await createJobRecordTable(dynamo(), TABLE);
});

const dynamo = (): DynamoDBClient => motoDynamo(moto.endpoint);
const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
/** A holder deadline an hour ahead, for the claims that do not test it. */
const HOLD = new Date(Date.now() + 60 * 60 * 1000);
const MAX_WAIT_SECONDS = 60 * 60;

function handler(ci: FakeCi, clients: MotoClients, records: DynamoJobRecords, lines: Lines, now?: () => Date) {
  return createScaleUpHandler({
    ...(now ? { now } : {}),
    ...clients,
    aws: aws(),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: 'unused',
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    jobRecords: records,
    sink: lines.sink,
    options: { maxWaitSeconds: MAX_WAIT_SECONDS },
  });
}

/** Runs a handler whose SQS sends are recorded (queue URL and body) instead of sent. */
function recordingSends(ci: FakeCi, lines: Lines, records: DynamoJobRecords = new DynamoJobRecords(aws(), dynamo(), TABLE)) {
  const sent: { queue: string; deliveryId: string }[] = [];
  const checks: string[] = [];
  const sqs = {
    send: async (command: { input: { QueueUrl?: string; MessageBody?: string; MessageAttributes?: Record<string, unknown> } }) => {
      const deliveryId = JSON.parse(command.input.MessageBody ?? '{}').deliveryId;
      // Retry checks (a served job's look-back) are kept apart from waits and dead letters.
      if (command.input.MessageAttributes?.['retry-check']) checks.push(deliveryId);
      else sent.push({ queue: command.input.QueueUrl ?? '', deliveryId });
    },
  };
  const run = (j: ReturnType<typeof job>, id: string) =>
    createScaleUpHandler({ ...c, sqs: sqs as never, aws: aws(), loadConfig: async () => config, providers: () => ({ github: ci }), queueUrl: 'q', deadLetterQueueUrl: 'dlq', instanceArnPrefix: INSTANCE_ARN_PREFIX, jobRecords: records, sink: lines.sink, options: { maxWaitSeconds: MAX_WAIT_SECONDS } })({
      Records: jobEvent([j]).Records.map((r) => ({ ...r, messageId: id })),
    });
  return { sent, checks, run };
}

async function recordOf(n: number) {
  return (await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: `github:${n}` } }, ConsistentRead: true }))).Item;
}

async function serving(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}

/** A record client whose answer to the first matching call of `command` is lost (test/support/lose-answer.ts). */
const losingFirstAnswer = (command: string, options?: LoseAnswerOptions) => loseAnswer(dynamo(), command, options);

describe('per-job record against moto', () => {
  it('a reconciled copy arriving while the original is being served launches nothing', { timeout: scaled(60_000) }, async () => {
    await parkInMoto(c, config, 2);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    // The original holds its record and stops at its observation of the fleet: it is being
    // served, and nothing of it is visible yet to another invocation's observation.
    const original = motoClients(moto.endpoint);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let observing!: () => void;
    const isObserving = new Promise<void>((r) => (observing = r));
    original.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'DescribeInstancesCommand') {
          observing();
          await gate;
        }
        return next(args);
      },
      { step: 'initialize' },
    );
    const originalRun = handler(ci, original, new DynamoJobRecords(aws(), dynamo(), TABLE), lines)(jobEvent([job(1)]));
    await isObserving;
    const copy = job(1, { deliveryId: 'reconciler-github-1', traceId: 'reconciler-github-1' });
    const copyEvent = { Records: jobEvent([copy]).Records.map((r) => ({ ...r, messageId: 'msg-copy' })) };
    expect((await handler(ci, c, new DynamoJobRecords(aws(), dynamo(), TABLE), lines)(copyEvent)).batchItemFailures).toEqual([]);
    release();
    expect((await originalRun).batchItemFailures).toEqual([]);

    expect((await serving()).map((i) => i.Tags?.find((t) => t.Key === KEYS.traceId)?.Value)).toEqual(['trace-1']);
    expect(ci.created).toBe(1);
    expect(lines.metric('JobsDeduplicated', { Reason: 'job-record' })).toBe(1);
    expect(lines.logs('another delivery of this job holds its record; this copy launches nothing')[0]).toMatchObject({ holder: 'delivery-1', traceId: 'reconciler-github-1' });
  });

  it('a copy of a job that waits for capacity is dropped instead of waiting beside it', async () => {
    config = await motoFleet(c, { maxRunners: 1, warmSize: 0 });
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    const { sent, checks, run } = recordingSends(ci, lines);
    const fresh = new Date().toISOString();
    // Job 1 takes the pool's only runner slot.
    expect((await run(job(1, { receivedAt: fresh }), 'msg-first')).batchItemFailures).toEqual([]);
    expect(ci.created).toBe(1);
    expect((await run(job(2, { receivedAt: fresh }), 'msg-original')).batchItemFailures).toEqual([]);
    expect((await run(job(2, { receivedAt: fresh, deliveryId: 'reconciler-github-2', traceId: 'reconciler-github-2' }), 'msg-copy')).batchItemFailures).toEqual([]);
    // One wait copy on the jobs queue, the original's; the reconciled copy is gone. Job 1,
    // served, sent its retry check.
    expect(sent).toEqual([{ queue: 'q', deliveryId: 'delivery-2' }]);
    expect(checks).toEqual(['delivery-1']);
    expect(ci.created).toBe(1);
    expect(lines.metric('JobsDeduplicated', { Reason: 'job-record' })).toBe(1);
  });

  it("a reconciled job waiting for capacity has its intake stamped on the first copy's claim only, not on each run's copy", async () => {
    config = await motoFleet(c, { maxRunners: 1, warmSize: 0 });
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    const { run } = recordingSends(ci, lines);
    const now = new Date().toISOString();
    expect((await run(job(1, { receivedAt: now }), 'msg-first')).batchItemFailures).toEqual([]);
    // Each run's copy of job 2 claims the record as its own (same delivery id) and waits: admitted, not served.
    const copy = job(2, { receivedAt: now, createdAt: now, deliveryId: 'reconciler-github-2', traceId: 'reconciler-github-2' });
    for (const id of ['msg-run1', 'msg-run2', 'msg-run3']) expect((await run(copy, id)).batchItemFailures).toEqual([]);
    expect(ci.created).toBe(1);
    const ledger = lines.logs('ledger').filter((l) => l.jobId === 'github:2');
    expect(ledger.filter((l) => l.stage === 'dequeued')).toHaveLength(3);
    expect(ledger.filter((l) => l.stage === 'received' || l.stage === 'queued').map((l) => l.stage)).toEqual(['received', 'queued']);
  });

  it('a job whose original scale-up dead-lettered is served by a reconciled copy', async () => {
    config = await motoFleet(c, { maxRunners: 1, warmSize: 0 });
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    const { sent, run } = recordingSends(ci, lines);
    expect((await run(job(1, { receivedAt: new Date().toISOString() }), 'msg-first')).batchItemFailures).toEqual([]);
    // Job 2 waited past its maximum age (the fixture's receivedAt is days old): dead-lettered, its record released.
    expect((await run(job(2), 'msg-original')).batchItemFailures).toEqual([]);
    expect(sent).toEqual([{ queue: 'dlq', deliveryId: 'delivery-2' }]);
    // Released: no holder, but the item stays (a tombstone: the job was claimed before).
    expect(await recordOf(2)).toEqual({ jobId: { S: 'github:2' }, claimedAt: expect.anything(), expiresAt: expect.anything() });
    // Capacity frees up; the reconciler finds job 2 still queued and sends a copy of its own.
    config = { ...config, pools: config.pools.map((p) => ({ ...p, maxRunners: 2 })) };
    const copy = job(2, { receivedAt: new Date().toISOString(), deliveryId: 'reconciler-github-2', traceId: 'reconciler-github-2' });
    expect((await run(copy, 'msg-copy')).batchItemFailures).toEqual([]);
    expect(ci.created).toBe(2);
    expect((await serving()).map((i) => i.Tags?.find((t) => t.Key === KEYS.traceId)?.Value).sort()).toEqual(['reconciler-github-2', 'trace-1']);
    expect(lines.metric('JobsDeduplicated', { Reason: 'job-record' })).toBe(0);
  });

  it('a failed release is logged and counted, and the job is dead-lettered all the same', async () => {
    // No capacity at all: the days-old job goes straight to the dead-letter queue.
    config = await motoFleet(c, { maxRunners: 1, warmSize: 0 });
    config = { ...config, pools: config.pools.map((p) => ({ ...p, maxRunners: 0 })) };
    const lines = new Lines();
    const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
    records.release = async () => ({ kind: 'failed', error: 'ProvisionedThroughputExceededException' });
    const { sent, run } = recordingSends(new FakeCi(Provider.GITHUB, PREFIX), lines, records);
    expect((await run(job(3), 'msg-3')).batchItemFailures).toEqual([]);
    expect(sent).toEqual([{ queue: 'dlq', deliveryId: 'delivery-3' }]);
    expect(lines.metric('JobsDeadLettered', { Reason: 'max-wait' })).toBe(1);
    expect(lines.metric('JobRecordErrors', { Operation: 'release' })).toBe(1);
    expect(lines.logs('releasing the per-job record failed; a later copy can serve the job only after its holder deadline')).toHaveLength(1);
  });

  describe('a holder that died silently (its message redriven to the dead-letter queue)', () => {
    const received = new Date();
    const original = job(4, { receivedAt: received.toISOString() });
    const copy = job(4, { receivedAt: received.toISOString(), deliveryId: 'reconciler-github-4', traceId: 'reconciler-github-4' });
    const deadline = holderDeadline(original, received, MAX_WAIT_SECONDS);
    const afterDeadline = () => new Date(deadline.getTime() + 60_000);

    beforeEach(async () => {
      // What the original left: its record, claimed when it was received; no instance.
      expect(await new DynamoJobRecords(aws(), dynamo(), TABLE).claim(original, received, deadline)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    });

    it('is held until its deadline (maximum wait plus the redrive budget), then a copy takes it over and serves the job', { timeout: scaled(60_000) }, async () => {
      expect(deadline.getTime() - received.getTime()).toBe((MAX_WAIT_SECONDS + JOB_RECORD_HOLD_SECONDS) * 1000);
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      const lines = new Lines();
      const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
      const copyEvent = { Records: jobEvent([copy]).Records.map((r) => ({ ...r, messageId: 'msg-copy' })) };
      // Before the deadline the original may still be served: the copy launches nothing.
      expect((await handler(ci, c, records, lines, () => new Date(deadline.getTime() - 60_000))(copyEvent)).batchItemFailures).toEqual([]);
      expect(ci.created).toBe(0);
      expect(ci.lookups).toBe(0);
      expect((await handler(ci, c, records, lines, afterDeadline)(copyEvent)).batchItemFailures).toEqual([]);
      expect(ci.lookups).toBe(1);
      expect(ci.created).toBe(1);
      expect((await serving()).map((i) => i.Tags?.find((t) => t.Key === KEYS.traceId)?.Value)).toEqual(['reconciler-github-4']);
      expect((await recordOf(4))?.deliveryId?.S).toBe('reconciler-github-4');
    });

    it('a copy that takes it over launches nothing when the job is no longer queued', async () => {
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      ci.notQueued.add(copy.jobId);
      const lines = new Lines();
      const copyEvent = { Records: jobEvent([copy]).Records.map((r) => ({ ...r, messageId: 'msg-copy' })) };
      expect((await handler(ci, c, new DynamoJobRecords(aws(), dynamo(), TABLE), lines, afterDeadline)(copyEvent)).batchItemFailures).toEqual([]);
      expect(ci.lookups).toBe(1);
      expect(ci.created).toBe(0);
      expect(await serving()).toEqual([]);
      expect(lines.logs('job no longer queued at the provider, dropping it')).toHaveLength(1);
    });

    it('a take-over claim that did not land before its answer was lost is sent again, not read as the dead holder\'s', async () => {
      const client = losingFirstAnswer('UpdateItemCommand', { lands: false });
      const at = afterDeadline();
      expect(await new DynamoJobRecords(aws(), client, TABLE).claim(copy, at, holderDeadline(copy, at, MAX_WAIT_SECONDS))).toEqual({ kind: 'mine', tookOver: true });
      expect(client.calls()).toBe(2);
      expect((await recordOf(4))?.deliveryId?.S).toBe(copy.deliveryId);
    });

    it('of two copies racing past the deadline, one takes it over', async () => {
      const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
      const at = afterDeadline();
      const outcomes = await Promise.all(['a', 'b'].map((d) => records.claim(job(4, { deliveryId: d }), at, holderDeadline(copy, at, MAX_WAIT_SECONDS))));
      expect(outcomes.filter((o) => o.kind === 'mine')).toEqual([{ kind: 'mine', tookOver: true }]);
      expect(outcomes.filter((o) => o.kind === 'taken')).toHaveLength(1);
    });
  });

  it('a release empties only the holder\'s record, down to a tombstone; a lost answer is resolved by reading the record', async () => {
    const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
    expect(await records.claim(job(5), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    expect(await records.release(job(5, { deliveryId: 'other' }))).toEqual({ kind: 'not-held' });
    expect((await recordOf(5))?.deliveryId?.S).toBe('delivery-5');
    const client = losingFirstAnswer('UpdateItemCommand');
    const reads: string[] = [];
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') reads.push(String((args.input as { ConsistentRead?: boolean }).ConsistentRead));
        return next(args);
      },
      { step: 'initialize' },
    );
    expect(await new DynamoJobRecords(aws(), client, TABLE).release(job(5))).toEqual({ kind: 'released' });
    expect(reads).toEqual(['true']);
    expect(await recordOf(5)).toEqual({ jobId: { S: 'github:5' }, claimedAt: expect.anything(), expiresAt: expect.anything() });
    // A later copy claims it as it would claim no record, but not as fresh: the job was claimed before.
    expect(await records.claim(job(5, { deliveryId: 'reconciler-github-5' }), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: false });
  });

  it('a delete that did not land before its answer was lost is sent again', async () => {
    const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
    expect(await records.claim(job(6), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    const client = losingFirstAnswer('DeleteItemCommand', { lands: false });
    expect(await new DynamoJobRecords(aws(), client, TABLE).release(job(6), 'delete')).toEqual({ kind: 'released' });
    expect(client.calls()).toBe(2);
    expect(await recordOf(6)).toBeUndefined();
  });

  it('the same delivery (a retry, a capacity wait copy) keeps its record; another finds it held until it expires', async () => {
    const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
    const now = new Date();
    // Only the first claim finds no record (`fresh`: scale-up stamps a reconciled job's intake on it).
    expect(await records.claim(job(7), now, HOLD)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    expect(await records.claim(job(7), now, HOLD)).toEqual({ kind: 'mine', tookOver: false });
    expect(await records.claim(job(7, { deliveryId: 'other' }), now, HOLD)).toEqual({ kind: 'taken', holder: 'delivery-7' });
    const later = new Date(now.getTime() + (JOB_RECORD_TTL_SECONDS + 1) * 1000);
    expect(await records.claim(job(7, { deliveryId: 'other' }), later, HOLD)).toEqual({ kind: 'mine', tookOver: false });
    const item = await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: 'github:7' } }, ConsistentRead: true }));
    expect(item.Item?.deliveryId?.S).toBe('other');
    expect(Number(item.Item?.expiresAt?.N)).toBe(Math.floor(later.getTime() / 1000) + JOB_RECORD_TTL_SECONDS);
  });

  it('a claim whose answer is lost is resolved by reading the record: ours when it landed', async () => {
    const client = losingFirstAnswer('UpdateItemCommand');
    const reads: boolean[] = [];
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') reads.push((args.input as { ConsistentRead?: boolean }).ConsistentRead === true);
        return next(args);
      },
      { step: 'initialize' },
    );
    const records = new DynamoJobRecords(aws(), client, TABLE);
    // Whether the put that landed took the record over cannot be told: the job is re-checked.
    expect(await records.claim(job(3), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: true });
    expect(reads).toEqual([true]);
  });

  it('a claim whose answer is lost while another delivery took the record is a lost record, not ours', async () => {
    // The other delivery's put lands first, then ours is refused and its answer lost.
    const client = losingFirstAnswer('UpdateItemCommand', {
      before: async () => void (await new DynamoJobRecords(aws(), dynamo(), TABLE).claim(job(4, { deliveryId: 'first' }), new Date(), HOLD)),
    });
    const records = new DynamoJobRecords(aws(), client, TABLE);
    expect(await records.claim(job(4), new Date(), HOLD)).toEqual({ kind: 'taken', holder: 'first' });
  });

  it('a claim that did not land before its answer was lost is sent again', async () => {
    const client = losingFirstAnswer('UpdateItemCommand', { lands: false });
    // The second put found no record: fresh.
    expect(await new DynamoJobRecords(aws(), client, TABLE).claim(job(5), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    expect(client.calls()).toBe(2);
  });

  it('a first claim whose answer was lost after it landed is not fresh: the read-back cannot tell it from a later one', async () => {
    const client = losingFirstAnswer('UpdateItemCommand');
    expect(await new DynamoJobRecords(aws(), client, TABLE).claim(job(31), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: true });
    expect(client.calls()).toBe(1);
  });

  it('when the record store fails, the job is served without a record, counted and logged', async () => {
    await parkInMoto(c, config, 1);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    const res = await handler(ci, c, new DynamoJobRecords(aws(), dynamo(), 'no-such-table'), lines)(jobEvent([job(9)]));
    expect(res.batchItemFailures).toEqual([]);
    expect((await serving()).map((i) => i.Tags?.find((t) => t.Key === KEYS.jobId)?.Value)).toEqual(['github:9']);
    expect(lines.metric('JobRecordErrors')).toBe(1);
    expect(lines.logs('the per-job record could not be written; serving the job without it')[0]).toMatchObject({ error: 'ResourceNotFoundException' });
  });

  it('record writes do not spend the SSM PutParameter pacing budget', async () => {
    // A pacer whose PutParameter bucket is empty: a record write that took from it would wait.
    const sleeps: number[] = [];
    const pacer = new Pacer(DEFAULT_RATES, () => 0, async (ms) => void sleeps.push(ms));
    for (let i = 0; i < DEFAULT_RATES.PutParameter!.capacity; i++) await pacer.take('PutParameter');
    const caller = new AwsCaller({ sleep: async () => {}, pacer });
    for (let n = 0; n < 5; n++) expect(await new DynamoJobRecords(caller, dynamo(), TABLE).claim(job(60 + n), new Date(), HOLD)).toEqual({ kind: 'mine', tookOver: false, fresh: true });
    expect(sleeps).toEqual([]);
  });
});
