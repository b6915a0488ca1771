import { isReconciled, METRIC_DIMENSIONS, type MetricNames } from '../shared/contract';
import { senderStampsIntake, type LedgerWriter } from '../shared/ledger';
import type { Metrics } from '../shared/log';
import type { BatchItem } from './batch';

/**
 * The intake (`received`, `queued`) of the jobs whose sender left it to scale-up (shared/ledger.ts
 * `senderStampsIntake`), stamped once per job: on the claim that found no record of it, so a
 * job the reconciler queues again at each run while it waits, or whose webhook delivery holds
 * its record already, gets no second line. `queued` is the queue's `SentTimestamp` of the
 * message. Only the original message: a wait copy or a retry check is scale-up's own send.
 * A claim whose record could not be written (or whose answer was lost) stamps nothing.
 */
export function stampDeferredIntake(ledger: LedgerWriter, fresh: readonly BatchItem[]): void {
  for (const item of intakeToStamp(fresh)) {
    ledger.stampQueued(item.job, item.pool ?? 'unresolved', new Date(Number(item.record.attributes.SentTimestamp)));
  }
}

/** The items of freshly claimed records whose intake is scale-up's to stamp. */
export function intakeToStamp<T extends Pick<BatchItem, 'job' | 'waits' | 'retryCheck' | 'record'>>(fresh: readonly T[]): T[] {
  return fresh.filter((i) => !senderStampsIntake(i.job) && i.waits === 0 && !i.retryCheck && Number.isFinite(Number(i.record.attributes?.SentTimestamp)));
}

/**
 * Lost deliveries: jobs whose first copy to claim a record was the reconciler's, so the
 * webhook never queued them (a delivery that failed, or never came). Counted here rather than
 * by the reconciler, which queues a job again at every run while it waits (for capacity, or
 * a runner that is still booting): only the claim that found no record of the job tells a lost
 * delivery from a slow one.
 */
export function countLostDeliveries(metrics: Metrics, names: Pick<MetricNames, 'lostDeliveries'>, fresh: readonly Pick<BatchItem, 'job' | 'pool' | 'waits' | 'retryCheck'>[]): void {
  for (const item of fresh) {
    if (isReconciled(item.job) && item.waits === 0 && !item.retryCheck) metrics.add(names.lostDeliveries, { [METRIC_DIMENSIONS.pool]: item.pool ?? 'unresolved' });
  }
}
