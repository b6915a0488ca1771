import { GetItemCommand, PutItemCommand, type DynamoDBClient, type GetItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { errorName, mapLimit, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, JOB_RECORD_TTL_SECONDS, type JobMessage, type MetricNames } from '../shared/contract';
import type { Logger, Metrics } from '../shared/log';

/**
 * The per-job record: "served exactly once" beyond the FIFO queue's 5-minute deduplication.
 *
 * One DynamoDB item per job (key `jobId`), naming the delivery whose messages serve it. It is
 * written with a conditional PutItem before any runner is registered for the job: the write
 * succeeds when there is no record, when the record is this delivery's own (an SQS retry or
 * a capacity wait copy carries the same body, so the same delivery id), or when the record
 * has expired. Another delivery of the same job (a reconciled copy, a redelivery GitHub gave
 * a new id, a second Job Hook event) finds the record held and launches nothing.
 *
 * DynamoDB rather than SSM: the claim's PutParameter is paced at a few writes a second per
 * account (docs/control-plane.md), and a record write per job would halve the warm path's
 * rate; a DynamoDB conditional write is atomic, on its own on-demand capacity, and moto
 * speaks it.
 */
export type RecordOutcome =
  /** This delivery holds the record: serve the job. */
  | { readonly kind: 'mine' }
  /** Another delivery holds it: its messages serve the job; this one launches nothing. */
  | { readonly kind: 'taken'; readonly holder: string }
  /** The store failed or its answer stayed unknown: the caller serves the job without a record. */
  | { readonly kind: 'unavailable'; readonly error: string };

export interface JobRecords {
  claim(job: JobMessage, now: Date): Promise<RecordOutcome>;
}

const A = JOB_RECORD_ATTRIBUTES;

export class DynamoJobRecords implements JobRecords {
  constructor(
    private readonly aws: AwsCaller,
    private readonly dynamodb: DynamoDBClient,
    private readonly tableName: string,
    private readonly ttlSeconds = JOB_RECORD_TTL_SECONDS,
  ) {}

  async claim(job: JobMessage, now: Date): Promise<RecordOutcome> {
    // A put whose answer was lost is resolved by reading the record back (consistent read);
    // when that finds nothing, the put did not happen and is sent once more.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, this.put(job, now), WRITE_ONCE);
        return { kind: 'mine' };
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return { kind: 'taken', holder: holderOf(error) };
        if (!(error instanceof UnknownOutcomeError)) return { kind: 'unavailable', error: errorName(error) };
      }
      let observed: RecordOutcome | undefined;
      try {
        observed = await this.observe(job, now);
      } catch (error) {
        return { kind: 'unavailable', error: `put outcome unknown, read failed: ${errorName(error)}` };
      }
      if (observed) return observed;
    }
    return { kind: 'unavailable', error: 'put outcome unknown twice' };
  }

  private put(job: JobMessage, now: Date): PutItemCommand {
    const nowSeconds = Math.floor(now.getTime() / 1000);
    return new PutItemCommand({
      TableName: this.tableName,
      Item: {
        [A.key]: { S: job.jobId },
        [A.delivery]: { S: job.deliveryId },
        [A.trace]: { S: job.traceId },
        [A.claimedAt]: { S: now.toISOString() },
        [A.expiresAt]: { N: String(nowSeconds + this.ttlSeconds) },
      },
      // TTL deletes lazily (within days of expiry): the condition treats an expired record as absent.
      ConditionExpression: 'attribute_not_exists(#key) OR #delivery = :delivery OR #expires < :now',
      ExpressionAttributeNames: { '#key': A.key, '#delivery': A.delivery, '#expires': A.expiresAt },
      ExpressionAttributeValues: { ':delivery': { S: job.deliveryId }, ':now': { N: String(nowSeconds) } },
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    });
  }

  /** The record as it is now: whose it is, or undefined when there is none (the put did not land). */
  private async observe(job: JobMessage, now: Date): Promise<RecordOutcome | undefined> {
    const out = await this.aws.send<GetItemCommandOutput>(
      this.dynamodb,
      new GetItemCommand({ TableName: this.tableName, Key: { [A.key]: { S: job.jobId } }, ConsistentRead: true }),
      READ,
    );
    const holder = out.Item?.[A.delivery]?.S;
    const expires = Number(out.Item?.[A.expiresAt]?.N ?? '0');
    if (holder === undefined || expires < Math.floor(now.getTime() / 1000)) return undefined;
    return holder === job.deliveryId ? { kind: 'mine' } : { kind: 'taken', holder };
  }
}

function holderOf(error: unknown): string {
  const item = (error as { Item?: Record<string, { S?: string }> }).Item;
  return item?.[A.delivery]?.S ?? 'unknown';
}

/** What `admitByRecord` needs of the invocation. */
export interface AdmitContext {
  readonly records: JobRecords;
  readonly now: () => Date;
  readonly metrics: Metrics;
  readonly names: MetricNames;
}

/**
 * The jobs of `jobs` that go on to be decided (wait, warm, cold): those whose record this
 * delivery holds, and those whose record could not be written (counted and logged: serving a
 * job twice costs an idle runner that the idle rule reclaims, failing it would leave it
 * waiting, and the decision's "served" rule still stops a copy whose instance carries its
 * runner id). The rest are copies of a job another delivery serves: returned as `dropped`,
 * to be settled.
 */
export async function admitByRecord<T extends { readonly job: JobMessage; readonly pool?: string; readonly log: Logger }>(
  ctx: AdmitContext,
  jobs: readonly T[],
): Promise<{ admitted: T[]; dropped: T[] }> {
  const outcomes = await mapLimit(jobs, 10, (j) => ctx.records.claim(j.job, ctx.now()));
  const admitted: T[] = [];
  const dropped: T[] = [];
  jobs.forEach((j, i) => {
    const o = outcomes[i]!;
    if (o.kind === 'taken') {
      j.log.info('another delivery of this job holds its record; this copy launches nothing', { holder: o.holder });
      ctx.metrics.add(ctx.names.jobsDeduplicated, { Pool: j.pool ?? 'unresolved', Reason: 'job-record' });
      dropped.push(j);
      return;
    }
    if (o.kind === 'unavailable') {
      j.log.error('the per-job record could not be written; serving the job without it', { error: o.error });
      ctx.metrics.add(ctx.names.jobRecordErrors, { Pool: j.pool ?? 'unresolved' });
    }
    admitted.push(j);
  });
  return { admitted, dropped };
}
