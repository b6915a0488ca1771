import { randomUUID } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { SSMClient } from '@aws-sdk/client-ssm';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { errorName, mapLimit, withTimeout, type AwsCaller } from '../shared/aws-call';
import {
  instanceArnOf,
  JOB_MAX_WAIT_SECONDS,
  JOB_RETRY_DEFAULTS,
  MAX_WAIT_REASON,
  parseJobMessage,
  UNKNOWN_LAUNCH_REDELIVERY_SECONDS,
  JOB_QUEUE_REDRIVE,
  ssmPaths,
  tagKeys,
  type CiProvider,
  type FleetConfig,
  type JobMessage,
  type JobRetryOptions,
  Provider,
  type RunnerSummary,
} from '../shared/contract';
import { describeFleet, type ObservedInstance } from '../shared/instances';
import { LedgerWriter } from '../shared/ledger';
import { createLogger, Metrics, type Sink } from '../shared/log';
import { activateWarm, Candidates, WARM_DEFAULTS, type Carried, type WarmOptions } from './activate';
import { batchResponse, ciFailed, deadLetter, fail, failUnsettled, groupOf, releaseRecord, settle, stillQueued, waitCopy, type Batch, type BatchItem, type Setup } from './batch';
import { dropCarried, launchCold, launchUnknown, lookUpEarlier, type ColdFleet } from './cold';
import { launchAttemptOf, type LaunchAttempt } from './cold-tokens';
import { countLostDeliveries, stampDeferredIntake } from './intake';
import { admitByRecord, type JobRecords } from './job-record';
import type { JobInFlight, StepContext } from './context';
import { arrivalOf, comesBack, decide, gateCold, heldWithoutTicket, isLateDelivery, orderCandidates, parkedByBucket, reuseAffinityOf, triageByRecord, usesOf, type ColdVerdict, type Plan, type QueuedJob } from './decide';
import { candidatePools } from '../shared/candidate-pools';
import { matchPool } from '../shared/match-pool';
import { capacityBackoffSeconds, hideUntil, holdNotBefore, sendRetryCheck, waitStateOf } from './queue';
import { checkServed, type RetryCheckContext } from './retry-check';
import { coldGates, settleTicket, ticketCold } from './cold-gate';
import { keptTicketFields, messageTicketOwner, type LaunchTickets, type Ticket } from '../shared/launch-tickets';
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
  maxWaitSeconds: JOB_MAX_WAIT_SECONDS,
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
  /**
   * The launch tickets (lambdas/shared/launch-tickets.ts) that make the prime back-off hold
   * under concurrent invocations. Production always has them; without them the back-off is
   * decided per observation only.
   */
  readonly launchTickets?: LaunchTickets;
  readonly now?: () => Date;
  readonly random?: () => number;
  /** Where log lines and EMF records go (stdout in Lambda). */
  readonly sink?: Sink;
  readonly options?: Partial<ScaleUpOptions>;
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
 *
 * The handler reads as its steps (`serve`): parse, resolve, admit (the per-job record),
 * observe and decide (decide.ts, pure), dispatch, activate warm, launch cold, record served.
 * Each step is a function of the batch (`Batch`, batch.ts: what the invocation shares and how
 * each message ends) and of the values the step before it returned.
 */
export function createScaleUpHandler(deps: ScaleUpDeps): (event: SQSEvent) => Promise<SQSBatchResponse> {
  const setup: Setup = {
    deps,
    options: { ...SCALE_UP_DEFAULTS, ...deps.options },
    // Checked once, at construction: a bad prefix fails the cold start, not every claim.
    instanceArn: instanceArnOf(deps.instanceArnPrefix),
    now: deps.now ?? (() => new Date()),
    random: deps.random ?? Math.random,
    queue: { aws: deps.aws, sqs: deps.sqs, queueUrl: deps.queueUrl, deadLetterQueueUrl: deps.deadLetterQueueUrl },
  };

  return async (event) => {
    const b = await openBatch(setup);
    try {
      await serve(b, event.Records);
    } catch (error) {
      // Observation failed (or a bug): nothing was started for the messages not yet
      // settled, so all of them are retried.
      b.log.error('scale-up failed; every unsettled message will be retried', { error: (error as Error).message });
      failUnsettled(b, event.Records);
    } finally {
      b.metrics.flush();
    }
    return batchResponse(b);
  };
}

/** The batch's steps, in order: each message leaves the list where its outcome is settled. */
async function serve(b: Batch, records: readonly SQSRecord[]): Promise<void> {
  const parsed = await parse(b, records);
  const resolved = await resolve(b, parsed);
  const live = b.deps.jobRecords && resolved.length > 0 ? await admit(b, b.deps.jobRecords, resolved) : resolved;
  if (live.length === 0) return;
  const observed = await observeAndDecide(b, live);
  const items = new Map(live.map((i) => [i.record.messageId, i]));
  const { warm, cold } = await dispatch(b, live, observed.plan);
  const step = stepContextOf(b);
  const warmed = await activate(b, step, warm, observed, items);
  const launched = await launch(b, step, [...cold, ...warmed.fallbacks], observed.instances, items, warmed.carried);
  if (b.deps.jobRecords) await recordServed(b, b.deps.jobRecords, [...warmed.started, ...launched]);
}

/** What the invocation's steps share; the fleet config is read here, before any message is looked at. */
async function openBatch(setup: Setup): Promise<Batch> {
  const started = setup.now();
  const id = randomUUID();
  const log = createLogger({ fn: 'scale-up', invocation: id }, setup.deps.sink);
  const config = await setup.deps.loadConfig();
  const providers = setup.deps.providers(config);
  const metrics = new Metrics(config.metrics.namespace, setup.deps.sink);
  const keys = tagKeys(config.prefix);
  const ledger = new LedgerWriter(config.metrics, log, setup.deps.sink);
  return { ...setup, id, started, log, config, providers, metrics, ledger, names: config.metrics.names, keys, failed: new Set(), settled: new Set() };
}

/** 1. Parse; dead-letter what can never be served; hide early wait copies. */
async function parse(b: Batch, records: readonly SQSRecord[]): Promise<BatchItem[]> {
  const items: BatchItem[] = [];
  for (const record of records) {
    const base = b.log.child({ messageId: record.messageId });
    let job: JobMessage;
    try {
      job = parseJobMessage(record.body);
    } catch (error) {
      await deadLetter(b, record, 'malformed', base, 'unknown', (error as Error).message);
      continue;
    }
    const l = base.child({ traceId: job.traceId, jobId: job.jobId });
    const wait = waitStateOf(record);
    const arrival = arrivalOf(wait, record.attributes?.ApproximateReceiveCount, b.now());
    if (arrival.kind === 'early') {
      try {
        await hideUntil(b.queue, record, arrival.hideSeconds);
      } catch (error) {
        l.warn('hiding an early wait copy failed', { error: errorName(error) });
      }
      fail(b, record);
      continue;
    }
    if (arrival.first) {
      b.metrics.add(b.names.jobsDequeued, { Pool: job.pool ?? 'unresolved' });
      b.ledger.stamp(job, job.pool ?? 'unresolved', 'dequeued', b.now(), job.receivedAt);
    }
    const late = arrival.first && isLateDelivery(job, b.now());
    items.push({ record, job, log: l, waits: wait.waits, redelivered: arrival.redelivered, late, retryCheck: wait.retryCheck, ...(job.pool ? { pool: job.pool } : {}) });
  }
  return items;
}

/**
 * 2. Resolve what the webhook could not: the pool of a job without labels, and whether a job
 *    that comes back (a retry or a wait copy) still waits for a runner.
 */
async function resolve(b: Batch, items: readonly BatchItem[]): Promise<BatchItem[]> {
  const live: BatchItem[] = [];
  await mapLimit(items, 10, async (item) => {
    const provider = b.providers[item.job.provider];
    if (!provider) {
      await deadLetter(b, item.record, 'no-provider', item.log, item.pool ?? 'unresolved', undefined, item.job);
      return;
    }
    try {
      if (item.pool === undefined && !(await resolvePool(b, item, provider))) return;
    } catch (error) {
      ciFailed(b, item, error);
      return;
    }
    if (comesBack(item) && (await stillQueued(b, item)) !== true) return;
    live.push(item);
  });
  return live;
}

/** The pool of a job the webhook queued unresolved; false when it matches none (dead-lettered). */
async function resolvePool(b: Batch, item: BatchItem, provider: CiProvider): Promise<boolean> {
  const lookUp = provider.resolveLabels?.bind(provider);
  const labels = lookUp ? await withTimeout('resolveLabels', b.options.ciTimeoutMs, () => lookUp(item.job)) : [...item.job.labels];
  // The webhook's rules (lambdas/shared/match-pool.ts), so both sides route alike.
  // A GitHub job matches the pools of its own organisation or repository only; a GitLab job of a project pool only its project's.
  const match = matchPool(candidatePools(b.config, item.job), item.job.provider, labels);
  if (match.pool === undefined) {
    await deadLetter(b, item.record, 'no-pool', item.log, 'unresolved', `${match.reason}: labels ${labels.join(',')}`, item.job);
    return false;
  }
  item.pool = match.pool.name;
  return true;
}

/**
 * 2b. The per-job record, before anything is decided for the job: a copy of a job that
 *     another delivery holds launches nothing and does not wait beside it. A copy that took
 *     the record over from a holder past its deadline asks first whether the job is still
 *     queued (the holder may have served it), as a retry does in step 2. A copy of a job
 *     whose runner was started already is checked for a retry (retry.ts).
 */
async function admit(b: Batch, records: JobRecords, live: readonly BatchItem[]): Promise<BatchItem[]> {
  const admission = await admitByRecord({ records, now: b.now, metrics: b.metrics, names: b.names, maxWaitSeconds: b.options.maxWaitSeconds }, live);
  for (const item of admission.unrecorded) item.unrecorded = true;
  stampDeferredIntake(b.ledger, admission.fresh);
  countLostDeliveries(b.metrics, b.names, admission.fresh);
  const unchecked = admission.tookOver.filter((i) => !comesBack(i));
  const queuedNow = await mapLimit(unchecked, 10, (i) => stillQueued(b, i));
  const gone = unchecked.filter((_, n) => queuedNow[n] !== true);
  for (const [item, instances] of admission.superseded) item.superseded = instances;
  // A retry check serves a job only as its retry (or a later receive of one, whose record
  // names superseded instances): decide.ts `triageByRecord`.
  const { proceed, strays, unread } = triageByRecord(live, admission, gone);
  for (const item of unread) {
    item.log.error("a retry check could not read the job's record; the message will be retried");
    fail(b, item.record);
  }
  for (const item of strays) item.log.info('a retry check found no served record; nothing to do');
  for (const item of [...admission.dropped, ...strays]) settle(b, item.record);
  // The stray's claim wrote a record for its delivery: give it up, or a reconciled copy of the
  // job would be refused until the holder deadline. One that found no record leaves none; one
  // that found a released record leaves it released (the job was claimed before).
  await mapLimit(strays, 10, (item) => releaseRecord(b, records, item.job, item.log, item.pool ?? 'unresolved', admission.fresh.includes(item) ? 'delete' : 'tombstone'));
  const retried = await checkServed(retryContext(b, records, scopedRepositories(b, admission.served.map((s) => s.item))), admission.served);
  for (const r of retried) r.item.superseded = r.superseded;
  return [...proceed, ...retried.map((r) => r.item)];
}

/**
 * The repositories whose repository-level runners the retry check lists besides the fleet's
 * own scope: those of the reusable pools' GitHub jobs (their runners are registered there
 * alone, and GitHub lists them per repository only).
 */
function scopedRepositories(b: Batch, items: readonly BatchItem[]): string[] {
  const reusable = (i: BatchItem) => b.config.pools.some((p) => p.name === i.pool && p.reuse !== undefined);
  return [...new Set(items.filter((i) => i.job.provider === Provider.GITHUB && reusable(i)).map((i) => `${i.job.owner}/${i.job.project}`.toLowerCase()))];
}

/** What the retry check (retry-check.ts) needs of the batch. */
function retryContext(b: Batch, records: JobRecords, repositories: readonly string[]): RetryCheckContext<BatchItem> {
  let fleet: Promise<readonly ObservedInstance[]> | undefined;
  const runners = new Map<CiProvider, Promise<readonly RunnerSummary[]>>();
  return {
    records,
    retry: b.options.retry,
    maxWaitSeconds: b.options.maxWaitSeconds,
    keys: b.keys,
    pools: b.config.pools,
    now: b.now,
    metrics: b.metrics,
    names: b.names,
    // Observed once per invocation, on the first check that needs it.
    observeFleet: () => (fleet ??= describeFleet(b.deps.aws, b.deps.ec2, b.keys)),
    runnersOf: (p) => runners.get(p) ?? runners.set(p, withTimeout('listRunners', b.options.ciTimeoutMs, () => p.listRunners({ repositories }))).get(p)!,
    providerOf: (item) => b.providers[item.job.provider]!,
    stillQueued: (item) => stillQueued(b, item),
    settle: (record) => settle(b, record),
    fail: (record) => fail(b, record),
    // The exhausted record is kept: a later copy must not start the retries over.
    deadLetter: (item, reason) => deadLetter(b, item.record, reason, item.log, item.pool ?? 'unresolved'),
    scheduleCheck: (item, notBefore) => sendRetryCheck(b.queue, item.record, groupOf(item), notBefore),
  };
}

interface Observed {
  readonly observedAt: Date;
  readonly instances: readonly ObservedInstance[];
  readonly plan: Plan;
}

/** 3. Observe once, decide once (decide.ts). */
async function observeAndDecide(b: Batch, live: readonly BatchItem[]): Promise<Observed> {
  const observedAt = b.now();
  const instances = await describeFleet(b.deps.aws, b.deps.ec2, b.keys);
  const queued: QueuedJob[] = live.map((i) => ({ key: i.record.messageId, job: i.job, pool: i.pool!, ...(i.superseded ? { superseded: i.superseded } : {}) }));
  const plan = decide(queued, instances, b.config, b.keys, b.now(), { maxWaitSeconds: b.options.maxWaitSeconds, salt: b.id });
  return { observedAt, instances, plan };
}

/** 3b. Settle the decisions that need no instance; the rest go warm or cold. */
async function dispatch(b: Batch, live: readonly BatchItem[], plan: Plan): Promise<{ warm: JobInFlight[]; cold: JobInFlight[] }> {
  const warm: JobInFlight[] = [];
  const cold: JobInFlight[] = [];
  for (const item of live) {
    const d = plan.decisions.get(item.record.messageId)!;
    const pool = item.pool!;
    switch (d.kind) {
      case 'served':
        item.log.info('job already has an instance', { instanceId: d.instanceId });
        settle(b, item.record);
        break;
      case 'duplicate':
        item.log.info('job appears twice in the batch; the other message serves it');
        settle(b, item.record);
        break;
      case 'unknown-pool':
        await deadLetter(b, item.record, 'unknown-pool', item.log, pool, undefined, item.job);
        break;
      case 'expired':
        await deadLetter(b, item.record, MAX_WAIT_REASON, item.log, pool, undefined, item.job);
        break;
      case 'wait':
        await waitCopy(b, item, new Date(b.now().getTime() + capacityBackoffSeconds(item.waits, b.random) * 1000), 'pool at capacity, job waits');
        break;
      case 'warm':
        warm.push(inFlight(b, item));
        break;
      case 'cold':
        cold.push(inFlight(b, item));
        break;
    }
  }
  return { warm, cold };
}

function inFlight(b: Batch, i: BatchItem): JobInFlight {
  const pool = b.config.pools.find((p) => p.name === i.pool)!;
  const affinity = reuseAffinityOf(pool, i.job);
  if (pool.reuse && affinity === undefined) i.log.warn('job of a reusable pool has no affinity (no project id): served without reuse, its instance terminates after it');
  const log = i.log.child({ pool: pool.name, ...(affinity === undefined ? {} : { affinity }) });
  return { key: i.record.messageId, job: i.job, pool, provider: b.providers[i.job.provider]!, log, ...(affinity === undefined ? {} : { affinity }) };
}

/**
 * Reuse hits and misses (contract metrics.ts), counted where a reusable pool's job is served:
 * a hit when its instance parked with the job's affinity, a miss when it got a fresh or cold one.
 */
function countReuse(b: Batch, j: JobInFlight, hit: boolean): void {
  if (j.pool.reuse === undefined) return;
  b.metrics.add(hit ? b.names.reuseHits : b.names.reuseMisses, { Pool: j.pool.name });
}

function stepContextOf(b: Batch): StepContext {
  return {
    ec2: b.deps.ec2,
    ssm: b.deps.ssm,
    aws: b.deps.aws,
    config: b.config,
    keys: b.keys,
    paths: ssmPaths(b.config.prefix),
    instanceArn: b.instanceArn,
    metrics: b.metrics,
    log: b.log,
    now: b.now,
    ciTimeoutMs: b.options.ciTimeoutMs,
    batching: b.options.batching,
  };
}

/** A runner started for a message's job, on this instance. */
interface Started {
  readonly item: BatchItem;
  readonly instanceId: string;
}

/** 4. Warm activations, batched; whatever falls back joins the cold launches. */
async function activate(
  b: Batch,
  step: StepContext,
  warm: readonly JobInFlight[],
  observed: Observed,
  items: ReadonlyMap<string, BatchItem>,
): Promise<{ started: Started[]; fallbacks: JobInFlight[]; carried: Map<string, Carried> }> {
  const started: Started[] = [];
  const fallbacks: JobInFlight[] = [];
  // Registrations the fallbacks' refused claims carried, for their cold launches.
  const carried = new Map<string, Carried>();
  if (warm.length === 0) return { started, fallbacks, carried };
  // Re-observations need only stopped instances (the parked candidates): a burst empties
  // that answer as it goes, and parsing it is most of what an observation costs a
  // Lambda of a small CPU share.
  // The `uses` tags of the parked instances, from the latest observation that saw each.
  const uses = new Map(observed.instances.map((i) => [i.id, usesOf(i, b.keys)]));
  const observe = async () => {
    const stopped = await describeFleet(b.deps.aws, b.deps.ec2, b.keys, { states: ['stopped'] });
    for (const i of stopped) uses.set(i.id, usesOf(i, b.keys));
    return orderCandidates(parkedByBucket(stopped, b.keys), b.id);
  };
  const candidates = new Candidates(observed.plan.candidates, observed.observedAt, observe, b.now, b.options.warm.freshSnapshotMs);
  const outcomes = await activateWarm(step, warm, candidates, b.options.warm, (id) => uses.get(id) ?? 0);
  for (const j of warm) {
    const o = outcomes.get(j.key)!;
    if (o.kind === 'started') {
      settle(b, items.get(j.key)!.record);
      started.push({ item: items.get(j.key)!, instanceId: o.instanceId });
      j.log.info('warm activation started the instance', { instanceId: o.instanceId, runnerId: o.runnerId });
      b.metrics.add(b.names.activations, { Pool: j.pool.name });
      countReuse(b, j, o.hit);
      b.metrics.add(b.names.activationDuration, { Pool: j.pool.name }, b.now().getTime() - b.started.getTime(), 'Milliseconds');
      const { registeredAt, claimedAt, startedAt } = o.stages;
      b.ledger.stampAll(j.job, j.pool.name, [['registered', registeredAt], ['claimed', claimedAt], ['instance-started', startedAt]], j.job.receivedAt);
    } else {
      j.log.warn('warm activation fell back to a cold launch', { reason: o.reason });
      b.metrics.add(b.names.fallbacks, { Pool: j.pool.name, Reason: o.reason });
      fallbacks.push(j);
      if (o.carried) carried.set(j.key, o.carried);
    }
  }
  return { started, fallbacks, carried };
}

interface Gated {
  readonly verdicts: Map<string, ColdVerdict>;
  readonly launching: JobInFlight[];
  readonly tickets?: { granted: Map<string, Ticket>; refused: JobInFlight[] };
}

/** 5a. The prime back-off's verdict per cold job, and the launch tickets of those it lets launch. */
async function gate(b: Batch, step: StepContext, cold: readonly JobInFlight[], instances: readonly ObservedInstance[], redelivered: (j: JobInFlight) => boolean): Promise<Gated> {
  const gates = cold.length > 0 ? await coldGates(step, cold, instances) : new Map<string, ColdGate>();
  const verdicts = gateCold(cold.map((j) => ({ key: j.key, pool: j.pool.name, receivedAt: j.job.receivedAt })), gates, b.now(), b.options.maxWaitSeconds);
  const launching = cold.filter((j) => verdicts.get(j.key)!.kind === 'cold');
  // A pool whose template is unproven or failing launches only with a ticket: the decision
  // and the permission to launch in one conditional write (launch-tickets.ts).
  const tickets = b.deps.launchTickets && launching.length > 0 ? await ticketCold(step, b.deps.launchTickets, gates, launching, redelivered) : undefined;
  if (!tickets) return { verdicts, launching };
  for (const [key, v] of heldWithoutTicket(tickets.refused, gates, b.now(), b.options.maxWaitSeconds)) verdicts.set(key, v);
  return { verdicts, launching: launching.filter((j) => !tickets.refused.includes(j)), tickets };
}

/**
 * 5. Cold launches, as far as the pool's prime back-off allows (lambdas/pool/backoff.ts): a
 *    pool whose launches keep failing before their runner starts launches one probe at a
 *    time; the other jobs wait for it, without a launch. A redelivery that finds the instance
 *    an earlier receive launched takes it over first: that launches nothing, so it passes
 *    neither the gate nor a ticket.
 */
async function launch(
  b: Batch,
  step: StepContext,
  cold: readonly JobInFlight[],
  instances: readonly ObservedInstance[],
  items: ReadonlyMap<string, BatchItem>,
  carried: ReadonlyMap<string, Carried>,
): Promise<Started[]> {
  const attemptOf = (j: JobInFlight) => launchAttemptOf(items.get(j.key)!.record.messageId, items.get(j.key)!.record.attributes?.ApproximateReceiveCount);
  let earlier: Map<string, TakeOver> = new Map();
  let launching: JobInFlight[] = [];
  let gated: Gated | undefined;
  try {
    earlier = await lookUpTakeOvers(step, cold, attemptOf);
    gated = await gate(b, step, cold.filter((j) => !earlier.has(j.key)), instances, (j) => attemptOf(j).receiveCount > 1);
    launching = gated.launching;
  } finally {
    // A carried registration goes with its job's launch or take-over; a job that does neither
    // now deletes it, also when a step threw (then no job launches).
    const going = (j: JobInFlight) => launching.includes(j) || earlier.get(j.key)?.kind === 'found';
    await dropCarried(step, cold.filter((j) => !going(j)), carried, b.options.coldConcurrency);
  }
  const { verdicts, tickets } = gated;
  for (const j of cold) {
    const item = items.get(j.key)!;
    const e = earlier.get(j.key);
    if (e?.kind === 'unreadable') {
      j.log.error('cold launch failed; the message will be retried', { error: e.error });
      b.metrics.add(b.names.jobsFailed, { Pool: j.pool.name, Reason: 'cold-launch' });
      fail(b, item.record);
      continue;
    }
    if (e?.kind === 'busy') {
      // Its ticket (the message's) is spent on that instance: a second launch beside it would
      // double the launch. It ends its config wait by `until`; the message comes back then.
      j.log.warn('an earlier receive of the message launched an instance that still waits for its config, too late to take over: no launch beside it', { instanceId: e.instanceId, until: e.until.toISOString() });
      b.metrics.add(b.names.jobsFailed, { Pool: j.pool.name, Reason: 'cold-earlier-launch' });
      await hideFor(b, item, (e.until.getTime() - b.now().getTime()) / 1000);
      fail(b, item.record);
      continue;
    }
    const v = verdicts.get(j.key);
    if (v?.kind === 'hold-expired') await deadLetter(b, item.record, 'backoff-max-wait', j.log, j.pool.name, `held by the prime back-off (${v.held}) past the maximum wait`, j.job);
    else if (v?.kind === 'hold') {
      const notBefore = holdNotBefore(b.now(), new Date(j.job.receivedAt), b.options.maxWaitSeconds, item.waits, b.random, v.resumeAt);
      await waitCopy(b, item, notBefore, `the pool's prime back-off holds cold launches (${v.held}), job waits`);
    }
  }
  const started: Started[] = [];
  const takingOver = cold.filter((j) => earlier.get(j.key)?.kind === 'found');
  await mapLimit([...takingOver, ...launching], b.options.coldConcurrency, async (j) => {
    const item = items.get(j.key)!;
    const record = item.record;
    const e = earlier.get(j.key);
    try {
      const r = await launchCold(step, j, attemptOf(j), carried.get(j.key), e?.kind === 'found' ? e.fleet : undefined);
      settle(b, record);
      started.push({ item, instanceId: r.instanceId });
      j.log.info('cold launch started an instance', { instanceId: r.instanceId, runnerId: r.runnerId, capacityType: r.capacityType });
      b.metrics.add(b.names.coldLaunches, { Pool: j.pool.name });
      countReuse(b, j, false);
      b.ledger.stampAll(j.job, j.pool.name, [['launched', r.stages.launchedAt], ['registered', r.stages.registeredAt], ['instance-started', r.stages.startedAt]], j.job.receivedAt);
    } catch (error) {
      j.log.error('cold launch failed; the message will be retried', { error: (error as Error).message });
      const ticket = tickets?.granted.get(j.key);
      if (ticket) await settleTicket(b.deps.launchTickets!, j, ticket, error);
      else if (e?.kind === 'found') await spendTakenOver(b, step, j, instances);
      // Only the first receive: a sustained outage whose answers are all lost would otherwise
      // spend the message's receives 30 s apart and dead-letter the job within minutes.
      if (launchUnknown(error) && attemptOf(j).receiveCount === 1) await redeliverSoon(b, item);
      b.metrics.add(b.names.jobsFailed, { Pool: j.pool.name, Reason: `cold-${(error as { step?: string }).step ?? 'launch'}` });
      fail(b, record);
    }
  });
  return started;
}

/** What a redelivery's look-up for its earlier receives' launches found (none on a first receive). */
type TakeOver =
  | { readonly kind: 'found'; readonly fleet: ColdFleet }
  /** An earlier receive's instance still waits for its config, too late to take over: no launch beside it. */
  | { readonly kind: 'busy'; readonly instanceId: string; readonly until: Date }
  | { readonly kind: 'unreadable'; readonly error: string };

/** 5a'. The earlier receives' instances the batch's redeliveries take over (`lookUpEarlier`, cold.ts). */
async function lookUpTakeOvers(step: StepContext, cold: readonly JobInFlight[], attemptOf: (j: JobInFlight) => LaunchAttempt): Promise<Map<string, TakeOver>> {
  const found = new Map<string, TakeOver>();
  await mapLimit(cold, 10, async (j) => {
    try {
      const earlier = await lookUpEarlier(step, j, attemptOf(j));
      if (earlier?.kind === 'take-over') found.set(j.key, { kind: 'found', fleet: earlier.fleet });
      else if (earlier) found.set(j.key, earlier);
    } catch (error) {
      found.set(j.key, { kind: 'unreadable', error: (error as Error).message });
    }
  });
  return found;
}

/**
 * A taken-over instance that failed after all was launched on the ticket an earlier receive of
 * the message took (and kept: its outcome was unknown). Spent like a failed launch's, or the
 * next receive, finding no instance, would launch on it again. The take-over passed no gate,
 * so the pool's need is read now (failure path only). Never throws: a ticket left costs at
 * most one launch per receive until its expiry.
 */
async function spendTakenOver(b: Batch, step: StepContext, j: JobInFlight, instances: readonly ObservedInstance[]): Promise<void> {
  const tickets = b.deps.launchTickets;
  if (!tickets) return;
  try {
    const gate = (await coldGates(step, [j], instances, { reportHeld: false })).get(j.pool.name);
    // An unreadable gate names no need; coldGates said why the ticket is not spent.
    const need = gate?.ticket;
    if (!need) return;
    const r = await tickets.spendHeld(j.pool.name, need, messageTicketOwner(j.key), b.now());
    for (const t of r.spent) j.log.warn('the taken-over instance was launched before the failure: its launch ticket is spent until its expiry', keptTicketFields(j.pool.name, t));
    if (r.errors.length) j.log.warn('spending the launch ticket of the taken-over instance failed; it frees at its expiry', { pool: j.pool.name, errors: r.errors });
  } catch (error) {
    j.log.warn('spending the launch ticket of the taken-over instance failed; it frees at its expiry', { pool: j.pool.name, error: errorName(error) });
  }
}

/**
 * A cold launch whose outcome stays unknown may land late: its message comes back in
 * `UNKNOWN_LAUNCH_REDELIVERY_SECONDS`, not after the queue's visibility timeout (6 minutes),
 * so the redelivery finds a late instance inside the take-over window (cold-tokens.ts) instead
 * of one too old to take over, which waits out its boot wait and ends as a start failure. When
 * this fails, the redelivery comes after the visibility timeout, and does not launch beside a
 * live instance of its message (`lookUpEarlier`).
 */
async function redeliverSoon(b: Batch, item: BatchItem): Promise<void> {
  await hideFor(b, item, UNKNOWN_LAUNCH_REDELIVERY_SECONDS);
}

/**
 * A failed message comes back in `seconds` (at least 30), never later than the visibility
 * timeout would bring it: the job record's hold (JOB_RECORD_HOLD_SECONDS) assumes no receive
 * is hidden longer.
 */
async function hideFor(b: Batch, item: BatchItem, seconds: number): Promise<void> {
  try {
    await hideUntil(b.queue, item.record, Math.min(JOB_QUEUE_REDRIVE.visibilityTimeoutSeconds, Math.max(UNKNOWN_LAUNCH_REDELIVERY_SECONDS, seconds)));
  } catch (error) {
    item.log.warn("setting a failed message's visibility failed; it comes back after the visibility timeout", { error: errorName(error) });
  }
}

/**
 * 6. Served: the record says when and where, and a retry check follows (retry.ts). A failure
 *    here costs the retry of this attempt only: the job's runner is started, and a reconciled
 *    copy can still find the job queued (its record then is past its deadline).
 */
async function recordServed(b: Batch, records: JobRecords, started: readonly Started[]): Promise<void> {
  await mapLimit(started.filter((s) => !s.item.unrecorded), 10, async ({ item, instanceId }) => {
    const pool = item.pool ?? 'unresolved';
    const marked = await records.markServed(item.job, instanceId, b.now());
    if (marked.kind !== 'marked') {
      item.log.error('marking the per-job record served failed; the job will not be retried', { kind: marked.kind, ...(marked.kind === 'failed' ? { error: marked.error } : {}) });
      b.metrics.add(b.names.jobRecordErrors, { Pool: pool, Operation: 'served' });
      return;
    }
    try {
      await sendRetryCheck(b.queue, item.record, groupOf(item), new Date(b.now().getTime() + b.options.retry.retryAfterSeconds * 1000));
    } catch (error) {
      item.log.error('sending the retry check failed; only a reconciled copy can retry the job', { error: errorName(error) });
      b.metrics.add(b.names.jobRecordErrors, { Pool: pool, Operation: 'retry-check' });
    }
  });
}
