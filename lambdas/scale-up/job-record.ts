import { DeleteItemCommand, GetItemCommand, PutItemCommand, type DynamoDBClient, type GetItemCommandOutput, type PutItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { errorName, mapLimit, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, JOB_RECORD_HOLD_SECONDS, JOB_RECORD_TTL_SECONDS, type JobMessage, type MetricNames } from '../shared/contract';
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
 * A holder never keeps a job it no longer serves: scale-up releases the record when it
 * dead-letters the job (`release`, a DeleteItem conditional on the holder), and a holder that
 * ended without scale-up knowing (SQS's redrive moved its message to the dead-letter queue)
 * loses it at its deadline (`holdUntil`, see `holderDeadline`), after which the write takes
 * the record over. A take-over is reported as such: the job may have been served meanwhile,
 * so the caller asks the provider whether it is still queued before serving it.
 *
 * DynamoDB rather than SSM: the claim's PutParameter is paced at a few writes a second per
 * account (docs/control-plane.md), and a record write per job would halve the warm path's
 * rate; a DynamoDB conditional write is atomic, on its own on-demand capacity, and moto
 * speaks it.
 */
export type RecordOutcome =
  /**
   * This delivery holds the record: serve the job. `tookOver`: it was another delivery's, past
   * its deadline (or the write's answer was lost, so that cannot be ruled out): ask the
   * provider whether the job is still queued first.
   */
  | { readonly kind: 'mine'; readonly tookOver: boolean }
  /** Another delivery holds it: its messages serve the job; this one launches nothing. */
  | { readonly kind: 'taken'; readonly holder: string }
  /** The store failed or its answer stayed unknown: the caller serves the job without a record. */
  | { readonly kind: 'unavailable'; readonly error: string };

/** What releasing a record came to; `failed` leaves it to its holder deadline. */
export type ReleaseOutcome = { readonly kind: 'released' } | { readonly kind: 'not-held' } | { readonly kind: 'failed'; readonly error: string };

export interface JobRecords {
  /** Holds the job's record for `job.deliveryId` until `holdUntil` (at least). */
  claim(job: JobMessage, now: Date, holdUntil: Date): Promise<RecordOutcome>;
  /** Deletes the record if `job.deliveryId` holds it, so a later copy may serve the job. */
  release(job: JobMessage): Promise<ReleaseOutcome>;
}

/**
 * The latest time the delivery of `job` can still be served, claimed at `now`: it may wait for
 * capacity until its maximum age, then a last wait copy and the redrive policy's receives may
 * follow (JOB_RECORD_HOLD_SECONDS). Each claim (every retry and wait copy claims again) moves
 * it on, so a live holder keeps its record.
 */
export function holderDeadline(job: JobMessage, now: Date, maxWaitSeconds: number): Date {
  const waitEnds = Date.parse(job.receivedAt) + maxWaitSeconds * 1000;
  return new Date(Math.max(Number.isNaN(waitEnds) ? 0 : waitEnds, now.getTime()) + JOB_RECORD_HOLD_SECONDS * 1000);
}

const A = JOB_RECORD_ATTRIBUTES;

export class DynamoJobRecords implements JobRecords {
  constructor(
    private readonly aws: AwsCaller,
    private readonly dynamodb: DynamoDBClient,
    private readonly tableName: string,
    private readonly ttlSeconds = JOB_RECORD_TTL_SECONDS,
  ) {}

  async claim(job: JobMessage, now: Date, holdUntil: Date): Promise<RecordOutcome> {
    // A put whose answer was lost is resolved by reading the record back (consistent read);
    // when that finds nothing, the put did not happen and is sent once more.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        const out = await this.aws.send<PutItemCommandOutput>(this.dynamodb, this.put(job, now, holdUntil), WRITE_ONCE);
        return { kind: 'mine', tookOver: tookOver(out.Attributes, job, now) };
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

  async release(job: JobMessage): Promise<ReleaseOutcome> {
    // As for the put: a delete whose answer was lost is resolved by reading the record back.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, this.delete(job), WRITE_ONCE);
        return { kind: 'released' };
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return { kind: 'not-held' };
        if (!(error instanceof UnknownOutcomeError)) return { kind: 'failed', error: errorName(error) };
      }
      let holder: string | undefined;
      try {
        holder = (await this.read(job)).Item?.[A.delivery]?.S;
      } catch (error) {
        return { kind: 'failed', error: `delete outcome unknown, read failed: ${errorName(error)}` };
      }
      if (holder !== job.deliveryId) return { kind: 'released' };
    }
    return { kind: 'failed', error: 'delete outcome unknown twice' };
  }

  private delete(job: JobMessage): DeleteItemCommand {
    return new DeleteItemCommand({
      TableName: this.tableName,
      Key: { [A.key]: { S: job.jobId } },
      // Only this delivery's own record: a copy that took it over keeps it.
      ConditionExpression: '#delivery = :delivery',
      ExpressionAttributeNames: { '#delivery': A.delivery },
      ExpressionAttributeValues: { ':delivery': { S: job.deliveryId } },
    });
  }

  private read(job: JobMessage): Promise<GetItemCommandOutput> {
    return this.aws.send<GetItemCommandOutput>(
      this.dynamodb,
      new GetItemCommand({ TableName: this.tableName, Key: { [A.key]: { S: job.jobId } }, ConsistentRead: true }),
      READ,
    );
  }

  private put(job: JobMessage, now: Date, holdUntil: Date): PutItemCommand {
    const nowSeconds = Math.floor(now.getTime() / 1000);
    return new PutItemCommand({
      TableName: this.tableName,
      Item: {
        [A.key]: { S: job.jobId },
        [A.delivery]: { S: job.deliveryId },
        [A.trace]: { S: job.traceId },
        [A.claimedAt]: { S: now.toISOString() },
        [A.expiresAt]: { N: String(nowSeconds + this.ttlSeconds) },
        [A.holdUntil]: { N: String(Math.ceil(holdUntil.getTime() / 1000)) },
      },
      // TTL deletes lazily (within days of expiry): the condition treats an expired record as
      // absent. A holder past its deadline is taken over by this one write: of two copies
      // racing for it, the second finds the first's fresh deadline and is refused.
      ConditionExpression: 'attribute_not_exists(#key) OR #delivery = :delivery OR #expires < :now OR #hold < :now',
      ExpressionAttributeNames: { '#key': A.key, '#delivery': A.delivery, '#expires': A.expiresAt, '#hold': A.holdUntil },
      ExpressionAttributeValues: { ':delivery': { S: job.deliveryId }, ':now': { N: String(nowSeconds) } },
      // The replaced record says whether this was a take-over.
      ReturnValues: 'ALL_OLD',
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    });
  }

  /** The record as it is now: whose it is, or undefined when there is none (the put did not land). */
  private async observe(job: JobMessage, now: Date): Promise<RecordOutcome | undefined> {
    const out = await this.read(job);
    const holder = out.Item?.[A.delivery]?.S;
    const nowSeconds = Math.floor(now.getTime() / 1000);
    const expires = Number(out.Item?.[A.expiresAt]?.N ?? '0');
    if (holder === undefined || expires < nowSeconds) return undefined;
    // Ours, but whether the lost put took it over from another holder cannot be told: ask.
    if (holder === job.deliveryId) return { kind: 'mine', tookOver: true };
    // Another holder past its deadline: the lost put (a take-over) did not land, as its
    // condition would have let it: the caller sends it once more (the put's own condition).
    const hold = out.Item?.[A.holdUntil]?.N;
    if (hold !== undefined && Number(hold) < nowSeconds) return undefined;
    return { kind: 'taken', holder };
  }
}

/** Whether the record a put replaced was another delivery's, still live but past its deadline. */
function tookOver(old: Record<string, { S?: string; N?: string }> | undefined, job: JobMessage, now: Date): boolean {
  const holder = old?.[A.delivery]?.S;
  if (holder === undefined || holder === job.deliveryId) return false;
  return Number(old?.[A.expiresAt]?.N ?? '0') >= Math.floor(now.getTime() / 1000);
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
  /** How long a job may wait for capacity: part of its holder deadline. */
  readonly maxWaitSeconds: number;
}

/**
 * The jobs of `jobs` that go on to be decided (wait, warm, cold): those whose record this
 * delivery holds, and those whose record could not be written (counted and logged: serving a
 * job twice costs an idle runner that the idle rule reclaims, failing it would leave it
 * waiting, and the decision's "served" rule still stops a copy whose instance carries its
 * runner id). The rest are copies of a job another delivery serves: returned as `dropped`,
 * to be settled. `tookOver` lists the admitted jobs whose record was another delivery's: the
 * caller asks the provider whether they are still queued before serving them.
 */
export async function admitByRecord<T extends { readonly job: JobMessage; readonly pool?: string; readonly log: Logger }>(
  ctx: AdmitContext,
  jobs: readonly T[],
): Promise<{ admitted: T[]; dropped: T[]; tookOver: T[] }> {
  const outcomes = await mapLimit(jobs, 10, (j) => {
    const now = ctx.now();
    return ctx.records.claim(j.job, now, holderDeadline(j.job, now, ctx.maxWaitSeconds));
  });
  const admitted: T[] = [];
  const dropped: T[] = [];
  const tookOver: T[] = [];
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
    if (o.kind === 'mine' && o.tookOver) {
      j.log.info('took over the record of a delivery past its deadline (or could not rule it out)');
      tookOver.push(j);
    }
    admitted.push(j);
  });
  return { admitted, dropped, tookOver };
}
