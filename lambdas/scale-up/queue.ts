import { createHash } from 'node:crypto';
import { ChangeMessageVisibilityCommand, SendMessageCommand, type MessageAttributeValue, type SQSClient } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';
import { WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import { DEAD_LETTER_REASON_ATTRIBUTE } from '../shared/contract';

/**
 * Waiting for capacity without burning the redrive budget.
 *
 * The jobs queue is FIFO, which has no per-message delay, and every receive of a message
 * counts towards the redrive policy's maxReceiveCount, which is the budget real failures
 * use. So a job that waits for capacity is not returned to the queue: scale-up sends a
 * fresh copy (same body and message group, a deduplication id of its own) carrying two
 * attributes, `capacity-waits` (how often it waited, for the backoff) and `not-before`
 * (when to look at it again), and the original is deleted by reporting it as processed.
 * The copy's first receive, when it arrives before `not-before`, only hides it for the rest
 * of the backoff (ChangeMessageVisibility) and reports it as not processed: that costs the
 * copy exactly one receive whatever the wait, so the redrive policy allows real failures
 * `maxReceiveCount - 1` attempts on a copy (the construct sets maxReceiveCount with that in
 * mind). A job waits at most its maximum age (from the webhook's `receivedAt`), then goes
 * to the dead-letter queue. Waits and failures are counted as separate metrics.
 */
export const WAIT_ATTRIBUTES = { waits: 'capacity-waits', notBefore: 'not-before', reason: DEAD_LETTER_REASON_ATTRIBUTE, retryCheck: 'retry-check' } as const;

export interface WaitState {
  readonly waits: number;
  readonly notBefore?: Date;
  /** A retry check (retry.ts): scale-up sent it itself to look at the job again once its runner had time to take it. */
  readonly retryCheck: boolean;
}

export function waitStateOf(record: SQSRecord): WaitState {
  const waits = Number(record.messageAttributes?.[WAIT_ATTRIBUTES.waits]?.stringValue ?? '0');
  const notBefore = record.messageAttributes?.[WAIT_ATTRIBUTES.notBefore]?.stringValue;
  const at = notBefore === undefined ? NaN : Date.parse(notBefore);
  return {
    waits: Number.isSafeInteger(waits) && waits >= 0 ? waits : 0,
    ...(Number.isNaN(at) ? {} : { notBefore: new Date(at) }),
    retryCheck: record.messageAttributes?.[WAIT_ATTRIBUTES.retryCheck] !== undefined,
  };
}

/** The capacity backoff's ceiling: no wait copy sleeps longer before it looks again. */
export const CAPACITY_BACKOFF_CAP_SECONDS = 300;

/** Exponential backoff with jitter: 15 s, 30 s, 60 s ... capped at 5 minutes. */
export function capacityBackoffSeconds(waits: number, random: () => number): number {
  const cap = Math.min(CAPACITY_BACKOFF_CAP_SECONDS, 15 * 2 ** Math.min(waits, 10));
  return Math.max(5, Math.round(cap * (0.75 + random() / 4)));
}

/**
 * When a job held back by its pool's prime back-off looks again: after its capacity backoff,
 * or at the next probe when that is later (spread over 30 s: the held jobs of a pool do not all
 * come back in the same moment, where two invocations could each see no probe on its way),
 * but never later than the capacity backoff's ceiling (jittered): the pool may recover before
 * the probe is due (a new template or image, a standby that primed), and the job, gated again
 * when it returns, must see it. Never after its maximum wait either (it then comes back to be
 * dead-lettered, not hours late).
 */
export function holdNotBefore(now: Date, receivedAt: Date, maxWaitSeconds: number, waits: number, random: () => number, resumeAt?: Date): Date {
  let at = now.getTime() + capacityBackoffSeconds(waits, random) * 1000;
  if (resumeAt && resumeAt.getTime() > at) {
    const ceiling = now.getTime() + Math.round(CAPACITY_BACKOFF_CAP_SECONDS * (0.75 + random() / 4)) * 1000;
    at = Math.max(at, Math.min(resumeAt.getTime() + Math.round(random() * 30_000), ceiling));
  }
  const limit = receivedAt.getTime() + (maxWaitSeconds + 1) * 1000;
  return new Date(Math.max(now.getTime() + 5000, Math.min(at, limit)));
}

function dedupId(...parts: string[]): string {
  return createHash('sha256').update(parts.join('|')).digest('hex');
}

export interface QueueDeps {
  readonly aws: AwsCaller;
  readonly sqs: SQSClient;
  readonly queueUrl: string;
  readonly deadLetterQueueUrl: string;
}

export async function sendWaitCopy(deps: QueueDeps, record: SQSRecord, groupId: string, waits: number, notBefore: Date): Promise<void> {
  // Unique per wait: a copy must not be swallowed by the five-minute deduplication window.
  await sendLater(deps, record, groupId, dedupId(record.messageId, 'wait', String(waits)), notBefore, {
    [WAIT_ATTRIBUTES.waits]: { DataType: 'Number', StringValue: String(waits) },
  });
}

/**
 * Sends a retry check of the job `record` carries (retry.ts), not before `notBefore`. One per
 * sending message: a redelivery of the sender within five minutes sends no second one.
 */
export async function sendRetryCheck(deps: QueueDeps, record: SQSRecord, groupId: string, notBefore: Date): Promise<void> {
  await sendLater(deps, record, groupId, dedupId(record.messageId, 'retry-check'), notBefore, {
    [WAIT_ATTRIBUTES.retryCheck]: { DataType: 'String', StringValue: 'true' },
  });
}

/** A copy of `record`'s body that scale-up looks at again not before `notBefore` (FIFO queues have no per-message delay). */
async function sendLater(deps: QueueDeps, record: SQSRecord, groupId: string, deduplicationId: string, notBefore: Date, attributes: Record<string, MessageAttributeValue>): Promise<void> {
  await deps.aws.send(
    deps.sqs,
    new SendMessageCommand({
      QueueUrl: deps.queueUrl,
      MessageBody: record.body,
      MessageGroupId: groupId,
      MessageDeduplicationId: deduplicationId,
      MessageAttributes: { ...attributes, [WAIT_ATTRIBUTES.notBefore]: { DataType: 'String', StringValue: notBefore.toISOString() } },
    }),
    WRITE_IDEMPOTENT,
  );
}

/** Hides a copy that came back early until its `not-before` (SQS allows at most 12 hours). */
export async function hideUntil(deps: QueueDeps, record: SQSRecord, seconds: number): Promise<void> {
  await deps.aws.send(
    deps.sqs,
    new ChangeMessageVisibilityCommand({
      QueueUrl: deps.queueUrl,
      ReceiptHandle: record.receiptHandle,
      VisibilityTimeout: Math.min(43_200, Math.max(0, Math.ceil(seconds))),
    }),
    WRITE_IDEMPOTENT,
  );
}

/**
 * Sends a message that can never be served to the dead-letter queue, with the reason as an
 * attribute; the caller then deletes the original. A malformed body keeps its message group
 * (or one of its own), since the dead-letter queue of a FIFO queue is FIFO too.
 */
export async function sendToDeadLetter(deps: QueueDeps, record: SQSRecord, reason: string): Promise<void> {
  await deps.aws.send(
    deps.sqs,
    new SendMessageCommand({
      QueueUrl: deps.deadLetterQueueUrl,
      MessageBody: record.body,
      MessageGroupId: record.attributes?.MessageGroupId || `dead-letter-${record.messageId}`,
      MessageDeduplicationId: dedupId(record.messageId, 'dead-letter'),
      MessageAttributes: { [WAIT_ATTRIBUTES.reason]: { DataType: 'String', StringValue: reason } },
    }),
    WRITE_IDEMPOTENT,
  );
}
