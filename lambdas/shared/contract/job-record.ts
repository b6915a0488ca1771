/**
 * The per-job record's table layout, shared by scale-up (lambdas/scale-up/job-record.ts) and
 * the construct that creates the table: key `jobId` (the provider-qualified job id), the
 * delivery that serves the job, `expiresAt` (epoch seconds, the table's TTL attribute) and
 * `holdUntil` (epoch seconds: the holder's deadline, after which another delivery may take over).
 *
 * Once a runner is started for the job: `servedAt` (epoch seconds) and `servedInstance`;
 * `attempt` counts the retries taken (0 for the first runner); `superseded` (a string set)
 * names the instances of earlier attempts, which no longer count as serving the job;
 * `advancedBy` names the message that took the last retry or exhaustion (`retry:<id>`,
 * `exhaust:<id>`), so a write whose answer was lost is resolved by reading it back;
 * `exhausted` is set once the retries are spent (the job was dead-lettered).
 */
export const JOB_RECORD_ATTRIBUTES = {
  key: 'jobId',
  delivery: 'deliveryId',
  trace: 'traceId',
  claimedAt: 'claimedAt',
  expiresAt: 'expiresAt',
  holdUntil: 'holdUntil',
  servedAt: 'servedAt',
  servedInstance: 'servedInstance',
  attempt: 'attempt',
  superseded: 'superseded',
  advancedBy: 'advancedBy',
  exhausted: 'exhausted',
} as const;

/**
 * Launch tickets share the table (lambdas/shared/launch-tickets.ts): key `jobId` holds
 * `launch-ticket|<pool>|<template>|<slot>` (never a job id), `expiresAt` the ticket's expiry
 * (the TTL attribute too), `owner` the token of the launcher that took it.
 */
/** What every launch ticket's key starts with; the pool's grant is limited to such keys. */
export const LAUNCH_TICKET_KEY_PREFIX = 'launch-ticket|';

export const LAUNCH_TICKET_ATTRIBUTES = {
  owner: 'ticketOwner',
  pool: 'pool',
  takenAt: 'takenAt',
} as const;

/**
 * How long a job may wait for a runner, from the webhook's `receivedAt`, before it is
 * dead-lettered (`max-wait`, or `backoff-max-wait` while the prime back-off held it).
 */
export const JOB_MAX_WAIT_SECONDS = 60 * 60;

/**
 * What a launch ticket holds beyond the priming timeout: the launcher's own steps between the
 * take and the launch (a function runs at most 2 minutes), and the pool run that evicts and
 * counts a launch that did not park in time (every minute by default).
 */
export const LAUNCH_TICKET_SETTLE_SECONDS = 5 * 60;

/**
 * How long a ticket spent on a launch holds its slot: until that launch's evidence (parked,
 * runner started, or counted as a failure) is in the streak. Shorter than a job's maximum wait,
 * so a job held behind it is launched for, or learns the template is failing, before it expires.
 */
export function launchTicketHoldSeconds(primingTimeoutSeconds: number): number {
  return primingTimeoutSeconds + LAUNCH_TICKET_SETTLE_SECONDS;
}

/**
 * Retrying a job whose runner went elsewhere (it took another job, or died before taking
 * any): how long after its runner was started a still-queued job is looked at again, and how
 * many more runners it may get. The construct's `jobRetryAfter` and `jobRetryLimit` props;
 * scale-up reads them from `LAMBDA_ENV.jobRetryOptions`.
 */
export interface JobRetryOptions {
  readonly retryAfterSeconds: number;
  readonly limit: number;
}

export const JOB_RETRY_DEFAULTS: JobRetryOptions = { retryAfterSeconds: 5 * 60, limit: 2 };

/** The dead-letter reason of a job still queued after its last retry's runner went elsewhere. */
export const RETRIES_EXHAUSTED_REASON = 'retries-exhausted';

/**
 * The dead-letter reason of a job still queued at its maximum wait (from the webhook's
 * `receivedAt`): a capacity wait, or a retry check still waiting for an idle runner to take it.
 */
export const MAX_WAIT_REASON = 'max-wait';

/**
 * How long a record is kept (its TTL, and the condition's expiry): longer than GitHub lists a
 * failed delivery for the reconciler to redeliver (a few days) and than a job may stay queued
 * (GitHub: 24 hours), so a late copy of a served job always finds it.
 */
export const JOB_RECORD_TTL_SECONDS = 4 * 24 * 60 * 60;

/**
 * The jobs queue's redrive settings (lib/job-queue.ts defaults; the construct does not expose
 * them): a message is received at most `maxReceiveCount` times, each hiding it for the
 * visibility timeout, before SQS moves it to the dead-letter queue.
 */
export const JOB_QUEUE_REDRIVE = { visibilityTimeoutSeconds: 6 * 60, maxReceiveCount: 5 } as const;

/**
 * Seconds a message whose cold launch ended with an unknown outcome stays hidden before its
 * redelivery (scale-up shortens its visibility to this, ChangeMessageVisibility): the redelivery
 * must look the launch up while its instance still waits for a config, inside the take-over
 * window (lambdas/scale-up/cold-tokens.ts `adoptWindowSeconds`: the boot wait less a margin),
 * which the visibility timeout (6 minutes) is longer than. test/lib ties the two to the
 * construct's rendered boot wait and scale-up's timeout.
 */
export const UNKNOWN_LAUNCH_REDELIVERY_SECONDS = 30;

/**
 * How long after its last claim (or after its maximum wait ends, whichever is later) a
 * delivery may still be served: its last wait copy's backoff (at most 300 s, queue.ts) plus
 * every receive the redrive policy allows. Past that, its messages are served, deleted or in
 * the dead-letter queue, and a record it still holds may be taken over.
 */
export const JOB_RECORD_HOLD_SECONDS = 300 + JOB_QUEUE_REDRIVE.visibilityTimeoutSeconds * JOB_QUEUE_REDRIVE.maxReceiveCount;
