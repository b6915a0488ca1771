import { GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CreateTagsCommand, DescribeInstancesCommand, TerminateInstancesCommand } from '@aws-sdk/client-ec2';
import { PutParameterCommand } from '@aws-sdk/client-ssm';
import { encodeStreak, freshStreak, templateOf } from '../../lambdas/pool/backoff';
import type { SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { LEDGER_MESSAGE, Provider, ReuseScope, ssmPaths, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, KEYS, Lines, PREFIX, record } from '../support/fixtures';
import { losingFirstAnswer } from '../support/lose-answer';
import { startMoto, type MotoServer } from '../support/moto';
import { createJobRecordTable, motoClients, motoDynamo, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

const TABLE = 'job-records';
const RETRY_AFTER = 300;
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
async function freshFleet(): Promise<void> {
  await moto.reset();
  config = await motoFleet(c);
  await createJobRecordTable(dynamo(), TABLE);
  await parkInMoto(c, config, 2);
}
beforeEach(freshFleet);

interface Sent {
  readonly queue: string;
  readonly body: string;
  readonly attributes: Record<string, { StringValue?: string }>;
}

/**
 * Scale-up against moto with the jobs queue recorded: the retry checks it sends come back as
 * the next events, at the time the test chooses.
 */
class Fleet {
  readonly ci = new FakeCi(Provider.GITHUB, PREFIX);
  readonly lines = new Lines();
  readonly sent: Sent[] = [];
  /** Dead-letter sends still to refuse (an SQS error, not a lost answer). */
  failDeadLetters = 0;
  private serial = 0;

  constructor(
    private readonly limit = 2,
    private readonly records: () => DynamoJobRecords = () => new DynamoJobRecords(aws(), dynamo(), TABLE),
  ) {}

  run(records: SQSRecord[], at: Date) {
    const sqs = {
      send: async (command: { constructor: { name: string }; input: { QueueUrl?: string; MessageBody?: string; MessageAttributes?: Sent['attributes'] } }) => {
        if (command.constructor.name !== 'SendMessageCommand') return;
        if (command.input.QueueUrl === 'dlq' && this.failDeadLetters > 0) {
          this.failDeadLetters--;
          throw Object.assign(new Error('access denied'), { name: 'AccessDenied', $metadata: { httpStatusCode: 403 } });
        }
        this.sent.push({ queue: command.input.QueueUrl ?? '', body: command.input.MessageBody ?? '', attributes: command.input.MessageAttributes ?? {} });
      },
    };
    return createScaleUpHandler({
      ...c,
      sqs: sqs as never,
      aws: aws(),
      now: () => at,
      loadConfig: async () => config,
      providers: () => ({ github: this.ci }),
      queueUrl: 'q',
      deadLetterQueueUrl: 'dlq',
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      jobRecords: this.records(),
      sink: this.lines.sink,
      options: { maxWaitSeconds: 24 * 60 * 60, retry: { retryAfterSeconds: RETRY_AFTER, limit: this.limit } },
    })({ Records: records });
  }

  /** The retry checks sent so far, oldest first, as the records SQS would hand back. */
  checks(): SQSRecord[] {
    return this.sent
      .filter((s) => s.queue === 'q' && s.attributes['retry-check'])
      .map((s, n) => record(s.body, { id: `check-${n}`, attributes: Object.fromEntries(Object.entries(s.attributes).map(([k, v]) => [k, v.StringValue ?? ''])) }));
  }

  lastCheck(): SQSRecord {
    return this.checks().at(-1)!;
  }

  deadLetters(): string[] {
    return this.sent.filter((s) => s.queue === 'dlq').map((s) => s.attributes['dead-letter-reason']?.StringValue ?? '');
  }

  /** The runner registered for the job's latest attempt. */
  latestRunner(j: JobMessage) {
    return [...this.ci.runners.values()].filter((r) => r.jobId === j.jobId).at(-1)!;
  }

  copy(j: JobMessage, from: string): SQSRecord {
    return record(JSON.stringify({ ...j, deliveryId: from, traceId: from }), { id: `copy-${++this.serial}-${from}` });
  }
}

const later = (at: Date, seconds: number) => new Date(at.getTime() + seconds * 1000);
const t0 = () => new Date(Date.now() + 60_000);
const fresh = (n: number) => job(n, { receivedAt: new Date().toISOString() });

async function serving(j: JobMessage): Promise<string[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: `tag:${KEYS.jobId}`, Values: [j.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((i) => i.InstanceId!);
}

async function recordOf(j: JobMessage) {
  return (await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: { jobId: { S: j.jobId } }, ConsistentRead: true }))).Item;
}

/** Serves `j` at `at`: one runner, the record marked served, one retry check sent. */
async function serve(f: Fleet, j: JobMessage, at: Date): Promise<void> {
  expect((await f.run([record(JSON.stringify(j), { id: `msg-${j.providerJobId}` })], at)).batchItemFailures).toEqual([]);
  expect(f.checks()).toHaveLength(1);
  expect(f.checks()[0]!.messageAttributes['not-before']?.stringValue).toBe(later(at, RETRY_AFTER).toISOString());
}

describe('retrying a job whose runner went elsewhere, against moto', () => {
  it('a job whose runner took another job gets a second runner after retryAfter, and is served once', { timeout: scaled(90_000) }, async () => {
    const f = new Fleet();
    const j = fresh(1);
    const at = t0();
    await serve(f, j, at);
    expect((await recordOf(j))?.servedInstance?.S).toBe((await serving(j))[0]);
    // Its runner came online and took another job of the pool: busy, and job 1 stays queued.
    Object.assign(f.latestRunner(j), { status: 'online', busy: true });
    // Before retryAfter the check is hidden again (its not-before): nothing happens.
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER - 10))).batchItemFailures).toEqual([{ itemIdentifier: 'check-0' }]);
    expect(f.ci.created).toBe(1);

    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(await serving(j)).toHaveLength(2);
    expect(f.lines.metric('JobsRetried', { Pool: 'linux' })).toBe(1);
    expect(f.lines.logs('the job is still queued and no runner of its pool could take it: starting another')[0]).toMatchObject({ attempt: 1 });
    expect(Number((await recordOf(j))?.attempt?.N)).toBe(1);

    // The second runner takes job 1: its check finds the job no longer queued, and stops.
    f.ci.notQueued.add(j.jobId);
    expect(f.checks()).toHaveLength(2);
    expect((await f.run([f.lastCheck()], later(at, 2 * RETRY_AFTER + 2))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(f.checks()).toHaveLength(2);
    expect(f.lines.metric('JobRetriesStopped', { Reason: 'not-queued' })).toBe(1);
    expect(f.deadLetters()).toEqual([]);
    // Three receives of the job (its delivery and two retry checks): dequeued once, in the
    // count and in the ledger, so the dashboard's dequeue time is the queue's, not retryAfter.
    expect(f.lines.metric('JobsDequeued', { Pool: 'linux' })).toBe(1);
    expect(f.lines.logs(LEDGER_MESSAGE).filter((l) => l.jobId === j.jobId && l.stage === 'dequeued')).toHaveLength(1);
  });

  it('a job whose runner died before taking any gets a second runner', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(2);
    const at = t0();
    await serve(f, j, at);
    // Registered, never came online; its instance still runs.
    Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(f.lines.metric('JobsRetried')).toBe(1);
  });

  it('a job whose pool has an idle runner waits for it, and keeps being checked', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(3);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'online', busy: false });
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
    expect(f.lines.logs('the job is still queued, but a runner of its pool is idle or starting; looking again later')).toHaveLength(1);
    expect(f.checks()).toHaveLength(2);
    expect(f.lastCheck().messageAttributes['not-before']?.stringValue).toBe(later(at, 2 * RETRY_AFTER + 1).toISOString());
  });

  it('reuse: an idle scoped runner of the job\'s repository keeps the job waiting: the check lists the repository\'s runners', { timeout: scaled(60_000) }, async () => {
    const saved = config;
    config = { ...config, pools: config.pools.map((p) => ({ ...p, reuse: { scope: ReuseScope.REPOSITORY, maxJobs: 5, maxAgeSeconds: 3600, cacheDirectories: [] } })) };
    try {
      const f = new Fleet();
      const j = fresh(31);
      const at = t0();
      await serve(f, j, at);
      expect(f.ci.scoped.has(f.latestRunner(j).runnerId)).toBe(true);
      Object.assign(f.latestRunner(j), { status: 'online', busy: false });
      expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
      // Seen (listed at its repository) as idle: no second runner.
      expect(f.ci.created).toBe(1);
      expect(f.lines.logs('the job is still queued, but a runner of its pool is idle or starting; looking again later')).toHaveLength(1);
    } finally {
      config = saved;
    }
  });

  it('a check still waiting for an idle runner at the maximum wait dead-letters the job, counted', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(17);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'online', busy: false });
    // The Fleet's maximum wait is a day from the job's receivedAt.
    const check = f.lastCheck();
    expect((await f.run([check], later(new Date(j.receivedAt), 24 * 60 * 60 + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
    expect(f.checks()).toHaveLength(1);
    expect(f.deadLetters()).toEqual(['max-wait']);
    expect(f.lines.metric('JobsDeadLettered', { Reason: 'max-wait' })).toBe(1);
    expect(f.lines.metric('JobRetriesStopped', { Reason: 'max-wait' })).toBe(1);
  });

  it("an idle runner of another repository does not keep the job waiting (the provider's runner scope)", { timeout: scaled(90_000) }, async () => {
    const f = new Fleet();
    // Repository runners, as GitHub's `owner/repo/<id>`: a runner takes only its repository's jobs.
    const repoOf = new Map<string, string>();
    const create = f.ci.createRunner.bind(f.ci);
    Object.assign(f.ci, {
      createRunner: async (job: JobMessage, instanceId: string, pool: string) => {
        const reg = await create(job, instanceId, pool);
        repoOf.set(reg.runnerId, job.project);
        return reg;
      },
      runnerServes: (runnerId: string, job: JobMessage) => repoOf.get(runnerId) === job.project,
    });
    const other = fresh(18);
    const j = { ...fresh(19), project: 'web' };
    const at = t0();
    expect((await f.run([record(JSON.stringify(other), { id: 'msg-other' })], at)).batchItemFailures).toEqual([]);
    expect((await f.run([record(JSON.stringify(j), { id: 'msg-j' })], at)).batchItemFailures).toEqual([]);
    expect(f.checks()).toHaveLength(2);
    Object.assign(f.latestRunner(other), { status: 'online', busy: false });
    Object.assign(f.latestRunner(j), { status: 'online', busy: true });
    const check = f.checks().find((c) => JSON.parse(c.body).jobId === j.jobId)!;
    expect((await f.run([check], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.lines.logs('the job is still queued, but a runner of its pool is idle or starting; looking again later')).toHaveLength(0);
    expect(f.lines.metric('JobsRetried')).toBe(1);
    expect(f.ci.created).toBe(3);
  });

  it('a cancelled job stops the retries', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(4);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'online', busy: true });
    f.ci.notQueued.add(j.jobId);
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
    expect(f.checks()).toHaveLength(1);
    expect(f.lines.metric('JobRetriesStopped', { Reason: 'not-queued' })).toBe(1);
    expect(f.lines.logs('job no longer queued at the provider, dropping it')).toHaveLength(1);
  });

  it('when the attempts are spent the job goes to the dead-letter queue with the reason, once', { timeout: scaled(90_000) }, async () => {
    const f = new Fleet(1);
    const j = fresh(5);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    // The retry's runner dies too: the limit (1) is spent.
    Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
    expect((await f.run([f.lastCheck()], later(at, 2 * RETRY_AFTER + 2))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(f.deadLetters()).toEqual(['retries-exhausted']);
    expect(f.lines.metric('JobRetriesStopped', { Reason: 'retries-exhausted' })).toBe(1);
    expect(f.lines.metric('JobsDeadLettered', { Reason: 'retries-exhausted' })).toBe(1);
    expect((await recordOf(j))?.exhausted?.BOOL).toBe(true);
    // A reconciled copy later finds the retries spent: no runner, no second dead letter.
    expect((await f.run([f.copy(j, 'reconciler-github-5')], later(at, 3 * RETRY_AFTER))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(f.deadLetters()).toEqual(['retries-exhausted']);
  });

  it('an exhausted job whose dead-letter send failed is dead-lettered by the redelivered message', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet(0);
    const j = fresh(15);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
    const check = f.lastCheck();
    f.failDeadLetters = 1;
    expect((await f.run([check], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([{ itemIdentifier: check.messageId }]);
    expect((await recordOf(j))?.exhausted?.BOOL).toBe(true);
    expect(f.deadLetters()).toEqual([]);
    // SQS redelivers the same message: it finds the record exhausted by itself, and sends again.
    const again = { ...check, attributes: { ...check.attributes, ApproximateReceiveCount: '2' } };
    expect((await f.run([again], later(at, RETRY_AFTER + 40))).batchItemFailures).toEqual([]);
    expect(f.deadLetters()).toEqual(['retries-exhausted']);
    expect(f.lines.metric('JobsDeadLettered', { Reason: 'retries-exhausted' })).toBe(1);
    // Any other copy still finds the retries spent and sends nothing.
    expect((await f.run([f.copy(j, 'reconciler-github-15')], later(at, 3 * RETRY_AFTER))).batchItemFailures).toEqual([]);
    expect(f.deadLetters()).toEqual(['retries-exhausted']);
    expect(f.ci.created).toBe(1);
  });

  it('a reconciled copy retries the job as a check would, when the check was lost', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(6);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'online', busy: true });
    // Before retryAfter the reconciled copy launches nothing.
    expect((await f.run([f.copy(j, 'reconciler-github-6')], later(at, 60))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
    expect(f.lines.metric('JobsDeduplicated', { Reason: 'job-record' })).toBe(1);
    expect((await f.run([f.copy(j, 'reconciler-github-6')], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    // The copy's delivery holds the record now, and its runner sent the next check.
    expect((await recordOf(j))?.deliveryId?.S).toBe('reconciler-github-6');
    expect(JSON.parse(f.lastCheck().body).deliveryId).toBe('reconciler-github-6');
  });

  it('a retry check that finds no served record launches nothing', { timeout: scaled(60_000) }, async () => {
    const f = new Fleet();
    const j = fresh(14);
    const check = record(JSON.stringify(j), { id: 'check-stray', attributes: { 'retry-check': 'true', 'not-before': t0().toISOString() } });
    expect((await f.run([check], later(t0(), 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(0);
    expect(f.lines.logs('a retry check found no served record; nothing to do')).toHaveLength(1);
    // Its claim's fresh record is given up: a reconciled copy of the job is not refused.
    expect(await recordOf(j)).toBeUndefined();
    expect((await f.run([f.copy(j, 'reconciler-github-14')], later(t0(), 2))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
  });

  it('a retry check whose record cannot be read is retried, not dropped', { timeout: scaled(60_000) }, async () => {
    // The store answers the check's first claim with an error (throttled, 5xx, both reads lost).
    let refuse = 0;
    const records = () => {
      const real = new DynamoJobRecords(aws(), dynamo(), TABLE);
      return Object.assign(Object.create(real) as DynamoJobRecords, {
        claim: (job: JobMessage, now: Date, holdUntil: Date) => (refuse-- > 0 ? Promise.resolve({ kind: 'unavailable' as const, error: 'ProvisionedThroughputExceededException' }) : real.claim(job, now, holdUntil)),
      });
    };
    const f = new Fleet(2, records);
    const j = fresh(16);
    const at = t0();
    await serve(f, j, at);
    Object.assign(f.latestRunner(j), { status: 'online', busy: true });
    const check = f.lastCheck();
    refuse = 1;
    expect((await f.run([check], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([{ itemIdentifier: check.messageId }]);
    expect(f.ci.created).toBe(1);
    expect(f.lines.logs('a retry check found no served record; nothing to do')).toHaveLength(0);
    // SQS redelivers it; the store answers now, and the retry goes ahead.
    const again = { ...check, attributes: { ...check.attributes, ApproximateReceiveCount: '2' } };
    expect((await f.run([again], later(at, RETRY_AFTER + 40))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(2);
    expect(Number((await recordOf(j))?.attempt?.N)).toBe(1);
  });

  it('two copies racing the retry start exactly one runner (fixed seeds)', { timeout: scaled(240_000) }, async () => {
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      // Each seed on a fleet of its own: an earlier seed's new runner would be "starting".
      if (seed > 1) await freshFleet();
      // The seed staggers the two copies' record writes, so each order and the overlap occur.
      let state = seed;
      const random = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
      const delayed = () => {
        const client = dynamo();
        client.middlewareStack.add(
          (next) => async (args) => {
            await new Promise((r) => setTimeout(r, Math.floor(random() * 20)));
            return next(args);
          },
          { step: 'initialize' },
        );
        return new DynamoJobRecords(aws(), client, TABLE);
      };
      const f = new Fleet(2, delayed);
      const j = fresh(100 + seed);
      const at = t0();
      await serve(f, j, at);
      Object.assign(f.latestRunner(j), { status: 'online', busy: true });
      const when = later(at, RETRY_AFTER + 1);
      const results = await Promise.all([f.run([f.lastCheck()], when), f.run([f.copy(j, `reconciler-github-${j.providerJobId}`)], when)]);
      expect(results.flatMap((r) => r.batchItemFailures)).toEqual([]);
      expect(f.ci.created, `seed ${seed}`).toBe(2);
      expect(await serving(j), `seed ${seed}`).toHaveLength(2);
      expect(f.lines.metric('JobsRetried'), `seed ${seed}`).toBe(1);
      expect(Number((await recordOf(j))?.attempt?.N)).toBe(1);
      // The loser is refused by the retry's condition, or (when the winner's write came first) by its claim.
      const refused = [/^another copy of the job moved its retries on first/, /^another delivery of this job holds its record/].map((m) => f.lines.logs(m).length);
      expect(refused[0]! + refused[1]!, `seed ${seed}`).toBe(1);
    }
  });

  describe('lost answers', () => {
    const isStep = (mark: string) => (input: Record<string, unknown>) => JSON.stringify(input.ExpressionAttributeValues ?? {}).includes(`"${mark}:`);

    for (const lands of [true, false]) {
      it(`a retry take-over whose answer is lost (${lands ? 'it landed' : 'it did not land'}) starts exactly one runner`, { timeout: scaled(60_000) }, async () => {
        let lossy!: ReturnType<typeof losingFirstAnswer>;
        const f = new Fleet(2, () => new DynamoJobRecords(aws(), (lossy ??= losingFirstAnswer(dynamo(), 'UpdateItemCommand', { lands, when: isStep('retry') })), TABLE));
        const j = fresh(lands ? 7 : 8);
        const at = t0();
        await serve(f, j, at);
        Object.assign(f.latestRunner(j), { status: 'online', busy: true });
        expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
        expect(lossy.calls()).toBe(lands ? 1 : 2);
        expect(f.ci.created).toBe(2);
        expect(Number((await recordOf(j))?.attempt?.N)).toBe(1);
      });
    }

    it('a retry take-over whose answer is lost while another copy took it is not ours', async () => {
      const j = fresh(9);
      const at = t0();
      const records = new DynamoJobRecords(aws(), dynamo(), TABLE);
      await records.claim(j, at, later(at, 3600));
      expect(await records.markServed(j, 'i-first', at)).toEqual({ kind: 'marked' });
      const seen = { servedAt: Math.floor(at.getTime() / 1000), instanceId: 'i-first', attempt: 0, exhausted: false };
      const other = { ...j, deliveryId: 'other' };
      const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', {
        before: async () => void expect(await records.advance(other, seen, 'retry', 'msg-other', at, later(at, 3600))).toEqual({ kind: 'won' }),
      });
      expect(await new DynamoJobRecords(aws(), client, TABLE).advance(j, seen, 'retry', 'msg-mine', at, later(at, 3600))).toEqual({ kind: 'lost' });
      expect((await recordOf(j))?.deliveryId?.S).toBe('other');
    });

    for (const lands of [true, false]) {
      it(`an exhaustion whose answer is lost (${lands ? 'it landed' : 'it did not land'}) dead-letters the job once`, { timeout: scaled(60_000) }, async () => {
        let lossy!: ReturnType<typeof losingFirstAnswer>;
        const f = new Fleet(0, () => new DynamoJobRecords(aws(), (lossy ??= losingFirstAnswer(dynamo(), 'UpdateItemCommand', { lands, when: isStep('exhaust') })), TABLE));
        const j = fresh(lands ? 10 : 11);
        const at = t0();
        await serve(f, j, at);
        Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
        expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
        expect(lossy.calls()).toBe(lands ? 1 : 2);
        expect(f.deadLetters()).toEqual(['retries-exhausted']);
        expect(f.ci.created).toBe(1);
      });
    }

    for (const lands of [true, false]) {
      it(`marking served whose answer is lost (${lands ? 'it landed' : 'it did not land'}) is resolved by reading the record`, async () => {
        const j = fresh(lands ? 12 : 13);
        const at = t0();
        await new DynamoJobRecords(aws(), dynamo(), TABLE).claim(j, at, later(at, 3600));
        const client = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { lands });
        expect(await new DynamoJobRecords(aws(), client, TABLE).markServed(j, 'i-1', at)).toEqual({ kind: 'marked' });
        expect(client.calls()).toBe(lands ? 1 : 2);
        expect((await recordOf(j))?.servedInstance?.S).toBe('i-1');
        // Another delivery's mark is refused: the record is not its own.
        expect(await new DynamoJobRecords(aws(), dynamo(), TABLE).markServed({ ...j, deliveryId: 'other' }, 'i-2', at)).toEqual({ kind: 'not-held' });
      });
    }
  });
});

describe("retrying when the provider reads busy:false mid-job, against moto", () => {
  it("a runner that took another job and reads busy:false, but whose instance reported its job started, does not keep the job waiting", { timeout: scaled(90_000) }, async () => {
    const f = new Fleet();
    const j = fresh(30);
    const at = t0();
    await serve(f, j, at);
    const [instanceId] = await serving(j);
    // Its runner took another job of the pool (job 30 stays queued), and GitHub reads it
    // online and busy:false mid-job; the boot script tagged its instance when the job started.
    Object.assign(f.latestRunner(j), { status: 'online', busy: false });
    await c.ec2.send(new CreateTagsCommand({ Resources: [instanceId!], Tags: [{ Key: KEYS.jobStarted, Value: later(at, 60).toISOString() }] }));
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.lines.logs('the job is still queued, but a runner of its pool is idle or starting; looking again later')).toHaveLength(0);
    expect(f.lines.metric('JobsRetried', { Pool: 'linux' })).toBe(1);
    expect(f.ci.created).toBe(2);
    expect(await serving(j)).toHaveLength(2);
    expect(f.deadLetters()).toEqual([]);
  });
});

describe('retrying a job whose pool is in prime back-off, against moto', () => {
  it('the retry becomes a wait copy and launches nothing', { timeout: scaled(90_000) }, async () => {
    const f = new Fleet();
    const j = fresh(31);
    const at = t0();
    await serve(f, j, at);
    // No parked standby left (the retry would go cold), and the pool's cold launches failing:
    // two failures in a row, the last one just now, so the next probe waits its delay.
    const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'instance-state-name', Values: ['stopped'] }] }));
    const parked = (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((i) => i.InstanceId!);
    if (parked.length > 0) await c.ec2.send(new TerminateInstancesCommand({ InstanceIds: parked }));
    const pool = config.pools.find((p) => p.name === 'linux')!;
    const streak = { ...freshStreak(templateOf(pool)), failures: 2, lastFailureAt: later(at, RETRY_AFTER).toISOString() };
    await c.ssm.send(new PutParameterCommand({ Name: ssmPaths(config.prefix).primeState('linux'), Value: encodeStreak(streak), Type: 'String', Overwrite: true }));
    // The job's runner died before taking it: the retry is due.
    Object.assign(f.latestRunner(j), { status: 'offline', busy: false });
    const sentBefore = f.sent.length;
    expect((await f.run([f.lastCheck()], later(at, RETRY_AFTER + 1))).batchItemFailures).toEqual([]);
    expect(f.ci.created).toBe(1);
    expect(await serving(j)).toHaveLength(1);
    expect(f.lines.logs("the pool's prime back-off holds cold launches (backoff), job waits")).toHaveLength(1);
    const copies = f.sent.slice(sentBefore).filter((s) => s.queue === 'q');
    expect(copies).toHaveLength(1);
    expect(JSON.parse(copies[0]!.body).jobId).toBe(j.jobId);
    expect(f.deadLetters()).toEqual([]);
  });
});
