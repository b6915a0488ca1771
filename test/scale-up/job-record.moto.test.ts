import { GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { DEFAULT_RATES, Pacer } from '../../lambdas/shared/pacing';
import { JOB_RECORD_TTL_SECONDS, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

const TABLE = 'job-records';
let moto: MotoServer;
let c: MotoClients;
let config: FleetConfig;

const dynamo = (): DynamoDBClient => motoDynamo(moto.endpoint);
const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
});
afterAll(async () => moto?.stop());
beforeEach(async () => {
  await moto.reset();
  config = await motoFleet(c);
  await createJobRecordTable(dynamo(), TABLE);
});

function handler(ci: FakeCi, clients: MotoClients, records: DynamoJobRecords, lines: Lines) {
  return createScaleUpHandler({
    ...clients,
    aws: aws(),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: 'unused',
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    jobRecords: records,
    sink: lines.sink,
  });
}

async function serving(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}

/** A client whose answer to the first call of `command` is lost after the call ran (a reset). */
function losingFirstAnswer(command: string, before?: () => Promise<void>): DynamoDBClient {
  const client = dynamo();
  let lost = false;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== command || lost) return next(args);
      lost = true;
      await before?.();
      // Whatever the call answered (done, or refused by the condition), the caller hears a reset.
      await next(args).catch(() => undefined);
      throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
    },
    { step: 'initialize' },
  );
  return client;
}

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
    const sent: string[] = [];
    const sqs = { send: async (command: { input: { MessageBody?: string } }) => void sent.push(command.input.MessageBody ?? '') };
    const run = (j: ReturnType<typeof job>, id: string) =>
      createScaleUpHandler({ ...c, sqs: sqs as never, aws: aws(), loadConfig: async () => config, providers: () => ({ github: ci }), queueUrl: 'q', deadLetterQueueUrl: 'dlq', instanceArnPrefix: INSTANCE_ARN_PREFIX, jobRecords: new DynamoJobRecords(aws(), dynamo(), TABLE), sink: lines.sink })({
        Records: jobEvent([j]).Records.map((r) => ({ ...r, messageId: id })),
      });
    // Job 1 takes the pool's only runner slot.
    expect((await run(job(1), 'msg-first')).batchItemFailures).toEqual([]);
    expect(ci.created).toBe(1);
    expect((await run(job(2), 'msg-original')).batchItemFailures).toEqual([]);
    expect((await run(job(2, { deliveryId: 'reconciler-github-2', traceId: 'reconciler-github-2' }), 'msg-copy')).batchItemFailures).toEqual([]);
    // One wait copy, the original's; the reconciled copy is gone.
    expect(sent.map((b) => JSON.parse(b).deliveryId)).toEqual(['delivery-2']);
    expect(ci.created).toBe(1);
    expect(lines.metric('JobsDeduplicated', { Reason: 'job-record' })).toBe(1);
  });

  it('the same delivery (a retry, a capacity wait copy) keeps its record; another finds it held until it expires', async () => {
    const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
    const now = new Date();
    expect(await records.claim(job(7), now)).toEqual({ kind: 'mine' });
    expect(await records.claim(job(7), now)).toEqual({ kind: 'mine' });
    expect(await records.claim(job(7, { deliveryId: 'other' }), now)).toEqual({ kind: 'taken', holder: 'delivery-7' });
    const later = new Date(now.getTime() + (JOB_RECORD_TTL_SECONDS + 1) * 1000);
    expect(await records.claim(job(7, { deliveryId: 'other' }), later)).toEqual({ kind: 'mine' });
    const item = await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: 'github:7' } }, ConsistentRead: true }));
    expect(item.Item?.deliveryId?.S).toBe('other');
    expect(Number(item.Item?.expiresAt?.N)).toBe(Math.floor(later.getTime() / 1000) + JOB_RECORD_TTL_SECONDS);
  });

  it('a put whose answer is lost is resolved by reading the record: ours when it landed', async () => {
    const client = losingFirstAnswer('PutItemCommand');
    const reads: boolean[] = [];
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') reads.push((args.input as { ConsistentRead?: boolean }).ConsistentRead === true);
        return next(args);
      },
      { step: 'initialize' },
    );
    const records = new DynamoJobRecords(aws(), client, TABLE);
    expect(await records.claim(job(3), new Date())).toEqual({ kind: 'mine' });
    expect(reads).toEqual([true]);
  });

  it('a put whose answer is lost while another delivery took the record is a lost record, not ours', async () => {
    // The other delivery's put lands first, then ours is refused and its answer lost.
    const client = losingFirstAnswer('PutItemCommand', async () => {
      await new DynamoJobRecords(aws(), dynamo(), TABLE).claim(job(4, { deliveryId: 'first' }), new Date());
    });
    const records = new DynamoJobRecords(aws(), client, TABLE);
    expect(await records.claim(job(4), new Date())).toEqual({ kind: 'taken', holder: 'first' });
  });

  it('a put that did not land before its answer was lost is sent again', async () => {
    const client = dynamo();
    let puts = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'PutItemCommand' && puts++ === 0) throw Object.assign(new Error('timed out'), { name: 'TimeoutError' });
        return next(args);
      },
      { step: 'initialize' },
    );
    expect(await new DynamoJobRecords(aws(), client, TABLE).claim(job(5), new Date())).toEqual({ kind: 'mine' });
    expect(puts).toBe(2);
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
    for (let n = 0; n < 5; n++) expect(await new DynamoJobRecords(caller, dynamo(), TABLE).claim(job(60 + n), new Date())).toEqual({ kind: 'mine' });
    expect(sleeps).toEqual([]);
  });
});
