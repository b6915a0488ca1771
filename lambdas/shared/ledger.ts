import { isReconciled, LEDGER_MESSAGE, ledgerEntry, type FleetConfig, type JobMessage, type LedgerEntry, type LedgerStage } from './contract';
import type { Logger, Sink } from './log';

/**
 * The EMF record of one ledger entry: `JobStageSeconds` per pool and stage, and per stage
 * fleet-wide. Not the rollups of `emitMetrics`: a per-pool figure across stages (or a
 * fleet-wide one) would mix a queueing time with a boot time and mean nothing.
 */
export function ledgerMetricRecord(metrics: FleetConfig['metrics'], entry: LedgerEntry, timestamp = Date.parse(entry.at)): string {
  const { pool, stage } = metrics.dimensions;
  const name = metrics.names.jobStageSeconds;
  return JSON.stringify({
    _aws: {
      Timestamp: timestamp,
      CloudWatchMetrics: [{ Namespace: metrics.namespace, Dimensions: [[pool, stage], [stage]], Metrics: [{ Name: name, Unit: 'Seconds' }] }],
    },
    [pool]: entry.pool,
    [stage]: entry.stage,
    // Not below 0: CloudWatch gives no percentile of a metric holding a negative value, and a
    // stage measured across two clocks (`received`: the provider's creation, the Lambda's
    // receipt) reads below 0 by their skew. The log line keeps the raw figure.
    [name]: Math.max(0, entry.seconds),
  });
}

/**
 * Whether the sender of a job message stamps its intake (`received`, `queued`) itself: the
 * webhook does for a job whose pool it resolved. Scale-up stamps the others on the claim that
 * finds no record of the job (scale-up/intake.ts): a reconciled copy, which the reconciler
 * sends again at every run while the job waits (its intake is the fleet's first knowledge of
 * the job, not each finding), and a GitLab job queued with its tags unresolved, whose pool
 * only scale-up learns (stamped by the webhook, it would land under `unresolved`).
 */
export function senderStampsIntake(message: Pick<JobMessage, 'deliveryId' | 'pool'>): boolean {
  return !isReconciled(message) && message.pool !== undefined;
}

/** Writes a job's ledger stages: a structured log line and an EMF record each. */
export class LedgerWriter {
  constructor(
    private readonly metrics: FleetConfig['metrics'],
    private readonly log: Logger,
    private readonly sink: Sink = (line) => process.stdout.write(line + '\n'),
  ) {}

  /** Stamps `stage` of `job` at `at`, measured from `origin` (see `LEDGER_STAGES[stage].since`). */
  stamp(job: { traceId: string; jobId: string }, pool: string, stage: LedgerStage, at: Date, origin: Date | string): void {
    const entry = ledgerEntry(job, pool, stage, at, origin);
    this.log.info(LEDGER_MESSAGE, { ...entry });
    this.sink(ledgerMetricRecord(this.metrics, entry));
  }

  /**
   * The intake of a job whose message the queue took at `queuedAt` (the webhook's send
   * answered, or SQS's `SentTimestamp` of a message scale-up stamps for its sender):
   * `received` from the job's creation, when known, and `queued` from its receipt. Only for a
   * message that is in the queue: a failed send queued nothing.
   */
  stampQueued(message: JobMessage, pool: string, queuedAt: Date): void {
    if (message.createdAt !== undefined) this.stamp(message, pool, 'received', new Date(message.receivedAt), message.createdAt);
    this.stamp(message, pool, 'queued', queuedAt, message.receivedAt);
  }

  /** Stamps several stages of one job in the order they happened. */
  stampAll(job: { traceId: string; jobId: string }, pool: string, stages: readonly (readonly [LedgerStage, Date | undefined])[], origin: Date | string): void {
    const known = stages.filter((s): s is readonly [LedgerStage, Date] => s[1] !== undefined);
    for (const [stage, at] of [...known].sort((a, b) => a[1].getTime() - b[1].getTime())) this.stamp(job, pool, stage, at, origin);
  }
}
