import {
  isTraceId,
  JOB_MESSAGE_SCHEMA_VERSION,
  parseJobMessage,
  qualifiedJobId,
  type JobMessage,
  type Provider,
} from '../shared/contract';
import type { JobDraft } from './delivery';
import { sha256Hex } from './verify';

export interface JobMessageFields {
  readonly labels: readonly string[];
  readonly labelsResolved: boolean;
  readonly pool?: string;
  readonly deliveryId: string;
  readonly receivedAt: Date;
}

/**
 * The contract's JobMessage for a job, checked with the reader scale-up uses, so a message
 * the consumer would refuse is never sent (the delivery gets a 400 instead).
 */
export function buildJobMessage(job: JobDraft, fields: JobMessageFields): JobMessage {
  const message: JobMessage = {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: job.provider,
    jobId: qualifiedJobId(job.provider, job.providerJobId),
    providerJobId: job.providerJobId,
    ...(fields.pool === undefined ? {} : { pool: fields.pool }),
    owner: job.owner,
    project: job.project,
    ...(job.projectId === undefined ? {} : { projectId: job.projectId }),
    labels: [...fields.labels],
    labelsResolved: fields.labelsResolved,
    traceId: traceIdFor(job.provider, fields.deliveryId),
    deliveryId: fields.deliveryId,
    receivedAt: fields.receivedAt.toISOString(),
    ...(job.createdAt === undefined ? {} : { createdAt: job.createdAt }),
  };
  return parseJobMessage(JSON.stringify(message));
}

/**
 * The trace id is the delivery id when it is usable as one (GitHub and GitLab send UUIDs),
 * so an operator finds the delivery in the service's delivery log from any instance log line;
 * otherwise a digest of it. A redelivery carries the same trace id.
 */
export function traceIdFor(provider: Provider, deliveryId: string): string {
  return isTraceId(deliveryId) ? deliveryId : `${provider}-${sha256Hex(deliveryId).slice(0, 40)}`;
}

const DEDUP_ID = /^[A-Za-z0-9._:-]{1,100}$/;

/**
 * SQS FIFO MessageDeduplicationId: the provider-qualified delivery id (at most 128
 * characters of letters, digits and punctuation), a digest when the id does not fit.
 * SQS drops a message whose deduplication id it has seen in the last 5 minutes, across
 * every sender, which is what makes a redelivery to another Lambda container harmless.
 */
export function deduplicationId(provider: Provider, deliveryId: string): string {
  return DEDUP_ID.test(deliveryId) ? `${provider}:${deliveryId}` : `${provider}:sha256:${sha256Hex(deliveryId)}`;
}

/**
 * GitLab's delivery id: `webhook-id` (sent with a signing token, equal to the Idempotency-Key),
 * else `Idempotency-Key` (GitLab 17.4 and later; the same value on every retry and manual
 * resend of one delivery), else, for older GitLab, a digest of the body: a resend carries
 * the stored payload unchanged, while two different events differ at least in their
 * timestamps and statuses.
 */
export function gitLabDeliveryId(headers: Readonly<Record<string, string | undefined>>, body: Buffer): string {
  const given = headers['webhook-id'] || headers['idempotency-key'];
  return given ? normaliseDeliveryId(given) : `body-sha256-${sha256Hex(body).slice(0, 48)}`;
}

const DELIVERY_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A header value kept as the delivery id when it is a plain token, else replaced by its digest. */
export function normaliseDeliveryId(value: string): string {
  return DELIVERY_ID.test(value) ? value : `sha256-${sha256Hex(value).slice(0, 48)}`;
}
