import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { DEAD_LETTER_REASON_ATTRIBUTE, JOB_MESSAGE_MAX_BYTES, type JobMessage } from '../shared/contract';
import { deduplicationId } from './job-message';

export const TOO_LARGE_REASON = 'too-large';

/** The body size of a queue message, as SQS counts it. */
export function messageBytes(body: string): number {
  return Buffer.byteLength(body, 'utf8');
}

export function isTooLarge(bytes: number): boolean {
  return bytes > JOB_MESSAGE_MAX_BYTES;
}

/**
 * What the dead-letter queue keeps of a job whose message SQS would refuse: who sent it and
 * which job it was, never the message (it is what was too large) nor anything from the
 * payload beyond the ids, which are bounded by the contract.
 */
export interface TooLargeSummary {
  readonly reason: typeof TOO_LARGE_REASON;
  readonly provider: JobMessage['provider'];
  readonly deliveryId: string;
  readonly jobId: string;
  readonly traceId: string;
  readonly sizeBytes: number;
  readonly maxBytes: number;
}

export function tooLargeSummary(message: JobMessage, sizeBytes: number): TooLargeSummary {
  return {
    reason: TOO_LARGE_REASON,
    provider: message.provider,
    deliveryId: message.deliveryId,
    jobId: message.jobId,
    traceId: message.traceId,
    sizeBytes,
    maxBytes: JOB_MESSAGE_MAX_BYTES,
  };
}

/**
 * The dead-letter record of a too-large job. The dead-letter queue is FIFO like the jobs queue:
 * one group per job, and a redelivery of the same delivery is recorded once.
 */
export function tooLargeRecord(deadLetterQueueUrl: string, summary: TooLargeSummary): SendMessageCommand {
  return new SendMessageCommand({
    QueueUrl: deadLetterQueueUrl,
    MessageBody: JSON.stringify(summary),
    MessageGroupId: summary.jobId,
    MessageDeduplicationId: `${TOO_LARGE_REASON}:${deduplicationId(summary.provider, summary.deliveryId)}`,
    MessageAttributes: { [DEAD_LETTER_REASON_ATTRIBUTE]: { DataType: 'String', StringValue: TOO_LARGE_REASON } },
  });
}
