import { DeleteItemCommand, GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient, type GetItemCommandOutput, type UpdateItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { errorName, mapLimit, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, JOB_RECORD_HOLD_SECONDS, JOB_RECORD_TTL_SECONDS, type JobMessage, type MetricNames } from '../shared/contract';
import type { Logger, Metrics } from '../shared/log';
import type { ServedCopy } from './retry-check';

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
 * dead-letters the job (`release`, conditional on the holder), and a holder that
 * ended without scale-up knowing (SQS's redrive moved its message to the dead-letter queue)
 * loses it at its deadline (`holdUntil`, see `holderDeadline`), after which the write takes
 * the record over. A take-over is reported as such: the job may have been served meanwhile,
 * so the caller asks the provider whether it is still queued before serving it.
 *
 * Once a runner is started for the job, its holder marks the record served (`markServed`): a
 * later copy then learns when and on which instance, and may retry the job whose runner went
 * elsewhere (`advance`, lambdas/scale-up/retry.ts). A served record is never taken over by
 * the holder deadline: only a retry, counted and bounded, gives it another runner.
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
   * provider whether the job is still queued first. `served`: a runner was started for it
   * already (this is a retry check, or a late copy of the same delivery). `superseded`: the
   * instances of earlier attempts, which do not serve the job any more. `fresh`: the claim found
   * no record of the job at all, not even a released one (no copy of it was claimed before: a
   * reconciled copy then is a lost delivery, and the latency ledger's intake is stamped on it).
   */
  | { readonly kind: 'mine'; readonly tookOver: boolean; readonly fresh?: boolean; readonly served?: ServedState; readonly superseded?: readonly string[] }
  /** Another delivery holds it: its messages serve the job; this one launches nothing (unless it retries a served job). */
  | { readonly kind: 'taken'; readonly holder: string; readonly served?: ServedState; readonly superseded?: readonly string[] }
  /** The store failed or its answer stayed unknown: the caller serves the job without a record. */
  | { readonly kind: 'unavailable'; readonly error: string };

/** A served record: when and where the current attempt's runner was started. */
export interface ServedState {
  /** Epoch seconds. */
  readonly servedAt: number;
  readonly instanceId: string;
  /** Retries taken so far (0: the first runner). */
  readonly attempt: number;
  /** The retries are spent: the job was dead-lettered. */
  readonly exhausted: boolean;
  /**
   * The SQS message id whose check spent the retries (from `advancedBy`, `exhaust:<id>`): its
   * dead-letter send follows the write, so a redelivery of that message sends it again.
   */
  readonly exhaustedBy?: string;
}

/** What a retry step came to: `won` (this message holds the next attempt, or the exhaustion), `lost` (another copy moved first). */
export type AdvanceOutcome = { readonly kind: 'won' } | { readonly kind: 'lost' } | { readonly kind: 'failed'; readonly error: string };

/** What marking a record served came to; `not-held` when another delivery holds it (or none). */
export type MarkOutcome = { readonly kind: 'marked' } | { readonly kind: 'not-held' } | { readonly kind: 'failed'; readonly error: string };

/** What releasing a record came to; `failed` leaves it to its holder deadline. */

export type ReleaseOutcome = { readonly kind: 'released' } | { readonly kind: 'not-held' } | { readonly kind: 'failed'; readonly error: string };

export interface JobRecords {
  /** Holds the job's record for `job.deliveryId` until `holdUntil` (at least). */
  claim(job: JobMessage, now: Date, holdUntil: Date): Promise<RecordOutcome>;
  /**
   * Gives the record up if `job.deliveryId` holds it, so a later copy may serve the job.
   * `tombstone` (a dead-lettered job) keeps the item without a holder or an attempt until its
   * TTL: the job was claimed before, so the reconciler's copy that serves it later is no lost
   * delivery. `delete` removes it: for a claim that found no record (a stray retry check), the
   * state before it.
   */
  release(job: JobMessage, keep?: 'tombstone' | 'delete'): Promise<ReleaseOutcome>;
  /** Records that the runner of `job`'s current attempt was started on `instanceId`. */
  markServed(job: JobMessage, instanceId: string, now: Date): Promise<MarkOutcome>;
  /**
   * Moves a served record on by one step, if it is still as `seen`: `retry` gives `job`'s
   * delivery the next attempt (holding it until `holdUntil`, the served instance superseded),
   * `exhaust` marks the retries spent. `token` (the SQS message id) tells this message's write
   * from another copy's when an answer is lost.
   */
  advance(job: JobMessage, seen: ServedState, step: 'retry' | 'exhaust', token: string, now: Date, holdUntil: Date): Promise<AdvanceOutcome>;
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
        const out = await this.aws.send<UpdateItemCommandOutput>(this.dynamodb, this.put(job, now, holdUntil), WRITE_ONCE);
        // ALL_OLD has no attributes when no item existed: not even a released one.
        return mineOf(out.Attributes, tookOver(out.Attributes, job, now), out.Attributes === undefined);
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return takenOf((error as { Item?: Item }).Item);
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

  async release(job: JobMessage, keep: 'tombstone' | 'delete' = 'tombstone'): Promise<ReleaseOutcome> {
    // As for the put: a release whose answer was lost is resolved by reading the record back.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, keep === 'delete' ? this.delete(job) : this.tombstone(job), WRITE_ONCE);
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

  /**
   * The record without its holder, its deadline or its attempts: a later copy's claim takes it
   * as it would take no record (`attribute_not_exists(#delivery)`), and serves the job from
   * attempt 0, but finds that the job was claimed before. `expiresAt` stays, and with it the
   * TTL: the record of the last claim, which outlives the job's time in the queue.
   */
  private tombstone(job: JobMessage): UpdateItemCommand {
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [A.key]: { S: job.jobId } },
      UpdateExpression: 'REMOVE #delivery, #trace, #hold, #servedAt, #servedInstance, #attempt, #superseded, #advancedBy, #exhausted',
      // Only this delivery's own record: a copy that took it over keeps it.
      ConditionExpression: '#delivery = :delivery',
      ExpressionAttributeNames: {
        '#delivery': A.delivery,
        '#trace': A.trace,
        '#hold': A.holdUntil,
        '#servedAt': A.servedAt,
        '#servedInstance': A.servedInstance,
        '#attempt': A.attempt,
        '#superseded': A.superseded,
        '#advancedBy': A.advancedBy,
        '#exhausted': A.exhausted,
      },
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

  /**
   * The claim: an update rather than a put, so that a served record keeps what it says about
   * its runner (a retry check of the same delivery claims it too).
   */
  private put(job: JobMessage, now: Date, holdUntil: Date): UpdateItemCommand {
    const nowSeconds = Math.floor(now.getTime() / 1000);
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [A.key]: { S: job.jobId } },
      UpdateExpression: 'SET #delivery = :delivery, #trace = :trace, #claimedAt = :claimedAt, #expires = :expiresAt, #hold = :hold',
      // TTL deletes lazily (within days of expiry): the condition treats an expired record as
      // absent. A holder past its deadline is taken over by this one write: of two copies
      // racing for it, the second finds the first's fresh deadline and is refused. A served
      // record is not: its job has a runner, and only a counted retry (`advance`) adds one.
      // A released record (no holder) is taken as no record.
      ConditionExpression: 'attribute_not_exists(#key) OR attribute_not_exists(#delivery) OR #delivery = :delivery OR #expires < :now OR (#hold < :now AND attribute_not_exists(#servedAt))',
      ExpressionAttributeNames: {
        '#key': A.key,
        '#delivery': A.delivery,
        '#trace': A.trace,
        '#claimedAt': A.claimedAt,
        '#expires': A.expiresAt,
        '#hold': A.holdUntil,
        '#servedAt': A.servedAt,
      },
      ExpressionAttributeValues: {
        ':delivery': { S: job.deliveryId },
        ':trace': { S: job.traceId },
        ':claimedAt': { S: now.toISOString() },
        ':expiresAt': { N: String(nowSeconds + this.ttlSeconds) },
        ':hold': { N: String(Math.ceil(holdUntil.getTime() / 1000)) },
        ':now': { N: String(nowSeconds) },
      },
      // The replaced record says whether this was a take-over, and whether the job was served.
      ReturnValues: 'ALL_OLD',
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    });
  }

  async markServed(job: JobMessage, instanceId: string, now: Date): Promise<MarkOutcome> {
    // SET is idempotent: a mark whose answer was lost is read back, and sent once more when it
    // did not land.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, this.mark(job, instanceId, now), WRITE_ONCE);
        return { kind: 'marked' };
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return { kind: 'not-held' };
        if (!(error instanceof UnknownOutcomeError)) return { kind: 'failed', error: errorName(error) };
      }
      let item: Item | undefined;
      try {
        item = (await this.read(job)).Item;
      } catch (error) {
        return { kind: 'failed', error: `mark outcome unknown, read failed: ${errorName(error)}` };
      }
      if (item?.[A.delivery]?.S !== job.deliveryId) return { kind: 'not-held' };
      if (item[A.servedInstance]?.S === instanceId) return { kind: 'marked' };
    }
    return { kind: 'failed', error: 'mark outcome unknown twice' };
  }

  private mark(job: JobMessage, instanceId: string, now: Date): UpdateItemCommand {
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [A.key]: { S: job.jobId } },
      UpdateExpression: 'SET #servedAt = :servedAt, #servedInstance = :instance, #attempt = if_not_exists(#attempt, :zero)',
      ConditionExpression: '#delivery = :delivery',
      ExpressionAttributeNames: { '#servedAt': A.servedAt, '#servedInstance': A.servedInstance, '#attempt': A.attempt, '#delivery': A.delivery },
      ExpressionAttributeValues: {
        ':servedAt': { N: String(Math.floor(now.getTime() / 1000)) },
        ':instance': { S: instanceId },
        ':zero': { N: '0' },
        ':delivery': { S: job.deliveryId },
      },
    });
  }

  async advance(job: JobMessage, seen: ServedState, step: 'retry' | 'exhaust', token: string, now: Date, holdUntil: Date): Promise<AdvanceOutcome> {
    const mark = `${step}:${token}`;
    // The condition names the served state this copy saw: of two copies racing, the second
    // finds it changed and is refused. A lost answer is read back: our mark means ours landed
    // (also when an earlier receive of this message wrote it); the state unchanged means it
    // did not, and it is sent once more.
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, this.step(job, seen, step, mark, now, holdUntil), WRITE_ONCE);
        return { kind: 'won' };
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return { kind: 'lost' };
        if (!(error instanceof UnknownOutcomeError)) return { kind: 'failed', error: errorName(error) };
      }
      let item: Item | undefined;
      try {
        item = (await this.read(job)).Item;
      } catch (error) {
        return { kind: 'failed', error: `${step} outcome unknown, read failed: ${errorName(error)}` };
      }
      if (item?.[A.advancedBy]?.S === mark) return { kind: 'won' };
      const current = servedOf(item);
      if (!current || current.servedAt !== seen.servedAt || current.attempt !== seen.attempt || current.exhausted) return { kind: 'lost' };
    }
    return { kind: 'failed', error: `${step} outcome unknown twice` };
  }

  private step(job: JobMessage, seen: ServedState, step: 'retry' | 'exhaust', mark: string, now: Date, holdUntil: Date): UpdateItemCommand {
    const names = { '#attempt': A.attempt, '#servedAt': A.servedAt, '#exhausted': A.exhausted, '#advancedBy': A.advancedBy };
    const values = { ':seenAttempt': { N: String(seen.attempt) }, ':seenServedAt': { N: String(seen.servedAt) }, ':mark': { S: mark } };
    const condition = '#attempt = :seenAttempt AND #servedAt = :seenServedAt AND attribute_not_exists(#exhausted)';
    if (step === 'exhaust') {
      return new UpdateItemCommand({
        TableName: this.tableName,
        Key: { [A.key]: { S: job.jobId } },
        UpdateExpression: 'SET #exhausted = :true, #advancedBy = :mark',
        ConditionExpression: condition,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ...values, ':true': { BOOL: true } },
      });
    }
    // The retry takes the record for this delivery as a claim does, and forgets the served
    // state: the new attempt is served when its runner starts.
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [A.key]: { S: job.jobId } },
      UpdateExpression:
        'SET #attempt = :next, #advancedBy = :mark, #delivery = :delivery, #trace = :trace, #claimedAt = :claimedAt, #hold = :hold ' +
        'ADD #superseded :instance REMOVE #servedAt, #servedInstance',
      ConditionExpression: condition,
      ExpressionAttributeNames: { ...names, '#delivery': A.delivery, '#trace': A.trace, '#claimedAt': A.claimedAt, '#hold': A.holdUntil, '#superseded': A.superseded, '#servedInstance': A.servedInstance },
      ExpressionAttributeValues: {
        ...values,
        ':next': { N: String(seen.attempt + 1) },
        ':delivery': { S: job.deliveryId },
        ':trace': { S: job.traceId },
        ':claimedAt': { S: now.toISOString() },
        ':hold': { N: String(Math.ceil(holdUntil.getTime() / 1000)) },
        ':instance': { SS: [seen.instanceId] },
      },
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
    // (The claim leaves the served state as it was, so the item shows it as the put found it.)
    if (holder === job.deliveryId) return mineOf(out.Item, true, false);
    // Another holder past its deadline: the lost put (a take-over) did not land, as its
    // condition would have let it: the caller sends it once more (the put's own condition).
    const hold = out.Item?.[A.holdUntil]?.N;
    if (hold !== undefined && Number(hold) < nowSeconds && out.Item?.[A.servedAt] === undefined) return undefined;
    return takenOf(out.Item);
  }
}

type Item = Record<string, AttributeValue>;

/** `advancedBy` of an exhaustion: `exhaust:<message id>` (the mark `advance` writes). */
const EXHAUST_MARK = 'exhaust:';

/** The served state an item records, if a runner was started for its job. */
function servedOf(item: Item | undefined): ServedState | undefined {
  const at = item?.[A.servedAt]?.N;
  const instanceId = item?.[A.servedInstance]?.S;
  if (at === undefined || instanceId === undefined) return undefined;
  const exhausted = item?.[A.exhausted]?.BOOL === true;
  const by = item?.[A.advancedBy]?.S;
  const exhaustedBy = exhausted && by?.startsWith(EXHAUST_MARK) ? by.slice(EXHAUST_MARK.length) : undefined;
  return { servedAt: Number(at), instanceId, attempt: Number(item?.[A.attempt]?.N ?? '0'), exhausted, ...(exhaustedBy ? { exhaustedBy } : {}) };
}

/** What a record says of earlier attempts: its served state and superseded instances, where it has them. */
function attemptsOf(item: Item | undefined): { served?: ServedState; superseded?: readonly string[] } {
  const served = servedOf(item);
  const superseded = item?.[A.superseded]?.SS;
  return { ...(served ? { served } : {}), ...(superseded?.length ? { superseded } : {}) };
}

function mineOf(old: Item | undefined, tookOverIt: boolean, fresh: boolean): RecordOutcome {
  return { kind: 'mine', tookOver: tookOverIt, ...(fresh ? { fresh } : {}), ...attemptsOf(old) };
}

function takenOf(item: Item | undefined): RecordOutcome {
  return { kind: 'taken', holder: item?.[A.delivery]?.S ?? 'unknown', ...attemptsOf(item) };
}

/** Whether the record a put replaced was another delivery's, still live but past its deadline. */
function tookOver(old: Item | undefined, job: JobMessage, now: Date): boolean {
  const holder = old?.[A.delivery]?.S;
  if (holder === undefined || holder === job.deliveryId) return false;
  return Number(old?.[A.expiresAt]?.N ?? '0') >= Math.floor(now.getTime() / 1000);
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
 * runner id). Copies of a job another delivery serves are returned as `dropped`, to be
 * settled; copies of a job a runner was started for already as `served`, to be checked for a
 * retry (retry-check.ts). `tookOver` lists the admitted jobs whose record was another
 * delivery's: the caller asks the provider whether they are still queued before serving them.
 * `superseded`: per admitted job, the instances of its earlier attempts (a retry's later receive).
 * `unrecorded`: the admitted jobs served without a record (none to mark served).
 * `fresh`: the admitted jobs whose claim found no record of the job (its first copy claimed).
 */
export async function admitByRecord<T extends { readonly job: JobMessage; readonly pool?: string; readonly log: Logger }>(
  ctx: AdmitContext,
  jobs: readonly T[],
): Promise<{ admitted: T[]; dropped: T[]; tookOver: T[]; served: ServedCopy<T>[]; superseded: Map<T, readonly string[]>; unrecorded: T[]; fresh: T[] }> {
  const outcomes = await mapLimit(jobs, 10, (j) => {
    const now = ctx.now();
    return ctx.records.claim(j.job, now, holderDeadline(j.job, now, ctx.maxWaitSeconds));
  });
  const admitted: T[] = [];
  const dropped: T[] = [];
  const tookOver: T[] = [];
  const served: ServedCopy<T>[] = [];
  const superseded = new Map<T, readonly string[]>();
  const unrecorded: T[] = [];
  const fresh: T[] = [];
  jobs.forEach((j, i) => {
    const o = outcomes[i]!;
    if (o.kind !== 'unavailable' && o.served) {
      served.push({ item: j, served: o.served, superseded: o.superseded ?? [], mine: o.kind === 'mine' });
      return;
    }
    if (o.kind === 'taken') {
      j.log.info('another delivery of this job holds its record; this copy launches nothing', { holder: o.holder });
      ctx.metrics.add(ctx.names.jobsDeduplicated, { Pool: j.pool ?? 'unresolved', Reason: 'job-record' });
      dropped.push(j);
      return;
    }
    if (o.kind === 'unavailable') {
      j.log.error('the per-job record could not be written; serving the job without it', { error: o.error });
      ctx.metrics.add(ctx.names.jobRecordErrors, { Pool: j.pool ?? 'unresolved' });
      unrecorded.push(j);
    }
    if (o.kind === 'mine' && o.tookOver) {
      j.log.info('took over the record of a delivery past its deadline (or could not rule it out)');
      tookOver.push(j);
    }
    if (o.kind === 'mine' && o.superseded) superseded.set(j, o.superseded);
    if (o.kind === 'mine' && o.fresh) fresh.push(j);
    admitted.push(j);
  });
  return { admitted, dropped, tookOver, served, superseded, unrecorded, fresh };
}
