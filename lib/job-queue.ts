import { Duration } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { JOB_QUEUE_REDRIVE, QUEUE_MAX_MESSAGE_BYTES } from '../lambdas/shared/contract';

export interface JobQueueProps {
  /**
   * Receives of a message before it moves to the dead-letter queue. Waiting for capacity
   * does not count against it (scale-up re-queues such jobs as fresh messages).
   * @default 5
   */
  readonly maxReceiveCount?: number;
  /**
   * Visibility timeout; AWS advises at least six times the consuming function's timeout.
   * @default Duration.minutes(6)
   */
  readonly visibilityTimeout?: Duration;
}

/**
 * The jobs queue and its dead-letter queue. Both are FIFO: the webhook de-duplicates
 * deliveries by using the delivery id as deduplication id (a durable, cross-container
 * guard), with one message group per job so one job never blocks another.
 */
export class JobQueue extends Construct {
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;

  constructor(scope: Construct, id: string, props: JobQueueProps = {}) {
    super(scope, id);
    // The defaults are those the job record's holder deadline assumes (JOB_QUEUE_REDRIVE).
    const maxReceiveCount = props.maxReceiveCount ?? JOB_QUEUE_REDRIVE.maxReceiveCount;
    if (!Number.isInteger(maxReceiveCount) || maxReceiveCount < 1 || maxReceiveCount > 1000) {
      throw new Error(`maxReceiveCount ${maxReceiveCount} must be an integer from 1 to 1000`);
    }
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      fifo: true,
      retentionPeriod: Duration.days(14),
      maxMessageSizeBytes: QUEUE_MAX_MESSAGE_BYTES,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    this.queue = new sqs.Queue(this, 'Queue', {
      fifo: true,
      visibilityTimeout: props.visibilityTimeout ?? Duration.seconds(JOB_QUEUE_REDRIVE.visibilityTimeoutSeconds),
      retentionPeriod: Duration.days(4),
      // The webhook's size check (JOB_MESSAGE_MAX_BYTES) leaves room below this for attributes.
      maxMessageSizeBytes: QUEUE_MAX_MESSAGE_BYTES,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      deadLetterQueue: { queue: this.deadLetterQueue, maxReceiveCount },
    });
  }
}
