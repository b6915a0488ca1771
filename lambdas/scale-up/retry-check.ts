import type { SQSRecord } from 'aws-lambda';
import { errorName, mapLimit } from '../shared/aws-call';
import { MAX_WAIT_REASON, RETRIES_EXHAUSTED_REASON, type CiProvider, type JobMessage, type JobRetryOptions, type MetricNames, type PoolConfig, type RunnerSummary, type TagKeys } from '../shared/contract';
import type { ObservedInstance } from '../shared/instances';
import { maxJobSecondsOf } from '../shared/job-report';
import type { Logger, Metrics } from '../shared/log';
import { holderDeadline, type JobRecords, type ServedState } from './job-record';
import { capableRunners, retryAction, retryDue } from './retry';

/** Logged when a retry check starts another runner for its job (local/lambdas.ts reads it as the job's `retried` fact). */
export const RETRY_STARTED_MESSAGE = 'the job is still queued and no runner of its pool could take it: starting another';

/** A message whose job's record says a runner was started for it (retry.ts explains the check). */
export interface ServedCopy<T> {
  readonly item: T;
  readonly served: ServedState;
  /** The instances of earlier attempts. */
  readonly superseded: readonly string[];
  /** This message's delivery holds the record (a retry check, or a late receive of the serving message). */
  readonly mine: boolean;
}

/** What the check needs of the invocation; the handler's own steps (settle, fail, dead-letter) are passed in. */
export interface RetryCheckContext<T> {
  readonly records: JobRecords;
  readonly retry: JobRetryOptions;
  readonly maxWaitSeconds: number;
  readonly keys: TagKeys;
  /** The fleet's pools: a pool's max job duration bounds its instances' job-started reports. */
  readonly pools: readonly PoolConfig[];
  readonly now: () => Date;
  readonly metrics: Metrics;
  readonly names: MetricNames;
  readonly observeFleet: () => Promise<readonly ObservedInstance[]>;
  readonly runnersOf: (provider: CiProvider) => Promise<readonly RunnerSummary[]>;
  readonly providerOf: (item: T) => CiProvider;
  /** True: still queued; false: not (the handler settled it); undefined: asking failed (the handler failed it). */
  readonly stillQueued: (item: T) => Promise<boolean | undefined>;
  readonly settle: (record: SQSRecord) => void;
  readonly fail: (record: SQSRecord) => void;
  readonly deadLetter: (item: T, reason: string) => Promise<void>;
  /** Sends the next retry check of the item's job, not before the given time. */
  readonly scheduleCheck: (item: T, notBefore: Date) => Promise<void>;
}

interface Checked {
  readonly job: JobMessage;
  readonly pool?: string;
  readonly log: Logger;
  readonly record: SQSRecord;
  readonly retryCheck: boolean;
}

/**
 * Checks the served copies; returns those that took the job's next attempt, with the
 * instances that no longer serve it, to be decided like any job. Every other copy is settled
 * or failed here.
 */
export async function checkServed<T extends Checked>(ctx: RetryCheckContext<T>, copies: readonly ServedCopy<T>[]): Promise<{ item: T; superseded: string[] }[]> {
  const retried = await mapLimit(copies, 10, (c) => checkOne(ctx, c));
  return retried.filter((r): r is { item: T; superseded: string[] } => r !== undefined);
}

async function checkOne<T extends Checked>(ctx: RetryCheckContext<T>, c: ServedCopy<T>): Promise<{ item: T; superseded: string[] } | undefined> {
  const { item, served } = c;
  const pool = item.pool ?? 'unresolved';
  const due = retryDue(served, ctx.now(), ctx.retry.retryAfterSeconds);
  if (due === 'exhausted' && served.exhaustedBy === item.record.messageId) {
    // This message spent the retries, then its dead-letter send failed (SQS redelivered it):
    // send it again, or the job is lost. The send's deduplication id is the message id.
    item.log.info("this message spent the job's retries; dead-lettering it again", { instanceId: served.instanceId });
    await ctx.deadLetter(item, RETRIES_EXHAUSTED_REASON);
    return undefined;
  }
  if (due !== 'due') {
    if (c.mine) item.log.info(due === 'exhausted' ? "the job's retries are spent; nothing to do" : "the job's runner was started recently; nothing to do", { instanceId: served.instanceId });
    else {
      item.log.info('another delivery of this job holds its record; this copy launches nothing', { holder: 'served', instanceId: served.instanceId });
      ctx.metrics.add(ctx.names.jobsDeduplicated, { Pool: pool, Reason: 'job-record' });
    }
    ctx.settle(item.record);
    return undefined;
  }
  const queued = await ctx.stillQueued(item);
  if (queued !== true) {
    if (queued === false) ctx.metrics.add(ctx.names.jobRetriesStopped, { Pool: pool, Reason: 'not-queued' });
    return undefined;
  }
  let capable: string[];
  try {
    const provider = ctx.providerOf(item);
    const [instances, runners] = await Promise.all([ctx.observeFleet(), ctx.runnersOf(provider)]);
    const serves = (runnerId: string) => provider.runnerServes?.(runnerId, item.job) ?? true;
    const maxJobSeconds = maxJobSecondsOf(ctx.pools.find((p) => p.name === pool));
    capable = capableRunners(instances, runners, pool, ctx.keys, ctx.now(), ctx.retry.retryAfterSeconds, maxJobSeconds, serves);
  } catch (error) {
    item.log.error("observing the pool's runners for a retry failed; the message will be retried", { error: errorName(error) });
    ctx.metrics.add(ctx.names.jobsFailed, { Pool: pool, Reason: 'retry-observe' });
    ctx.fail(item.record);
    return undefined;
  }
  const action = retryAction(served, capable, ctx.retry.limit);
  if (action.kind === 'wait') {
    item.log.info('the job is still queued, but a runner of its pool is idle or starting; looking again later', { instanceId: action.instanceId });
    await keepChecking(ctx, item);
    return undefined;
  }
  const now = ctx.now();
  const outcome = await ctx.records.advance(item.job, served, action.kind, item.record.messageId, now, holderDeadline(item.job, now, ctx.maxWaitSeconds));
  if (outcome.kind === 'failed') {
    item.log.error('moving the per-job record to the next attempt failed; the message will be retried', { error: outcome.error });
    ctx.metrics.add(ctx.names.jobRecordErrors, { Pool: pool, Operation: action.kind });
    ctx.fail(item.record);
    return undefined;
  }
  if (outcome.kind === 'lost') {
    item.log.info("another copy of the job moved its retries on first; this copy launches nothing");
    ctx.metrics.add(ctx.names.jobsDeduplicated, { Pool: pool, Reason: 'job-record' });
    ctx.settle(item.record);
    return undefined;
  }
  if (action.kind === 'exhaust') {
    ctx.metrics.add(ctx.names.jobRetriesStopped, { Pool: pool, Reason: RETRIES_EXHAUSTED_REASON });
    await ctx.deadLetter(item, RETRIES_EXHAUSTED_REASON);
    return undefined;
  }
  item.log.info(RETRY_STARTED_MESSAGE, { attempt: served.attempt + 1, supersedes: served.instanceId });
  ctx.metrics.add(ctx.names.jobsRetried, { Pool: pool });
  return { item, superseded: [...c.superseded, served.instanceId] };
}

/**
 * A retry check keeps looking while the job may still wait (its maximum age), and
 * dead-letters it after: the job is still queued, and no later check would look at it again.
 * Any other copy is done (the check it was sent with goes on).
 */
async function keepChecking<T extends Checked>(ctx: RetryCheckContext<T>, item: T): Promise<void> {
  const now = ctx.now();
  const waitEnds = Date.parse(item.job.receivedAt) + ctx.maxWaitSeconds * 1000;
  if (item.retryCheck && !(now.getTime() < waitEnds)) {
    ctx.metrics.add(ctx.names.jobRetriesStopped, { Pool: item.pool ?? 'unresolved', Reason: MAX_WAIT_REASON });
    await ctx.deadLetter(item, MAX_WAIT_REASON);
    return;
  }
  if (item.retryCheck) {
    try {
      await ctx.scheduleCheck(item, new Date(now.getTime() + ctx.retry.retryAfterSeconds * 1000));
    } catch (error) {
      item.log.error('sending the next retry check failed; the message will be retried', { error: errorName(error) });
      ctx.fail(item.record);
      return;
    }
  }
  ctx.settle(item.record);
}
