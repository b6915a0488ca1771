import type { SQSBatchResponse, SQSRecord } from 'aws-lambda';
import { errorName, withTimeout } from '../shared/aws-call';
import { JobLookupError, type CiProvider, type FleetConfig, type JobMessage, type MetricNames, type Provider, type TagKeys } from '../shared/contract';
import type { LedgerWriter } from '../shared/ledger';
import type { Logger, Metrics } from '../shared/log';
import type { ScaleUpDeps, ScaleUpOptions } from './handler';
import type { JobRecords } from './job-record';
import { sendToDeadLetter, sendWaitCopy, type QueueDeps } from './queue';

/** What lives for the container, built once from the deps. */
export interface Setup {
  readonly deps: ScaleUpDeps;
  readonly options: ScaleUpOptions;
  /** The ARN of an instance, for the config parameter's `PARAMETER_INSTANCE_ARN_TAG`. */
  readonly instanceArn: (instanceId: string) => string;
  readonly now: () => Date;
  readonly random: () => number;
  readonly queue: QueueDeps;
}

/** What the steps of one invocation share: the container's setup, the fleet config, and how far each message got. */
export interface Batch extends Setup {
  /** The invocation id: the salt of this invocation's candidate order. */
  readonly id: string;
  readonly started: Date;
  readonly log: Logger;
  readonly config: FleetConfig;
  readonly providers: Partial<Record<Provider, CiProvider>>;
  readonly metrics: Metrics;
  /** The jobs' latency ledger lines (shared/ledger.ts). */
  readonly ledger: LedgerWriter;
  readonly names: MetricNames;
  readonly keys: TagKeys;
  /** Messages reported as not processed: SQS redelivers them. */
  readonly failed: Set<string>;
  /** Messages whose outcome is final; on an unexpected error only the others are retried. */
  readonly settled: Set<string>;
}

/** One message of the batch, as far as the steps have resolved it. */
export interface BatchItem {
  readonly record: SQSRecord;
  readonly job: JobMessage;
  readonly log: Logger;
  readonly waits: number;
  readonly redelivered: boolean;
  /** A first receive of a delivery about a job created long before (decide.ts `isLateDelivery`). */
  readonly late: boolean;
  /** A retry check scale-up sent itself (retry.ts). */
  readonly retryCheck: boolean;
  pool?: string;
  /** Instances of the job's earlier attempts (retry.ts). */
  superseded?: readonly string[];
  /** Its record could not be written: there is none to mark served. */
  unrecorded?: boolean;
}

/*
 * How a message ends: settled (deleted), failed (SQS redelivers it), dead-lettered, or
 * waiting (a fresh copy sent, the original settled).
 */

export function settle(b: Batch, record: SQSRecord): void {
  b.settled.add(record.messageId);
}

export function fail(b: Batch, record: SQSRecord): void {
  b.failed.add(record.messageId);
}

/** Nothing was started for the messages not yet settled (observation failed, or a bug): all of them are retried. */
export function failUnsettled(b: Batch, records: readonly SQSRecord[]): void {
  for (const record of records) if (!b.settled.has(record.messageId)) fail(b, record);
}

export function batchResponse(b: Batch): SQSBatchResponse {
  return { batchItemFailures: [...b.failed].map((itemIdentifier) => ({ itemIdentifier })) };
}

export async function deadLetter(b: Batch, record: SQSRecord, reason: string, l: Logger, pool: string, detail?: string, job?: JobMessage): Promise<void> {
  try {
    await sendToDeadLetter(b.queue, record, reason);
    settle(b, record);
    l.error('job dead-lettered', { reason, ...(detail ? { detail } : {}) });
    b.metrics.add(b.names.deadLettered, { Pool: pool, Reason: reason });
  } catch (error) {
    l.error('sending to the dead-letter queue failed; the message will be retried', { reason, error: errorName(error) });
    fail(b, record);
    return;
  }
  if (job && b.deps.jobRecords) await releaseRecord(b, b.deps.jobRecords, job, l, pool);
}

/**
 * This delivery gives the job up: a later copy (the reconciler's) may serve it. A failed
 * release does not undo the dead-lettering; the record's holder deadline frees it later.
 * `keep`: see `JobRecords.release` (a dead-lettered job's record stays as a tombstone).
 */
export async function releaseRecord(b: Batch, records: JobRecords, job: JobMessage, l: Logger, pool: string, keep: 'tombstone' | 'delete' = 'tombstone'): Promise<void> {
  const o = await records.release(job, keep);
  if (o.kind !== 'failed') return;
  l.error('releasing the per-job record failed; a later copy can serve the job only after its holder deadline', { error: o.error });
  b.metrics.add(b.names.jobRecordErrors, { Pool: pool, Operation: 'release' });
}

/**
 * Whether a job that comes back (a retry, a wait copy, a record taken over) still waits for
 * a runner; undefined when asking failed (the message is then failed, to be retried).
 */
export async function stillQueued(b: Batch, item: BatchItem): Promise<boolean | undefined> {
  const provider = b.providers[item.job.provider]!;
  try {
    if (await withTimeout('isJobQueued', b.options.ciTimeoutMs, () => provider.isJobQueued(item.job))) return true;
    item.log.info('job no longer queued at the provider, dropping it');
    settle(b, item.record);
    return false;
  } catch (error) {
    ciFailed(b, item, error);
    return undefined;
  }
}

/** The job waits without a launch: a fresh copy that comes back at notBefore (queue.ts). */
export async function waitCopy(b: Batch, item: BatchItem, notBefore: Date, why: string): Promise<void> {
  const waits = item.waits + 1;
  try {
    await sendWaitCopy(b.queue, item.record, groupOf(item), waits, notBefore);
    settle(b, item.record);
    item.log.info(why, { waits, notBefore: notBefore.toISOString() });
    b.metrics.add(b.names.jobsWaitingForCapacity, { Pool: item.pool ?? 'unresolved' });
  } catch (error) {
    item.log.error('re-queueing a waiting job failed; the message will be retried', { error: errorName(error) });
    fail(b, item.record);
  }
}

export function ciFailed(b: Batch, item: BatchItem, error: unknown): void {
  if (error instanceof JobLookupError) {
    // A 404: the job is gone, or the credential cannot see it (both services answer
    // 404 for "no access"). Not "no runner needed": it fails like any real error, so
    // the redrive policy dead-letters it after its budget, and the count makes a
    // credential or permission problem visible instead of jobs vanishing.
    item.log.error('the CI provider would not show the job; the message will be retried', {
      error: error.name,
      reason: error.reason,
      provider: error.provider,
    });
    b.metrics.add(b.names.jobsFailed, { Pool: item.pool ?? 'unresolved', Reason: `job-lookup-${error.reason}` });
  } else {
    item.log.error('asking the CI provider failed; the message will be retried', { error: errorName(error) });
    b.metrics.add(b.names.jobsFailed, { Pool: item.pool ?? 'unresolved', Reason: 'ci-error' });
  }
  fail(b, item.record);
}

/** The message group of the item's copies: its own, or the job's. */
export function groupOf(item: BatchItem): string {
  return item.record.attributes?.MessageGroupId || item.job.jobId;
}
