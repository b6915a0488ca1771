/**
 * The per-job record's table layout, shared by scale-up (lambdas/scale-up/job-record.ts) and
 * the construct that creates the table: key `jobId` (the provider-qualified job id), the
 * delivery that serves the job, and `expiresAt` (epoch seconds, the table's TTL attribute).
 */
export const JOB_RECORD_ATTRIBUTES = { key: 'jobId', delivery: 'deliveryId', trace: 'traceId', claimedAt: 'claimedAt', expiresAt: 'expiresAt' } as const;

/**
 * How long a record is kept (its TTL, and the condition's expiry): longer than GitHub lists a
 * failed delivery for the reconciler to redeliver (a few days) and than a job may stay queued
 * (GitHub: 24 hours), so a late copy of a served job always finds it.
 */
export const JOB_RECORD_TTL_SECONDS = 4 * 24 * 60 * 60;
