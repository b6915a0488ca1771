import { randomUUID } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { SSMClient } from '@aws-sdk/client-ssm';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { errorName, mapLimit, withTimeout, type AwsCaller } from '../shared/aws-call';
import {
  instanceArnOf,
  JOB_RETRY_DEFAULTS,
  JobLookupError,
  MAX_WAIT_REASON,
  parseJobMessage,
  ssmPaths,
  tagKeys,
  type CiProvider,
  type FleetConfig,
  type JobMessage,
  type JobRetryOptions,
  type Provider,
  type RunnerSummary,
} from '../shared/contract';
import { describeFleet, type ObservedInstance } from '../shared/instances';
import { LedgerWriter } from '../shared/ledger';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { activateWarm, Candidates, WARM_DEFAULTS, type WarmOptions } from './activate';
import { launchCold } from './cold';
import { admitByRecord, type JobRecords } from './job-record';
import type { JobInFlight, StepContext } from './context';
import { decide, gateCold, orderCandidates, parkedByPool, type QueuedJob } from './decide';
import { matchPool } from '../shared/match-pool';
import { capacityBackoffSeconds, hideUntil, holdNotBefore, sendRetryCheck, sendToDeadLetter, sendWaitCopy, waitStateOf, type QueueDeps } from './queue';
import { checkServed, type RetryCheckContext } from './retry-check';
import { coldGates } from './cold-gate';
import type { ColdGate } from '../pool/backoff';

export interface ScaleUpOptions {
  /** How long a job may wait for capacity (from the webhook's receivedAt) before it is dead-lettered. */
  readonly maxWaitSeconds: number;
  readonly ciTimeoutMs: number;
  /** Off only for the benchmark's per-job baseline. */
  readonly batching: boolean;
  readonly warm: WarmOptions;
  /** Cold launches in flight at once (CreateFleet's bucket is small). */
  readonly coldConcurrency: number;
  /** Retrying a job whose runner went elsewhere (retry.ts). */
  readonly retry: JobRetryOptions;
}

export const SCALE_UP_DEFAULTS: ScaleUpOptions = {
  maxWaitSeconds: 60 * 60,
  ciTimeoutMs: 10_000,
  batching: true,
  warm: WARM_DEFAULTS,
  coldConcurrency: 5,
  retry: JOB_RETRY_DEFAULTS,
};

export interface ScaleUpDeps {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly sqs: SQSClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly providers: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>;
  readonly queueUrl: string;
  readonly deadLetterQueueUrl: string;
  /**
   * `arn:<partition>:ec2:<region>:<account>:instance/` (LAMBDA_ENV.instanceArnPrefix): each
   * config parameter is tagged with its instance's ARN, which the instance role's IAM
   * condition compares with the calling instance.
   */
  readonly instanceArnPrefix: string;
  /**
   * The per-job records (job-record.ts), checked before any runner is registered. Production
   * always has them; without them only the FIFO deduplication and the batch's "served" check
   * keep a late copy of a job from launching a second runner.
   */
  readonly jobRecords?: JobRecords;
  readonly now?: () => Date;
  readonly random?: () => number;
  /** Where log lines and EMF records go (stdout in Lambda). */
  readonly sink?: Sink;
  readonly options?: Partial<ScaleUpOptions>;
}

interface Item {
  readonly record: SQSRecord;
  readonly job: JobMessage;
  readonly log: Logger;
  readonly waits: number;
  readonly redelivered: boolean;
  /** A retry check scale-up sent itself (retry.ts). */
  readonly retryCheck: boolean;
  pool?: string;
  /** Instances of the job's earlier attempts (retry.ts). */
  superseded?: readonly string[];
  /** Its record could not be written: there is none to mark served. */
  unrecorded?: boolean;
}

/**
 * The scale-up Lambda: the jobs queue's event-source handler (FIFO, one message group per
 * job, ReportBatchItemFailures). Each message ends in exactly one of: served (warm or cold,
 * deleted), already served or no longer queued (deleted), waiting (a fresh copy sent, the
 * original deleted), dead-lettered (sent to the DLQ, deleted), or failed (reported, so SQS
 * redelivers it until the redrive policy moves it to the DLQ).
 *
 * The batch is not cut at the first failure, as AWS suggests for FIFO queues: every message
 * group holds one job, so there is no order between the messages of a batch to preserve.
 */
export function createScaleUpHandler(deps: ScaleUpDeps): (event: SQSEvent) => Promise<SQSBatchResponse> {
  const options: ScaleUpOptions = { ...SCALE_UP_DEFAULTS, ...deps.options };
  // Checked once, at construction: a bad prefix fails the cold start, not every claim.
  const instanceArn = instanceArnOf(deps.instanceArnPrefix);
  const now = deps.now ?? (() => new Date());
  const random = deps.random ?? Math.random;
  const queue: QueueDeps = { aws: deps.aws, sqs: deps.sqs, queueUrl: deps.queueUrl, deadLetterQueueUrl: deps.deadLetterQueueUrl };

  return async (event) => {
    const started = now();
    const invocation = randomUUID();
    const log = createLogger({ fn: 'scale-up', invocation }, deps.sink);
    const config = await deps.loadConfig();
    const providers = deps.providers(config);
    const names = config.metrics.names;
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    const ledger = new LedgerWriter(config.metrics, log, deps.sink);
    const keys = tagKeys(config.prefix);
    const failed = new Set<string>();
    const fail = (record: SQSRecord) => failed.add(record.messageId);
    // Messages whose outcome is final; on an unexpected error only the others are retried.
    const settled = new Set<string>();
    const settle = (record: SQSRecord) => settled.add(record.messageId);

    const deadLetter = async (record: SQSRecord, reason: string, l: Logger, pool: string, detail?: string, job?: JobMessage) => {
      try {
        await sendToDeadLetter(queue, record, reason);
        settle(record);
        l.error('job dead-lettered', { reason, ...(detail ? { detail } : {}) });
        metrics.add(names.deadLettered, { Pool: pool, Reason: reason });
      } catch (error) {
        l.error('sending to the dead-letter queue failed; the message will be retried', { reason, error: errorName(error) });
        fail(record);
        return;
      }
      if (job && deps.jobRecords) await releaseRecord(deps.jobRecords, job, l, pool);
    };
    // This delivery gives the job up: a later copy (the reconciler's) may serve it. A failed
    // release does not undo the dead-lettering; the record's holder deadline frees it later.
    const releaseRecord = async (records: JobRecords, job: JobMessage, l: Logger, pool: string) => {
      const o = await records.release(job);
      if (o.kind !== 'failed') return;
      l.error('releasing the per-job record failed; a later copy can serve the job only after its holder deadline', { error: o.error });
      metrics.add(names.jobRecordErrors, { Pool: pool, Operation: 'release' });
    };
    // Whether a job that comes back (a retry, a wait copy, a record taken over) still waits for
    // a runner; undefined when asking failed (the message is then failed, to be retried).
    const stillQueued = async (item: Item, provider: CiProvider): Promise<boolean | undefined> => {
      try {
        if (await withTimeout('isJobQueued', options.ciTimeoutMs, () => provider.isJobQueued(item.job))) return true;
        item.log.info('job no longer queued at the provider, dropping it');
        settle(item.record);
        return false;
      } catch (error) {
        ciFailed(item, error);
        return undefined;
      }
    };
    // The job waits without a launch: a fresh copy that comes back at notBefore (queue.ts).
    const waitCopy = async (item: Item, notBefore: Date, why: string) => {
      const waits = item.waits + 1;
      try {
        await sendWaitCopy(queue, item.record, item.record.attributes?.MessageGroupId || item.job.jobId, waits, notBefore);
        settle(item.record);
        item.log.info(why, { waits, notBefore: notBefore.toISOString() });
        metrics.add(names.jobsWaitingForCapacity, { Pool: item.pool ?? 'unresolved' });
      } catch (error) {
        item.log.error('re-queueing a waiting job failed; the message will be retried', { error: errorName(error) });
        fail(item.record);
      }
    };
    const ciFailed = (item: Item, error: unknown) => {
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
        metrics.add(names.jobsFailed, { Pool: item.pool ?? 'unresolved', Reason: `job-lookup-${error.reason}` });
      } else {
        item.log.error('asking the CI provider failed; the message will be retried', { error: errorName(error) });
        metrics.add(names.jobsFailed, { Pool: item.pool ?? 'unresolved', Reason: 'ci-error' });
      }
      fail(item.record);
    };

    const retryContext = (records: JobRecords): RetryCheckContext<Item> => {
      let fleet: Promise<readonly ObservedInstance[]> | undefined;
      const runners = new Map<CiProvider, Promise<readonly RunnerSummary[]>>();
      return {
        records,
        retry: options.retry,
        maxWaitSeconds: options.maxWaitSeconds,
        keys,
        now,
        metrics,
        names,
        // Observed once per invocation, on the first check that needs it.
        observeFleet: () => (fleet ??= describeFleet(deps.aws, deps.ec2, keys)),
        runnersOf: (p) => runners.get(p) ?? runners.set(p, withTimeout('listRunners', options.ciTimeoutMs, () => p.listRunners())).get(p)!,
        providerOf: (item) => providers[item.job.provider]!,
        stillQueued: (item) => stillQueued(item, providers[item.job.provider]!),
        settle,
        fail,
        // The exhausted record is kept: a later copy must not start the retries over.
        deadLetter: (item, reason) => deadLetter(item.record, reason, item.log, item.pool ?? 'unresolved'),
        scheduleCheck: (item, notBefore) => sendRetryCheck(queue, item.record, item.record.attributes?.MessageGroupId || item.job.jobId, notBefore),
      };
    };
    // A failure here costs the retry of this attempt only: the job's runner is started, and a
    // reconciled copy can still find the job queued (its record then is past its deadline).
    const recordServed = async (records: JobRecords, started: readonly { item: Item; instanceId: string }[]) => {
      await mapLimit(started.filter((s) => !s.item.unrecorded), 10, async ({ item, instanceId }) => {
        const pool = item.pool ?? 'unresolved';
        const marked = await records.markServed(item.job, instanceId, now());
        if (marked.kind !== 'marked') {
          item.log.error('marking the per-job record served failed; the job will not be retried', { kind: marked.kind, ...(marked.kind === 'failed' ? { error: marked.error } : {}) });
          metrics.add(names.jobRecordErrors, { Pool: pool, Operation: 'served' });
          return;
        }
        try {
          await sendRetryCheck(queue, item.record, item.record.attributes?.MessageGroupId || item.job.jobId, new Date(now().getTime() + options.retry.retryAfterSeconds * 1000));
        } catch (error) {
          item.log.error('sending the retry check failed; only a reconciled copy can retry the job', { error: errorName(error) });
          metrics.add(names.jobRecordErrors, { Pool: pool, Operation: 'retry-check' });
        }
      });
    };

    try {
      // 1. Parse; dead-letter what can never be served; hide early wait copies.
      const items: Item[] = [];
      for (const record of event.Records) {
        const base = log.child({ messageId: record.messageId });
        let job: JobMessage;
        try {
          job = parseJobMessage(record.body);
        } catch (error) {
          await deadLetter(record, 'malformed', base, 'unknown', (error as Error).message);
          continue;
        }
        const l = base.child({ traceId: job.traceId, jobId: job.jobId });
        const wait = waitStateOf(record);
        if (wait.notBefore && wait.notBefore.getTime() > now().getTime()) {
          try {
            await hideUntil(queue, record, (wait.notBefore.getTime() - now().getTime()) / 1000);
          } catch (error) {
            l.warn('hiding an early wait copy failed', { error: errorName(error) });
          }
          fail(record);
          continue;
        }
        const redelivered = Number(record.attributes?.ApproximateReceiveCount ?? '1') > 1;
        if (wait.waits === 0 && !redelivered) {
          metrics.add(names.jobsDequeued, { Pool: job.pool ?? 'unresolved' });
          ledger.stamp(job, job.pool ?? 'unresolved', 'dequeued', now(), job.receivedAt);
        }
        items.push({ record, job, log: l, waits: wait.waits, redelivered, retryCheck: wait.retryCheck, ...(job.pool ? { pool: job.pool } : {}) });
      }

      // 2. Resolve what the webhook could not: the pool of a job without labels, and whether
      //    a job that comes back (a retry or a wait copy) still waits for a runner.
      const live: Item[] = [];
      await mapLimit(items, 10, async (item) => {
        const provider = providers[item.job.provider];
        if (!provider) {
          await deadLetter(item.record, 'no-provider', item.log, item.pool ?? 'unresolved', undefined, item.job);
          return;
        }
        try {
          if (item.pool === undefined) {
            const resolve = provider.resolveLabels?.bind(provider);
            const labels = resolve ? await withTimeout('resolveLabels', options.ciTimeoutMs, () => resolve(item.job)) : [...item.job.labels];
            // The webhook's rules (lambdas/shared/match-pool.ts), so both sides route alike.
            const match = matchPool(config.pools, item.job.provider, labels);
            if (match.pool === undefined) {
              await deadLetter(item.record, 'no-pool', item.log, 'unresolved', `${match.reason}: labels ${labels.join(',')}`, item.job);
              return;
            }
            item.pool = match.pool.name;
          }
        } catch (error) {
          ciFailed(item, error);
          return;
        }
        if ((item.redelivered || item.waits > 0) && (await stillQueued(item, provider)) !== true) return;
        live.push(item);
      });
      // 2b. The per-job record, before anything is decided for the job: a copy of a job that
      //     another delivery holds launches nothing and does not wait beside it. A copy that
      //     took the record over from a holder past its deadline asks first whether the job
      //     is still queued (the holder may have served it), as a retry does in step 2.
      //     A copy of a job whose runner was started already is checked for a retry (retry.ts).
      if (deps.jobRecords && live.length > 0) {
        const admit = { records: deps.jobRecords, now, metrics, names, maxWaitSeconds: options.maxWaitSeconds };
        const { dropped, tookOver, served, superseded, unrecorded } = await admitByRecord(admit, live);
        for (const item of unrecorded) item.unrecorded = true;
        const unchecked = tookOver.filter((i) => !i.redelivered && i.waits === 0);
        const queuedNow = await mapLimit(unchecked, 10, (i) => stillQueued(i, providers[i.job.provider]!));
        const gone = unchecked.filter((_, n) => queuedNow[n] !== true);
        for (const [item, instances] of superseded) item.superseded = instances;
        // A retry check serves a job only as its retry (or a later receive of one, whose record
        // names superseded instances): one that finds no served record (expired, or not
        // written) must not launch for a job nobody re-checked at the provider. One whose
        // record could not be read at all is not such a stray: it fails, so SQS redelivers it
        // and the retry chain goes on.
        const unread = live.filter((i) => i.retryCheck && unrecorded.includes(i));
        for (const item of unread) {
          item.log.error("a retry check could not read the job's record; the message will be retried");
          fail(item.record);
        }
        const strays = live.filter((i) => i.retryCheck && !served.some((s) => s.item === i) && !dropped.includes(i) && !i.superseded && !unread.includes(i));
        for (const item of strays) item.log.info('a retry check found no served record; nothing to do');
        for (const item of [...dropped, ...strays]) settle(item.record);
        // The stray's claim wrote a fresh record for its delivery: give it up, or a reconciled
        // copy of the job would be refused until the holder deadline.
        await mapLimit(strays, 10, (item) => releaseRecord(deps.jobRecords!, item.job, item.log, item.pool ?? 'unresolved'));
        for (const item of [...dropped, ...gone, ...strays, ...unread, ...served.map((s) => s.item)]) if (live.includes(item)) live.splice(live.indexOf(item), 1);
        for (const r of await checkServed(retryContext(deps.jobRecords), served)) {
          r.item.superseded = r.superseded;
          live.push(r.item);
        }
      }
      if (live.length === 0) return { batchItemFailures: [...failed].map((itemIdentifier) => ({ itemIdentifier })) };

      // 3. Observe once, decide once.
      const observedAt = now();
      const instances = await describeFleet(deps.aws, deps.ec2, keys);
      const queued: QueuedJob[] = live.map((i) => ({ key: i.record.messageId, job: i.job, pool: i.pool!, ...(i.superseded ? { superseded: i.superseded } : {}) }));
      const plan = decide(queued, instances, config, keys, now(), { maxWaitSeconds: options.maxWaitSeconds, salt: invocation });

      const ctx: StepContext = {
        ec2: deps.ec2,
        ssm: deps.ssm,
        aws: deps.aws,
        config,
        keys,
        paths: ssmPaths(config.prefix),
        instanceArn,
        metrics,
        log,
        now,
        ciTimeoutMs: options.ciTimeoutMs,
        batching: options.batching,
      };
      const byKey = new Map(live.map((i) => [i.record.messageId, i]));
      const flight = (i: Item): JobInFlight => {
        const pool = config.pools.find((p) => p.name === i.pool)!;
        return { key: i.record.messageId, job: i.job, pool, provider: providers[i.job.provider]!, log: i.log.child({ pool: pool.name }) };
      };
      const warm: JobInFlight[] = [];
      const cold: JobInFlight[] = [];
      for (const item of live) {
        const d = plan.decisions.get(item.record.messageId)!;
        const pool = item.pool!;
        switch (d.kind) {
          case 'served':
            item.log.info('job already has an instance', { instanceId: d.instanceId });
            settle(item.record);
            break;
          case 'duplicate':
            item.log.info('job appears twice in the batch; the other message serves it');
            settle(item.record);
            break;
          case 'unknown-pool':
            await deadLetter(item.record, 'unknown-pool', item.log, pool, undefined, item.job);
            break;
          case 'expired':
            await deadLetter(item.record, MAX_WAIT_REASON, item.log, pool, undefined, item.job);
            break;
          case 'wait':
            await waitCopy(item, new Date(now().getTime() + capacityBackoffSeconds(item.waits, random) * 1000), 'pool at capacity, job waits');
            break;
          case 'warm':
            warm.push(flight(item));
            break;
          case 'cold':
            cold.push(flight(item));
            break;
        }
      }

      // 4. Warm activations, batched; whatever falls back joins the cold launches.
      const runnersStarted: { item: Item; instanceId: string }[] = [];
      if (warm.length > 0) {
        // Re-observations need only stopped instances (the parked candidates): a burst empties
        // that answer as it goes, and parsing it is most of what an observation costs a
        // Lambda of a small CPU share.
        const observe = async () => orderCandidates(parkedByPool(await describeFleet(deps.aws, deps.ec2, keys, { states: ['stopped'] }), keys), invocation);
        const candidates = new Candidates(plan.candidates, observedAt, observe, now, options.warm.freshSnapshotMs);
        const outcomes = await activateWarm(ctx, warm, candidates, options.warm);
        for (const j of warm) {
          const o = outcomes.get(j.key)!;
          if (o.kind === 'started') {
            settle(byKey.get(j.key)!.record);
            runnersStarted.push({ item: byKey.get(j.key)!, instanceId: o.instanceId });
            j.log.info('warm activation started the instance', { instanceId: o.instanceId, runnerId: o.runnerId });
            metrics.add(names.activations, { Pool: j.pool.name });
            metrics.add(names.activationDuration, { Pool: j.pool.name }, now().getTime() - started.getTime(), 'Milliseconds');
            const { registeredAt, claimedAt, startedAt } = o.stages;
            ledger.stampAll(j.job, j.pool.name, [['registered', registeredAt], ['claimed', claimedAt], ['instance-started', startedAt]], j.job.receivedAt);
          } else {
            j.log.warn('warm activation fell back to a cold launch', { reason: o.reason });
            metrics.add(names.fallbacks, { Pool: j.pool.name, Reason: o.reason });
            cold.push(j);
          }
        }
      }

      // 5. Cold launches, as far as the pool's prime back-off allows (lambdas/pool/backoff.ts):
      //    a pool whose launches keep failing before their runner starts launches one probe
      //    at a time; the other jobs wait for it, without a launch.
      const gates = cold.length > 0 ? await coldGates(ctx, cold, instances) : new Map<string, ColdGate>();
      const verdicts = gateCold(cold.map((j) => ({ key: j.key, pool: j.pool.name, receivedAt: j.job.receivedAt })), gates, now(), options.maxWaitSeconds);
      const launching = cold.filter((j) => verdicts.get(j.key)!.kind === 'cold');
      for (const j of cold) {
        const v = verdicts.get(j.key)!;
        const item = byKey.get(j.key)!;
        if (v.kind === 'hold-expired') await deadLetter(item.record, 'backoff-max-wait', j.log, j.pool.name, `held by the prime back-off (${v.held}) past the maximum wait`, j.job);
        else if (v.kind === 'hold') {
          const notBefore = holdNotBefore(now(), new Date(j.job.receivedAt), options.maxWaitSeconds, item.waits, random, v.resumeAt);
          await waitCopy(item, notBefore, `the pool's prime back-off holds cold launches (${v.held}), job waits`);
        }
      }
      await mapLimit(launching, options.coldConcurrency, async (j) => {
        const record = byKey.get(j.key)!.record;
        try {
          const r = await launchCold(ctx, j, `${record.messageId}|${record.attributes?.ApproximateReceiveCount ?? '1'}`);
          settle(record);
          runnersStarted.push({ item: byKey.get(j.key)!, instanceId: r.instanceId });
          j.log.info('cold launch started an instance', { instanceId: r.instanceId, runnerId: r.runnerId, capacityType: r.capacityType });
          metrics.add(names.coldLaunches, { Pool: j.pool.name });
          ledger.stampAll(j.job, j.pool.name, [['launched', r.stages.launchedAt], ['registered', r.stages.registeredAt], ['instance-started', r.stages.startedAt]], j.job.receivedAt);
        } catch (error) {
          j.log.error('cold launch failed; the message will be retried', { error: (error as Error).message });
          metrics.add(names.jobsFailed, { Pool: j.pool.name, Reason: `cold-${(error as { step?: string }).step ?? 'launch'}` });
          fail(record);
        }
      });

      // 6. Served: the record says when and where, and a retry check follows (retry.ts).
      if (deps.jobRecords) await recordServed(deps.jobRecords, runnersStarted);
    } catch (error) {
      // Observation failed (or a bug): nothing was started for the messages not yet
      // settled, so all of them are retried.
      log.error('scale-up failed; every unsettled message will be retried', { error: (error as Error).message });
      for (const record of event.Records) if (!settled.has(record.messageId)) fail(record);
    } finally {
      metrics.flush();
    }
    return { batchItemFailures: [...failed].map((itemIdentifier) => ({ itemIdentifier })) };
  };
}
